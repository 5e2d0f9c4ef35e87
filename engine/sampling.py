"""Which chips a ``[sim] trace = "sampled"`` run keeps every event of, and why.

A pod of tens of thousands of chips has too many events to store (about five per
chip-step), and most chips of a synchronous job look alike. A sampled run keeps the
exact per-step and per-chip aggregates of every chip (as summary mode does) plus every
event of ``sim.sample_chips`` chips chosen to be worth looking at. Chips are chosen
before the layout, from the step's segments: a chip's time not spent waiting for the
others (its busy time) is the sum of its segment durations, so ranking by busy time is
ranking by the sync-wait profile the layout would produce (events tile every step, so a
chip's ``sync_wait`` is the run's wall time minus its busy time).

Chips are taken in this order, each chip once, under the reason it was first taken by
(:data:`SAMPLE_REASONS`, also the order of priority of the stored reason):

1. ``straggler``: chips slower by their straggler factor, those the scenario lists first,
   then the rest by busy time; at most a quarter of what the slice representatives leave;
2. ``degraded_link``: the two end chips of every degraded or failed ICI link, in the
   order the scenario lists them; at most a quarter;
3. ``slowest``: the chips with the most busy time (least sync wait); at most a quarter;
4. ``slice_host``: every slice's representatives: the chips of the host holding the
   slice's slowest chip when a host per slice fits in half the budget, else that slowest
   chip alone (with fewer samples than slices, slices evenly spread over the pod);
5. ``random``: the rest, drawn from the remaining chips with the scenario's
   ``sample_chips`` random stream (every remaining chip when the sample covers the pod).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .model.step import Segment, seeded_rng
from .pod.topology import Pod
from .scenario import Scenario
from .trace import TABLES

__all__ = ["SAMPLE_REASONS", "ChipSample", "busy_s_per_chip", "choose_sample", "plan_sample"]

#: why a chip was sampled, in the order chips are taken (and a chip's reason is its first)
SAMPLE_REASONS: tuple[str, ...] = ("straggler", "degraded_link", "slowest", "slice_host", "random")


@dataclass(frozen=True)
class ChipSample:
    """The sampled chips (sorted ids) and each one's reason (a :data:`SAMPLE_REASONS` entry)."""

    chips: np.ndarray  # (n,) int32, ascending
    reasons: tuple[str, ...]  # aligned with chips

    def table(self) -> pa.Table:
        """The ``extra_sampled_chips`` table of the run (engine/trace.py)."""
        return TABLES["extra_sampled_chips"].table({"chip": self.chips, "reason": list(self.reasons)})


def busy_s_per_chip(segments: Sequence[Segment], steps: int, chips: int) -> np.ndarray:
    """(chips,) seconds each chip spends in its segments over all steps: its time not waiting at barriers.

    A duration is a scalar, (chips,), (steps, 1) or (steps, chips), as :func:`engine.model.step.assemble`
    takes them; each is summed over steps without broadcasting it to (steps, chips).
    """
    busy = np.zeros(chips)
    for seg in segments:
        d = np.asarray(seg.dur_s, dtype=np.float64) if not isinstance(seg.dur_s, np.ndarray) else seg.dur_s
        if d.ndim == 2:
            per_chip = d.sum(axis=0, dtype=np.float64)  # (chips,) or (1,)
        else:
            per_chip = d * steps
        busy += np.broadcast_to(per_chip, (chips,))
    return busy


def _link_chips(pod: Pod, links: Sequence) -> list[int]:
    """Chip ids of both end chips of each link (slice-local coordinates), in the order given."""
    out: list[int] = []
    for link in links:
        for coord in (link.a, link.b):
            local = int(np.ravel_multi_index(tuple(coord), pod.slice.shape))
            out.append(link.slice * pod.chips_per_slice + local)
    return out


