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

The records it fills are declared in :mod:`~engine.hlo.module_cost`; how many trips a while
loop runs is read by :mod:`~engine.hlo.loops`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import HloError
from .groups import parse_replica_groups, parse_source_target_pairs
from .loops import FLIP, MAX_TRIP_COUNT, constant_int, counter_step, trip_count, tuple_index
from .module_cost import COLLECTIVE_OPS, CollectiveOp, DotShape, HloModuleCost, HloOp, ScheduleBlock
from .text import DEFAULT_MAX_HLO_BYTES, DTYPE_BYTES, Computation, HloText, Instruction, Shape, parse_hlo, read_hlo_text

__all__ = [
    "COLLECTIVE_OPS", "MAX_TRIP_COUNT", "DotShape", "HloOp", "CollectiveOp", "ScheduleBlock", "HloModuleCost", "describe_hlo",
    "load_hlo",
]  # fmt: skip


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
    all-gather-done collective-permute-done async-done async-update call-done slice-start slice-done""".split()
)
#: asynchronous copies between memory spaces (HBM and a core's vector memory): DMAs that overlap compute
_ASYNC_COPIES = frozenset(("copy-start", "slice-start"))
#: XLA:TPU's bookkeeping custom calls: no arithmetic (buffer allocation, the ends of an asynchronous collective
#: fusion, bitcasting concatenation, an index bound hint)
_FREE_CUSTOM_CALLS = frozenset(
    "AllocateBuffer AsyncCollectiveStart AsyncCollectiveDone ConcatBitcast AssumeGatherIndicesInBound PrepareAsyncCallStart "
    "PrepareAsyncCallDone".split()
)
_FLOAT_TYPES = frozenset("bf16 f16 f32 f64".split()) | frozenset(t for t in DTYPE_BYTES if t.startswith("f8"))
#: ops that hold no bytes of their own at the top level (views, tuples, control)
_NO_BYTES = frozenset(
    "parameter constant tuple get-tuple-element bitcast after-all add-dependency opt-barrier partition-id replica-id".split()
)
_DONE = frozenset(
    "all-reduce-done all-gather-done collective-permute-done async-done async-update call-done copy-done send-done recv-done "
    "slice-done".split()
)


def _dims_attr(attrs: dict[str, str], key: str) -> list[int]:
    v = attrs.get(key, "{}").strip("{} ")
    return [int(x) for x in v.split(",") if x.strip()]



_CYCLES = re.compile(r'"estimated_cycles"\s*:\s*"?(\d+)')
_EMITTER = re.compile(r'"collective_algorithm_config"\s*:\s*\{[^{}]*?"emitter"\s*:\s*"([^"]*)"(?:\s*,\s*"strategy"\s*:\s*"([^"]*)")?')


#: what libtpu writes as an op's ``estimated_cycles`` when its cost model has no estimate for it (INT64_MAX, beside
#: ``"cost_model_type":"COST_MODEL_TYPE_INVALID"``: libtpu 0.0.42.1 on a layout-changing copy of a TPU7x module)
_NO_ESTIMATE_CYCLES = 2**63 - 1


def _estimated_cycles(ins: Instruction) -> float | None:
    """The op's ``estimated_cycles``; None where it carries none, or the compiler's value for "no estimate"."""
    m = _CYCLES.search(ins.attrs.get("backend_config", ""))
    if m is None or int(m.group(1)) >= _NO_ESTIMATE_CYCLES:
        return None
    return float(m.group(1))


def _algorithm(*instructions: Instruction) -> str:
    """``emitter/strategy`` from the first of ``instructions`` whose backend config names a collective algorithm."""
    for ins in instructions:
        m = _EMITTER.search(ins.attrs.get("backend_config", ""))
        if m:
            return m.group(1) + (f"/{m.group(2)}" if m.group(2) else "")
    return ""


_WINDOW_FIELD = re.compile(r"(\w+)=([\w_x\-]+)")


def _main_dtype(shapes: list[Shape]) -> str:
    """The element type that carries the most bytes of ``shapes`` (a tuple's elements counted one by one)."""
    by: dict[str, float] = {}
    for s in shapes:
        for e in s.elements if s.is_tuple else (s,):
            by[e.dtype] = by.get(e.dtype, 0.0) + e.bytes
    return max(by, key=by.__getitem__) if by else ""


def _convolution(lhs: Shape, rhs: Shape, out: Shape, attrs: dict[str, str]) -> tuple[float, DotShape]:
    """Multiply-adds of a convolution and the matmul the MXU sees, as XLA's HloCostAnalysis counts them.

    Only the (kernel, output) position pairs that land on a real input element count:
    padding and base (lhs) dilation holes are skipped, per spatial dimension
    (``GetConvolutionFlops`` in xla/service/hlo_cost_analysis.cc). XLA:TPU writes a batched
    matmul as such a convolution, its batch dimension a dilated window.
    """
    labels = attrs["dim_labels"]
    lhs_l, rest = labels.split("_", 1)
    rhs_l, out_l = rest.split("->")
    fields = dict(_WINDOW_FIELD.findall(attrs.get("window", "")))
    n_spatial = sum(c.isdigit() for c in lhs_l)

    def per_dim(key: str, default: int) -> list[int]:
        v = fields.get(key)
        return [int(x) for x in v.split("x")] if v else [default] * n_spatial

    stride, lhs_dilate, rhs_dilate = per_dim("stride", 1), per_dim("lhs_dilate", 1), per_dim("rhs_dilate", 1)
    pads = [int(p.split("_")[0]) for p in fields["pad"].split("x")] if "pad" in fields else [0] * n_spatial
    valid = 1
    out_positions = 1
    for d in range(n_spatial):
        c = str(d)
        in_size, k_size, o_size = lhs.dims[lhs_l.index(c)], rhs.dims[rhs_l.index(c)], out.dims[out_l.index(c)]
        out_positions *= o_size
        valid *= int(_valid_positions(in_size, o_size, k_size, stride[d], pads[d], lhs_dilate[d], rhs_dilate[d]).sum())
    groups = int(attrs.get("feature_group_count", "1"))
    batch_groups = int(attrs.get("batch_group_count", "1"))
    batch = lhs.dims[lhs_l.index("b")] // batch_groups
    c_in = lhs.dims[lhs_l.index("f")] // groups
    c_out = rhs.dims[rhs_l.index("o")]
    fma = float(c_in) * c_out * batch * valid
    m = batch * out_positions
    k = max(1, round(fma / max(m * c_out, 1)))
    return fma, DotShape(1, m, k, c_out, lhs.dtype)


def _valid_positions(in_size: int, out_size: int, k_size: int, stride: int, pad_lo: int, lhs_dilate: int = 1,
                     rhs_dilate: int = 1) -> np.ndarray:  # fmt: skip
    """Per output index: the window positions that land on a real input element (not padding or a dilation hole)."""
    pos = np.arange(out_size, dtype=np.int64) * stride - pad_lo
    count = np.zeros(out_size, dtype=np.int64)
    for k in range(k_size):
        undilated = pos + k * rhs_dilate
        idx = undilated // lhs_dilate
        count += (undilated % lhs_dilate == 0) & (idx >= 0) & (idx < in_size)
    return count


def _reduce_window_count(in_dims: tuple[int, ...], out_dims: tuple[int, ...], window: str) -> float:
    """Reductions a reduce-window performs: per output, its real window elements less one.

    A dimension whose every window covers the whole input (a running max of a softmax
    row written as a padded window) is one reduction of the row shared by every output,
    as XLA:TPU emits it, so it counts once per row.
    """
    fields = dict(_WINDOW_FIELD.findall(window))
    n = len(in_dims)
    sizes = [int(x) for x in fields["size"].split("x")] if "size" in fields else [1] * n
    strides = [int(x) for x in fields["stride"].split("x")] if "stride" in fields else [1] * n
    pads = [int(p.split("_")[0]) for p in fields["pad"].split("x")] if "pad" in fields else [0] * n
    lhs_dilate = [int(x) for x in fields["lhs_dilate"].split("x")] if "lhs_dilate" in fields else [1] * n
    if not (len(sizes) == len(strides) == len(pads) == len(lhs_dilate) == n == len(out_dims)):
        return float(math.prod(out_dims))
    total, outputs = 1.0, 1.0
    for d in range(n):
        valid = _valid_positions(in_dims[d], out_dims[d], sizes[d], strides[d], pads[d], lhs_dilate[d])
        whole_row = in_dims[d] > 1 and bool((valid == in_dims[d]).all())
        total *= in_dims[d] if whole_row else float(valid.sum())
        outputs *= 1 if whole_row else out_dims[d]
    return max(total - outputs, 0.0)


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
        self.starts: dict[str, int] = {}  # async start instruction -> its collective's index
        self.channels: dict[str, int] = {}  # channel of an asynchronous collective fusion in flight -> its index
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
            try:
                fma, dot = _convolution(lhs, rhs, ins.shape, ins.attrs)
            except (ValueError, IndexError, KeyError):
                raise HloError(f"{self.mod.source}: line {ins.line}: convolution {ins.name} has no readable dim_labels "
                               "or window") from None  # fmt: skip
            return 2.0 * fma, 0.0, (dot,)
        if op in ("fusion", "call", "async-start", "call-start"):
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
            first = self.operand_shapes(comp, ins)[0]
            out = ins.shape.leaves()[0]
            return self.reducer_flops(ins) * _reduce_window_count(first.dims, out.dims, ins.attrs.get("window", "")), 0.0, ()
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
        target = ins.attrs.get("custom_call_target", "?").strip('"')
        if op == "custom-call" and target in _FREE_CUSTOM_CALLS:
            return 0.0, 0.0, ()
        key = f"custom-call:{target}" if op == "custom-call" else op
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
    def walk(self, comp: Computation, executions: int, depth: int = 0) -> list[tuple[str, Any]]:
        """Record ``comp``'s top-level ops and collectives; return its schedule items (calls inlined)."""
        if depth > 64:
            raise HloError(f"{self.mod.source}: computations nest more than 64 deep (or call themselves)")
        items: list[tuple[str, Any]] = []
        by_name = {i.name: i for i in comp.instructions}
        for ins in comp.instructions:
            op = ins.opcode
            if op == "while":
                items.append(("loop", self.loop(comp, ins, by_name, executions, depth)))
                continue
            if op == "call":
                items += self.walk(self.comp(ins.attrs.get("to_apply") or ins.attrs.get("calls", ""), ins), executions, depth + 1)
                continue
            if op in ("async-start", "call-start"):  # call-start: an asynchronous call (XLA:TPU runs some on a SparseCore)
                called = self.comp(ins.attrs.get("calls") or ins.attrs.get("to_apply", ""), ins)
                inner = self.collective_in(called)
                if inner is None:  # an asynchronous computation that is not a collective: run it in place
                    items += self.walk(called, executions, depth + 1)
                    continue
                self.ops.append(self.top_op(comp, ins, executions, collective=True))
                j = self.collective(called, inner, executions, asynchronous=True, outer=ins)
                self.starts[ins.name] = j
                items.append(("start", j))
                continue
            if op == "conditional":
                f, t, d = self.flops(comp, ins)
                self.ops.append(HloOp(ins.name, op, f, t, 0.0, executions, d, ins.shape.dtype))
                items.append(("op", len(self.ops) - 1))
                continue
            if op in _DONE:
                start = self.start_of(ins, by_name)
                if start is not None:
                    items.append(("done", start))
                continue
            if op.removesuffix("-start") in COLLECTIVE_OPS:
                self.ops.append(self.top_op(comp, ins, executions, collective=True))
                j = self.collective(comp, ins, executions, asynchronous=op.endswith("-start"))
                if op.endswith("-start"):
                    self.starts[ins.name] = j
                items.append(("start" if op.endswith("-start") else "collective", j))
                continue
            if op in _NO_BYTES or (op == "custom-call" and ins.attrs.get("custom_call_target", "").strip('"') in _FREE_CUSTOM_CALLS):
                continue
            if op == "fusion":
                fused = self.comp(ins.attrs.get("calls", ""), ins)
                inner = self.collective_in(fused)
                if inner is not None:
                    item = self.collective_fusion(comp, fused, ins, inner, executions)
                    if item is not None:
                        items.append(item)
                        continue
            self.ops.append(self.top_op(comp, ins, executions))
            items.append(("op", len(self.ops) - 1))
        return items

    def loop(self, comp: Computation, ins: Instruction, by_name: dict[str, Instruction], executions: int,
             depth: int) -> ScheduleBlock:  # fmt: skip
        """Walk a ``while`` body ``trips`` times over (its trip count from the backend config, else its condition)."""
        trips = trip_count(ins)
        if trips is None:
            trips = self.condition_trips(ins, by_name)
        if trips is not None and trips > MAX_TRIP_COUNT:
            raise HloError(f"{self.mod.source}: line {ins.line}: {ins.name} runs {trips:,} trips, more than the "
                           f"limit of {MAX_TRIP_COUNT:,} for one while loop")  # fmt: skip
        if trips is None:
            self.unknown_trips.append(ins.name)
        used = trips if (trips is not None and self.count_trips) else 1
        self.whiles[ins.name] = trips if trips is not None else 1
        body = self.walk(self.comp(ins.attrs.get("body", ""), ins), executions * used, depth + 1)
        return ScheduleBlock(used, tuple(body))

    def top_op(self, comp: Computation, ins: Instruction, executions: int, collective: bool = False) -> HloOp:
        """One top-level op: its FLOPs, its HBM bytes at the kernel boundary (in its layout's tiles), XLA's cycles."""
        f, t, d = self.flops(comp, ins)
        nbytes = sum(s.padded_bytes for s in self.operand_shapes(comp, ins)) + ins.shape.padded_bytes
        leaves = ins.shape.leaves()
        return HloOp(ins.name, ins.opcode, f, t, nbytes, executions, d, leaves[0].dtype if leaves else "",
                     _estimated_cycles(ins), collective, ins.opcode in _ASYNC_COPIES)  # fmt: skip

    def collective_fusion(self, comp: Computation, fused: Computation, ins: Instruction, inner: Instruction,
                          executions: int) -> tuple[str, int] | None:  # fmt: skip
        """A fusion that performs a collective: its schedule item, or None for a compute fusion it runs inside.

        XLA:TPU's asynchronous collective fusion splits one collective (one ``channel_id``)
        over several fusions: the one marked ``AsyncCollectiveStart`` starts it, fusions of
        compute between carry it along, the one marked ``AsyncCollectiveDone`` ends it. A
        fusion with a collective and no marker that is not carrying one already in flight is
        a synchronous collective fusion (XLA:TPU's fused reduce-scatter).
        """
        targets = {i.attrs.get("custom_call_target", "").strip('"') for i in fused.instructions if i.opcode == "custom-call"}
        channel = inner.attrs.get("channel_id", "")
        if "AsyncCollectiveStart" in targets:
            self.ops.append(self.top_op(comp, ins, executions, collective=True))
            j = self.collective(fused, inner, executions, asynchronous=True, outer=ins)
            self.channels[channel] = j
            return ("start", j)
        if "AsyncCollectiveDone" in targets:
            self.ops.append(self.top_op(comp, ins, executions, collective=True))
            j = self.channels.pop(channel, None)
            return ("done", j) if j is not None else ("op", len(self.ops) - 1)
        if channel and channel in self.channels:
            return None  # compute carrying an asynchronous collective along: an op like any other
        self.ops.append(self.top_op(comp, ins, executions, collective=True))
        return ("collective", self.collective(fused, inner, executions, outer=ins))

    def collective_in(self, comp: Computation) -> Instruction | None:
        """The collective a fused or asynchronous computation performs, if it performs one."""
        for ins in comp.instructions:
            if ins.opcode.removesuffix("-start") in COLLECTIVE_OPS:
                return ins
        return None

    def start_of(self, done: Instruction, by_name: dict[str, Instruction]) -> int | None:
        """The collective a ``*-done`` / ``async-done`` ends: its operand chain back to the start."""
        name = done.operands[0] if done.operands else ""
        for _ in range(64):
            if name in self.starts:
                return self.starts[name]
            prev = by_name.get(name)
            if prev is None or prev.opcode != "async-update" or not prev.operands:
                return None
            name = prev.operands[0]
        return None

    def condition_trips(self, ins: Instruction, by_name: dict[str, Instruction]) -> int | None:
        """Trips of a counted loop read from its condition, init value and increment; None when not a counted loop.

        The loop XLA prints for ``lax.scan`` / ``fori_loop`` keeps a counter in tuple element
        ``i``: the condition is ``compare(gte(param, i), constant(n)), direction=LT``, the
        while's operand tuple starts it at a constant and the body's root tuple adds a
        constant to it.
        """
        cond = self.comp(ins.attrs.get("condition", ""), ins)
        root = cond.root
        if root.opcode != "compare" or len(root.operands) != 2:
            return None
        names = {i.name: i for i in cond.instructions}
        direction = root.attrs.get("direction", "")
        (ia, ib), (ka, kb) = ([tuple_index(names, o) for o in root.operands], [constant_int(names, o) for o in root.operands])
        if ia is not None and kb is not None:
            index, limit = ia, kb
        elif ib is not None and ka is not None:
            index, limit, direction = ib, ka, FLIP.get(direction, "")
        else:
            return None
        init_tuple = by_name.get(ins.operands[0]) if ins.operands else None
        if init_tuple is None or init_tuple.opcode != "tuple" or index >= len(init_tuple.operands):
            return None
        init = constant_int(by_name, init_tuple.operands[index])
        step = counter_step(self.comp(ins.attrs.get("body", ""), ins), index)
        if init is None or not step:
            return None
        span = {"LT": limit - init, "LE": limit - init + 1, "GT": init - limit, "GE": init - limit + 1}.get(direction)
        if span is None or (step > 0) != (direction in ("LT", "LE")):
            return None
        return max(0, -(-span // abs(step)))

    def collective(self, comp: Computation, ins: Instruction, executions: int, asynchronous: bool = False,
                   outer: Instruction | None = None) -> int:  # fmt: skip
        """Record the collective ``ins`` (in ``comp``) performs; ``outer`` is the fusion or async-start wrapping it."""
        op = ins.opcode.removesuffix("-start")
        shapes = self.operand_shapes(comp, ins)
        algorithm = _algorithm(*(x for x in (outer, ins) if x is not None))
        name = outer.name if outer is not None else ins.name
        if op == "collective-permute":
            pairs = parse_source_target_pairs(ins.attrs.get("source_target_pairs", "{}"), self.devices)
            nbytes = shapes[0].bytes if shapes else 0.0
            self.collectives.append(CollectiveOp(name, op, nbytes, executions, pairs, asynchronous, algorithm, _main_dtype(shapes)))
            return len(self.collectives) - 1
        try:
            groups = parse_replica_groups(ins.attrs.get("replica_groups", "{}"), self.devices)
        except HloError as e:
            raise HloError(f"{self.mod.source}: line {ins.line}: {ins.name}: {e}") from None
        operand_bytes = sum(s.bytes for s in shapes)
        nbytes = operand_bytes * groups.shape[1] if op == "all-gather" else operand_bytes
        if outer is not None and outer.opcode == "fusion" and op == "all-reduce" and outer.shape.bytes < operand_bytes:
            op = "reduce-scatter"  # XLA:TPU fuses a reduce-scatter as an all-reduce whose result the fusion slices
        self.collectives.append(CollectiveOp(name, op, nbytes, executions, groups, asynchronous, algorithm, _main_dtype(shapes)))
        return len(self.collectives) - 1

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
    schedule = ScheduleBlock(1, tuple(c.walk(entry, 1)))
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
        schedule=schedule,
        padded_parameter_bytes_per_device=sum(p.shape.padded_bytes for p in params),
        padded_output_bytes_per_device=entry.root.shape.padded_bytes,
        is_scheduled=mod.header.get("is_scheduled", "").lower() == "true",
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
