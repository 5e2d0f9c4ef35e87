"""The table contract between the engine, the store and everything downstream.

Every per-run table a run can store is declared here once, in :data:`TABLES`, with
its columns, their Arrow types and their meaning with the unit. The engine builds
each table from its declared schema (:meth:`TableSpec.table`), the store creates
each table from it (adding a leading ``run_id``), and a test checks that what the
engine emits conforms exactly.

Core tables (always present, on :class:`Trace` fields):

* ``events``: per chip, events tile the step exactly (no gaps, no overlaps), so
  chip time by kind sums to wall time.
* ``steps``: the synchronous step boundaries.
* ``chips``: where each chip sits.
* ``step_kind`` / ``chip_kind``: exact aggregates of ``events`` by kind.

Extra tables attach to :attr:`Trace.extra` under their key (``link_load``); the
store holds them as ``extra_<key>`` (:func:`extra_table_name`). A mechanism that
does not apply to a run emits no table (a run without ``[compile]`` has no
compile log), never a differently shaped one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # typing only: scenario sections build tables from this contract (compilation imports it)
    from .scenario import Scenario

__all__ = [
    "Column",
    "TableSpec",
    "TABLES",
    "EXTRA_PREFIX",
    "extra_table_name",
    "EVENT_KINDS",
    "KIND_CODE",
    "KIND_TYPE",
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
#: ``bubble``: a pipeline stage idle while the pipeline fills or drains (engine/model/pipeline.py).
EVENT_KINDS: tuple[str, ...] = ("input_wait", "recompile", "compute", "collective", "sync_wait", "bubble", "other")
KIND_CODE = {k: i for i, k in enumerate(EVENT_KINDS)}
#: how the engine carries an event kind: codes into EVENT_KINDS (the store keeps the text)
KIND_TYPE = pa.dictionary(pa.int8(), pa.string())
#: stored name of an extra table = this prefix + its key in :attr:`Trace.extra`
EXTRA_PREFIX = "extra_"


@dataclass(frozen=True)
class Column:
    """One column of a stored table."""

    name: str
    type: pa.DataType
    doc: str  # meaning, with the unit


@dataclass(frozen=True)
class TableSpec:
    """One per-run table: its stored name, its columns in order, and what a row is."""

    name: str  # the stored table name ("events", "extra_link_load", ...)
    columns: tuple[Column, ...]
    doc: str

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema the engine builds this table with (without the store's ``run_id``)."""
        return pa.schema([(c.name, c.type) for c in self.columns])

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def table(self, columns: Mapping[str, Any]) -> pa.Table:
        """Build this table from column arrays keyed by name, cast to the declared types.

        Raises ``KeyError``/``ValueError`` (from Arrow) when a column is missing or extra,
        so a builder cannot drift from its declaration.
        """
        if set(columns) != set(self.column_names):
            raise ValueError(f"{self.name}: columns {sorted(columns)} differ from the declared {list(self.column_names)}")
        return pa.table({c.name: columns[c.name] for c in self.columns}, schema=self.schema)

    def empty(self) -> pa.Table:
        """A table of this shape with no rows (Arrow tables are immutable, so one is shared)."""
        if self.name not in _EMPTY_TABLES:
            _EMPTY_TABLES[self.name] = self.schema.empty_table()
        return _EMPTY_TABLES[self.name]


#: one empty table per declared table name (TABLES never changes at run time)
_EMPTY_TABLES: dict[str, pa.Table] = {}


def _spec(name: str, doc: str, *columns: tuple[str, pa.DataType, str]) -> TableSpec:
    return TableSpec(name, tuple(Column(n, t, d) for n, t, d in columns), doc)


