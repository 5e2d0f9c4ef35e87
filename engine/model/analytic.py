"""The deterministic cost of one training step, and its fast analytic evaluation.

:func:`step_costs` derives what every steady-state step costs on a chip before any
randomness: compute by roofline (forward, backward), the exposed per-layer
collectives, the data-parallel gradient sync on the links, the optimizer update and
the HBM plan. :func:`engine.simulate.simulate` lays these out on every chip with
jitter and the idle mechanisms; :func:`evaluate` turns the same numbers into a step
time without a trace, so the two cannot drift apart.

The analytic step follows the assembler's barrier rule on the slowest chip class.
Each chip's forward + backward is multiplied by its straggler factor ``f_c`` and its
per-step jitter ``exp(j z)`` (``z`` standard normal), so the first barrier waits for
``max_c f_c exp(j z_c)``. The run's reported step time is the median over steps, and
the median of that maximum is the ``x`` where ``prod_c Phi((ln x - ln f_c) / j) = 1/2``
(order statistics of independent chips): a deterministic number, solved here per
distinct factor class. After the barrier every chip runs the sync, the update (times
its factor) and the step overhead; the step ends at the slowest chip.

What the analytic path does not express: user HLO programs (``kind = "hlo"``, costed op by op by
:mod:`engine.hlo`), the input pipeline (host queues), recompiles
of changing shapes, failures and checkpoints. :func:`evaluate` reports the steady-state
step with those mechanisms off (see :func:`steady_state_scenario`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np
import pyarrow as pa

from ..comm import (
    GradientSync,
    MeshGradientSync,
    StepComm,
    gradient_sync,
    mesh_gradient_sync,
    mesh_link_penalties,
    plan_step_comm,
)
from ..errors import SimulationError
from ..idle.stragglers import straggler_factors
from ..memory.hbm import MemoryPlan, hbm_plan
from ..memory.states import optimizer_state_bytes_per_param
from ..memory.layout import device_padded_batch
from ..pod.mesh import Mesh, resolve_mesh, whole_torus_axes
from ..pod.topology import Pod, build_pod
from ..scenario import ParameterServerSection, Scenario
from ..scenario.calibration import Calibration, load_calibration
from ..units import BYTES_PER_ELEMENT, GB_BYTES, WEIGHT_BYTES_PER_ELEMENT
from .batch_norm import plan_batch_norm_sync
from .compute import ComputeCost, step_compute
from .context import RingAttention, plan_ring_attention
from .models import ModelCost, layer_units, model_cost
from .moe import plan_routing
from .pipeline import in_flight_microbatches
from .step import Segment, seeded_rng

__all__ = ["StepCosts", "step_costs", "scenario_compute", "activation_send_bytes", "Estimate", "evaluate", "slowest_factor",
           "steady_state_scenario"]

#: elements read + written per parameter by the optimizer update, each in the stored weights' dtype
UPDATE_BASE_ELEMENTS_PER_PARAM = 3  # read weight and gradient, write weight

#: sections whose mechanisms the analytic step does not express (see the module docstring)
UNEXPRESSED_SECTIONS = ("input", "compile", "failures")


@dataclass(frozen=True)
class StepCosts:
    """The deterministic per-step costs of a scenario on one representative chip (seconds, bytes)."""

    comp: ComputeCost
    forward_s: float  # forward compute
    backward_s: float  # backward compute, recomputation included
    mesh: Mesh
    comm: StepComm
    sync: GradientSync | MeshGradientSync | None  # None: no data-parallel gradient sync
    grad_sync_s: float  # exposed data-parallel gradient sync
    update_s: float  # optimizer update
    step_overhead_s: float
    mem: MemoryPlan
    replan: Callable[..., MemoryPlan]  # hbm_plan with some arguments changed (for OOM advice)
    use_ps: bool
    # microbatches x per-chip passes: exposed per-layer collectives of the step (forward, backward)
    comm_forward_s: float = 0.0
    comm_backward_s: float = 0.0
    work: float = 1.0  # microbatches / pipeline stages: the chip's passes through the whole model
    micro_batch: int = 1  # samples per chip per microbatch
    bubble_s: float = 0.0  # a pipeline stage's fill + drain wait (engine/model/pipeline.py)
    # FLOPs the chip executes beyond its passes through the model, as a share of them: MaxText's pipeline loop
    # (``gpipe``) runs every stage's layers in all microbatches + stages - 1 iterations, on zeros in the bubble
    bubble_flops_frac: float = 0.0
    pipeline_send_s: float = 0.0  # stage-to-stage sends on the critical path
    ring: RingAttention | None = None  # context parallelism's K/V ring, one pass (engine/model/context.py)

    @property
    def hardware_flops_per_chip(self) -> float:
        """FLOPs the chip executes per step: its passes through the model and MaxText's bubble iterations."""
        return self.comp.hardware_flops * self.work * (1.0 + self.bubble_flops_frac)

    @property
    def attention_flops_per_chip(self) -> float:
        """The attention core's share of :attr:`hardware_flops_per_chip`."""
        return self.comp.attention_hardware_flops * self.work * (1.0 + self.bubble_flops_frac)

    def core_compute_terms_s(self, without_attention: bool = False) -> dict[str, float]:
        """The step's work on the chip's TensorCores by term, seconds: every pass through its layers (MaxText's bubble
        iterations included, as in :attr:`hardware_flops_per_chip`) as ``mxu_bound`` (the ops whose FLOPs outlast
        their HBM traffic), ``memory_bound`` (the other ops, and the passes that run after a matmul) and
        ``op_overhead`` (the fixed cost per op and pass), then the optimizer's ``update``. ``without_attention``:
        ``attention_kernel`` takes the attention core off (negative: a Pallas kernel's share, which a compiled module
        carries no estimate for)."""
        c, scale = self.comp, self.work * (1.0 + self.bubble_flops_frac)
        terms = {"mxu_bound": c.matmul_s * scale, "memory_bound": c.memory_s * scale, "op_overhead": c.overhead_s * scale,
                 "update": self.update_s}  # fmt: skip
        if without_attention:
            terms["attention_kernel"] = -c.attention_fwd_bwd_s * scale
        return terms

    def core_compute_s(self, without_attention: bool = False) -> float:
        """The step's work on the chip's TensorCores, seconds: the sum of :meth:`core_compute_terms_s`."""
        return sum(self.core_compute_terms_s(without_attention).values())

    @property
    def exposed_collective_s(self) -> float:
        """Collective time of the step that no compute hides: the ``collective`` segments of :meth:`segments`, and a
        pipeline's stage-to-stage sends on the critical path."""
        return float(sum(np.mean(s.dur_s) for s in self.segments() if s.kind == "collective")) + self.pipeline_send_s

    def segments(self, noise: np.ndarray | float = 1.0, forward_s=None, backward_s=None) -> list[Segment]:
        """The step's device work as segments; ``noise`` multiplies forward and backward compute.

        ``forward_s`` / ``backward_s`` replace the representative chip's compute by per-chip
        arrays (a mixture of experts' busier expert groups).
        """
        fwd = self.forward_s if forward_s is None else forward_s
        bwd = self.backward_s if backward_s is None else backward_s
        return [
            Segment("compute", fwd * noise),
            Segment("collective", self.comm_forward_s),
            Segment("compute", bwd * noise),
            Segment("collective", self.comm_backward_s),
            Segment("collective", self.grad_sync_s + self.comm.ps_push_s + self.comm.context_sync_s
                    + self.comm.fsdp_grad_sync_s, barrier=True),
            Segment("compute", self.update_s),
            Segment("collective", self.comm.weight_gather_s),  # ZeRO-1/2: the updated weights gathered
            Segment("other", self.step_overhead_s),
        ]


