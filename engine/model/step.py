"""A training step as ordered segments, and how they are laid out on every chip's timeline.

A step is an ordered list of :class:`Segment` s, each a duration for every
(step, chip) pair. Segments marked ``barrier`` start only when every chip has
reached them: the difference is charged to ``sync_wait``, which is how a
synchronous data-parallel step (TPUStrategy, pjit) makes fast chips wait for the
slowest. A final barrier closes each step. That rule lives in one place,
:class:`StepCursor`, which both the assembler here and the idle planner (which
needs step lengths before the layout) walk segments with.

:func:`assemble` lays all steps and chips out at once with array arithmetic on
integer nanoseconds, so events tile each chip's timeline exactly; the only
Python loop is over blocks of steps, to bound memory. :class:`SimContext` is
what every mechanism that contributes segments is given.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import SimulationError
from ..pod.topology import Pod
from ..scenario import Scenario
from ..scenario.calibration import Calibration
from ..trace import (
    CHIP_KIND_SCHEMA,
    EVENT_KINDS,
    EVENTS_SCHEMA,
    KIND_CODE,
    STEP_KIND_SCHEMA,
    STEPS_SCHEMA,
    events_batch,
    kind_array,
)
from ..units import MAX_RUN_NS, NS_PER_S, longest_ns, seconds_to_ns
from .models import ModelCost

__all__ = ["Segment", "StepCursor", "SimContext", "seeded_rng", "Assembled", "assemble", "STEP_BLOCK", "SUMMARY_STEP_BLOCK"]

#: steps laid out per block; bounds peak memory at ~STEP_BLOCK x chips x segments x 8 bytes x a few.
#: Events are chip-major within a block, so a Timeline window reads whole blocks of the chips it
#: shows: 32 steps halved the rows read for 256 chips spread over the pod x 100 steps against 128
#: (Timeline p95, docs/performance.md), for ~30% more for a few chips over all 1,000 steps.
STEP_BLOCK = 32
#: a summary-mode run lays out no events, so its block only bounds memory: larger, fewer numpy calls
SUMMARY_STEP_BLOCK = 128


@dataclass(frozen=True)
class Segment:
    """One phase of a step: a duration in seconds broadcastable to (steps, chips)."""

    kind: str
    dur_s: np.ndarray | float
    barrier: bool = False


class StepCursor:
    """Where each chip stands in a block of steps, advanced segment by segment: the barrier rule.

    ``start`` is each chip's position, shape (steps, chips) or (steps, 1). A barrier
    segment starts when the last chip reaches it; the others' gap is a ``sync_wait``
    part. :meth:`close` is the final barrier of the step. Works on integer
    nanoseconds (the assembler) and float seconds (the idle planner) alike.
    """

    def __init__(self, start: np.ndarray):
        self.cursor = start

    def place(self, segment: Segment, dur: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Lay ``segment`` (its duration ``dur``, broadcastable to the cursor) down next.

        Returns the parts placed, as ``(kind, start, dur)``: the barrier's ``sync_wait``
        (when the segment is a barrier), then the segment itself.
        """
        parts = []
        if segment.barrier:
            front = self.cursor.max(axis=1, keepdims=True)
            parts.append(("sync_wait", self.cursor, front - self.cursor))
            self.cursor = front
        parts.append((segment.kind, self.cursor, dur))
        self.cursor = self.cursor + dur
        return parts

    def close(self) -> tuple[tuple[str, np.ndarray, np.ndarray], np.ndarray]:
        """The step's closing barrier: its ``sync_wait`` part and the step end, shape (steps, 1)."""
        end = self.cursor.max(axis=1, keepdims=True)
        return ("sync_wait", self.cursor, end - self.cursor), end


@dataclass(frozen=True)
class Assembled:
    """Laid-out steps: events (empty in summary mode), step boundaries, and exact aggregates by kind."""

    events: pa.Table
    steps: pa.Table
    step_kind: pa.Table
    chip_kind: pa.Table