def _slice_representatives(pod: Pod, busy: np.ndarray, budget: int) -> list[int]:
    """Per slice, the host of its slowest chip (whole, if a host per slice fits in half ``budget``) or that chip."""
    per_slice = busy.reshape(pod.slices, pod.chips_per_slice)
    slowest = per_slice.argmax(axis=1) + np.arange(pod.slices) * pod.chips_per_slice
    slices = np.arange(pod.slices)
    if budget < pod.slices:  # fewer samples than slices: spread them over the pod
        slices = np.unique(np.linspace(0, pod.slices - 1, max(budget, 1)).round().astype(np.int64))
    if pod.chips_per_host > 1 and len(slices) * pod.chips_per_host * 2 <= budget:
        host = pod.chip_table["host"]
        want = np.isin(host, host[slowest[slices]])
        return [int(c) for c in np.flatnonzero(want)]
    return [int(c) for c in slowest[slices]]


def choose_sample(
    pod: Pod,
    busy_s: np.ndarray,
    n: int,
    rng: np.random.Generator,
    *,
    stragglers: Sequence[int] = (),
    listed_stragglers: Sequence[int] = (),
    links: Sequence = (),
) -> ChipSample:
    """Choose ``n`` chips of ``pod`` to keep every event of (the order and reasons: module docstring).

    Parameters
    ----------
    busy_s
        (chips,) busy seconds of every chip (:func:`busy_s_per_chip`).
    n
        Chips to sample, 1 .. pod.chips (checked at scenario load: ``sim.sample_chips``).
    rng
        The run's ``sample_chips`` stream: the random rest, and nothing else.
    stragglers, listed_stragglers
        Chips slower by their straggler factor, and those of them the scenario names.
    links
        Degraded and failed ICI links (``LinkRef``: slice-local end coordinates and slice).
    """
    chips = pod.chips
    n = min(n, chips)
    chosen: dict[int, str] = {}  # insertion order = order taken
    reps = _slice_representatives(pod, busy_s, n)
    quota = max(0, (n - len(reps)) // 4)
    by_busy = np.argsort(-busy_s, kind="stable")  # slowest first, ties by chip id

    def take(candidates, reason: str, limit: int) -> None:
        taken = 0
        for c in candidates:
            if taken >= limit or len(chosen) >= n:
                return
            c = int(c)
            if c not in chosen:
                chosen[c] = reason
                taken += 1

    slow = set(stragglers)
    listed = [c for c in dict.fromkeys(listed_stragglers) if c in slow]
    rest = sorted(slow - set(listed), key=lambda c: (-busy_s[c], c))
    take(listed + rest, "straggler", quota)
    take(_link_chips(pod, links), "degraded_link", quota)
    take(by_busy, "slowest", quota)
    take(reps, "slice_host", n)
    left = np.setdiff1d(np.arange(chips), np.fromiter(chosen, dtype=np.int64, count=len(chosen)))
    take(rng.permutation(left)[: n - len(chosen)], "random", n)
    ids = np.array(sorted(chosen), dtype=np.int32)
    return ChipSample(chips=ids, reasons=tuple(chosen[int(c)] for c in ids))


def plan_sample(scenario: Scenario, pod: Pod, segments: Sequence[Segment], stragglers: Sequence[int] = ()) -> ChipSample | None:
    """The chips a ``trace = "sampled"`` scenario keeps every event of (None for other traces).

    ``stragglers``: the chips the idle planner named stragglers (``facts["stragglers"]``).
    Randomness comes from the scenario's ``sample_chips`` stream (:meth:`engine.model.step.SimContext.rng`),
    so sampling never changes another mechanism's draws.
    """
    if scenario.sim.trace != "sampled":
        return None
    busy = busy_s_per_chip(segments, scenario.training.steps, pod.chips)
    section = scenario.stragglers
    listed: list[int] = []
    if section is not None:
        host = pod.chip_table["host"]
        listed = [*section.chips, *(int(c) for c in np.flatnonzero(np.isin(host, section.hosts)))]
    ic = scenario.interconnect
    return choose_sample(
        pod, busy, scenario.sampled_chip_count, seeded_rng(scenario.sim.seed, "sample_chips"),
        stragglers=stragglers, listed_stragglers=listed, links=[*ic.degraded_links, *ic.failed_links],
    )  # fmt: skip