def step_costs(
    scenario: Scenario,
    cal: Calibration,
    pod: Pod | None = None,
    cost: ModelCost | None = None,
    tables: bool = True,
    memo: dict | None = None,
) -> StepCosts:
    """The deterministic per-step costs of ``scenario`` under ``cal``.

    ``pod`` and ``cost`` may be passed in when the caller has them already.
    ``tables=False`` skips the per-layer collective and memory timeline tables
    (the numbers are the same). ``memo``, a dict the caller keeps across calls that share
    ``cal`` and the ``cost`` objects, holds the compute of each distinct microbatch shape, so
    many meshes of one model (the planner's search) compute each shape once, and the
    gradient all-reduce on whole torus axes is priced once per operand (``pod`` by identity too).
    """
    chip = scenario.chip_spec()
    pod = pod or build_pod(chip, scenario.slice_shape, scenario.pod.slices)
    cost = cost or model_cost(scenario.model)
    tr = scenario.training
    par = scenario.parallelism
    b = scenario.per_chip_batch
    n_mb, stages = tr.microbatches, par.pipeline
    b_mb = b // n_mb  # one microbatch (the whole per-chip batch without accumulation or a pipeline)
    # a chip runs n_mb microbatches through its 1 / stages of the layers (engine/model/pipeline.py)
    work = n_mb / stages

    b_computed = device_padded_batch(b_mb, chip.devices_per_chip)  # each device computes its whole shard
    if memo is None:
        comp = scenario_compute(scenario, cost, cal, b_computed, chip)
    else:  # everything step_compute reads, with the cost and calibration by identity
        key = ("compute", id(cost), id(cal), chip, b_computed, tr.precision, tr.remat, par.tensor, par.expert, par.context,
               getattr(scenario.model, "attention_kernel", None), tuple(getattr(scenario.model, "gmm_tiling", ())),
               par.pipeline > 1 and par.pipeline_schedule == "gpipe")  # fmt: skip
        if key not in memo:
            memo[key] = scenario_compute(scenario, cost, cal, b_computed, chip)
        comp = memo[key]
    fwd_s = comp.forward_s * work
    bwd_s = (comp.fwd_bwd_s - comp.forward_s) * work
    mesh = resolve_mesh(pod.slice.shape, pod.slice.wrap, scenario.mesh_sizes, par.mapping)
    model = scenario.model
    moe = getattr(model, "moe_layers", 0) > 0
    # each MoE layer's dispatch: this chip's tokens, k copies each, d_model wide; under dense dispatch
    # the experts' whole capacity buffers travel, empty slots included
    dispatch_bytes = 0.0
    if moe:
        slots = model.experts * model.expert_capacity_per_sequence if model.moe_dispatch == "dense" else model.seq_len * model.experts_per_token
        dispatch_bytes = b_mb * slots * model.d_model * BYTES_PER_ELEMENT[tr.precision]
    cp = par.context
    if cp > 1:
        dispatch_bytes /= cp  # this chip's seq_len / context tokens
    ps = par.parameter_server or ParameterServerSection()
    use_ps = par.strategy == "parameter_server"
    comm = plan_step_comm(
        cost,
        mesh,
        fwd_compute_s=comp.forward_s,
        bwd_compute_s=comp.fwd_bwd_s - comp.forward_s,
        per_chip_batch=b_mb / cp if cp > 1 else b_mb,  # TP all-reduces and PS rows carry this chip's tokens
        precision=tr.precision,
        slices=scenario.dcn_data_parallel,
        chips_per_host=pod.chips_per_host,
        link_bytes_per_s=chip.ici_link_bytes_per_s * cal.ici_efficiency,
        hop_latency_s=cal.ici_hop_latency_s,
        dcn_bytes_per_s_per_host=chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency,
        dcn_latency_s=cal.dcn_latency_s,
        ps_hosts=ps.hosts if use_ps else 0,
        ps_bytes_per_s_per_host=ps.dcn_gbps_per_host * GB_BYTES * cal.dcn_efficiency,
        remat=tr.remat,
        collective_matmul=par.collective_matmul,
        # [interconnect] faults on the torus axes fsdp/tensor run over slow their per-layer collectives
        link_penalties=mesh_link_penalties(pod, cal, scenario.interconnect, mesh),
        tables=tables,
        moe_layer_interval=getattr(model, "moe_layer_interval", 1),
        dispatch_bytes=dispatch_bytes,
        pipeline=stages,
        fsdp_shard=par.fsdp_shard,
        weight_dtype=tr.weight_dtype,
        gradient_reduce_dtype=tr.gradient_reduce_dtype,
    )
    ring = None
    if cp > 1:
        ring = plan_ring_attention(model, mesh["context"], micro_batch=b_mb, precision=tr.precision, tensor=par.tensor,
                                   forward_passes=comp.attention_forward_passes, attention_forward_s=comp.attention_forward_s,
                                   attention_fwd_bwd_s=comp.attention_fwd_bwd_s, tables=tables,
                                   link_bytes_per_s=chip.ici_link_bytes_per_s * cal.ici_efficiency,
                                   hop_latency_s=cal.ici_hop_latency_s)  # fmt: skip
        comm = replace(comm, forward_s=comm.forward_s + ring.forward_exposed_s, backward_s=comm.backward_s + ring.backward_exposed_s,
                       total_comm_s=comm.total_comm_s + ring.send_s,
                       per_layer=pa.concat_tables([comm.per_layer, ring.per_layer]) if tables else comm.per_layer)  # fmt: skip
    bn_group = getattr(model, "batch_norm_group", 1)
    if bn_group > 1 and cost.batch_norm_ops:
        idx = list(cost.batch_norm_ops)
        bn = plan_batch_norm_sync(cost.ops.n[idx], tuple(cost.ops.names[i] for i in idx), bn_group, remat=tr.remat,
                                  link_bytes_per_s=chip.ici_link_bytes_per_s * cal.ici_efficiency,
                                  hop_latency_s=cal.ici_hop_latency_s, collective_fixed_s=cal.collective_fixed_s, tables=tables)  # fmt: skip
        comm = replace(comm, forward_s=comm.forward_s + bn.forward_s, backward_s=comm.backward_s + bn.backward_s,
                       total_comm_s=comm.total_comm_s + bn.exposed_s,
                       per_layer=pa.concat_tables([comm.per_layer, bn.per_layer]) if tables else comm.per_layer)  # fmt: skip
    # per-microbatch collectives (FSDP gathers, TP all-reduces, expert all-to-alls) repeat per microbatch
    comm_fwd_s, comm_bwd_s = comm.forward_s * work, comm.backward_s * work
    shard = par.fsdp * par.tensor
    dense_params = (cost.params - (cost.sparse_params if use_ps else 0)) / par.expert  # every weight shards over expert (MaxText)
    update_bytes = dense_params / shard / stages * (UPDATE_BASE_ELEMENTS_PER_PARAM * WEIGHT_BYTES_PER_ELEMENT[tr.weight_dtype]
                                                    + 2 * optimizer_state_bytes_per_param(tr.optimizer, tr.optimizer_state))
    if par.shard_weight_update:
        # Each replica updates 1/replicas of the weights (Xu et al. 2020); a ring all-reduce is already
        # reduce-scatter + all-gather, so the collective's cost is unchanged.
        update_bytes /= scenario.data_parallel * scenario.dcn_data_parallel
    update_s = update_bytes / (chip.hbm_bytes_per_s * cal.hbm_efficiency)

    # Data-parallel gradient sync: on whole torus axes the interconnect model prices it (schedule,
    # bucketed overlap with the backward pass, link faults, per-link load); a `data` axis that splits
    # a torus axis keeps the mesh model's strided-ring estimate, with the same links' faults, one-way
    # links, overlap and link load laid on top (engine/comm/gradient_sync.py mesh_gradient_sync).
    data_axes = whole_torus_axes(mesh["data"], pod.slice.shape)
    sync = None
    grad_sync_s = comm.data_sync_s
    if comm.grad_shard_bytes > 0 and scenario.pipeline_spans_slices:
        pass  # no data parallelism over the DCN: the mesh model's estimate over `data` stands
    elif comm.grad_shard_bytes > 0 and (mesh["data"].size > 1 or pod.slices > 1):
        if data_axes is not None:
            sync = gradient_sync(pod, comm.grad_shard_bytes, cal, scenario.interconnect, bwd_s, axes=data_axes, memo=memo)
        else:
            sync = mesh_gradient_sync(pod, comm.grad_shard_bytes, cal, scenario.interconnect, bwd_s,
                                      mesh["data"].segments, comm.data_sync_s, mesh["data"].size)  # fmt: skip
        grad_sync_s = sync.exposed_s

    replicas = scenario.data_parallel * scenario.dcn_data_parallel * chip.devices_per_chip  # copies of a replicated gradient

    def replan(**changes) -> MemoryPlan:
        args = dict(
            per_chip_batch=b_mb, precision=tr.precision, optimizer=tr.optimizer, remat=tr.remat, fsdp=par.fsdp,
            tensor=par.tensor, capacity_bytes=chip.hbm_bytes,
            usable_bytes=chip.usable_hbm_bytes(cal.hbm_reserved_frac), sparse_off_chip=use_ps,
            timeline=tables, expert=par.expert, pipeline=stages, accumulation=n_mb if stages == 1 else 1,
            in_flight=in_flight_microbatches(stages, n_mb, par.pipeline_schedule, par.virtual_stages),
            stage_remat=stages > 1 and par.pipeline_schedule == "gpipe",
            context=cp, fsdp_shard=par.fsdp_shard, optimizer_state=tr.optimizer_state, weight_dtype=tr.weight_dtype,
            ring_buffer_bytes=ring.buffer_bytes if ring is not None else (0.0, 0.0),
            devices_per_chip=chip.devices_per_chip, async_all_gather=chip.xla_async_all_gather,
            async_all_reduce=chip.xla_async_all_reduce and replicas > 1,
        )  # fmt: skip
        args.update(changes)
        return hbm_plan(cost, scenario.model, **args)

    return StepCosts(
        comp=comp,
        forward_s=fwd_s,
        backward_s=bwd_s,
        mesh=mesh,
        comm=comm,
        sync=sync,
        grad_sync_s=grad_sync_s,
        update_s=update_s,
        step_overhead_s=cal.step_overhead_s,
        mem=replan(),
        replan=replan,
        use_ps=use_ps,
        comm_forward_s=comm_fwd_s,
        comm_backward_s=comm_bwd_s,
        work=work,
        micro_batch=b_mb,
        ring=ring,
        **(_pipeline_totals(scenario, pod, cal, comp, comm, b_mb, cost) if stages > 1 else {}),
    )