def assemble(
    segments: Sequence[Segment],
    steps: int,
    chips: int,
    detail: str = "full",
    sample: np.ndarray | None = None,
    *,
    on_events: Callable[[pa.RecordBatch], None] | None = None,
) -> Assembled:
    """Lay segments out on every chip's timeline.

    A segment's duration is a scalar, a (chips,) array, or a 2-D array whose first
    axis is steps ((steps, 1) or (steps, chips)). Zero-length events are dropped.
    Within a step, a chip's events are contiguous from the step start to its end.

    Parameters
    ----------
    detail
        ``"full"`` emits one row per event; ``"summary"`` emits no events, only the
        per-step and per-chip aggregates (for sweeps and very large pods); ``"sampled"``
        emits those aggregates of every chip and the events of the ``sample`` chips only.
    sample
        ``"sampled"`` only: ascending chip ids whose events are kept (engine/sampling.py).
    on_events
        Called with each block's events (one record batch of :data:`~engine.trace.EVENTS_SCHEMA`,
        in table order) as soon as the block is laid out; the events are then not kept, and
        :attr:`Assembled.events` is empty. A store uses it to insert a block while the next
        one is laid out. Without it, the events are collected into :attr:`Assembled.events`.
    """
    # A step never exceeds the sum of its segments' longest durations (barrier waits only
    # pad up to the slowest chip), so bounding that sum in float keeps every int64 sum exact.
    longest_step_ns = sum(longest_ns(seg.kind, seg.dur_s) for seg in segments)
    if longest_step_ns * steps >= MAX_RUN_NS:
        raise SimulationError(
            f"{steps} steps of up to {longest_step_ns / NS_PER_S:.3g} s overflow the trace clock "
            f"({MAX_RUN_NS / NS_PER_S:.3g} s per run): the model, batch or steps are implausibly large"
        )
    n_kinds = len(EVENT_KINDS)
    step_ns = np.zeros(steps, dtype=np.int64)
    step_kind_sum = np.zeros((steps, n_kinds), dtype=np.int64)
    step_kind_max = np.zeros((steps, n_kinds), dtype=np.int64)
    chip_kind_sum = np.zeros((n_kinds, chips), dtype=np.int64)
    batches: list[pa.RecordBatch] = []
    emit = batches.append if on_events is None else on_events
    emitting = np.asarray(sample, dtype=np.int32) if detail == "sampled" else None  # None: every chip's events
    block = STEP_BLOCK if detail == "full" else SUMMARY_STEP_BLOCK
    block_start_ns = 0
    # per-step durations (2-D) are converted to nanoseconds block by block, the rest once
    whole_ns = [None if np.ndim(seg.dur_s) == 2 else seconds_to_ns(seg.kind, seg.dur_s) for seg in segments]
    for s0 in range(0, steps, block):
        s1 = min(steps, s0 + block)
        seg_ns = [seconds_to_ns(seg.kind, seg.dur_s[s0:s1]) if ns is None else ns for seg, ns in zip(segments, whole_ns)]
        parts, end = _lay_out_block(segments, seg_ns, s0, s1)
        step_ns[s0:s1] = end
        _add_kind_totals(parts, chips, step_kind_sum[s0:s1], step_kind_max[s0:s1], chip_kind_sum)
        block_ns = int(end.sum())
        if detail in ("full", "sampled"):
            emit(_block_events(parts, s0, s1, block_start_ns, block_ns, chips, emitting))
        block_start_ns += block_ns
    step_start = np.concatenate([[0], np.cumsum(step_ns)[:-1]]).astype(np.int64)
    events = pa.Table.from_batches(batches, schema=EVENTS_SCHEMA)
    steps_table = pa.table(
        {"step": np.arange(steps, dtype=np.int32), "start_ns": step_start, "step_ns": step_ns}, schema=STEPS_SCHEMA
    )
    sk_step, sk_kind = np.nonzero(step_kind_sum)
    step_kind = pa.table(
        [
            pa.array(sk_step.astype(np.int32)),
            kind_array(sk_kind),
            pa.array(step_kind_sum[sk_step, sk_kind]),
            pa.array(step_kind_max[sk_step, sk_kind]),
        ],
        schema=STEP_KIND_SCHEMA,
    )
    ck_kind, ck_chip = np.nonzero(chip_kind_sum)
    chip_kind = pa.table(
        [pa.array(ck_chip.astype(np.int32)), kind_array(ck_kind), pa.array(chip_kind_sum[ck_kind, ck_chip])],
        schema=CHIP_KIND_SCHEMA,
    )
    return Assembled(events=events, steps=steps_table, step_kind=step_kind, chip_kind=chip_kind)


def _lay_out_block(segments: Sequence[Segment], seg_ns: list[np.ndarray], s0: int, s1: int) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """Steps ``s0:s1`` walked segment by segment: the parts ``(kind code, dur_ns)`` in order, and each step's length.

    ``seg_ns`` holds each segment's durations in nanoseconds: its rows ``s0:s1`` when per step, else whole.

    A part's duration broadcasts to (steps in block, chips); it stays (steps, 1) or scalar-like
    while every chip stands at the same point, so uniform phases cost no per-chip work. Parts
    that are zero on every chip of the block are left out (they would emit no event).
    """
    cursor = StepCursor(np.zeros((s1 - s0, 1), dtype=np.int64))
    parts = []
    for seg, ns in zip(segments, seg_ns):
        for kind, _, dur in cursor.place(seg, ns):
            if dur.any():
                parts.append((KIND_CODE[kind], dur))
    (kind, _, dur), end = cursor.close()
    if dur.any():
        parts.append((KIND_CODE[kind], dur))
    return parts, end[:, 0]


