"""Collective costs on the torus: per-axis rings, multi-axis schedules, and DCN across slices.

The model is the alpha-beta ring model per torus axis. Sources:

* [book] "How to Scale Your Model" (JAX scaling book), sharding.md at commit
  0819a7d8c55ddc113f5cba0285a5f97380cac1e3: AllGather / ReduceScatter cost
  ``V/W * (n-1)/n`` per axis, bidirectional rings halve it, AllReduce = RS + AG,
  multi-axis AllGather ``V / (W_bidi * n_axes)``, AllToAll = AllGather / 4 on a
  bidirectional ring.
* [astra] ASTRA-sim's hierarchical per-dimension ring schedule (reduce-scatter
  dimension by dimension with the shard shrinking, all-gather back in reverse).
* [nccl] NCCL tests, doc/PERFORMANCE.md: algbw = bytes / time; busbw factors
  ``2(n-1)/n`` (all-reduce) and ``(n-1)/n`` (reduce-scatter, all-gather, all-to-all).
* [ring] Patarasuk & Yuan 2009: the bandwidth-optimal ring all-reduce moves
  ``2(S-1)/S`` of the data per participant.

Per axis of n chips:

* with wraparound, a bidirectional ring sends half of every shard each way: a
  reduce-scatter or all-gather of an S-byte array puts ``(n-1)/n * S / 2`` bytes on
  every directed link, plus ``ceil((n-1)/2)`` hop latencies;
* without wraparound (or with ``unidirectional`` links) the ring is one-directional:
  ``(n-1)/n * S`` bytes per directed link and ``n-1`` hops ([book]: unidirectional
  rings cost 2x). On a line both directions of every link carry the ring (forward
  leg and the return leg), so the line and the one-way ring cost the same.

Multi-axis schedules (``schedule``):

* ``sequential`` [astra]: reduce-scatter axis by axis on the whole array, shard
  shrinking by each axis' size, then all-gather in reverse. Only one axis' links are
  busy at a time.
* ``simultaneous``: the array is cut into one piece per axis; piece i runs the
  sequential schedule with its axis order rotated by i, so in every stage each axis
  carries exactly one piece and all links are busy. Its bandwidth term is
  ``V / (W_bidi * n_axes)``, the [book]'s multi-axis formula, and it reproduces the
  vendor's "all-reduce bandwidth per Pod" (see docs/validation.md). It is Podscope's default
  for scenarios and the CLI because it is what the published TPU figures describe;
  ``sequential`` stays available (and is what :func:`all_reduce_time_s` computes).

Stages run one after another; phases within a stage run at once on disjoint axes,
so a stage lasts as long as its slowest phase. :mod:`engine.comm.fabric` maps the same
schedule onto every directed link of the torus (per-link bytes, faults).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import TopologyError

__all__ = [
    "OPS",
    "SCHEDULES",
    "AxisPhase",
    "RingSchedule",
    "CollectiveResult",
    "ring_phase",
    "all_reduce_time_s",
    "dcn_all_reduce_time_s",
    "dcn_time_s",
    "p2p_time_s",
    "ring_schedule",
    "collective_time",
    "busbw_factor",
    "stage_times_s",
]

OPS: tuple[str, ...] = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all")
SCHEDULES: tuple[str, ...] = ("sequential", "simultaneous")


@dataclass(frozen=True)
class AxisPhase:
    """One ring phase on one axis.

    ``bytes_in`` is the array the phase reduces, gathers or exchanges, per ring
    group (bytes); ``link_bytes`` the bytes on the busiest directed link of that
    axis; ``stage`` the index of the stage it runs in (phases of a stage overlap).
    """

    op: str  # "reduce-scatter" | "all-gather" | "all-to-all" | "dcn-*"
    axis: int
    chips: int
    bytes_in: float
    time_s: float
    stage: int = 0
    link_bytes: float = 0.0
    hops: int = 0
    directions: int = 1
    piece: int = 0


def _ring_geometry(n: int, wrap: bool, unidirectional: bool) -> tuple[int, int]:
    """(directions, hops) of a reduce-scatter/all-gather ring on an axis of n chips."""
    if wrap and not unidirectional:
        return 2, math.ceil((n - 1) / 2)
    return 1, n - 1


def ring_phase(bytes_total: float, n: int, wrap: bool, link_bytes_per_s: float, hop_latency_s: float) -> float:
    """Time of one reduce-scatter or all-gather of ``bytes_total`` over an n-chip ring.

    ``bytes_total`` is the whole (unsharded) array the phase reduces or gathers (bytes);
    ``link_bytes_per_s`` one link's one-way bandwidth; returns seconds.
    """
    if n <= 1 or bytes_total <= 0:
        return 0.0
    directions, hops = _ring_geometry(n, wrap, False)
    return (n - 1) / n * bytes_total / (directions * link_bytes_per_s) + hops * hop_latency_s


@dataclass(frozen=True)
class RingSchedule:
    """The ring schedule of one collective over the ICI axes of one slice (no timing)."""

    op: str
    bytes_total: float
    axis_sizes: tuple[int, ...]
    wrap: tuple[bool, ...]
    axes: tuple[int, ...]  # the axes the collective spans (indices into axis_sizes)
    schedule: str
    unidirectional: bool
    phases: tuple[AxisPhase, ...]  # time_s = 0; see collective_time

    @property
    def stages(self) -> int:
        return 1 + max((p.stage for p in self.phases), default=-1)

    @property
    def participants(self) -> int:
        return math.prod(self.axis_sizes[a] for a in self.axes)


@dataclass(frozen=True)
class CollectiveResult:
    """Timing of a collective: total, bandwidths in NCCL's sense, and its phases."""

    op: str
    bytes_total: float
    participants: int
    time_s: float
    ici_time_s: float
    dcn_time_s: float
    phases: tuple[AxisPhase, ...]
    rings: RingSchedule = field(repr=False)

    @property
    def algbw_bytes_per_s(self) -> float:
        return self.bytes_total / self.time_s if self.time_s > 0 else math.inf

    @property
    def busbw_bytes_per_s(self) -> float:
        return self.algbw_bytes_per_s * busbw_factor(self.op, self.participants)


