"""One call of an HLO module on a pod's chips: compute per op, collectives on the torus, the schedule between them.

**Compute** of each top-level op (a fusion counts as one kernel) has two estimates:

* Podscope's MXU roofline of :mod:`engine.model.compute` -- ``max(padded matmul FLOPs /
  achievable FLOP/s, HBM bytes / achievable B/s)`` plus the per-op launch overhead --
  with each dot's dimensions rounded up to the chip's systolic array edge and the
  bytes in their TPU layout's tiles. Elementwise FLOPs ride on the HBM term (the
  vector units keep up with HBM on every TPU generation), and the launch overhead is
  charged per matmul kernel, as the built-in families charge their GEMMs: a CPU
  module splits elementwise work into many small loop fusions that XLA:TPU fuses into
  its neighbours, so counting each as a launch would charge the CPU's fusion choices
  to the TPU. Their HBM bytes still count.
* XLA:TPU's own: the ``estimated_cycles`` a TPU-compiled module carries in each op's
  backend config, over the generation's TensorCore clock (``clock_ghz`` in
  data/chips.toml, each with its source).

``compute_source = "xla"`` takes the compiler's estimate for every op that has one and
the roofline for the rest; ``"podscope"`` takes the roofline throughout. Asynchronous
copies between memory spaces (``copy-start``) overlap compute and cost nothing here.

Matmul precision is each dot's element type, with one exception: XLA:CPU has no bf16
matmul and upcasts bf16 dots to f32, so in a module whose floating-point parameters
are all bf16 an f32 dot is taken as the bf16 dot it is on a TPU.

**Collectives**: each one's replica groups are placed on the torus (:mod:`.placement`)
and priced by the same functions as the built-in families' collectives: groups on
whole torus axes by :func:`engine.comm.collective_on_pod` (schedule, link faults, DCN
across slices), groups on parts of axes by the mesh model's strided rings
(:func:`engine.comm.mesh_collective_s`), permutes as point-to-point routes. All-to-all
on part of an axis costs a quarter of the all-gather of the same array ([book] in
engine/comm/collectives.py).

**The schedule** (:func:`run_schedule`): a scheduled module prints its instructions in
the order they run. Ops run one after another on the core; a collective keeps the links
it uses busy (both directions of each torus axis its rings run on, the directions its
permute pairs move in, the DCN between slices), and one that needs a busy link waits for
it, while collectives on other links run at once: tensor-parallel collectives on one
axis beside FSDP gathers on others, a bidirectional windowed einsum's two permutes each
way round its ring. A synchronous collective holds the core until it ends; an
asynchronous one (``*-start`` ... ``*-done``, ``async-start`` ... ``async-done``)
runs beside the ops scheduled between its start and its done, and the core waits at
the done only for what is left of it. A ``while`` body runs trip after trip, so a
collective a body starts at its end and finishes in the next trip overlaps that trip's
beginning. What the core waits for is the step's exposed collective time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from ..comm import collective_on_pod, dcn_time_s, mesh_collective_s, p2p_time_s
from ..model.compute import pad_to_mxu, roofline_terms_s
from ..pod.mesh import MeshAxis
from ..pod.topology import Pod
from ..scenario.calibration import Calibration
from ..trace import TABLES
from .cost import CollectiveOp, HloModuleCost, ScheduleBlock
from .placement import GroupPlacement, Link, group_links, permute_hops, permute_links, place_groups

__all__ = ["HloStepCost", "hlo_step_cost", "matmul_precision", "run_schedule", "COMPUTE_SOURCES"]

_AXIS = "xyz"
_PRECISION_OF = {"bf16": "bf16", "f16": "bf16", "f32": "fp32", "f64": "fp32", "s8": "int8", "u8": "int8"}
#: where an op's compute time comes from: the compiler's cycle estimates (where the module has them) or Podscope's roofline
COMPUTE_SOURCES = ("xla", "podscope")


@dataclass(frozen=True)
class HloStepCost:
    """Seconds and FLOPs of one module call on one device (every device runs the same program)."""

    compute_s: float  # the core's busy time: every op's time, per compute_source
    matmul_s: float  # part of the roofline compute bound by the MXU
    memory_s: float  # part bound by HBM
    overhead_s: float
    collective_s: float  # exposed: what the core waits for collectives, per the schedule
    collective_total_s: float  # every collective's own time, hidden or not
    hardware_flops: float  # FLOPs one device executes per call (as XLA counts them)
    precision: str  # the module's dominant matmul precision
    compute_source: str  # "xla" when the compiler's cycle estimates set the op times, else "podscope"
    podscope_compute_s: float  # the roofline's time for every op
    xla_compute_s: float | None  # the compiler's estimates over the clock, for the ops that have one (None: none do)
    collectives: pa.Table  # one row per collective (engine.trace.TABLES["extra_hlo_collectives"])
    ops: pa.Table  # one row per top-level op (engine.trace.TABLES["extra_hlo_ops"])

    @property
    def collective_hidden_s(self) -> float:
        return max(self.collective_total_s - self.collective_s, 0.0)


def matmul_precision(dtype: str, module_float_dtypes: set[str]) -> str:
    """Training precision a dot of ``dtype`` runs at on a TPU (see the module docstring)."""
    if dtype == "f32" and module_float_dtypes == {"bf16"}:
        return "bf16"
    return _PRECISION_OF.get(dtype, "fp32")


@dataclass(frozen=True)
class _OpTimes:
    roofline_s: np.ndarray  # per op, one execution
    bound: np.ndarray  # per op: "mxu" | "hbm" | "" (no time)
    xla_s: np.ndarray  # per op, one execution; NaN without an estimate
    precision: str
    overhead_s: float


def _op_times(cost: HloModuleCost, pod: Pod, cal: Calibration, devices_per_chip: int) -> _OpTimes:
    chip = pod.chip
    floats = set(cost.float_parameter_dtypes)
    # a chip whose TensorCores are separate devices (tpu7x; v4 compiled without megacore) splits its peak and HBM
    share = 1.0 / devices_per_chip
    byte_rate = chip.hbm_bytes_per_s * cal.hbm_efficiency * share
    d = chip.mxu_dim
    n = len(cost.ops)
    roof = np.zeros(n)
    bound = np.full(n, "", dtype=object)
    xla = np.full(n, np.nan)
    flops_by_precision: dict[str, float] = {}
    overhead = 0.0
    for i, op in enumerate(cost.ops):
        if op.collective or op.asynchronous:
            continue
        if op.estimated_cycles is not None and chip.clock_hz > 0:
            xla[i] = op.estimated_cycles / chip.clock_hz
        padded = sum(2.0 * dot.batch * float(pad_to_mxu(dot.m, d) * pad_to_mxu(dot.k, d) * pad_to_mxu(dot.n, d)) for dot in op.dots)
        # a kernel's matmuls run at the precision of its largest dot (fusions mixing precisions are rare)
        prec = matmul_precision(max(op.dots, key=lambda x: x.flops).dtype, floats) if op.dots else "bf16"
        flop_rate = chip.peak_flops_per_s(prec) * cal.mxu_efficiency * share
        t_flops, t_bytes = roofline_terms_s(padded, op.bytes_accessed, flop_rate, byte_rate)
        if op.dots:
            flops_by_precision[prec] = flops_by_precision.get(prec, 0.0) + sum(x.flops for x in op.dots) * op.executions
            overhead += cal.op_overhead_s * op.executions
        launch = cal.op_overhead_s if op.dots else 0.0
        roof[i] = max(t_flops, t_bytes) + launch
        bound[i] = "mxu" if t_flops >= t_bytes and t_flops > 0 else ("hbm" if t_bytes > 0 else "")
    precision = max(flops_by_precision, key=flops_by_precision.get) if flops_by_precision else "bf16"
    return _OpTimes(roof, bound, xla, precision, overhead)


def _collective_s(c: CollectiveOp, placement: GroupPlacement | None, pod: Pod, cal: Calibration, interconnect) -> float:
    chip = pod.chip
    link = chip.ici_link_bytes_per_s * cal.ici_efficiency
    chips_per_host = pod.chips_per_host  # the host block as the slice tiles it (engine/pod/topology.py)
    host_bw = chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency
    if c.op == "collective-permute":
        hops, across = permute_hops(c.groups, pod)
        if across:
            return c.bytes * chips_per_host / host_bw + cal.dcn_latency_s
        return p2p_time_s(c.bytes, hops, link, cal.ici_hop_latency_s)
    assert placement is not None
    if placement.group_size <= 1 or c.bytes <= 0:
        return 0.0
    if not placement.axes:  # one chip per slice: the DCN alone
        return dcn_time_s(c.op, c.bytes, placement.slices, chips_per_host, host_bw, cal.dcn_latency_s)
    if placement.whole:
        res, _, _ = collective_on_pod(
            c.op, c.bytes, pod, cal, axes=placement.axes, schedule=interconnect.schedule, unidirectional=interconnect.unidirectional,
            degraded=interconnect.degraded_links, failed=interconnect.failed_links, across_slices=placement.slices > 1,
        )  # fmt: skip
        return res.time_s
    axis = MeshAxis("hlo", placement.chips_per_slice, placement.segments)
    op = "all-gather" if c.op == "all-to-all" else c.op
    t = mesh_collective_s(op, c.bytes, axis, link, cal.ici_hop_latency_s)
    if c.op == "all-to-all":
        t /= 4.0
    if placement.slices > 1:
        shard = c.bytes / placement.chips_per_slice
        t += dcn_time_s(c.op, shard, placement.slices, chips_per_host, host_bw, cal.dcn_latency_s)
    return t


class _Timeline:
    """The core and the interconnect through a schedule (see the module docstring)."""

    def __init__(self, op_s: np.ndarray, coll_s: np.ndarray, links: list[frozenset[Link]] | None = None):
        self.op_s, self.coll_s = op_s, coll_s
        # the links each collective keeps busy; without them every collective queues for one shared interconnect
        self.links = links if links is not None else [frozenset({"all"})] * len(coll_s)
        self.t = 0.0  # the core's clock
        self.link_free: dict[Link, float] = {}  # each link -> when it is free for the next collective
        self.finish: dict[int, float] = {}  # async collectives in flight -> when they end
        self.exposed = np.zeros(len(coll_s))  # per collective: core time spent waiting for it, summed over executions

    def _occupy(self, x: int) -> float:
        """Start collective ``x`` once the core has issued it and its links are free; when it ends."""
        start = max([self.t, *(self.link_free.get(link, 0.0) for link in self.links[x])])
        end = start + self.coll_s[x]
        for link in self.links[x]:
            self.link_free[link] = end
        return end

    def run(self, items, weight: float) -> None:
        for kind, x in items:
            if kind == "op":
                self.t += self.op_s[x]
            elif kind == "collective":
                end = self._occupy(x)
                self.exposed[x] += (end - self.t) * weight
                self.t = end
            elif kind == "start":
                self.finish[x] = self._occupy(x)
            elif kind == "done":
                end = self.finish.pop(x, self.t)
                if end > self.t:
                    self.exposed[x] += (end - self.t) * weight
                    self.t = end
            else:
                self.loop(x, weight)

    def loop(self, block: ScheduleBlock, weight: float) -> None:
        """Trip 1, then trip 2 as the steady state every later trip repeats (shifted in time)."""
        if block.trips <= 0:
            return
        self.run(block.items, weight)
        if block.trips == 1:
            return
        before = self.t
        self.run(block.items, weight * (block.trips - 1))
        shift = (self.t - before) * (block.trips - 2)
        self.t += shift
        self.link_free = {link: v + shift for link, v in self.link_free.items()}
        self.finish = {k: v + shift for k, v in self.finish.items()}

    def end(self) -> float:
        """Drain what is still in flight at the end of the program; the step's elapsed time."""
        for x, end in self.finish.items():
            if end > self.t:
                self.exposed[x] += end - self.t
                self.t = end
        self.finish = {}
        return self.t


