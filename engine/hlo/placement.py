"""Where an HLO module's devices and replica groups sit on a pod's torus.

Logical device ``d`` of an SPMD module (its partition id; with replicas,
``replica * partitions + partition``) runs on chip ``d`` of the pod, chips being
numbered in torus order: slice-major, then C order over the slice's ``x, y, z``
coordinates (:attr:`engine.pod.topology.Pod.chip_table`). That is the order
``jax.devices()`` lists a TPU slice's chips in and the order a mesh built from it
with ``mesh_utils.create_device_mesh`` keeps contiguous along the torus, so a
replica group becomes the chips it names, and the torus axes along which those
chips differ are the axes its rings run on.

A group that covers whole torus axes (every chip along each axis it spans) can use
the interconnect model's full machinery (schedules, link faults, DCN across
slices); a group that covers part of an axis (2 chips of a 4-chip axis, or every
other chip) becomes the mesh model's strided segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ScenarioError
from ..pod.mesh import Segment1D
from ..pod.topology import Pod

__all__ = ["DCN", "GroupPlacement", "Link", "group_links", "place_groups", "permute_hops", "permute_links"]


#: a direction of a torus axis's links, ``(axis, +1 or -1)``, or :data:`DCN`: what collectives queue for
Link = tuple[int, int] | str
#: the data-center network between slices, as a :data:`Link`
DCN = "dcn"


@dataclass(frozen=True)
class GroupPlacement:
    """The torus geometry shared by a collective's replica groups."""

    group_size: int
    axes: tuple[int, ...]  # torus axes the groups span, innermost (z) first
    whole: bool  # every group covers those axes entirely within its slice
    segments: tuple[Segment1D, ...]  # per spanned axis: chips, wraparound, stride
    slices: int  # slices one group spans (DCN when > 1)

    @property
    def chips_per_slice(self) -> int:
        return self.group_size // max(self.slices, 1)


def _local(pod: Pod, chips: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slice ids, slice-local coordinates) of chip ids."""
    n = pod.chips_per_slice
    return chips // n, pod.slice.coords[chips % n]


def place_groups(groups: np.ndarray, pod: Pod, source: str = "model.path") -> GroupPlacement:
    """Map ``[groups, size]`` device ids onto the pod's torus.

    Raises
    ------
    ScenarioError
        A device id beyond the pod's chips (the module was compiled for more devices).
    """
    if groups.size and int(groups.max()) >= pod.chips:
        raise ScenarioError(
            source, [("model.path", f"the module names device {int(groups.max())}; the pod has {pod.chips} chips")]
        )
    size = int(groups.shape[1])
    if size <= 1:
        return GroupPlacement(size, (), True, (), 1)
    slice_ids, coords = _local(pod, groups.reshape(-1))
    slice_ids = slice_ids.reshape(groups.shape)
    coords = coords.reshape(*groups.shape, -1)
    shape, wrap = pod.slice.shape, pod.slice.wrap
    slices = max(len(np.unique(s)) for s in slice_ids)
    axes, segments, whole = [], [], True
    for a in reversed(range(len(shape))):  # innermost first: the mesh model's order
        distinct = [np.unique(c[:, a]) for c in coords]
        count = max(len(d) for d in distinct)
        if count <= 1:
            continue
        steps = np.concatenate([np.diff(d) for d in distinct if len(d) > 1])
        stride = int(steps.min()) if steps.size else 1
        full = count == shape[a]
        whole = whole and full
        axes.append(a)
        segments.append(Segment1D(torus_axis=a, chips=count, wrap=bool(full and wrap[a]), stride=stride))
    return GroupPlacement(size, tuple(axes), whole, tuple(segments), slices)


def permute_hops(pairs: np.ndarray, pod: Pod) -> tuple[list[int], bool]:
    """The longest (source -> target) route of a collective-permute: hops per torus axis, and
    whether any pair crosses slices (over the DCN)."""
    if not pairs.size:
        return [0] * len(pod.slice.shape), False
    s_src, c_src = _local(pod, pairs[:, 0])
    s_dst, c_dst = _local(pod, pairs[:, 1])
    shape = np.asarray(pod.slice.shape)
    d = np.abs(c_src - c_dst)
    d = np.where(np.asarray(pod.slice.wrap), np.minimum(d, shape - d), d)
    worst = int(np.argmax(d.sum(axis=1)))
    return [int(h) for h in d[worst]], bool(np.any(s_src != s_dst))


def group_links(placement: GroupPlacement, unidirectional: bool = False) -> frozenset[Link]:
    """The links a collective on ``placement``'s groups keeps busy: both directions of each torus axis its rings run on
    (one with one-way rings), and the DCN where a group spans slices."""
    signs = (1,) if unidirectional else (1, -1)
    links: set[Link] = {(a, s) for a in placement.axes for s in signs}
    if placement.slices > 1:
        links.add(DCN)
    return frozenset(links)


def permute_links(pairs: np.ndarray, pod: Pod) -> frozenset[Link]:
    """The links a collective-permute's routes take: ``(axis, +1 or -1)`` for each torus axis and direction some pair
    moves along (the shorter way round a wraparound axis), and the DCN where a pair crosses slices. A bidirectional
    windowed einsum's two permutes (one each way round the ring) take opposite directions, which a full-duplex link
    carries at once."""
    if not pairs.size:
        return frozenset()
    s_src, c_src = _local(pod, pairs[:, 0])
    s_dst, c_dst = _local(pod, pairs[:, 1])
    shape = np.asarray(pod.slice.shape)
    d = c_dst - c_src
    d = np.where(np.asarray(pod.slice.wrap) & (2 * np.abs(d) > shape), d - np.sign(d) * shape, d)
    links: set[Link] = {(a, s) for a in range(d.shape[1]) for s in (1, -1) if np.any(np.sign(d[:, a]) == s)}
    if np.any(s_src != s_dst):
        links.add(DCN)
    return frozenset(links)