def scenario_compute(scenario: Scenario, cost: ModelCost, cal: Calibration, micro_batch: float, chip=None) -> ComputeCost:
    """:func:`~engine.model.compute.step_compute` of one microbatch of ``scenario``'s model on one chip.

    The mesh (tensor, expert, context), precision, remat and the attention kernel the model
    picks come from the scenario; ``cost`` is its model's (or a reshaped copy's, e.g. another
    sequence length) cost, ``micro_batch`` the samples of one pass.
    """
    tr, par = scenario.training, scenario.parallelism
    model = scenario.model
    flash = getattr(model, "attention_kernel", None) == "flash"
    grouped = getattr(model, "moe", False) and model.moe_dispatch == "grouped"
    return step_compute(cost, chip or scenario.chip_spec(), cal, micro_batch, tr.precision, tr.remat, tensor=par.tensor,
                        flash=flash, expert=par.expert, context=par.context,
                        gmm_tiling=tuple(model.gmm_tiling) if grouped else None,
                        stage_recompute=par.pipeline > 1 and par.pipeline_schedule == "gpipe")  # fmt: skip


def activation_send_bytes(s: Scenario, micro_batch: float) -> float:
    """Bytes of one microbatch's activations sent between pipeline stages (this chip's tokens)."""
    out = micro_batch * s.model.seq_len * s.model.d_model * BYTES_PER_ELEMENT[s.training.precision]
    return out / s.parallelism.context if s.parallelism.context > 1 else out