def run_schedule(schedule: ScheduleBlock, op_s: np.ndarray, coll_s: np.ndarray,
                 links: list[frozenset[Link]] | None = None) -> tuple[float, np.ndarray]:  # fmt: skip
    """Elapsed seconds of one call, and each collective's exposed seconds (summed over its executions).

    ``op_s[i]`` and ``coll_s[j]`` are one execution's seconds of ``ops[i]`` and
    ``collectives[j]``; ``schedule`` is :attr:`HloModuleCost.schedule`; ``links[j]`` the links ``collectives[j]``
    keeps busy (:func:`~engine.hlo.placement.group_links`, :func:`~engine.hlo.placement.permute_links`; default: one
    interconnect all of them share).
    """
    tl = _Timeline(np.asarray(op_s, dtype=float), np.asarray(coll_s, dtype=float), links)
    for _ in range(schedule.trips):
        tl.run(schedule.items, 1.0)
    return tl.end(), tl.exposed


def hlo_step_cost(cost: HloModuleCost, pod: Pod, cal: Calibration, interconnect, compute_source: str = "xla",
                  devices_per_chip: int = 1) -> HloStepCost:  # fmt: skip
    """Compute and collective seconds of one call of ``cost``'s module on every device of ``pod``.

    ``interconnect`` is the scenario's :class:`~engine.scenario.InterconnectSection`
    (schedule, one-way links, degraded and failed links). ``compute_source`` is one of
    :data:`COMPUTE_SOURCES` (``"xla"`` falls back to the roofline for ops without an
    estimate, and throughout when the chip has no clock on record). ``devices_per_chip``
    is 2 where XLA compiled each TensorCore as a device of its own (tpu7x; v4 without megacore); device ``d``
    then runs on chip ``d // 2``.
    """
    times = _op_times(cost, pod, cal, devices_per_chip)
    has_xla = bool(np.isfinite(times.xla_s).any())
    use_xla = compute_source == "xla" and has_xla
    op_s = np.where(np.isfinite(times.xla_s), times.xla_s, times.roofline_s) if use_xla else times.roofline_s
    execs = np.array([o.executions for o in cost.ops], dtype=float)

    placements: dict[bytes, GroupPlacement] = {}
    priced: dict[tuple, float] = {}
    coll_s = np.zeros(len(cost.collectives))
    axes_of: list[str] = []
    links: list[frozenset[Link]] = []
    routes: dict[bytes, frozenset[Link]] = {}  # a permute's links, per distinct set of pairs
    for j, c in enumerate(cost.collectives):
        groups = c.groups // devices_per_chip if devices_per_chip > 1 else c.groups
        placement = None
        if c.op != "collective-permute":
            key = groups.tobytes() + bytes(str(groups.shape), "ascii")
            if key not in placements:
                placements[key] = place_groups(_chip_groups(groups), pod)
            placement = placements[key]
            links.append(group_links(placement, interconnect.unidirectional))
        else:
            key = b"p" + groups.tobytes() + bytes(str(groups.shape), "ascii")
            if key not in routes:
                routes[key] = permute_links(groups[groups[:, 0] != groups[:, 1]] if groups.size else groups, pod)
            links.append(routes[key])
        memo = (c.op, c.bytes, groups.tobytes(), groups.shape)
        if memo not in priced:
            priced[memo] = _collective_s(c if devices_per_chip == 1 else _on_chips(c, groups), placement, pod, cal, interconnect)
        coll_s[j] = priced[memo]
        axes_of.append("".join(_AXIS[a] for a in placement.axes) if placement else "")

    compute_s = float((op_s * execs).sum())
    if cost.schedule is not None:
        elapsed, exposed = run_schedule(cost.schedule, op_s, coll_s, links)
        exposed_s = max(elapsed - compute_s, 0.0)
    else:  # a hand-built cost without a schedule: every collective exposed
        exposed = coll_s * np.array([c.executions for c in cost.collectives], dtype=float)
        exposed_s = float(exposed.sum())
    total_coll = float(sum(coll_s[j] * c.executions for j, c in enumerate(cost.collectives)))

    cspec = TABLES["extra_hlo_collectives"]
    crow = {
        "name": [c.name for c in cost.collectives],
        "op": [c.op for c in cost.collectives],
        "bytes": [c.bytes for c in cost.collectives],
        "executions": [c.executions for c in cost.collectives],
        "group_size": [c.group_size for c in cost.collectives],
        "torus_axes": axes_of,
        "time_ns": [round(t * 1e9) for t in coll_s],
        "asynchronous": [c.asynchronous for c in cost.collectives],
        "exposed_ns": [round(e * 1e9 / max(c.executions, 1)) for e, c in zip(exposed, cost.collectives)],
        "algorithm": [c.algorithm for c in cost.collectives],
    }
    ospec = TABLES["extra_hlo_ops"]
    keep = [i for i, o in enumerate(cost.ops) if not (o.collective or o.asynchronous)]
    orow = {
        "name": [cost.ops[i].name for i in keep],
        "opcode": [cost.ops[i].opcode for i in keep],
        "executions": [cost.ops[i].executions for i in keep],
        "flops": [cost.ops[i].flops for i in keep],
        "bytes": [cost.ops[i].bytes_accessed for i in keep],
        "bound": [times.bound[i] for i in keep],
        "podscope_ns": [round(times.roofline_s[i] * 1e9) for i in keep],
        "xla_ns": [None if not np.isfinite(times.xla_s[i]) else round(times.xla_s[i] * 1e9) for i in keep],
    }
    xla_total = float(np.nansum(times.xla_s * execs)) if has_xla else None
    matmul_s = float(sum(times.roofline_s[i] * execs[i] for i in keep if times.bound[i] == "mxu"))
    memory_s = float(sum(times.roofline_s[i] * execs[i] for i in keep if times.bound[i] == "hbm"))
    return HloStepCost(
        compute_s=compute_s,
        matmul_s=matmul_s,
        memory_s=memory_s,
        overhead_s=times.overhead_s,
        collective_s=exposed_s,
        collective_total_s=total_coll,
        hardware_flops=cost.flops_per_device,
        precision=times.precision,
        compute_source="xla" if use_xla else "podscope",
        podscope_compute_s=float((times.roofline_s * execs).sum()),
        xla_compute_s=xla_total,
        collectives=cspec.table({k: pa.array(v, cspec.schema.field(k).type) for k, v in crow.items()}),
        ops=ospec.table({k: pa.array(v, ospec.schema.field(k).type) for k, v in orow.items()}),
    )


def _chip_groups(groups: np.ndarray) -> np.ndarray:
    """Replica groups over chips: the devices of one chip (its TensorCores) collapse into that chip."""
    if groups.ndim != 2 or groups.shape[1] <= 1:
        return groups
    out = [np.unique(g) for g in groups]
    sizes = {len(g) for g in out}
    if len(sizes) != 1:
        return groups
    return np.unique(np.stack(out), axis=0)


def _on_chips(c: CollectiveOp, groups: np.ndarray) -> CollectiveOp:
    """``c`` with its groups over chips (see :func:`_chip_groups`); the bytes stay each device's."""
    return replace(c, groups=_chip_groups(groups) if c.op != "collective-permute" else groups)