_CORE = (
    _spec(
        "events",
        "One exclusive stretch of a chip's time; per chip, events tile every step with no gap or overlap.",
        ("chip", pa.int32(), "chip id (see chips.chip)"),
        ("step", pa.int32(), "training step, from 0"),
        ("kind", KIND_TYPE, "cause of the time, one of EVENT_KINDS"),
        ("start_ns", pa.int64(), "start, nanoseconds from the run's start"),
        ("dur_ns", pa.int64(), "duration, nanoseconds (> 0)"),
    ),
    _spec(
        "steps",
        "One synchronous step: it ends when the slowest chip does.",
        ("step", pa.int32(), "training step, from 0"),
        ("start_ns", pa.int64(), "start, nanoseconds from the run's start"),
        ("step_ns", pa.int64(), "wall duration, nanoseconds"),
    ),
    _spec(
        "chips",
        "Where each chip sits in the pod.",
        ("chip", pa.int32(), "chip id, 0 .. chips-1, slice-major"),
        ("host", pa.int32(), "host id the chip is attached to"),
        ("slice", pa.int32(), "slice id, 0 .. slices-1"),
        ("x", pa.int32(), "torus coordinate along x within the slice, chips"),
        ("y", pa.int32(), "torus coordinate along y within the slice, chips"),
        ("z", pa.int32(), "torus coordinate along z within the slice, chips (0 on 2-D tori)"),
    ),
    _spec(
        "step_kind",
        "Per step and kind: chip time summed over chips and the largest single chip's total (exact, also in summary mode).",
        ("step", pa.int32(), "training step, from 0"),
        ("kind", KIND_TYPE, "cause of the time, one of EVENT_KINDS"),
        ("chip_ns", pa.int64(), "chip time of this kind summed over all chips, nanoseconds"),
        ("max_chip_ns", pa.int64(), "the largest one chip's time of this kind in the step, nanoseconds"),
    ),
    _spec(
        "chip_kind",
        "Per chip and kind: time summed over all steps (exact, also in summary mode).",
        ("chip", pa.int32(), "chip id"),
        ("kind", KIND_TYPE, "cause of the time, one of EVENT_KINDS"),
        ("ns", pa.int64(), "chip time of this kind over the run, nanoseconds"),
    ),
)

