"""What one device of an SPMD HLO module costs per call: the frozen records :mod:`~engine.hlo.cost` fills in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["COLLECTIVE_OPS", "DotShape", "HloOp", "CollectiveOp", "ScheduleBlock", "HloModuleCost"]

#: the collective opcodes reported, in the order the summary lists them
COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


@dataclass(frozen=True)
class DotShape:
    """One matrix multiply as the MXU sees it: ``batch`` products of ``[m, k] x [k, n]``."""

    batch: int
    m: int
    k: int
    n: int
    dtype: str  # the left operand's element type

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.k * self.n


@dataclass(frozen=True)
class HloOp:
    """One top-level op (a fusion counts as one) per execution; ``executions`` per module call."""

    name: str
    opcode: str
    flops: float
    transcendentals: float
    bytes_accessed: float
    executions: int
    dots: tuple[DotShape, ...] = ()
    output_dtype: str = ""
    estimated_cycles: float | None = None  # XLA:TPU's own estimate for one execution (backend config), cycles
    collective: bool = False  # the op is (or wraps) a collective: its time is the interconnect's, not the core's
    asynchronous: bool = False  # an asynchronous copy between memory spaces (copy-start): overlaps compute


@dataclass(frozen=True)
class CollectiveOp:
    """One collective in the module; ``groups`` is ``[groups, group_size]`` device ids (pairs for permutes)."""

    name: str
    op: str  # one of COLLECTIVE_OPS
    bytes: float  # per device, per execution: the whole buffer it takes part in
    executions: int
    groups: np.ndarray = field(compare=False, repr=False)
    asynchronous: bool = False  # a start/done pair (or async-start wrapper): compute scheduled between them overlaps it
    algorithm: str = ""  # XLA:TPU's collective emitter and strategy, as its backend config names them
    dtype: str = ""  # the element type of its operands ("bf16", "f32", ...); of the largest share of them if they mix

    @property
    def group_size(self) -> int:
        return 2 if self.op == "collective-permute" else int(self.groups.shape[1])


@dataclass(frozen=True)
class ScheduleBlock:
    """A computation's schedule in program order, run ``trips`` times per run of its parent.

    Items are ``("op", i)`` (``HloModuleCost.ops[i]``), ``("collective", j)`` (a
    synchronous ``collectives[j]``), ``("start", j)`` / ``("done", j)`` (an asynchronous
    one's two ends) and ``("loop", block)`` (a ``while`` body). A scheduled module
    (``is_scheduled=true``, as every TPU-compiled module is) prints its instructions in
    the order the compiler will run them, so this order is the schedule.
    """

    trips: int
    items: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class HloModuleCost:
    """Per-device totals of one module call (one train step, when the module is the step)."""

    name: str
    source: str
    devices: int
    num_partitions: int
    replica_count: int
    flops_per_device: float
    transcendentals_per_device: float
    bytes_accessed_per_device: float
    parameter_bytes_per_device: float
    output_bytes_per_device: float
    peak_live_bytes_per_device: float  # parameters + the largest set of buffers live at once
    ops: tuple[HloOp, ...]
    collectives: tuple[CollectiveOp, ...]
    unknown_ops: dict[str, int]  # opcode (or custom-call:target) -> occurrences, costed as elementwise
    unknown_trip_counts: tuple[str, ...]  # while loops whose body was counted once
    while_loops: dict[str, int]  # while op -> trip count used
    float_parameter_dtypes: tuple[str, ...] = ()  # floating element types among the entry parameters
    schedule: ScheduleBlock | None = field(default=None, compare=False, repr=False)
    padded_parameter_bytes_per_device: float = 0.0  # the entry parameters in their TPU layouts (tiles padded)
    padded_output_bytes_per_device: float = 0.0
    is_scheduled: bool = False  # the module's header says is_scheduled=true

    @property
    def has_cycle_estimates(self) -> bool:
        """XLA:TPU wrote its per-op cycle estimates into the module (a TPU-compiled module)."""
        return any(o.estimated_cycles is not None for o in self.ops)

    def collective_totals(self) -> dict[str, dict[str, float]]:
        """``{op: {"count": executions, "bytes": per-device bytes summed}}`` for the ops present."""
        out: dict[str, dict[str, float]] = {}
        for c in self.collectives:
            t = out.setdefault(c.op, {"count": 0, "bytes": 0.0})
            t["count"] += c.executions
            t["bytes"] += c.bytes * c.executions
        return {op: out[op] for op in COLLECTIVE_OPS if op in out}

    def largest_ops(self, n: int = 10) -> list[HloOp]:
        """The ``n`` ops with the most FLOPs per module call (then the most bytes)."""
        return sorted(self.ops, key=lambda o: (o.flops * o.executions, o.bytes_accessed * o.executions), reverse=True)[:n]

    @property
    def dot_flops_per_device(self) -> float:
        return sum(d.flops * o.executions for o in self.ops for d in o.dots)