def _pipeline_totals(s: Scenario, pod: Pod, cal: Calibration, comp: ComputeCost, comm: StepComm, b_mb: int,
                     cost: ModelCost) -> dict:  # fmt: skip
    """A pipeline stage's bubble (fill + drain), the stage-to-stage sends on the critical path, and under ``gpipe``
    (MaxText's loop) the layers' FLOPs its stages compute in the bubble."""
    par, chip = s.parallelism, pod.chip
    v = par.virtual_stages if par.pipeline_schedule == "interleaved" else 1
    send_bytes = activation_send_bytes(s, b_mb)
    # a send to the next stage's chip: one ICI hop, or a host NIC's share across the DCN
    ici_s = send_bytes / (chip.ici_link_bytes_per_s * cal.ici_efficiency) + cal.ici_hop_latency_s
    hosts_share = pod.chips_per_host
    dcn_s = send_bytes * hosts_share / (chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency) + cal.dcn_latency_s
    boundaries = par.pipeline * v - 1
    over_dcn = (pod.slices - 1) * v if s.pipeline_spans_slices else 0
    # one microbatch through one stage: its compute and its per-layer collectives
    slot_s = (comp.fwd_bwd_s + comm.forward_s + comm.backward_s) / par.pipeline
    layer_frac = sum(u.flops_frac for u in layer_units(cost) if u.name.startswith("layer"))
    return {
        "bubble_s": (par.pipeline - 1) * slot_s / v,
        "pipeline_send_s": 2.0 * ((boundaries - over_dcn) * ici_s + over_dcn * dcn_s),
        "bubble_flops_frac": layer_frac * (par.pipeline - 1) / s.training.microbatches if par.pipeline_schedule == "gpipe" else 0.0,
    }


