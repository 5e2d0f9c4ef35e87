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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
import numpy as np

from .catalog import ChipSpec
from .errors import TopologyError

__all__ = ["Slice", "Pod", "build_pod", "wraparound_for"]

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
        """The slice as a networkx grid graph; nodes are coordinate tuples in axis order."""
        # grid_graph numbers node tuples in reverse order of `dim`; reverse both to keep (x, y, z).
        g = nx.grid_graph(dim=list(self.shape[::-1]), periodic=list(self.wrap[::-1]))
        if len(self.shape) == 1:
            g = nx.relabel_nodes(g, {n: (n,) for n in g.nodes})
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
        """Host block in chips along each slice axis (clipped to the slice)."""
        hs = list(self.chip.host_shape[: len(self.slice.shape)])
        hs += [1] * (len(self.slice.shape) - len(hs))
        # A slice smaller than a host along an axis shares that host's block.
        return tuple(min(h, n) for h, n in zip(hs, self.slice.shape))

    @cached_property
    def hosts_per_slice(self) -> int:
        return math.prod(-(-n // h) for n, h in zip(self.slice.shape, self.host_shape))

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
        If the shape has more axes than the chip's torus or exceeds its largest slice.
    """
    if len(shape) > chip.torus_dims:
        raise TopologyError(f"{chip.key} has a {chip.torus_dims}D torus; {'x'.join(map(str, shape))} has {len(shape)} axes")
    if math.prod(shape) > chip.max_slice_chips:
        raise TopologyError(f"{chip.key} slices hold at most {chip.max_slice_chips} chips; got {math.prod(shape)}")
    return Pod(chip=chip, slice=Slice(shape=tuple(shape), wrap=wraparound_for(chip, tuple(shape))), slices=slices)