_EXTRA = (
    _spec(
        "extra_memory_timeline",
        "HBM held by one chip at each point of a step (all chips alike under SPMD), by category.",
        ("point", pa.int32(), "index of the point in the step, in execution order"),
        ("phase", pa.string(), "forward | loss | backward | optimizer"),
        ("category", pa.string(), "params | grads | optimizer | activations | temporary"),
        ("bytes", pa.float64(), "HBM held by this category at this point, bytes"),
    ),
    _spec(
        "extra_chip_memory",
        "Peak HBM of each chip over a step.",
        ("chip", pa.int32(), "chip id"),
        ("peak_bytes", pa.float64(), "peak HBM in use, bytes"),
    ),
    _spec(
        "extra_chip_expert_load",
        "Mixture-of-experts runs: how much of its expert group's routed tokens each chip computes (engine/model/moe.py).",
        ("chip", pa.int32(), "chip id"),
        ("mean_load_ratio", pa.float64(), "tokens its expert GEMMs compute over an even share, mean over steady-state steps, ratio (1 = even)"),
        ("max_load_ratio", pa.float64(), "the same ratio in the chip's busiest step, ratio"),
    ),
    _spec(
        "extra_layer_collectives",
        "Per-layer collectives of one step on a representative chip (FSDP gathers, TP all-reduces, gradient sync, PS pulls).",
        ("unit", pa.int32(), "layer unit index in execution order; -1 for the whole-model gradient sync"),
        ("layer", pa.string(), "layer unit name (embed, layer0, ..., unembed, or model)"),
        ("phase", pa.string(), "forward | backward | recompute (collectives of a full-remat forward) | gradient_sync | update"),
        ("op", pa.string(), "all-gather | reduce-scatter | all-reduce | all-to-all | collective-permute (ring attention) | ps-pull | ps-push"),
        ("mesh_axis", pa.string(), "mesh axis it runs over: fsdp | tensor | expert | context | data+dcn | dcn"),
        ("bytes", pa.float64(), "payload per chip, bytes"),
        ("time_ns", pa.int64(), "time the collective takes, hidden or not, nanoseconds"),
    ),
    _spec(
        "extra_link_load",
        "Load of every directed ICI link (and each host's DCN NIC) in one step of the data-parallel gradient sync.",
        ("src_chip", pa.int32(), "chip the link leaves (DCN: the host's first chip)"),
        ("dst_chip", pa.int32(), "chip the link enters (DCN: first chip of the same host on the next slice)"),
        ("axis", pa.string(), "torus axis x | y | z, or dcn"),
        ("bytes_per_step", pa.float64(), "bytes carried per step, bytes"),
        ("busy_ns_per_step", pa.int64(), "time the link is busy per step at its bandwidth, nanoseconds"),
        ("utilization", pa.float64(), "busy time over the median step time, fraction"),
        ("bandwidth_frac", pa.float64(), "bandwidth left: 1 healthy, (0, 1) degraded, 0 failed, fraction"),
    ),
    _spec(
        "extra_collective_overlap",
        "Per step, the bucketed gradient all-reduce and how much of it the backward pass hides (no rows when nothing overlaps).",
        ("step", pa.int32(), "training step, from 0"),
        ("start_ns", pa.int64(), "when the first bucket's all-reduce starts, nanoseconds from the run's start"),
        ("overlapped_ns", pa.int64(), "collective time hidden under the backward pass, nanoseconds"),
        ("exposed_ns", pa.int64(), "collective time charged to the step (the collective event), nanoseconds"),
        ("buckets", pa.int32(), "gradient buckets, count"),
    ),
    _spec(
        "extra_compiles",
        "XLA compile log: one row per compile (present when the scenario has [compile] or a failure forced one).",
        ("step", pa.int32(), "step that paid the compile"),
        ("signature", pa.string(), "input-shape signature compiled for"),
        ("cause", pa.string(), "first | new_shape | restart"),
        ("compile_ns", pa.int64(), "compile time on every chip, nanoseconds"),
    ),
    _spec(
        "extra_hlo_collectives",
        "Each collective of an HLO model's module: where its replica groups sit on the torus and what one execution costs.",
        ("name", pa.string(), "instruction name in the module"),
        ("op", pa.string(), "all-reduce | all-gather | reduce-scatter | all-to-all | collective-permute"),
        ("bytes", pa.float64(), "the whole buffer a device takes part in, per execution, bytes"),
        ("executions", pa.int64(), "executions per step (while-loop trip counts included), count"),
        ("group_size", pa.int32(), "devices per replica group (2 for a permute's pairs), count"),
        ("torus_axes", pa.string(), "torus axes the groups span, innermost first (e.g. zy); empty for permutes and DCN-only groups"),
        ("time_ns", pa.int64(), "time of one execution on the pod, nanoseconds"),
        ("asynchronous", pa.bool_(), "a start/done pair: the compute the schedule puts between them overlaps it"),
        ("exposed_ns", pa.int64(), "what the core waits for it per execution, per the module's schedule, nanoseconds"),
        ("algorithm", pa.string(), "XLA:TPU's emitter/strategy for it (backend config); empty when the module names none"),
    ),
    _spec(
        "extra_hlo_ops",
        "Each top-level op (a fusion counts as one) of an HLO model's module: Podscope's time beside the compiler's estimate.",
        ("name", pa.string(), "instruction name in the module"),
        ("opcode", pa.string(), "HLO opcode (fusion, convolution, copy, ...)"),
        ("executions", pa.int64(), "executions per step (while-loop trip counts included), count"),
        ("flops", pa.float64(), "FLOPs of one execution, as XLA's cost analysis counts them"),
        ("bytes", pa.float64(), "HBM bytes of one execution at the kernel boundary, in the layout's tiles, bytes"),
        ("bound", pa.string(), "mxu | hbm: the roofline term that sets Podscope's time; empty for an op with no work"),
        ("podscope_ns", pa.int64(), "Podscope's roofline time of one execution, nanoseconds"),
        ("xla_ns", pa.int64(), "XLA:TPU's estimated_cycles over the chip's clock, one execution, nanoseconds; null without an estimate"),
    ),
    _spec(
        "extra_sampled_chips",
        "The chips a sim.trace = \"sampled\" run stored every event of, and why each was chosen (engine/sampling.py).",
        ("chip", pa.int32(), "chip id (see chips.chip); only these chips have rows in events"),
        ("reason", pa.string(), "straggler | degraded_link | slowest | slice_host | random: the first reason it was taken for"),
    ),
    _spec(
        "extra_import_events",
        "Every complete event of an imported trace, as read (before exclusive attribution).",
        ("chip", pa.int32(), "chip id the event's process became; null for host processes"),
        ("pid", pa.string(), "trace process id, as in the file"),
        ("tid", pa.string(), "trace thread id, as in the file"),
        ("name", pa.string(), "event name, as in the file"),
        ("cat", pa.string(), "event category, as in the file"),
        ("kind", pa.string(), "classified kind: one of EVENT_KINDS, or step for a step marker"),
        ("start_ns", pa.int64(), "start, nanoseconds from the first step's start"),
        ("dur_ns", pa.int64(), "duration, nanoseconds"),
    ),
)

#: every per-run table by stored name (the store adds a leading run_id column)
TABLES: Mapping[str, TableSpec] = MappingProxyType({t.name: t for t in _CORE + _EXTRA})


def extra_table_name(key: str) -> str:
    """Stored name of the extra table kept under ``key`` in :attr:`Trace.extra`."""
    return EXTRA_PREFIX + key


EVENTS_SCHEMA = TABLES["events"].schema
STEPS_SCHEMA = TABLES["steps"].schema
CHIPS_SCHEMA = TABLES["chips"].schema
STEP_KIND_SCHEMA = TABLES["step_kind"].schema
CHIP_KIND_SCHEMA = TABLES["chip_kind"].schema
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
    """A run's tables. ``events`` is empty when the run was simulated in summary mode, and holds
    only the chips of ``extra["sampled_chips"]`` in sampled mode.

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
    scenario: Scenario | None  # None for an imported trace
    trace: Trace
    facts: RunFacts