def slowest_factor(factors: np.ndarray, jitter_frac: float, chips: int | None = None) -> float:
    """Median over steps of the slowest chip's compute multiplier ``max_c f_c exp(j z_c)``.

    ``factors`` are the chips' straggler factors; ``z_c`` independent standard normals.
    Without jitter it is ``max f``; with one class of ``N`` chips it is
    ``f exp(j Phi^-1(2^(-1/N)))``; with several classes the median solves
    ``sum_k n_k ln Phi((ln x - ln f_k) / j) = ln 1/2`` (bisection on ``ln x``).
    ``chips`` with a single factor: that many chips share it (no per-chip array needed).
    """
    factors = np.asarray(factors, dtype=np.float64)
    if jitter_frac <= 0:
        return float(factors.max())
    if chips is not None:
        classes, counts = factors[:1], np.array([chips])
    else:
        classes, counts = np.unique(factors, return_counts=True)
    nd = NormalDist()
    if len(classes) == 1:
        return float(classes[0]) * math.exp(jitter_frac * nd.inv_cdf(0.5 ** (1.0 / counts[0])))
    log_f = np.log(classes)
    target = math.log(0.5)

    def log_cdf(log_x: float) -> float:
        z = (log_x - log_f) / jitter_frac
        return float(sum(n * math.log(max(nd.cdf(v), 1e-300)) for n, v in zip(counts, z)))

    lo, hi = float(log_f.max()) - 10 * jitter_frac, float(log_f.max()) + 10 * jitter_frac
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if log_cdf(mid) < target else (lo, mid)
    return math.exp(0.5 * (lo + hi))


