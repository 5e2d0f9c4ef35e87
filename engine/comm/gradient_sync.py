"""The data-parallel gradient sync of a step: its cost on the links, its overlap, its link load.

Ties together the ring schedule (:mod:`engine.comm.collectives`), the links it loads
(:mod:`engine.comm.fabric`) and the scenario's ``[interconnect]`` section. The gradient
all-reduce can overlap the backward pass in buckets (PyTorch DDP / XLA async
collectives style): bucket i of B is ready at ``i/B`` of the backward pass and
each bucket pays the collective's bandwidth time / B plus its full latency. The
pipeline's finish is ``max(bwd/B + B c, bwd + c)`` after the backward starts, so
the exposed part is ``max(c, B c - (B-1)/B bwd)``; only that part is charged to
the step, the rest is recorded as overlapped.

A data mesh axis that splits a torus axis (``data = 4`` strided over a z ring of 8
that ``tensor = 2`` shares) is priced by the mesh model's per-segment rings
(:func:`engine.comm.mesh_comm.mesh_collective_s`); :func:`mesh_gradient_sync` lays those
same rings onto the slice's links, so faults, one-way links, overlap and link load
apply to it as well: the mesh estimate plus what the actual links add to it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from ..pod.mesh import Segment1D
from ..pod.topology import Pod
from ..scenario import InterconnectSection
from ..scenario.calibration import Calibration
from ..trace import TABLES
from .collectives import CollectiveResult
from .fabric import Fabric, collective_on_pod, dcn_link_table, mesh_ring_phases, slice_fabrics

__all__ = [
    "GradientSync",
    "gradient_sync",
    "MeshGradientSync",
    "mesh_gradient_sync",
    "overlap_exposed_s",
    "overlap_table",
]

COLLECTIVE_OVERLAP = TABLES["extra_collective_overlap"]


def overlap_exposed_s(bw_time_s: float, latency_s: float, backward_s: float, buckets: int) -> tuple[float, float]:
    """Exposed and overlapped seconds of a bucketed all-reduce started during the backward pass.

    Parameters
    ----------
    bw_time_s, latency_s
        The whole collective's bandwidth and latency terms (s); each bucket pays
        ``bw_time_s / buckets + latency_s``.
    backward_s
        Backward-pass duration (s) the buckets become ready over.
    buckets
        Number of gradient buckets (1 = no overlap possible).

    Returns
    -------
    (exposed_s, overlapped_s)
    """
    b = max(int(buckets), 1)
    c = bw_time_s / b + latency_s
    exposed = max(c, b * c - (b - 1) / b * backward_s) if b > 1 else c
    return exposed, max(b * c - exposed, 0.0)


@dataclass(frozen=True)
class GradientSync:
    """The per-step gradient all-reduce: its cost, what is exposed, and its link load."""

    result: CollectiveResult
    total_s: float  # all buckets' collective time
    exposed_s: float  # charged to the step as the `collective` event
    overlapped_s: float  # hidden under the backward pass
    buckets: int
    fabrics: dict[int, Fabric]
    loads: dict[int, np.ndarray]

    def link_load(self, pod: Pod, cal: Calibration, step_s: float) -> pa.Table:
        """The ``link_load`` table (one row per directed ICI link and per host NIC)."""
        rings = self.result.rings
        tables = []
        for s in range(pod.slices):
            key = s if s in self.fabrics else -1
            tables.append(self.fabrics[key].link_load_table(rings, 1.0, step_s, s, self.loads[key]))
        if pod.slices > 1:
            tables.append(_dcn_all_reduce_rows(pod, cal, rings.bytes_total / rings.participants, step_s))
        return pa.concat_tables(tables)


def _dcn_all_reduce_rows(pod: Pod, cal: Calibration, shard_bytes: float, step_s: float) -> pa.Table:
    """``dcn`` link-load rows of the cross-slice all-reduce of each chip's ``shard_bytes``."""
    cph = pod.chips_per_host
    host_bytes = 2 * (pod.slices - 1) / pod.slices * shard_bytes * cph  # ring all-reduce [ring]
    host_bw = pod.chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency
    return dcn_link_table(pod.chip_table["host"], pod.chips_per_slice, pod.slices, host_bytes, host_bw, step_s)


