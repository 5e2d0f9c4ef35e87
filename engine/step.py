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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .calibration import Calibration
from .errors import SimulationError
from .models import ModelCost
from .scenario import Scenario
from .topology import Pod
from .trace import (
    CHIP_KIND_SCHEMA,
    EVENT_KINDS,
    EVENTS_SCHEMA,
    KIND_CODE,
    STEP_KIND_SCHEMA,
    STEPS_SCHEMA,
    events_batch,
    kind_array,
)
from .units import MAX_RUN_NS, NS_PER_S, seconds_to_ns

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
            self.cursor = np.broadcast_to(front, self.cursor.shape)
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
    segments: Sequence[Segment], steps: int, chips: int, detail: str = "full", sample: np.ndarray | None = None
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
    """
    seg_ns = [seconds_to_ns(seg.kind, seg.dur_s) for seg in segments]
    # A step never exceeds the sum of its segments' longest durations (barrier waits only
    # pad up to the slowest chip), so bounding that sum in float keeps every int64 sum exact.
    longest_step_ns = sum(float(ns.max()) for ns in seg_ns if ns.size)
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
    blocks = []
    block = STEP_BLOCK if detail == "full" else SUMMARY_STEP_BLOCK
    for s0 in range(0, steps, block):
        s1 = min(steps, s0 + block)
        shape = (s1 - s0, chips)
        cursor = StepCursor(np.zeros(shape, dtype=np.int64))
        placed = []  # (kind, start_rel, dur), each (steps in block, chips)
        for seg, ns in zip(segments, seg_ns):
            placed += cursor.place(seg, np.broadcast_to(ns[s0:s1] if ns.ndim == 2 else ns, shape))
        closing, end = cursor.close()
        placed.append(closing)
        parts = [(KIND_CODE[kind], start, dur) for kind, start, dur in placed]
        step_ns[s0:s1] = end[:, 0]
        # Exact per-chip totals by kind (a chip may have several events of one kind in a step).
        per_kind = np.zeros((n_kinds, *shape), dtype=np.int64)
        for code, _, dur in parts:
            per_kind[code] += dur
        step_kind_sum[s0:s1] = per_kind.sum(axis=2).T
        step_kind_max[s0:s1] = per_kind.max(axis=2).T
        chip_kind_sum += per_kind.sum(axis=1)
        if detail == "full":
            blocks.append((s0, s1, parts))
        elif detail == "sampled":  # the sampled chips' columns only: ~sample/chips of a full block's memory
            blocks.append((s0, s1, [(code, np.broadcast_to(start, shape)[:, sample], dur[:, sample]) for code, start, dur in parts]))
    step_start = np.concatenate([[0], np.cumsum(step_ns)[:-1]]).astype(np.int64)

    batches = []
    chip_ids = np.arange(chips, dtype=np.int32)
    if detail == "sampled":  # the blocks hold the sampled chips' columns only: lay those out
        chip_ids = np.asarray(sample, dtype=np.int32)
        chips = len(chip_ids)
    for s0, s1, parts in blocks:
        n_steps = s1 - s0
        k = len(parts)
        # (chips, steps, parts) order within a block: each chip's events of the block are adjacent
        # and time-ordered, so DuckDB's row groups (~123k rows) each hold a few hundred chips, and a
        # timeline of a few chips over many steps reads a few row groups per block, not the table.
        starts = np.stack([np.broadcast_to(p[1], (n_steps, chips)).T for p in parts], axis=2)
        durs = np.stack([np.broadcast_to(p[2], (n_steps, chips)).T for p in parts], axis=2)
        codes = np.broadcast_to(np.array([p[0] for p in parts], dtype=np.int8), (chips, n_steps, k))
        keep = durs > 0
        step_col = np.broadcast_to(np.arange(s0, s1, dtype=np.int32)[None, :, None], (chips, n_steps, k))
        chip_col = np.broadcast_to(chip_ids[:, None, None], (chips, n_steps, k))
        abs_start = starts + step_start[None, s0:s1, None]
        batches.append(events_batch(chip_col[keep], step_col[keep], codes[keep], abs_start[keep], durs[keep]))
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
