"""The device mesh on the torus: how the mesh axes (:data:`MESH_AXES`) are laid onto a slice's axes.

Inside a slice the chips form a logical mesh ``data x fsdp x tensor x expert x
pipeline x context`` (GSPMD, Xu et al. 2021; the MaxText/pjit convention; axes of
size 1 take no torus axis); across slices the job is data parallel over the DCN
(or a pipeline spans them, engine/model/pipeline.py). Each mesh axis is laid onto torus axes:

* A scenario may name the mapping (``[parallelism] mapping = {tensor = ["z"],
  fsdp = ["x", "y"]}``); ``"y:2"`` takes a 2-chip part of axis ``y``.
* Otherwise the default fills torus axes from the innermost (``z``, then ``y``,
  then ``x``) in :data:`LAYOUT_ORDER` (``tensor`` first, ``data`` last): the axis with the
  most traffic per step gets the shortest, contiguous rings (as
  ``jax.experimental.mesh_utils.create_device_mesh`` orders the physical mesh).
* A torus axis split between mesh axes is no longer a ring for either part: the
  inner (first-assigned) part is a contiguous line; the outer part strides over
  it, so its rings share each link with ``inner`` other groups and see
  ``1 / inner`` of the link bandwidth (an approximation).
  A mesh axis that cannot be factored onto the torus is a :class:`TopologyError`.

What each mesh axis costs per step is :mod:`engine.comm.mesh_comm`'s concern; this
module only knows the layout, so the scenario checks can use it without the models.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import TopologyError
from .topology import AXIS_NAMES

__all__ = ["MESH_AXES", "LAYOUT_ORDER", "axis_index_of_chips", "Segment1D", "MeshAxis", "Mesh", "resolve_mesh", "whole_torus_axes"]

#: Every mesh axis, in the one order the rest of Podscope (scenario keys, summaries, a mesh search)
#: lists them. The first three are the classic SPMD axes; the others are 1 unless a scenario asks.
MESH_AXES = ("data", "fsdp", "tensor", "expert", "pipeline", "context")
#: inner to outer: the axis with the most traffic per step gets the shortest, contiguous rings
#: (tensor's per-layer all-reduces, context's per-layer K/V ring passes (next-neighbour sends, which a
#: whole wraparound ring serves best), expert's all-to-alls, fsdp's gathers; pipeline sends one
#: activation per microbatch; data all-reduces once per step)
LAYOUT_ORDER = ("tensor", "context", "expert", "fsdp", "pipeline", "data")
#: axes every mesh description names even at size 1 (the others only when larger than 1)
_ALWAYS_DESCRIBED = ("data", "fsdp", "tensor")


@dataclass(frozen=True)
class Segment1D:
    """A run of chips along one torus axis that a mesh axis spans."""

    torus_axis: int
    chips: int
    wrap: bool
    stride: int  # chips of the same torus axis owned by inner mesh axes (1 = contiguous)


@dataclass(frozen=True)
class MeshAxis:
    name: str
    size: int
    segments: tuple[Segment1D, ...]

    def describe(self) -> str:
        parts = [f"{AXIS_NAMES[s.torus_axis]}:{s.chips}" for s in self.segments]
        return f"{self.name}={self.size}" + (f" on {'*'.join(parts)}" if parts else "")


@dataclass(frozen=True)
class Mesh:
    axes: tuple[MeshAxis, ...]  # in MESH_AXES order

    def __getitem__(self, name: str) -> MeshAxis:
        return self.axes[MESH_AXES.index(name)]

    def describe(self) -> str:
        return ", ".join(a.describe() for a in self.axes if a.name in _ALWAYS_DESCRIBED or a.size > 1)


def _parse_part(text: str, shape: Sequence[int]) -> tuple[int, int]:
    name, _, count = text.strip().lower().partition(":")
    if name not in AXIS_NAMES[: len(shape)]:
        raise TopologyError(f"mapping names torus axis {text!r}; this slice has axes {', '.join(AXIS_NAMES[: len(shape)])}")
    axis = AXIS_NAMES.index(name)
    if not count:
        return axis, shape[axis]
    if not count.isdigit() or int(count) < 1 or shape[axis] % int(count):
        raise TopologyError(f"mapping part {text!r}: the count must divide the axis length {shape[axis]}")
    return axis, int(count)


def resolve_mesh(
    shape: Sequence[int],
    wrap: Sequence[bool],
    sizes: Mapping[str, int],
    mapping: Mapping[str, Sequence[str]] | None = None,
) -> Mesh:
    """Lay the mesh (:data:`MESH_AXES`) onto the slice's torus axes.

    Parameters
    ----------
    shape, wrap
        The slice's axis lengths (chips) and which axes wrap around.
    sizes
        Mesh axis sizes by name (an axis not given is 1); their product must equal the slice's chips.
    mapping
        Optional explicit mapping: mesh axis -> torus axis parts (``"z"``, ``"y:2"``).
        Every mesh axis larger than 1 must then be listed.

    Raises
    ------
    TopologyError
        If the mesh does not factor onto the torus (or the mapping is inconsistent).
    """
    key_sizes = tuple(int(sizes.get(a, 1)) for a in MESH_AXES)
    key_mapping = tuple((k, tuple(v)) for k, v in mapping.items()) if mapping else None
    return _resolve_mesh(tuple(int(n) for n in shape), tuple(bool(w) for w in wrap), key_sizes, key_mapping)


# A Mesh is immutable and depends only on these arguments, so a search over meshes (engine.planning.search),
# which validates and then costs each candidate, lays each one out once.
@functools.lru_cache(maxsize=4096)
def _resolve_mesh(
    shape: tuple[int, ...],
    wrap: tuple[bool, ...],
    key_sizes: tuple[int, ...],
    key_mapping: tuple[tuple[str, tuple[str, ...]], ...] | None,
) -> Mesh:
    sizes = dict(zip(MESH_AXES, key_sizes))
    mapping = dict(key_mapping) if key_mapping else None
    if math.prod(sizes[a] for a in MESH_AXES) != math.prod(shape):
        named = [a for a in MESH_AXES if a in _ALWAYS_DESCRIBED or sizes[a] > 1]
        raise TopologyError(
            f"mesh {'x'.join(str(sizes[a]) for a in named)} ({' x '.join(named)}) does not cover "
            f"the {math.prod(shape)} chips of the slice"
        )
    parts: dict[str, list[tuple[int, int]]] = {a: [] for a in MESH_AXES}
    order = LAYOUT_ORDER
    if mapping:
        for name in order:
            listed = [_parse_part(t, shape) for t in mapping.get(name, [])]
            got = math.prod(c for _, c in listed)
            if got != sizes[name]:
                raise TopologyError(
                    f"mapping gives mesh axis {name!r} {got} chips ({', '.join(mapping.get(name, [])) or 'none'}), "
                    f"but its size is {sizes[name]}"
                )
            parts[name] = listed
        for axis, n in enumerate(shape):
            total = math.prod(c for name in order for a, c in parts[name] if a == axis)
            if total != n:
                raise TopologyError(f"mapping uses {total} chips of torus axis {AXIS_NAMES[axis]!r}, which has {n}")
    else:
        # Default: inner mesh axes take the innermost torus axes (z, then y, then x). If the sizes
        # do not divide that way (PaLM's 12-way tensor axis on a 12x16x16 slice), try the other
        # torus-axis orders and keep the first that fits; only if none does is the mesh an error.
        orders = [tuple(reversed(range(len(shape))))]
        orders += [o for o in itertools.permutations(range(len(shape))) if o != orders[0]]
        first_error: TopologyError | None = None
        for visit in orders:
            try:
                parts = _greedy_layout(shape, sizes, order, visit)
                break
            except TopologyError as e:
                first_error = first_error or e
        else:
            assert first_error is not None
            raise first_error
    axes = []
    for name in MESH_AXES:
        segs = []
        for axis, count in parts[name]:
            # the stride is what inner mesh axes took of the same torus axis first
            stride = math.prod(c for inner in order[: order.index(name)] for a, c in parts[inner] if a == axis)
            whole = count == shape[axis]
            segs.append(Segment1D(axis, count, bool(wrap[axis]) and whole, stride))
        axes.append(MeshAxis(name, sizes[name], tuple(segs)))
    return Mesh(tuple(axes))


def _greedy_layout(
    shape: tuple[int, ...], sizes: Mapping[str, int], order: Sequence[str], visit: Sequence[int]
) -> dict[str, list[tuple[int, int]]]:
    """Place mesh axes (inner to outer) onto torus axes taken in ``visit`` order, greedily."""
    used = [1] * len(shape)
    parts: dict[str, list[tuple[int, int]]] = {a: [] for a in MESH_AXES}
    pos = 0
    for name in order:
        need = sizes[name]
        while need > 1:
            while pos < len(visit) and shape[visit[pos]] // used[visit[pos]] == 1:
                pos += 1
            if pos == len(visit):
                raise TopologyError(f"mesh axis {name!r} ({sizes[name]}) does not fit on the torus {shape}")
            axis = visit[pos]
            g = math.gcd(need, shape[axis] // used[axis])
            if g == 1:
                raise TopologyError(
                    f"mesh axis {name!r} of size {sizes[name]} cannot be laid onto torus {'x'.join(map(str, shape))}: "
                    f"{need} chips left to place do not divide axis {AXIS_NAMES[axis]!r}'s "
                    f"remaining {shape[axis] // used[axis]}"
                )
            parts[name].append((axis, g))
            used[axis] *= g
            need //= g
    return parts


def whole_torus_axes(axis: MeshAxis, shape: Sequence[int]) -> list[int] | None:
    """The torus axes a mesh axis occupies entirely and contiguously, or None if it splits one.

    A mesh axis on whole torus axes can use the interconnect model's full machinery
    (schedules, overlap, link faults, per-link load); a split axis cannot.
    """
    if all(seg.stride == 1 and seg.chips == shape[seg.torus_axis] for seg in axis.segments):
        return [seg.torus_axis for seg in axis.segments]
    return None


def axis_index_of_chips(axis: MeshAxis, coords: Sequence[np.ndarray]) -> np.ndarray:
    """Each chip's position (0 .. size-1) along a mesh axis, from its slice-local torus coordinates.

    ``coords`` holds one integer array per torus axis (x, y, z). A segment of ``chips``
    chips at ``stride`` covers coordinates ``(c // stride) % chips`` of its torus axis;
    the segments combine in mixed radix, first segment innermost.
    """
    index = np.zeros(len(coords[0]), dtype=np.int64)
    radix = 1
    for seg in axis.segments:
        index += ((np.asarray(coords[seg.torus_axis]) // seg.stride) % seg.chips) * radix
        radix *= seg.chips
    return index