def gradient_sync(
    pod: Pod,
    grad_bytes_per_chip: float,
    cal: Calibration,
    section: InterconnectSection,
    backward_s: float,
    axes: Sequence[int] | None = None,
    memo: dict | None = None,
) -> GradientSync:
    """The gradient all-reduce of a data-parallel step under the scenario's ``[interconnect]``.

    Parameters
    ----------
    grad_bytes_per_chip
        Gradient bytes each chip all-reduces (the operand).
    section
        The scenario's :class:`~engine.scenario.InterconnectSection`.
    backward_s
        Backward-pass duration (s), for overlap.
    axes
        Torus axes the data-parallel mesh axis spans (default: all); across slices the
        shard is then all-reduced over the DCN.
    memo
        A dict the caller keeps across calls with the same ``pod`` and ``cal`` objects: the
        collective on the links is priced once per operand, axes and ``[interconnect]`` (many
        meshes of a search share them; only the overlap with ``backward_s`` differs).
    """
    kw = dict(axes=axes, schedule=section.schedule, unidirectional=section.unidirectional,
              degraded=section.degraded_links, failed=section.failed_links)
    buckets = section.buckets if section.overlap else 1
    key = ("gradient_sync", id(pod), id(cal), grad_bytes_per_chip, None if axes is None else tuple(axes),
           section.model_dump_json())  # fmt: skip
    if memo is not None and key in memo:
        res, fabrics, loads, bw_s = memo[key]
    else:
        res, fabrics, loads = collective_on_pod("all-reduce", grad_bytes_per_chip, pod, cal, **kw)
        bw_s = None
        if buckets > 1:
            bw_only = replace(cal, ici_hop_latency_s=0.0, dcn_latency_s=0.0)
            bw_s = collective_on_pod("all-reduce", grad_bytes_per_chip, pod, bw_only, fabrics=fabrics, **kw)[0].time_s
        if memo is not None:
            memo[key] = (res, fabrics, loads, bw_s)
    if buckets > 1:
        exposed, overlapped = overlap_exposed_s(bw_s, res.time_s - bw_s, backward_s, buckets)
    else:
        exposed, overlapped = res.time_s, 0.0
    return GradientSync(res, exposed + overlapped, exposed, overlapped, buckets, fabrics, loads)


@dataclass(frozen=True)
class MeshGradientSync:
    """The gradient all-reduce over a data mesh axis that splits a torus axis (see the module docstring)."""

    total_s: float  # all buckets' collective time
    exposed_s: float
    overlapped_s: float
    buckets: int
    fabrics: dict[int, Fabric]
    loads: dict[int, np.ndarray]  # {slice key: (phases, links) bytes}, as GradientSync
    dcn_shard_bytes: float  # each chip's shard all-reduced across slices

    def link_load(self, pod: Pod, cal: Calibration, step_s: float) -> pa.Table:
        """The ``link_load`` table (one row per directed ICI link and per host NIC)."""
        tables = []
        for s in range(pod.slices):
            key = s if s in self.fabrics else -1
            tables.append(self.fabrics[key].link_load_table(None, 1.0, step_s, s, self.loads[key]))
        if pod.slices > 1:
            tables.append(_dcn_all_reduce_rows(pod, cal, self.dcn_shard_bytes, step_s))
        return pa.concat_tables(tables)