def busbw_factor(op: str, n: int) -> float:
    """NCCL's bus-bandwidth factor [nccl]: busbw = algbw * factor."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n if op == "all-reduce" else (n - 1) / n


def _rs_ag_phases(
    op: str,
    bytes_total: float,
    order: Sequence[int],
    sizes: Sequence[int],
    wrap: Sequence[bool],
    uni: bool,
    piece: int,
    stage0: int,
) -> list[AxisPhase]:
    """Reduce-scatter over ``order`` (shard shrinking), all-gather back in reverse, or both."""
    rs: list[AxisPhase] = []
    shard = float(bytes_total)
    for i, a in enumerate(order):
        n = sizes[a]
        d, h = _ring_geometry(n, wrap[a], uni)
        rs.append(AxisPhase("reduce-scatter", a, n, shard, 0.0, stage0 + i, (n - 1) / n * shard / d, h, d, piece))
        shard /= n
    k = len(order)
    ag = [
        AxisPhase("all-gather", p.axis, p.chips, p.bytes_in, 0.0, 0, p.link_bytes, p.hops, p.directions, piece)
        for p in reversed(rs)
    ]
    if op == "reduce-scatter":
        return rs
    if op == "all-gather":
        return [_restage(p, stage0 + i) for i, p in enumerate(ag)]
    return rs + [_restage(p, stage0 + k + i) for i, p in enumerate(ag)]


def _restage(p: AxisPhase, stage: int) -> AxisPhase:
    return AxisPhase(p.op, p.axis, p.chips, p.bytes_in, p.time_s, stage, p.link_bytes, p.hops, p.directions, p.piece)


def _all_to_all_phases(
    bytes_total: float, axes: Sequence[int], sizes: Sequence[int], wrap: Sequence[bool], uni: bool
) -> list[AxisPhase]:
    """All-to-all of a V-byte array (each chip holds V/N) with dimension-ordered routing.

    Pair traffic is V/N^2; the bytes x hops on axis a total ``V * D_a / n_a`` where
    D_a is the sum of ring distances from one chip. Wraparound rings spread them over
    2N directed links; on a line the middle link is the busiest, carrying
    ``floor(n/2) * ceil(n/2) * V / (n_a N)`` each way. For one even ring this is
    V/(8W) = AllGather/4 [book]. All axes move at once (one stage).
    """
    n_total = math.prod(sizes[a] for a in axes)
    phases = []
    for a in axes:
        n = sizes[a]
        if wrap[a] and not uni:
            dist_sum = sum(min(j, n - j) for j in range(1, n))
            link = bytes_total * dist_sum / (2 * n * n_total)
            hops, d = n // 2, 2
        elif wrap[a]:
            dist_sum = n * (n - 1) // 2
            link = bytes_total * dist_sum / (n * n_total)
            hops, d = n - 1, 1
        else:
            link = bytes_total * (n // 2) * (n - n // 2) / (n * n_total)
            hops, d = n - 1, 1
        phases.append(AxisPhase("all-to-all", a, n, bytes_total, 0.0, 0, link, hops, d, 0))
    return phases


def ring_schedule(
    op: str,
    bytes_total: float,
    axis_sizes: Sequence[int],
    wrap: Sequence[bool],
    axes: Sequence[int] | None = None,
    schedule: str = "simultaneous",
    unidirectional: bool = False,
) -> RingSchedule:
    """Plan a collective's ring phases over some axes of a torus.

    Parameters
    ----------
    op
        One of :data:`OPS`.
    bytes_total
        The whole, unsharded array in bytes: the all-reduce operand, the
        all-gather result, the reduce-scatter input, the all-to-all array.
    axis_sizes, wrap
        The slice shape and which axes wrap around.
    axes
        Axis indices the collective spans, in schedule order (default: all).
    schedule
        ``"sequential"`` or ``"simultaneous"`` (see the module docstring).
    unidirectional
        Links carry data one way only: wraparound rings lose their second direction.

    Raises
    ------
    TopologyError
        Unknown op or schedule, or an axis index out of range.
    """
    if op not in OPS:
        raise TopologyError(f"unknown collective {op!r}; valid: {', '.join(OPS)}")
    if schedule not in SCHEDULES:
        raise TopologyError(f"unknown schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    sizes, wraps = tuple(int(n) for n in axis_sizes), tuple(bool(w) for w in wrap)
    if len(sizes) != len(wraps):
        raise TopologyError(f"axis sizes {sizes} and wraparound {wraps} differ in length")
    axes = tuple(range(len(sizes))) if axes is None else tuple(axes)
    if any(not 0 <= a < len(sizes) for a in axes) or len(set(axes)) != len(axes):
        raise TopologyError(f"axes {axes} must be distinct indices below {len(sizes)}")
    active = [a for a in axes if sizes[a] > 1]
    phases: list[AxisPhase] = []
    if bytes_total > 0 and active:
        if op == "all-to-all":
            phases = _all_to_all_phases(bytes_total, active, sizes, wraps, unidirectional)
        elif schedule == "sequential" or len(active) == 1:
            phases = _rs_ag_phases(op, bytes_total, active, sizes, wraps, unidirectional, 0, 0)
        else:
            k = len(active)
            for i in range(k):
                order = active[i:] + active[:i]
                phases += _rs_ag_phases(op, bytes_total / k, order, sizes, wraps, unidirectional, i, 0)
    return RingSchedule(op, float(bytes_total), sizes, wraps, axes, schedule, unidirectional, tuple(phases))


def _timed(p: AxisPhase, bw_time_s: float, hop_latency_s: float) -> AxisPhase:
    t = bw_time_s + p.hops * hop_latency_s
    return AxisPhase(p.op, p.axis, p.chips, p.bytes_in, t, p.stage, p.link_bytes, p.hops, p.directions, p.piece)


def stage_times_s(phases: Sequence[AxisPhase], stages: int) -> list[float]:
    """Each stage lasts as long as its slowest phase (phases of a stage overlap)."""
    out = [0.0] * stages
    for p in phases:
        out[p.stage] = max(out[p.stage], p.time_s)
    return out


def p2p_time_s(bytes_total: float, hops_per_axis: Sequence[int], link_bytes_per_s: float, hop_latency_s: float) -> float:
    """Point-to-point transfer of ``bytes_total`` between two chips of a slice, in seconds.

    The message is split over one dimension-ordered route per axis it must move
    along (each starts on a different port of the source), so it streams at
    ``ports * W``; the first byte arrives after ``sum(hops)`` hop latencies and the
    rest pipelines behind it ([book] tpus.md, point-to-point question). An HLO
    ``collective-permute`` costs its longest route (engine/hlo/step.py).
    """
    hops = sum(abs(int(h)) for h in hops_per_axis)
    ports = sum(1 for h in hops_per_axis if h)
    if hops == 0 or bytes_total <= 0:
        return 0.0
    return bytes_total / (ports * link_bytes_per_s) + hops * hop_latency_s


def dcn_time_s(
    op: str, shard_bytes_per_chip: float, slices: int, chips_per_host: int, host_bytes_per_s: float, latency_s: float
) -> float:
    """The cross-slice part of a collective over the DCN, in seconds.

    After the in-slice reduce-scatter each chip holds ``shard_bytes_per_chip``; each
    host's NIC carries its chips' shards. A ring across S slices moves ``2(S-1)/S``
    of that volume for all-reduce and ``(S-1)/S`` for reduce-scatter or all-gather
    [ring]; all-to-all sends the ``(S-1)/S`` of each chip's data bound for other
    slices once over a full-bisection DCN.
    """
    if slices <= 1 or shard_bytes_per_chip <= 0:
        return 0.0
    host_bytes = shard_bytes_per_chip * chips_per_host
    if op == "all-reduce":
        return dcn_all_reduce_time_s(shard_bytes_per_chip, slices, chips_per_host, host_bytes_per_s, latency_s)
    if op == "all-to-all":
        return (slices - 1) / slices * host_bytes / host_bytes_per_s + latency_s
    return (slices - 1) / slices * host_bytes / host_bytes_per_s + (slices - 1) * latency_s


def collective_time(
    rings: RingSchedule,
    link_bytes_per_s: float,
    hop_latency_s: float,
    *,
    stage_bw_time_s: Sequence[float] | None = None,
    slices: int = 1,
    chips_per_host: int = 1,
    dcn_host_bytes_per_s: float = math.inf,
    dcn_latency_s: float = 0.0,
) -> CollectiveResult:
    """Time a planned collective on healthy links, or with per-stage bandwidth times.

    Parameters
    ----------
    rings
        From :func:`ring_schedule`.
    link_bytes_per_s
        One ICI link's one-way bandwidth (already times any efficiency).
    hop_latency_s
        Per-hop latency (the alpha term).
    stage_bw_time_s
        Optional bandwidth time of each stage computed on the actual links
        (:meth:`engine.comm.fabric.Fabric.stage_bw_time_s`, faults included); default
        is the closed form ``link_bytes / link_bytes_per_s`` per phase.
    slices, chips_per_host, dcn_host_bytes_per_s, dcn_latency_s
        Multi-slice: the slice-local result is combined across ``slices`` over the
        DCN (reduce-scatter in the slice, DCN all-reduce of the shard, all-gather back).

    Returns
    -------
    CollectiveResult
        ``time_s`` in seconds; phases carry their own ``time_s``.
    """
    n_stages = rings.stages
    timed = []
    for p in rings.phases:
        bw = p.link_bytes / link_bytes_per_s
        if stage_bw_time_s is not None:
            # The fabric knows the stage's bottleneck link; every phase of the stage ends with it.
            bw = stage_bw_time_s[p.stage]
        timed.append(_timed(p, bw, hop_latency_s))
    ici_s = sum(stage_times_s(timed, n_stages))
    dcn_s = 0.0
    if slices > 1:
        n_slice = rings.participants
        dcn_op = rings.op
        shard = rings.bytes_total / n_slice if dcn_op != "all-to-all" else rings.bytes_total / (n_slice * slices)
        dcn_s = dcn_time_s(dcn_op, shard, slices, chips_per_host, dcn_host_bytes_per_s, dcn_latency_s)
        # The DCN step sits between the in-slice reduce-scatter and all-gather stages.
        timed.append(AxisPhase(f"dcn-{dcn_op}", -1, slices, shard * chips_per_host, dcn_s, n_stages, 0.0, slices - 1, 1, 0))
    participants = rings.participants * max(slices, 1)
    return CollectiveResult(rings.op, rings.bytes_total, participants, ici_s + dcn_s, ici_s, dcn_s, tuple(timed), rings)


def all_reduce_time_s(
    bytes_total: float,
    axis_sizes: Sequence[int],
    wrap: Sequence[bool],
    link_bytes_per_s: float,
    hop_latency_s: float,
    schedule: str = "sequential",
    unidirectional: bool = False,
) -> tuple[float, list[AxisPhase]]:
    """Multi-axis ring all-reduce over every axis; returns total time (s) and its phases.

    The schedule defaults to ``sequential`` ([astra]'s per-dimension rings); on one
    axis both schedules agree. :func:`ring_schedule` and :func:`collective_time`
    give the phases' stages and the DCN part as well.
    """
    rings = ring_schedule("all-reduce", bytes_total, axis_sizes, wrap, None, schedule, unidirectional)
    res = collective_time(rings, link_bytes_per_s, hop_latency_s)
    return res.time_s, list(res.phases)


def dcn_all_reduce_time_s(
    shard_bytes_per_chip: float,
    slices: int,
    chips_per_host: int,
    host_bytes_per_s: float,
    latency_s: float,
) -> float:
    """All-reduce of each chip's shard across ``slices`` slices over the DCN.

    Each host's NIC carries the shards of all its chips; a ring across slices moves
    ``2 (S-1)/S`` of that volume (Patarasuk & Yuan 2009, bandwidth-optimal ring).
    """
    if slices <= 1:
        return 0.0
    host_bytes = shard_bytes_per_chip * chips_per_host
    return 2 * (slices - 1) / slices * host_bytes / host_bytes_per_s + 2 * (slices - 1) * latency_s
