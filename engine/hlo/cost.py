"""What one device of an SPMD HLO module computes, moves and communicates per call.

The counting follows XLA's own ``HloCostAnalysis`` (xla/service/hlo_cost_analysis.cc)
so the FLOPs can be checked against ``compiled.cost_analysis()``:

* ``dot``: 2 x output elements x contracted size (``lhs_contracting_dims``);
  ``convolution``: 2 x output elements x kernel window x input features per group
  (padding is not subtracted, so a padded convolution counts a little high);
* elementwise arithmetic (and ``convert``): one FLOP per output element; exp, log,
  tanh, rsqrt, ... are transcendentals, counted apart as XLA does; ``reduce``,
  ``reduce-window``, ``scatter``, ``all-reduce``: the reducer's FLOPs per reduction;
  data movement (copy, transpose, slice, gather, ...) costs no FLOPs;
* a fusion costs the FLOPs of its fused computation and the bytes at its
  boundary (operands read + result written), which is the HBM traffic of a fused
  kernel; other ops cost their operands + result bytes;
* ``while`` bodies run their trip count (``known_trip_count`` in the backend
  config); when it is unknown the body counts once and the loop is listed in
  ``unknown_trip_counts``. XLA's ``cost_analysis`` counts every body once whatever
  its trip count; :func:`describe_hlo` with ``count_trip_counts=False`` reproduces that;
* collectives (``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
  ``collective-permute``, as themselves, as ``-start``/``-done`` pairs or wrapped in
  ``async-start``/``async-done``) are counted once per execution; their ``bytes`` is
  the whole buffer each device takes part in: the all-reduced array, the gathered
  (output) array, the array before it is scattered, the array exchanged or sent;
* an opcode this reader does not know (or a custom call) is kept: costed as one
  FLOP per output element on its operand + result bytes, and listed in ``unknown_ops``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import HloError
from .groups import parse_replica_groups, parse_source_target_pairs
from .text import DEFAULT_MAX_HLO_BYTES, DTYPE_BYTES, Computation, HloText, Instruction, Shape, parse_hlo, read_hlo_text

__all__ = ["COLLECTIVE_OPS", "DotShape", "HloOp", "CollectiveOp", "HloModuleCost", "describe_hlo", "load_hlo"]

#: the collective opcodes reported, in the order the summary lists them
COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

_TRANSCENDENTAL = frozenset(
    "exponential exponential-minus-one log log-plus-one logistic power sqrt cbrt rsqrt tanh sine cosine tan atan2 erf".split()
)
_ELEMENTWISE = frozenset(
    """add subtract multiply divide remainder maximum minimum compare select clamp and or xor not negate abs sign
    floor ceil round-nearest-afz round-nearest-even shift-left shift-right-logical shift-right-arithmetic popcnt clz
    is-finite real imag complex convert stochastic-convert reduce-precision map""".split()
)
_FREE = frozenset(
    """parameter constant tuple get-tuple-element bitcast bitcast-convert reshape dynamic-reshape transpose broadcast copy
    slice dynamic-slice dynamic-update-slice concatenate pad gather iota reverse partition-id replica-id after-all
    add-dependency opt-barrier optimization-barrier domain get-dimension-size set-dimension-size copy-start copy-done
    rng rng-bit-generator rng-get-and-update-state infeed outfeed send recv send-done recv-done all-reduce-done
    all-gather-done collective-permute-done async-done async-update""".split()
)
_FLOAT_TYPES = frozenset("bf16 f16 f32 f64".split()) | frozenset(t for t in DTYPE_BYTES if t.startswith("f8"))
#: ops that hold no bytes of their own at the top level (views, tuples, control)
_NO_BYTES = frozenset(
    "parameter constant tuple get-tuple-element bitcast after-all add-dependency opt-barrier partition-id replica-id".split()
)
_DONE = frozenset(
    "all-reduce-done all-gather-done collective-permute-done async-done async-update copy-done send-done recv-done".split()
)


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


@dataclass(frozen=True)
class CollectiveOp:
    """One collective in the module; ``groups`` is ``[groups, group_size]`` device ids (pairs for permutes)."""

    name: str
    op: str  # one of COLLECTIVE_OPS
    bytes: float  # per device, per execution: the whole buffer it takes part in
    executions: int
    groups: np.ndarray = field(compare=False, repr=False)

    @property
    def group_size(self) -> int:
        return 2 if self.op == "collective-permute" else int(self.groups.shape[1])


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


def _dims_attr(attrs: dict[str, str], key: str) -> list[int]:
    v = attrs.get(key, "{}").strip("{} ")
    return [int(x) for x in v.split(",") if x.strip()]


def _trip_count(ins: Instruction) -> int | None:
    m = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)', ins.attrs.get("backend_config", ""))
    return int(m.group(1)) if m else None


class _Costing:
    """Walks the entry computation once, recursing into called computations."""

    def __init__(self, mod: HloText, count_trip_counts: bool):
        self.mod = mod
        self.devices = mod.num_partitions * mod.replica_count
        self.count_trips = count_trip_counts
        self.ops: list[HloOp] = []
        self.collectives: list[CollectiveOp] = []
        self.unknown: Counter[str] = Counter()
        self.unknown_trips: list[str] = []
        self.whiles: dict[str, int] = {}
        self.shapes: dict[str, dict[str, Shape]] = {
            c.name: {i.name: i.shape for i in c.instructions} for c in mod.computations.values()
        }
        self._comp_flops: dict[str, tuple[float, float, tuple[DotShape, ...]]] = {}

    def comp(self, name: str, ins: Instruction) -> Computation:
        c = self.mod.computations.get(name.strip().lstrip("%"))
        if c is None:
            raise HloError(f"{self.mod.source}: line {ins.line}: {ins.name} calls {name!r}, which the module does not define")
        return c

    def operand_shapes(self, comp: Computation, ins: Instruction) -> list[Shape]:
        table = self.shapes[comp.name]
        out = []
        for o in ins.operands:
            if o not in table:
                raise HloError(f"{self.mod.source}: line {ins.line}: {ins.name} uses {o!r}, not defined in {comp.name}")
            out.append(table[o])
        return out

    # -- FLOPs of one instruction (inside a fusion or at the top level) --------------------------
    def flops(self, comp: Computation, ins: Instruction) -> tuple[float, float, tuple[DotShape, ...]]:
        """(FLOPs, transcendentals, dot shapes) of one instruction, nested computations included."""
        op = ins.opcode
        out_elems = ins.shape.num_elements
        if op == "dot":
            lhs, rhs = self.operand_shapes(comp, ins)[:2]
            lc, lb = _dims_attr(ins.attrs, "lhs_contracting_dims"), _dims_attr(ins.attrs, "lhs_batch_dims")
            rc, rb = _dims_attr(ins.attrs, "rhs_contracting_dims"), _dims_attr(ins.attrs, "rhs_batch_dims")
            k = math.prod(lhs.dims[d] for d in lc)
            batch = math.prod(lhs.dims[d] for d in lb)
            m = math.prod(s for d, s in enumerate(lhs.dims) if d not in lc and d not in lb)
            n = math.prod(s for d, s in enumerate(rhs.dims) if d not in rc and d not in rb)
            dot = DotShape(batch, m, k, n, lhs.dtype)
            return 2.0 * out_elems * k, 0.0, (dot,)
        if op == "convolution":
            lhs, rhs = self.operand_shapes(comp, ins)[:2]
            labels = ins.attrs.get("dim_labels", "")
            kernel = labels.split("_")[1].split("->")[0] if "_" in labels else ""
            if len(kernel) != len(rhs.dims):
                raise HloError(f"{self.mod.source}: line {ins.line}: convolution {ins.name} has no readable dim_labels")
            window = math.prod(s for c, s in zip(kernel, rhs.dims) if c.isdigit())
            c_in = rhs.dims[kernel.index("i")]
            c_out = rhs.dims[kernel.index("o")]
            out_per_feature = out_elems // max(c_out, 1)
            dot = DotShape(1, out_per_feature, window * c_in, c_out, lhs.dtype)
            return 2.0 * out_elems * window * c_in, 0.0, (dot,)
        if op in ("fusion", "call", "async-start"):
            return self.comp_flops(self.comp(ins.attrs.get("calls") or ins.attrs.get("to_apply", ""), ins))
        if op in _TRANSCENDENTAL:
            return 0.0, float(out_elems), ()
        if op in _ELEMENTWISE:
            return float(out_elems), 0.0, ()
        if op in _FREE:
            return 0.0, 0.0, ()
        if op in ("reduce", "all-reduce", "all-reduce-start", "reduce-scatter"):
            per = self.reducer_flops(ins)
            shapes = self.operand_shapes(comp, ins)
            if op == "reduce":
                n_in = len(shapes) // 2 or 1
                first_out = ins.shape.leaves()[0].num_elements
                return per * max(shapes[0].num_elements - first_out, 0) * n_in, 0.0, ()
            return per * sum(s.num_elements for s in shapes), 0.0, ()
        if op == "reduce-window":
            wm = re.search(r"size=([\dx]+)", ins.attrs.get("window", ""))
            window = math.prod(int(x) for x in wm.group(1).split("x")) if wm else 1
            return self.reducer_flops(ins) * out_elems * window, 0.0, ()
        if op in ("scatter", "select-and-scatter"):
            updates = self.operand_shapes(comp, ins)[-1].num_elements
            return self.reducer_flops(ins) * updates, 0.0, ()
        if op == "sort":
            first = self.operand_shapes(comp, ins)[0]
            dim = _dims_attr(ins.attrs, "dimensions")
            n = first.dims[dim[0]] if dim and first.dims else 1
            return float(first.num_elements * max(math.log2(max(n, 2)), 1)), 0.0, ()
        if op == "conditional":
            branches = re.findall(r"%?([\w.\-]+)", ins.attrs.get("branch_computations", ""))
            branches += [ins.attrs[k].lstrip("%") for k in ("true_computation", "false_computation") if k in ins.attrs]
            costs = [self.comp_flops(self.comp(b, ins)) for b in branches] or [(0.0, 0.0, ())]
            return max(costs, key=lambda c: c[0])
        if op in COLLECTIVE_OPS or op.endswith("-start") or op in ("collective-broadcast", "ragged-all-to-all"):
            return 0.0, 0.0, ()
        key = f"custom-call:{ins.attrs.get('custom_call_target', '?').strip(chr(34))}" if op == "custom-call" else op
        self.unknown[key] += 1
        return float(out_elems), 0.0, ()

    def reducer_flops(self, ins: Instruction) -> float:
        name = ins.attrs.get("to_apply")
        if not name:
            return 1.0
        f, _, _ = self.comp_flops(self.comp(name, ins))
        return max(f, 1.0)

    def comp_flops(self, comp: Computation) -> tuple[float, float, tuple[DotShape, ...]]:
        if comp.name not in self._comp_flops:
            self._comp_flops[comp.name] = (0.0, 0.0, ())  # a cycle (malformed module) counts nothing
            flops = trans = 0.0
            dots: list[DotShape] = []
            for ins in comp.instructions:
                f, t, d = self.flops(comp, ins)
                flops, trans = flops + f, trans + t
                dots.extend(d)
            self._comp_flops[comp.name] = (flops, trans, tuple(dots))
        return self._comp_flops[comp.name]

    # -- the schedule: top-level ops, loops, collectives ------------------------------------------
    def walk(self, comp: Computation, executions: int, depth: int = 0) -> None:
        if depth > 64:
            raise HloError(f"{self.mod.source}: computations nest more than 64 deep (or call themselves)")
        for ins in comp.instructions:
            op = ins.opcode
            if op == "while":
                trips = _trip_count(ins)
                if trips is None:
                    self.unknown_trips.append(ins.name)
                used = trips if (trips is not None and self.count_trips) else 1
                self.whiles[ins.name] = trips if trips is not None else 1
                self.walk(self.comp(ins.attrs.get("body", ""), ins), executions * used, depth + 1)
                continue
            if op in ("call", "async-start"):
                called = self.comp(ins.attrs.get("calls") or ins.attrs.get("to_apply", ""), ins)
                self.walk(called, executions, depth + 1)
                continue
            if op == "conditional":
                f, t, d = self.flops(comp, ins)
                self.ops.append(HloOp(ins.name, op, f, t, 0.0, executions, d, ins.shape.dtype))
                continue
            if op in _DONE:
                continue
            base = op.removesuffix("-start")
            if base in COLLECTIVE_OPS:
                self.collective(comp, ins, base, executions)
            if op in _NO_BYTES:
                continue
            f, t, d = self.flops(comp, ins)
            nbytes = sum(s.bytes for s in self.operand_shapes(comp, ins)) + ins.shape.bytes
            self.ops.append(
                HloOp(ins.name, op, f, t, nbytes, executions, d, ins.shape.leaves()[0].dtype if ins.shape.leaves() else "")
            )

    def collective(self, comp: Computation, ins: Instruction, op: str, executions: int) -> None:
        shapes = self.operand_shapes(comp, ins)
        if op == "collective-permute":
            pairs = parse_source_target_pairs(ins.attrs.get("source_target_pairs", "{}"), self.devices)
            nbytes = shapes[0].bytes if shapes else 0.0
            self.collectives.append(CollectiveOp(ins.name, op, nbytes, executions, pairs))
            return
        try:
            groups = parse_replica_groups(ins.attrs.get("replica_groups", "{}"), self.devices)
        except HloError as e:
            raise HloError(f"{self.mod.source}: line {ins.line}: {ins.name}: {e}") from None
        operand_bytes = sum(s.bytes for s in shapes)
        nbytes = operand_bytes * groups.shape[1] if op == "all-gather" else operand_bytes
        self.collectives.append(CollectiveOp(ins.name, op, nbytes, executions, groups))

    def peak_live_bytes(self, comp: Computation) -> float:
        """Parameters plus the most bytes of other buffers live at one point of the schedule."""
        last_use: dict[str, int] = {}
        for i, ins in enumerate(comp.instructions):
            for o in ins.operands:
                last_use[o] = i
        root = comp.root.name
        live: dict[str, float] = {}
        params = sum(i.shape.bytes for i in comp.instructions if i.opcode == "parameter")
        peak = 0.0
        for i, ins in enumerate(comp.instructions):
            extra = 0.0
            if ins.opcode == "while":
                extra = self.peak_live_bytes(self.comp(ins.attrs.get("body", ""), ins)) - ins.shape.bytes
            if ins.opcode not in _NO_BYTES and ins.opcode != "while":
                live[ins.name] = ins.shape.bytes
            peak = max(peak, sum(live.values()) + max(extra, 0.0))
            for o in set(ins.operands):
                if last_use.get(o) == i and o != root:
                    live.pop(o, None)
        return params + peak


def describe_hlo(mod: HloText, count_trip_counts: bool = True) -> HloModuleCost:
    """Cost one parsed module per device. See the module docstring for the rules."""
    c = _Costing(mod, count_trip_counts)
    entry = mod.computations[mod.entry]
    c.walk(entry, 1)
    params = [i for i in entry.instructions if i.opcode == "parameter"]
    return HloModuleCost(
        name=mod.name,
        source=mod.source,
        devices=c.devices,
        num_partitions=mod.num_partitions,
        replica_count=mod.replica_count,
        flops_per_device=sum(o.flops * o.executions for o in c.ops),
        transcendentals_per_device=sum(o.transcendentals * o.executions for o in c.ops),
        bytes_accessed_per_device=sum(o.bytes_accessed * o.executions for o in c.ops),
        parameter_bytes_per_device=sum(p.shape.bytes for p in params),
        output_bytes_per_device=entry.root.shape.bytes,
        peak_live_bytes_per_device=c.peak_live_bytes(entry),
        ops=tuple(c.ops),
        collectives=tuple(c.collectives),
        unknown_ops=dict(sorted(c.unknown.items())),
        unknown_trip_counts=tuple(c.unknown_trips),
        while_loops=c.whiles,
        float_parameter_dtypes=tuple(
            sorted({leaf.dtype for p in params for leaf in p.shape.leaves() if leaf.dtype in _FLOAT_TYPES})
        ),
    )


def load_hlo(path: str | Path, max_bytes: int = DEFAULT_MAX_HLO_BYTES, count_trip_counts: bool = True) -> HloModuleCost:
    """Read, parse and cost an HLO text file (plain or ``.gz``).

    Raises
    ------
    HloError
        The file is missing, not HLO, truncated, larger than ``max_bytes`` or inconsistent
        (an operand or computation it does not define, a malformed replica group).
    """
    text = read_hlo_text(path, max_bytes)
    return describe_hlo(parse_hlo(text, str(path)), count_trip_counts)