def _add_kind_totals(parts: list[tuple[int, np.ndarray]], chips: int, step_sum: np.ndarray, step_max: np.ndarray, chip_sum: np.ndarray) -> None:
    """Add a block's exact totals by kind: per step over chips (sum, largest chip) and per chip over steps.

    A chip may have several parts of one kind in a step, so parts of a kind are summed per
    chip-step before the largest is taken.
    """
    n = step_sum.shape[0]
    by_kind: dict[int, np.ndarray] = {}
    for code, dur in parts:
        by_kind[code] = by_kind[code] + dur if code in by_kind else dur
    for code, total in by_kind.items():
        total = np.broadcast_to(total, np.broadcast_shapes(total.shape, (n, 1)))  # (n, chips) or (n, 1)
        step_sum[:, code] = total.sum(axis=1) * (chips // total.shape[1])
        step_max[:, code] = total.max(axis=1)
        chip_sum[code] += total.sum(axis=0)


def _block_events(
    parts: list[tuple[int, np.ndarray]], s0: int, s1: int, block_start_ns: int, block_ns: int, chips: int,
    emitting: np.ndarray | None,
) -> pa.RecordBatch:
    """The events of steps ``s0:s1`` (``block_ns`` long from ``block_start_ns``), one record batch.

    ``emitting`` selects the chips whose events are kept (ascending ids); None keeps every chip.

    Rows are (chip, step, part) ordered: each chip's events of the block are adjacent and
    time-ordered, so DuckDB's row groups (~123k rows) each hold a few hundred chips, and a
    timeline of a few chips over many steps reads a few row groups per block, not the table.
    A chip's events tile its time, so a start is the block's start plus the durations before
    it: one running sum over the kept durations, less the whole block's length per chip before.
    """
    chip_ids = np.arange(chips, dtype=np.int32) if emitting is None else emitting
    n, k, m = s1 - s0, len(parts), len(chip_ids)
    laid = np.empty((m, n, k), dtype=np.int64)  # (chips, steps, parts): the rows' order
    for j, (_, dur) in enumerate(parts):
        laid[:, :, j] = _chip_major(dur, emitting)
    kept = laid > 0
    dur_col = np.compress(kept.ravel(), laid.ravel())  # np.compress: several times faster than a boolean index here
    as_int = kept.view(np.uint8)
    per_chip_step = np.zeros((m, n), dtype=np.int64)  # events of each (chip, step): k slices added, faster than .sum(axis=2)
    for j in range(k):
        per_chip_step += as_int[:, :, j]
    step_col = np.repeat(np.broadcast_to(np.arange(s0, s1, dtype=np.int32), (m, n)).ravel(), per_chip_step.ravel())
    per_chip = per_chip_step.sum(axis=1)
    chip_col = np.repeat(chip_ids, per_chip)
    kind_col = np.compress(kept.ravel(), np.tile(np.array([code for code, _ in parts], dtype=np.int8), m * n))
    start_col = np.cumsum(dur_col)
    start_col -= dur_col
    start_col += np.repeat(block_start_ns - block_ns * np.arange(m, dtype=np.int64), per_chip)
    return events_batch(chip_col, step_col, kind_col, start_col, dur_col)


def _chip_major(dur: np.ndarray, emitting: np.ndarray | None) -> np.ndarray:
    """A part's durations (broadcastable to (steps, chips)) as (chips, steps) or broadcastable to it, of ``emitting`` only."""
    if dur.ndim == 0:
        return dur
    by_chip = dur.T if dur.ndim == 2 else dur[:, None]
    return by_chip[emitting] if emitting is not None and by_chip.shape[0] > 1 else by_chip


@dataclass(frozen=True)
class SimContext:
    """Everything a mechanism needs to contribute to a run, derived once from the scenario."""

    scenario: Scenario
    cal: Calibration
    pod: Pod
    cost: ModelCost

    @property
    def steps(self) -> int:
        return self.scenario.training.steps

    @property
    def chips(self) -> int:
        return self.pod.chips

    def rng(self, stream: str) -> np.random.Generator:
        """An independent random stream per mechanism, derived from the scenario's seed.

        Streams are keyed by name, so adding a mechanism never changes another's draws.
        """
        return seeded_rng(self.scenario.sim.seed, stream)


def seeded_rng(seed: int, stream: str) -> np.random.Generator:
    """The random stream named ``stream`` of a scenario with seed ``seed`` (see :meth:`SimContext.rng`)."""
    key = int.from_bytes(hashlib.sha256(stream.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, key])
