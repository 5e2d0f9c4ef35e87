"""Collective costs on the torus: per-axis bidirectional rings, plus DCN across slices.

The model is the alpha-beta ring model per torus axis (scaling book, "How to
Scale Your Model", sharding.md, AllGather/ReduceScatter/AllReduce costs;
ASTRA-sim's hierarchical per-dimension ring schedule):

* On an axis of n chips with wraparound, a bidirectional ring moves each chip's
  share over two links at once: reduce-scatter or all-gather of V bytes takes
  ``(n-1)/n * V / (2 W)`` plus ``ceil((n-1)/2)`` hop latencies.
* Without wraparound the axis is a line and the ring cost is one-directional:
  ``(n-1)/n * V / W`` plus ``n-1`` hops (scaling book: unidirectional rings cost 2x).
* Multi-axis all-reduce, the default "sequential" schedule: reduce-scatter axis by
  axis with the shard shrinking by each axis' size, then all-gather in reverse.
* Across slices: reduce-scatter inside the slice, all-reduce of the resulting
  shard over DCN (each host's NIC carries its chips' shards), all-gather back.

``W`` is one link's one-way bandwidth times the calibrated ICI efficiency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["AxisPhase", "ring_phase", "all_reduce_time_s", "dcn_all_reduce_time_s"]


@dataclass(frozen=True)
class AxisPhase:
    """One ring phase on one axis."""

    op: str  # "reduce-scatter" | "all-gather"
    axis: int
    chips: int
    bytes_in: float  # size of the array this phase operates on, per participating group
    time_s: float


def ring_phase(bytes_total: float, n: int, wrap: bool, link_bytes_per_s: float, hop_latency_s: float) -> float:
    """Time of one reduce-scatter or all-gather of ``bytes_total`` over an n-chip ring.

    ``bytes_total`` is the whole (unsharded) array the phase reduces or gathers.
    """
    if n <= 1 or bytes_total <= 0:
        return 0.0
    directions = 2 if wrap else 1
    hops = math.ceil((n - 1) / 2) if wrap else n - 1
    return (n - 1) / n * bytes_total / (directions * link_bytes_per_s) + hops * hop_latency_s


def all_reduce_time_s(
    bytes_total: float,
    axis_sizes: Sequence[int],
    wrap: Sequence[bool],
    link_bytes_per_s: float,
    hop_latency_s: float,
) -> tuple[float, list[AxisPhase]]:
    """Sequential multi-axis ring all-reduce; returns total time and its phases."""
    phases: list[AxisPhase] = []
    shard = float(bytes_total)
    for axis, (n, w) in enumerate(zip(axis_sizes, wrap)):
        t = ring_phase(shard, n, w, link_bytes_per_s, hop_latency_s)
        phases.append(AxisPhase("reduce-scatter", axis, n, shard, t))
        shard /= max(n, 1)
    for rs in reversed(list(phases)):
        phases.append(AxisPhase("all-gather", rs.axis, rs.chips, rs.bytes_in, rs.time_s))
    return sum(p.time_s for p in phases), phases


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
