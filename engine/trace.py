"""The trace-table contract between the engine and everything downstream.

Three tables describe a run, all as Arrow:

* ``events(chip, step, kind, start_ns, dur_ns)``: per chip, events tile the
  step exactly (no gaps, no overlaps), so chip time by kind sums to wall time.
* ``steps(step, start_ns, step_ns)``: the synchronous step boundaries.
* ``chips(chip, host, slice, x, y, z)``: where each chip sits.

Mechanisms added later (link load, memory timeline, ...) attach further tables
under ``Trace.extra``; the profiler stores them generically by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "EVENT_KINDS",
    "KIND_CODE",
    "EVENTS_SCHEMA",
    "STEPS_SCHEMA",
    "CHIPS_SCHEMA",
    "STEP_KIND_SCHEMA",
    "CHIP_KIND_SCHEMA",
    "kind_array",
    "Trace",
    "RunFacts",
    "RunResult",
    "events_batch",
]

#: Exclusive causes of chip time, in XProf-like attribution priority (host waits first).
EVENT_KINDS: tuple[str, ...] = ("input_wait", "recompile", "compute", "collective", "sync_wait", "other")
KIND_CODE = {k: i for i, k in enumerate(EVENT_KINDS)}

_KIND_TYPE = pa.dictionary(pa.int8(), pa.string())
EVENTS_SCHEMA = pa.schema(
    [
        ("chip", pa.int32()),
        ("step", pa.int32()),
        ("kind", _KIND_TYPE),
        ("start_ns", pa.int64()),
        ("dur_ns", pa.int64()),
    ]
)
STEPS_SCHEMA = pa.schema([("step", pa.int32()), ("start_ns", pa.int64()), ("step_ns", pa.int64())])
#: per step and kind: chip time summed over chips, and the largest single chip's total
STEP_KIND_SCHEMA = pa.schema([("step", pa.int32()), ("kind", _KIND_TYPE), ("chip_ns", pa.int64()), ("max_chip_ns", pa.int64())])
#: per chip and kind: time summed over all steps
CHIP_KIND_SCHEMA = pa.schema([("chip", pa.int32()), ("kind", _KIND_TYPE), ("ns", pa.int64())])
CHIPS_SCHEMA = pa.schema([(c, pa.int32()) for c in ("chip", "host", "slice", "x", "y", "z")])
_KIND_DICTIONARY = pa.array(EVENT_KINDS, type=pa.string())


def kind_array(kind_code: np.ndarray) -> pa.DictionaryArray:
    """Kind codes (indices into EVENT_KINDS) as an Arrow dictionary array."""
    return pa.DictionaryArray.from_arrays(pa.array(kind_code.astype(np.int8, copy=False)), _KIND_DICTIONARY)


def events_batch(chip: np.ndarray, step: np.ndarray, kind_code: np.ndarray, start_ns: np.ndarray, dur_ns: np.ndarray) -> pa.RecordBatch:
    """Build one events record batch from flat numpy columns (kind as codes into EVENT_KINDS)."""
    kind = kind_array(kind_code)
    return pa.RecordBatch.from_arrays(
        [pa.array(chip, pa.int32()), pa.array(step, pa.int32()), kind, pa.array(start_ns, pa.int64()), pa.array(dur_ns, pa.int64())],
        schema=EVENTS_SCHEMA,
    )


@dataclass(frozen=True)
class Trace:
    """A run's tables. ``events`` is empty when the run was simulated in summary mode.

    ``step_kind`` and ``chip_kind`` are the per-step and per-chip aggregates by kind; the
    engine computes them exactly while laying out steps. When absent (imported traces)
    the profiler derives them from ``events`` in SQL.
    """

    events: pa.Table
    steps: pa.Table
    chips: pa.Table
    extra: dict[str, pa.Table] = field(default_factory=dict)
    step_kind: pa.Table | None = None
    chip_kind: pa.Table | None = None


@dataclass(frozen=True)
class RunFacts:
    """Scalars the engine knows about a run that the trace tables do not show."""

    chip: str
    chips: int
    hosts: int
    slices: int
    topology: str
    steps: int
    # None below means "unknown": an imported real trace does not carry these.
    params: int | None
    samples_per_step: int | None
    tokens_per_step: int | None
    model_flops_per_step: float | None  # whole job, forward + backward, no remat
    hardware_flops_per_step: float | None  # whole job, including recomputation
    peak_flops_per_s_per_chip: float | None
    peak_hbm_bytes: float | None
    hbm_capacity_bytes: float | None
    oom: bool
    hbm_breakdown_bytes: dict[str, float] | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    scenario: Any  # engine.scenario.Scenario (kept untyped to avoid an import cycle)
    trace: Trace
    facts: RunFacts