@dataclass(frozen=True)
class Estimate:
    """A scenario's steady-state step, evaluated without a trace."""

    step_time_s: float
    peak_hbm_bytes: float
    usable_hbm_bytes: float
    oom: bool
    oom_term: str | None  # the largest memory term at the peak, when out of memory
    chips: int
    samples_per_step: float
    tokens_per_step: float | None
    costs: StepCosts

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_step / self.step_time_s

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens_per_step / self.step_time_s if self.tokens_per_step is not None else None


def steady_state_scenario(scenario: Scenario) -> Scenario:
    """``scenario`` without the sections the analytic step does not express (input, compile, failures)."""
    return scenario.model_copy(update={k: None for k in UNEXPRESSED_SECTIONS})


def evaluate(
    scenario: Scenario,
    calibration: Calibration | None = None,
    *,
    pod: Pod | None = None,
    cost: ModelCost | None = None,
    memo: dict | None = None,
) -> Estimate:
    """The steady-state step time and peak HBM of ``scenario``, without simulating a trace.

    Uses :func:`step_costs` (what :func:`~engine.simulate.simulate` uses) and the
    barrier rule on the slowest chip class (module docstring). ``[input]``,
    ``[compile]`` and ``[failures]`` are ignored: the result is the step a full run
    of :func:`steady_state_scenario` reports. ``memo`` is passed to :func:`step_costs`.
    """
    cal = calibration or load_calibration()
    if scenario.model.kind == "hlo":
        raise SimulationError("the analytic step covers the built-in model families; an HLO program is costed by a full run")
    pod = pod or build_pod(scenario.chip_spec(), scenario.slice_shape, scenario.pod.slices)
    cost = cost or model_cost(scenario.model)
    c = step_costs(scenario, cal, pod=pod, cost=cost, tables=False, memo=memo)
    jitter = scenario.sim.jitter_frac if scenario.sim.jitter_frac is not None else cal.jitter_frac
    if scenario.stragglers is not None:
        factors = straggler_factors(scenario.stragglers, pod.chip_table["host"], seeded_rng(scenario.sim.seed, "stragglers"))
        slow = slowest_factor(factors, jitter)
        update_factor = float(factors.max())
    else:
        slow = slowest_factor(np.ones(1), jitter, chips=pod.chips)
        update_factor = 1.0
    fwd_bwd = c.forward_s + c.backward_s
    if cost.moe_layers:
        # the busiest expert group's chips set the barrier: the median step's busiest group (engine/model/moe.py)
        m = scenario.model
        routing = plan_routing(m.experts, m.capacity_factor, scenario.parallelism.expert, scenario.training.steps,
                               seeded_rng(scenario.sim.seed, "routing"), dense=m.moe_dispatch == "dense")  # fmt: skip
        busiest = float(np.median(routing.group_factor.max(axis=1)))
        fwd_bwd += c.comp.expert_fwd_bwd_s * c.work * (busiest - 1.0)
    step_s = (
        fwd_bwd * slow
        + c.comm_forward_s
        + c.comm_backward_s
        + c.bubble_s
        + c.pipeline_send_s
        + c.grad_sync_s
        + c.comm.ps_push_s
        + c.update_s * update_factor
        + c.step_overhead_s
        + c.comm.context_sync_s
        + c.comm.fsdp_grad_sync_s
        + c.comm.weight_gather_s
    )
    tr = scenario.training
    return Estimate(
        step_time_s=step_s,
        peak_hbm_bytes=c.mem.peak_bytes,
        usable_hbm_bytes=c.mem.usable_bytes,
        oom=c.mem.oom,
        oom_term=c.mem.largest_term if c.mem.oom else None,
        chips=pod.chips,
        samples_per_step=float(tr.global_batch),
        tokens_per_step=float(tr.global_batch * cost.tokens_per_sample) if cost.tokens_per_sample else None,
        costs=c,
    )