def mesh_gradient_sync(
    pod: Pod,
    grad_bytes_per_chip: float,
    cal: Calibration,
    section: InterconnectSection,
    backward_s: float,
    segments: Sequence[Segment1D],
    estimate_s: float,
    data_size: int,
) -> MeshGradientSync:
    """The gradient all-reduce over a data mesh axis that splits a torus axis, on the actual links.

    The mesh model's estimate (healthy, bidirectional links) is kept, and what the
    links of each slice add to it is charged on top: per ring phase, the busiest
    link's bandwidth time with the scenario's degraded/failed links and one-way
    links minus the same on healthy links, plus, on each phase whose rings cross a
    failed link, the extra hops of its longest such detour, and the hops a one-way
    ring adds. The slowest slice sets the time (a synchronous collective).
    ``[interconnect] overlap`` buckets it as :func:`gradient_sync` does; ``schedule``
    does not apply (the mesh model runs a mesh axis' segments in sequence).

    Parameters
    ----------
    grad_bytes_per_chip
        Gradient bytes each chip all-reduces over the data axis (and then the DCN).
    section
        The scenario's :class:`~engine.scenario.InterconnectSection`.
    backward_s
        Backward-pass duration (s), for overlap.
    segments
        The data mesh axis' :class:`~engine.pod.mesh.Segment1D` parts, inner first.
    estimate_s
        The mesh model's time of this all-reduce, DCN included (s).
    data_size
        Chips of the data mesh axis (the DCN all-reduces ``1/data_size`` of the gradients).
    """
    link = pod.chip.ici_link_bytes_per_s * cal.ici_efficiency
    lat = cal.ici_hop_latency_s
    rs_ref = mesh_ring_phases(segments, grad_bytes_per_chip, unidirectional=False)
    rs = mesh_ring_phases(segments, grad_bytes_per_chip, section.unidirectional)
    ref = rs_ref + rs_ref[::-1]  # all-reduce: reduce-scatter, then all-gather back in reverse
    act = rs + rs[::-1]
    fabrics = slice_fabrics(pod, link, section.degraded_links, section.failed_links)
    loads = {k: f.ring_loads(act) for k, f in fabrics.items()}
    if len(fabrics) == 1 and not section.unidirectional:
        added_bw_s = 0.0  # healthy, bidirectional links: the very rings the estimate priced, nothing to add
    else:
        healthy = np.asarray(fabrics[-1].stage_bw_time_s(None, fabrics[-1].ring_loads(ref)))
        worst = np.max([fabrics[k].stage_bw_time_s(None, loads[k]) for k in fabrics], axis=0) if act else healthy
        added_bw_s = float(np.sum(worst - healthy))
    hops = [s.chips - 1 if s.wrap else 0 for s in segments]  # a one-way ring pays n-1 hops, not ceil((n-1)/2)
    one_way_hops = 2 * sum(h - math.ceil(h / 2) for h in hops) if section.unidirectional else 0
    # A detour lengthens the rings of the phases that cross the failed link (as collective_on_pod
    # charges stages); a failed link no ring of a phase uses (a strided line's wraparound, another
    # axis' phase) costs that phase nothing.
    broken = [f.detour_hops(f.ring_loads(act, reroute=False)) for f in fabrics.values() if f.failed]
    detour_hops = int(np.max(broken, axis=0).sum()) if broken and act else 0
    total = estimate_s + added_bw_s + (one_way_hops + detour_hops) * lat
    buckets = section.buckets if section.overlap else 1
    if buckets > 1:
        latency_s = lat * (sum(2 * (s.chips - 1 if not s.wrap or section.unidirectional else math.ceil((s.chips - 1) / 2))
                                   for s in segments) + detour_hops)
        if pod.slices > 1:
            latency_s += 2 * (pod.slices - 1) * cal.dcn_latency_s  # engine.comm.collectives.dcn_all_reduce_time_s
        exposed, overlapped = overlap_exposed_s(total - latency_s, latency_s, backward_s, buckets)
    else:
        exposed, overlapped = total, 0.0
    return MeshGradientSync(exposed + overlapped, exposed, overlapped, buckets, fabrics, loads,
                            grad_bytes_per_chip / data_size)


def overlap_table(sync: GradientSync | MeshGradientSync, steps: pa.Table, backward_start_s: float, backward_s: float) -> pa.Table:
    """Per-step record of the overlapped gradient all-reduce (no rows when nothing overlaps).

    The first bucket starts once ``1/buckets`` of the backward pass is done.
    """
    n = steps.num_rows if sync.overlapped_s > 0 else 0
    start = steps.column("start_ns").to_numpy()[:n]
    first_bucket_s = backward_start_s + backward_s / max(sync.buckets, 1)
    return COLLECTIVE_OVERLAP.table(
        {
            "step": np.arange(n, dtype=np.int32),
            "start_ns": start + int(round(first_bucket_s * 1e9)),
            "overlapped_ns": np.full(n, int(round(sync.overlapped_s * 1e9)), np.int64),
            "exposed_ns": np.full(n, int(round(sync.exposed_s * 1e9)), np.int64),
            "buckets": np.full(n, sync.buckets, np.int32),
        }
    )


