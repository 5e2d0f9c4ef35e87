"""One call of an HLO module on a pod's chips: compute from op shapes, collectives on the torus.

Compute is re-derived for the target chip, not read from the compiling machine:
every top-level op (a fusion counts as one kernel) takes the MXU roofline of
:mod:`engine.compute` -- ``max(padded matmul FLOPs / achievable FLOP/s, HBM bytes /
achievable B/s)`` plus the per-op launch overhead -- with each dot's dimensions
rounded up to the chip's systolic array edge. Elementwise FLOPs ride on the HBM
term (the vector units keep up with HBM on every TPU generation), and the launch
overhead is charged per matmul kernel, as the built-in families charge their
GEMMs: a CPU module splits elementwise work into many small loop fusions that
XLA:TPU fuses into its neighbours, so counting each as a launch would charge
the CPU's fusion choices to the TPU. Their HBM bytes still count.

Matmul precision is each dot's element type, with one exception: XLA:CPU has no
bf16 matmul and upcasts bf16 dots to f32, so in a module whose floating-point
parameters are all bf16 an f32 dot is taken as the bf16 dot it is on a TPU.

Each collective's replica groups are placed on the torus (:mod:`.placement`) and
priced by the same functions as the built-in families' collectives: groups on whole
torus axes by :func:`engine.comm.collective_on_pod` (schedule, link faults,
DCN across slices), groups on parts of axes by the mesh model's strided rings
(:func:`engine.comm.mesh_collective_s`), permutes as point-to-point routes.
All-to-all on part of an axis costs a quarter of the all-gather of the same array
([book] in engine/comm/collectives.py). Collectives are charged as exposed: the module's
own schedule decides what overlaps on a TPU, and a CPU-compiled module has no async
collectives to tell.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..calibration import Calibration
from ..compute import pad_to_mxu, roofline_terms_s
from ..comm import collective_on_pod, dcn_time_s, mesh_collective_s, p2p_time_s
from ..mesh import MeshAxis
from ..topology import Pod
from ..trace import TABLES
from .cost import COLLECTIVE_OPS, CollectiveOp, HloModuleCost
from .placement import GroupPlacement, permute_hops, place_groups

__all__ = ["HloStepCost", "hlo_step_cost", "matmul_precision"]

_AXIS = "xyz"
_PRECISION_OF = {"bf16": "bf16", "f16": "bf16", "f32": "fp32", "f64": "fp32", "s8": "int8", "u8": "int8"}


@dataclass(frozen=True)
class HloStepCost:
    """Seconds and FLOPs of one module call on one chip (every chip runs the same program)."""

    compute_s: float
    matmul_s: float  # part of compute_s bound by the MXU
    memory_s: float  # part bound by HBM
    overhead_s: float
    collective_s: float
    hardware_flops: float  # FLOPs the chip executes per call (as XLA counts them)
    precision: str  # the module's dominant matmul precision
    collectives: pa.Table  # one row per collective (engine.trace.TABLES["extra_hlo_collectives"])


def matmul_precision(dtype: str, module_float_dtypes: set[str]) -> str:
    """Training precision a dot of ``dtype`` runs at on a TPU (see the module docstring)."""
    if dtype == "f32" and module_float_dtypes == {"bf16"}:
        return "bf16"
    return _PRECISION_OF.get(dtype, "fp32")


def _compute(cost: HloModuleCost, pod: Pod, cal: Calibration) -> tuple[float, float, float, float, str]:
    chip = pod.chip
    floats = set(cost.float_parameter_dtypes)
    byte_rate = chip.hbm_bytes_per_s * cal.hbm_efficiency
    d = chip.mxu_dim
    matmul = memory = 0.0
    launches = 0
    flops_by_precision: dict[str, float] = {}
    for op in cost.ops:
        if op.opcode.removesuffix("-start") in COLLECTIVE_OPS:
            continue
        padded = sum(2.0 * dot.batch * float(pad_to_mxu(dot.m, d) * pad_to_mxu(dot.k, d) * pad_to_mxu(dot.n, d)) for dot in op.dots)
        # a kernel's matmuls run at the precision of its largest dot (fusions mixing precisions are rare)
        prec = matmul_precision(max(op.dots, key=lambda x: x.flops).dtype, floats) if op.dots else "bf16"
        flop_rate = chip.peak_flops_per_s(prec) * cal.mxu_efficiency
        t_flops, t_bytes = roofline_terms_s(padded, op.bytes_accessed, flop_rate, byte_rate)
        if op.dots:
            flops_by_precision[prec] = flops_by_precision.get(prec, 0.0) + sum(x.flops for x in op.dots) * op.executions
        if t_flops >= t_bytes:
            matmul += t_flops * op.executions
        else:
            memory += t_bytes * op.executions
        launches += op.executions if op.dots else 0
    overhead = launches * cal.op_overhead_s
    precision = max(flops_by_precision, key=flops_by_precision.get) if flops_by_precision else "bf16"
    return matmul + memory + overhead, matmul, memory, overhead, precision


def _collective_s(c: CollectiveOp, placement: GroupPlacement | None, pod: Pod, cal: Calibration, interconnect) -> float:
    chip = pod.chip
    link = chip.ici_link_bytes_per_s * cal.ici_efficiency
    chips_per_host = pod.chips_per_host  # the host block as the slice tiles it (engine/topology.py)
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


def hlo_step_cost(cost: HloModuleCost, pod: Pod, cal: Calibration, interconnect) -> HloStepCost:
    """Compute and collective seconds of one call of ``cost``'s module on every chip of ``pod``.

    ``interconnect`` is the scenario's :class:`~engine.scenario.InterconnectSection`
    (schedule, one-way links, degraded and failed links).
    """
    compute_s, matmul_s, memory_s, overhead_s, precision = _compute(cost, pod, cal)
    spec = TABLES["extra_hlo_collectives"]
    rows: dict[str, list] = {c: [] for c in spec.column_names}
    placements: dict[bytes, GroupPlacement] = {}
    priced: dict[tuple, float] = {}
    total = 0.0
    for c in cost.collectives:
        placement = None
        if c.op != "collective-permute":
            key = c.groups.tobytes() + bytes(str(c.groups.shape), "ascii")
            if key not in placements:
                placements[key] = place_groups(c.groups, pod)
            placement = placements[key]
        memo = (c.op, c.bytes, c.groups.tobytes(), c.groups.shape)
        if memo not in priced:
            priced[memo] = _collective_s(c, placement, pod, cal, interconnect)
        t = priced[memo]
        total += t * c.executions
        axes = "".join(_AXIS[a] for a in placement.axes) if placement else ""
        for k, v in zip(rows, (c.name, c.op, c.bytes, c.executions, c.group_size, axes, round(t * 1e9))):
            rows[k].append(v)
    return HloStepCost(
        compute_s=compute_s,
        matmul_s=matmul_s,
        memory_s=memory_s,
        overhead_s=overhead_s,
        collective_s=total,
        hardware_flops=cost.flops_per_device,
        precision=precision,
        collectives=spec.table({k: pa.array(v, spec.schema.field(k).type) for k, v in rows.items()}),
    )
