"""Pod topology: torus slices, chip coordinates, hosts, and slices over DCN.

Chips are numbered within a slice in C order over the topology string's axes
(``x`` slowest), and globally as ``slice * chips_per_slice + local``. Per-chip
columns (coordinates, host, slice) are numpy arrays so every consumer stays
vectorised. The torus itself is available as a networkx graph for routing and
inspection; anything computed for all chips or all pairs uses the closed form.

Wraparound rules by generation (``ChipSpec.wraparound``):

* ``all``    - every axis longer than 2 wraps (v2/v3 2D tori).
* ``cube``   - v4/v5p: slices built of whole 4x4x4 cubes get optical wraparound on
               every axis; smaller or partial slices are meshes (Cloud TPU v4 docs:
               3D torus when each dimension is a multiple of 4).
* ``axis16`` - v5e/v6e: an axis wraps only when it has 16 chips (scaling book,
               sharding.md: 'TPU v5e only has a wraparound connection when one axis
               has size 16').
* ``none``   - a plain mesh.

Supported slice shapes by generation (:func:`supported_shapes`), from the Cloud
TPU docs' slice tables: 2D chips (v2, v3, v5e, v6e) take power-of-two shapes whose
sides differ by at most 2x (2x2, 2x4, 4x4, ..., 16x16; v5e/v6e also 1x1); 3D chips
(v4, v5p) take shapes with sides in {1, 2, 4} up to 64 chips and otherwise sides
that are multiples of 4 (whole 4x4x4 cubes). Shapes with fewer axes than the torus
are padded with 1s. Twisted tori (v4's optional twisted 4x4x8-style slices) are
not modelled: every slice is a regular torus or mesh.

Link faults a scenario names are checked against the slice's graph here
(:func:`fault_problems`); what they cost is :mod:`engine.comm.fabric`'s concern.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TopologyError
from .catalog import ChipSpec

if TYPE_CHECKING:  # networkx is imported where a graph is built: routing and fault checks need it, costing does not
    import networkx as nx

__all__ = ["AXIS_NAMES", "Slice", "Pod", "build_pod", "wraparound_for", "supported_shapes", "is_supported_shape", "fault_problems"]

AXIS_NAMES = ("x", "y", "z")


def wraparound_for(chip: ChipSpec, shape: tuple[int, ...]) -> tuple[bool, ...]:
    """Which axes of a slice of ``shape`` have wraparound links on ``chip``."""
    rule = chip.wraparound
    if rule == "all":
        return tuple(n > 2 for n in shape)
    if rule == "cube":
        whole_cubes = len(shape) == 3 and all(n % 4 == 0 for n in shape)
        return tuple(whole_cubes and n > 2 for n in shape)
    if rule == "axis16":
        return tuple(n == 16 for n in shape)
    return tuple(False for _ in shape)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def is_supported_shape(chip: ChipSpec, shape: tuple[int, ...]) -> bool:
    """Whether ``shape`` is a slice shape ``chip`` offers (see the module docstring)."""
    if len(shape) > chip.torus_dims or math.prod(shape) > chip.max_slice_chips:
        return False
    dims = tuple(shape) + (1,) * (chip.torus_dims - len(shape))
    if chip.torus_dims == 2:
        a, b = sorted(dims)
        return _pow2(a) and _pow2(b) and b <= 2 * a and (a > 1 or chip.wraparound == "axis16" and b == 1)
    if math.prod(dims) <= 64:
        return all(n in (1, 2, 4) for n in dims)
    return all(n % 4 == 0 for n in dims)


def supported_shapes(chip: ChipSpec) -> list[str]:
    """Human-readable list of the slice shapes ``chip`` supports (canonical orientation)."""
    if chip.torus_dims == 2:
        out = ["1x1"] if chip.wraparound == "axis16" else []
        a = 2
        while a * a <= chip.max_slice_chips:
            out += [f"{a}x{a}"] + ([f"{a}x{2 * a}"] if 2 * a * a <= chip.max_slice_chips else [])
            a *= 2
        return out
    small = [(2, 2, 1), (2, 2, 2), (2, 2, 4), (2, 4, 4), (4, 4, 4)]
    return ["x".join(map(str, s)) for s in small] + ["AxBxC with A, B, C multiples of 4 (whole 4x4x4 cubes), "
                                                     f"up to {chip.max_slice_chips} chips"]


@dataclass(frozen=True)
class Slice:
    """One torus (or mesh) slice: its shape and which axes wrap around."""

    shape: tuple[int, ...]
    wrap: tuple[bool, ...]

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.wrap) or not 1 <= len(self.shape) <= 3:
            raise TopologyError(f"slice shape {self.shape} and wraparound {self.wrap} must have 1-3 matching axes")

    @property
    def chips(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def coords(self) -> np.ndarray:
        """(chips, axes) int32 coordinates, C order over the axes."""
        idx = np.indices(self.shape, dtype=np.int32).reshape(len(self.shape), -1)
        return idx.T.copy()

    def graph(self) -> nx.Graph:
        """The slice as a networkx graph; nodes are coordinate tuples in axis order.

        Edges are the ICI links (closed form over all chips, one per neighbour pair;
        nx.grid_graph builds the same graph but takes ~0.5 s at 4,096 chips).
        """
        import networkx as nx

        coords = self.coords
        g = nx.Graph()
        for a, (n, w) in enumerate(zip(self.shape, self.wrap)):
            if n <= 1:
                continue
            src = coords if w else coords[coords[:, a] < n - 1]
            dst = src.copy()
            dst[:, a] = (dst[:, a] + 1) % n
            g.add_edges_from(zip(map(tuple, src.tolist()), map(tuple, dst.tolist())))
        if g.number_of_nodes() < self.chips:  # axes of length 1 only: chips without links
            g.add_nodes_from(map(tuple, coords.tolist()))
        return g


@dataclass(frozen=True)
class Pod:
    """All chips of a job: ``slices`` identical slices joined over the data-center network."""

    chip: ChipSpec
    slice: Slice
    slices: int

    @property
    def chips_per_slice(self) -> int:
        return self.slice.chips

    @property
    def chips(self) -> int:
        return self.slice.chips * self.slices

    @cached_property
    def host_shape(self) -> tuple[int, ...]:
        """Host block in chips along each slice axis: how one host's chips tile the slice.

        A host's chips are a fixed block (``ChipSpec.host_shape``, e.g. v5e's 8 chips as
        ``4x2``), which the slice takes in whichever orientation tiles it: Cloud TPU's
        v5e and v6e tables list ``v5litepod-8`` / ``v6e-8`` as one ``2x4`` host of 8 chips
        and ``-16`` as ``4x4`` on 2 hosts, which only an upright *or* turned ``4x2``
        block gives. Of the orientations that divide every axis, the first in the
        catalog's own order wins. A slice smaller than a host along an axis (v5e
        ``1x1``, ``2x2``: one host with 1 or 4 chips, docs' ``v5litepod-1`` / ``-4``)
        shares one host's block there.
        """
        n_axes = len(self.slice.shape)
        hs = list(self.chip.host_shape[:n_axes]) + [1] * max(n_axes - len(self.chip.host_shape), 0)
        for orient in dict.fromkeys(itertools.permutations(hs)):  # catalog orientation first, no repeats
            if all(n % h == 0 for h, n in zip(orient, self.slice.shape)):
                return tuple(orient)
        return tuple(min(h, n) for h, n in zip(hs, self.slice.shape))

    @cached_property
    def hosts_per_slice(self) -> int:
        return math.prod(-(-n // h) for n, h in zip(self.slice.shape, self.host_shape))

    @property
    def chips_per_host(self) -> int:
        """Chips one host drives (and whose DCN traffic shares its NIC): its block, clipped to the slice."""
        return math.prod(self.host_shape)

    @property
    def hosts(self) -> int:
        return self.hosts_per_slice * self.slices

    @cached_property
    def chip_table(self) -> dict[str, np.ndarray]:
        """Per-chip columns: chip, host, slice, x, y, z (z = 0 on 2D slices)."""
        local = self.slice.coords  # (n, axes)
        n, axes = local.shape
        block = local // np.asarray(self.host_shape, dtype=np.int32)
        blocks_per_axis = [-(-s // h) for s, h in zip(self.slice.shape, self.host_shape)]
        host_local = np.ravel_multi_index(tuple(block.T), blocks_per_axis).astype(np.int32)
        slice_id = np.repeat(np.arange(self.slices, dtype=np.int32), n)
        xyz = np.zeros((n, 3), dtype=np.int32)
        xyz[:, :axes] = local
        xyz = np.tile(xyz, (self.slices, 1))
        return {
            "chip": np.arange(self.chips, dtype=np.int32),
            "host": np.tile(host_local, self.slices) + slice_id * self.hosts_per_slice,
            "slice": slice_id,
            "x": xyz[:, 0],
            "y": xyz[:, 1],
            "z": xyz[:, 2],
        }

    def describe(self) -> str:
        shape = "x".join(map(str, self.slice.shape))
        wraps = ",".join(a for a, w in zip(AXIS_NAMES, self.slice.wrap) if w) or "none"
        return f"{self.slices} x {self.chip.key} {shape} (wraparound: {wraps})"


def build_pod(chip: ChipSpec, shape: tuple[int, ...], slices: int = 1) -> Pod:
    """Build the pod for a scenario: ``slices`` slices of ``shape`` on ``chip``.

    Raises
    ------
    TopologyError
        If the shape has more axes than the chip's torus, exceeds its largest slice,
        or is not one of the chip's supported slice shapes (the message lists them).
    """
    if len(shape) > chip.torus_dims:
        raise TopologyError(f"{chip.key} has a {chip.torus_dims}D torus; {'x'.join(map(str, shape))} has {len(shape)} axes")
    if math.prod(shape) > chip.max_slice_chips:
        raise TopologyError(f"{chip.key} slices hold at most {chip.max_slice_chips} chips; got {math.prod(shape)}")
    if not is_supported_shape(chip, tuple(shape)):
        raise TopologyError(
            f"{chip.key} does not offer a {'x'.join(map(str, shape))} slice; supported shapes: {', '.join(supported_shapes(chip))}"
        )
    return Pod(chip=chip, slice=Slice(shape=tuple(shape), wrap=wraparound_for(chip, tuple(shape))), slices=slices)


def fault_problems(
    shape: Sequence[int], wrap: Sequence[bool], slices: int, degraded: Sequence, failed: Sequence, key: str = "interconnect"
) -> list[tuple[str, str]]:
    """Check scenario link faults against the slice; returns ``(dotted_key, message)`` problems."""
    problems: list[tuple[str, str]] = []
    if not degraded and not failed:
        return problems
    g = Slice(tuple(shape), tuple(wrap)).graph()
    for name, items in (("degraded_links", degraded), ("failed_links", failed)):
        for i, f in enumerate(items):
            a, b = tuple(f.a), tuple(f.b)
            where = f"{key}.{name}.{i}"  # pydantic's dotted form, as for every other key
            if len(a) != len(shape) or len(b) != len(shape):
                shape_txt = "x".join(map(str, shape))
                problems.append((where, f"coordinates {list(a)}, {list(b)} need {len(shape)} entries for a {shape_txt} slice"))
            elif not g.has_edge(a, b):
                problems.append((where, f"{list(a)} and {list(b)} are not neighbours on the {'x'.join(map(str, shape))} slice"))
            elif f.slice >= slices:
                problems.append((where, f"slice {f.slice} does not exist; the pod has {slices} slice(s)"))
    if not problems and failed:
        import networkx as nx

        for s in {f.slice for f in failed}:
            cut = g.copy()
            cut.remove_edges_from((tuple(f.a), tuple(f.b)) for f in failed if f.slice == s)
            if not nx.is_connected(cut):
                problems.append((f"{key}.failed_links", f"the failed links disconnect slice {s}; rings cannot route around them"))
    return problems
