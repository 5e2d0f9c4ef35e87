"""Simulate a scenario's training steps on every chip.

:func:`simulate` derives the step's device work (compute by roofline, per-layer
collectives, the gradient sync, the optimizer update) as :class:`~engine.step.Segment` s,
hands them to the idle planner (input pipeline, recompilation, stragglers,
failures), lays them out with :func:`~engine.step.assemble`, and collects the
run's facts and extra tables. Each mechanism contributes segments, duration
factors or tables; this module only wires them together.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .calibration import Calibration, load_calibration
from .compute import step_compute
from .hlo.run import simulate_hlo
from .idle import idle_facts, plan_idle
from .memory import GRADIENT_BYTES_PER_PARAM, MASTER_WEIGHT_BYTES_PER_PARAM, OPTIMIZER_STATE_BYTES_PER_PARAM, MemoryPlan, hbm_plan, oom_detail
from .comm import gradient_sync, mesh_gradient_sync, mesh_link_penalties, overlap_table, plan_step_comm
from .mesh import axis_index_of_chips, resolve_mesh, whole_torus_axes
from .models import ModelCost, model_cost
from .moe import RoutingPlan, plan_routing
from .pipeline import PipelinePlan, in_flight_microbatches, plan_pipeline
from .scenario import ParameterServerSection, Scenario
from .step import Segment, SimContext, assemble
from .topology import build_pod
from .trace import CHIPS_SCHEMA, TABLES, RunFacts, RunResult, Trace
from .units import BYTES_PER_ELEMENT, GB_BYTES, NS_PER_S

__all__ = ["simulate"]

#: bytes read + written per parameter by the optimizer update (fp32 master weights)
_UPDATE_BASE_BYTES_PER_PARAM = 4 + 4 + 4  # read weight and gradient, write weight


def simulate(scenario: Scenario, calibration: Calibration | None = None) -> RunResult:
    """Simulate a scenario and return its trace tables and run facts.

    Deterministic for a given scenario (including ``sim.seed``) and calibration.
    """
    cal = calibration or load_calibration()
    if scenario.model.kind == "hlo":  # the user's own program: engine/hlo/run.py
        return simulate_hlo(scenario, cal)
    chip = scenario.chip_spec()
    ctx = SimContext(
        scenario=scenario,
        cal=cal,
        pod=build_pod(chip, scenario.slice_shape, scenario.pod.slices),
        cost=model_cost(scenario.model),
    )
    pod, cost = ctx.pod, ctx.cost
    tr = scenario.training
    par = scenario.parallelism
    steps, chips = ctx.steps, ctx.chips
    b = scenario.per_chip_batch
    n_mb, stages = tr.microbatches, par.pipeline
    b_mb = b // n_mb  # one microbatch (the whole per-chip batch without accumulation or a pipeline)
    # a chip runs n_mb microbatches through its 1 / stages of the layers (engine/pipeline.py)
    work = n_mb / stages

    flash = getattr(scenario.model, "attention", "standard") == "flash"
    comp = step_compute(cost, chip, cal, b_mb, tr.precision, tr.remat, tensor=par.tensor, flash=flash, expert=par.expert)
    fwd_s = comp.forward_s * work
    bwd_s = (comp.fwd_bwd_s - comp.forward_s) * work
    mesh = resolve_mesh(pod.slice.shape, pod.slice.wrap, scenario.mesh_sizes, par.mapping)
    model = scenario.model
    moe = getattr(model, "moe_layers", 0) > 0
    # each MoE layer's dispatch: this chip's tokens, k copies each, d_model wide
    dispatch_bytes = b_mb * model.seq_len * model.experts_per_token * model.d_model * BYTES_PER_ELEMENT[tr.precision] if moe else 0.0
    ps = par.parameter_server or ParameterServerSection()
    use_ps = par.strategy == "parameter_server"
    comm = plan_step_comm(
        cost,
        mesh,
        fwd_compute_s=comp.forward_s,
        bwd_compute_s=comp.fwd_bwd_s - comp.forward_s,
        per_chip_batch=b_mb,
        precision=tr.precision,
        slices=scenario.dcn_data_parallel,
        chips_per_host=min(chip.chips_per_host, pod.chips_per_slice),
        link_bytes_per_s=chip.ici_link_bytes_per_s * cal.ici_efficiency,
        hop_latency_s=cal.ici_hop_latency_s,
        dcn_bytes_per_s_per_host=chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency,
        dcn_latency_s=cal.dcn_latency_s,
        ps_hosts=ps.hosts if use_ps else 0,
        ps_bytes_per_s_per_host=ps.dcn_gbps_per_host * GB_BYTES * cal.dcn_efficiency,
        remat=tr.remat,
        tp_overlap_frac=cal.tp_overlap_frac,
        # [interconnect] faults on the torus axes fsdp/tensor run over slow their per-layer collectives
        link_penalties=mesh_link_penalties(pod, cal, scenario.interconnect, mesh),
        moe_layer_interval=getattr(model, "moe_layer_interval", 1),
        dispatch_bytes=dispatch_bytes,
        pipeline=stages,
    )
    # per-microbatch collectives (FSDP gathers, TP all-reduces, expert all-to-alls) repeat per microbatch
    comm_fwd_s, comm_bwd_s = comm.forward_s * work, comm.backward_s * work
    shard = par.fsdp * par.tensor
    dense_params = cost.params - (cost.sparse_params if use_ps else 0) - cost.expert_params * (1 - 1 / par.expert)
    update_bytes = dense_params / shard / stages * (_UPDATE_BASE_BYTES_PER_PARAM + 2 * OPTIMIZER_STATE_BYTES_PER_PARAM[tr.optimizer])
    update_s = update_bytes / (chip.hbm_bytes_per_s * cal.hbm_efficiency)

    jitter = scenario.sim.jitter_frac if scenario.sim.jitter_frac is not None else cal.jitter_frac
    noise = np.exp(jitter * ctx.rng("jitter").standard_normal((steps, chips), dtype=np.float32)) if jitter > 0 else 1.0

    # Per-layer FSDP/TP collectives are aggregated into one exposed event per pass (their per-layer
    # detail is the `layer_collectives` table), keeping events at a few per chip-step at any scale.
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
            sync = gradient_sync(pod, comm.grad_shard_bytes, cal, scenario.interconnect, bwd_s, axes=data_axes)
        else:
            sync = mesh_gradient_sync(pod, comm.grad_shard_bytes, cal, scenario.interconnect, bwd_s,
                                      mesh["data"].segments, comm.data_sync_s, mesh["data"].size)  # fmt: skip
        grad_sync_s = sync.exposed_s

    fwd_chip: np.ndarray | float = fwd_s
    bwd_chip: np.ndarray | float = bwd_s
    routing = None
    if moe:
        # the busiest expert group's chips compute more of their MoE layers (engine/moe.py)
        routing = plan_routing(model.experts, model.capacity_factor, par.expert, steps, ctx.rng("routing"))
        where = pod.chip_table  # slice-local torus coordinates of every chip
        group = axis_index_of_chips(mesh["expert"], [where[a] for a in "xyz"])
        extra_work = routing.chip_factor(group) - 1.0
        fwd_chip = fwd_s + comp.expert_forward_s * work * extra_work
        bwd_chip = bwd_s + (comp.expert_fwd_bwd_s - comp.expert_forward_s) * work * extra_work

    pp = _pipeline(scenario, pod, mesh, cal, comp, comm, b_mb) if stages > 1 else None
    segments = [
        Segment("compute", fwd_chip * noise),
        Segment("collective", comm_fwd_s),
        Segment("compute", bwd_chip * noise),
        Segment("collective", comm_bwd_s),
        Segment("collective", grad_sync_s + comm.ps_push_s + comm.expert_sync_s, barrier=True),
        Segment("compute", update_s),
        Segment("other", cal.step_overhead_s),
    ]
    if pp is not None:
        segments[:4] = [Segment("bubble", pp.fill_s), segments[0], Segment("collective", comm_fwd_s + pp.send_s / 2),
                        segments[2], Segment("collective", comm_bwd_s + pp.send_s / 2), Segment("bubble", pp.drain_s)]  # fmt: skip
    idle = plan_idle(ctx, comp, segments)  # input waits, recompiles, stragglers, failures
    laid = assemble(idle.segments, steps, chips, detail=scenario.sim.trace)
    chip_table = pa.table(pod.chip_table, schema=CHIPS_SCHEMA)

    def memory(**changes) -> MemoryPlan:
        args = dict(
            per_chip_batch=b_mb, precision=tr.precision, optimizer=tr.optimizer, remat=tr.remat, fsdp=par.fsdp,
            tensor=par.tensor, capacity_bytes=chip.hbm_bytes, reserved_frac=cal.hbm_reserved_frac, sparse_off_chip=use_ps,
            expert=par.expert, pipeline=stages, grad_accumulator=n_mb > 1 and stages == 1,
            in_flight=in_flight_microbatches(stages, n_mb, par.pipeline_schedule, par.virtual_stages),
        )  # fmt: skip
        args.update(changes)
        return hbm_plan(cost, scenario.model, **args)

    mem = memory()
    replicas = scenario.batch_shards  # model replicas' worth of chips: each processes per_chip_batch
    extra_tables = {
        "memory_timeline": mem.timeline,
        # SPMD: every chip holds the same shard sizes, so every chip peaks alike
        "chip_memory": TABLES["extra_chip_memory"].table(
            {"chip": np.arange(chips, dtype=np.int32), "peak_bytes": np.full(chips, mem.peak_bytes)}
        ),
        "layer_collectives": comm.per_layer,
    }
    grad_extra: dict[str, float] = {"grad_allreduce_s": comm.data_sync_s, "grad_allreduce_exposed_s": comm.data_sync_s,
                                    "grad_allreduce_overlapped_s": 0.0}  # fmt: skip
    if sync is not None:
        step_s = float(np.median(laid.steps.column("step_ns").to_numpy())) / NS_PER_S
        extra_tables["link_load"] = sync.link_load(pod, cal, step_s)
        extra_tables["collective_overlap"] = overlap_table(sync, laid.steps, fwd_s, bwd_s)
        grad_extra = {"grad_allreduce_s": sync.total_s, "grad_allreduce_exposed_s": sync.exposed_s,
                      "grad_allreduce_overlapped_s": sync.overlapped_s}  # fmt: skip
    facts = RunFacts(
        chip=chip.key,
        chips=chips,
        hosts=pod.hosts,
        slices=pod.slices,
        topology=scenario.pod.topology,
        steps=steps,
        params=cost.params,
        # steady-state means of the executed shapes (partial batches, variable sequence lengths)
        samples_per_step=round(tr.global_batch * idle.steady_mean(idle.sample_scale)),
        tokens_per_step=(
            round(tr.global_batch * cost.tokens_per_sample * idle.steady_mean(idle.token_scale))
            if cost.tokens_per_sample
            else None
        ),
        model_flops_per_step=cost.train_flops_per_sample * tr.global_batch * idle.steady_mean(idle.work_scale),
        hardware_flops_per_step=comp.hardware_flops * par.tensor * replicas * n_mb * idle.steady_mean(idle.work_scale),
        peak_flops_per_s_per_chip=chip.peak_flops_per_s(tr.precision),
        peak_hbm_bytes=mem.peak_bytes,
        hbm_capacity_bytes=mem.capacity_bytes,
        oom=mem.oom,
        hbm_breakdown_bytes=mem.breakdown_bytes,
        extra={
            "oom_detail": oom_detail(mem, memory, b, scenario.data_parallel, par.fsdp, tr.remat) if mem.oom else None,
            "hbm_usable_bytes": mem.usable_bytes,
            "hbm_peak_phase": mem.peak_phase,
            "mesh": mesh.describe(),
            "parallelism_strategy": par.strategy,
            "exposed_layer_collective_s": comm_fwd_s + comm_bwd_s,
            **grad_extra,
            **idle_facts(idle, laid.step_kind, laid.steps, chips),
            **(_moe_facts(scenario, cost, comm, routing, mem, idle.special_steps) if routing is not None else {}),
            **({"gradient_accumulation_steps": n_mb} if n_mb > 1 and stages == 1 else {}),
            **(_pipeline_facts(pp, mem) if pp is not None else {}),
        },
    )
    trace = Trace(
        events=laid.events,
        steps=laid.steps,
        chips=chip_table,
        step_kind=laid.step_kind,
        chip_kind=laid.chip_kind,
        extra={**extra_tables, **idle.tables},
    )
    return RunResult(scenario=scenario, trace=trace, facts=facts)


def _moe_facts(s: Scenario, cost: ModelCost, comm, routing: RoutingPlan, mem: MemoryPlan, special: np.ndarray) -> dict:
    """Summary facts of a mixture-of-experts run: total vs active parameters, capacity, drops, imbalance."""
    m, par = s.model, s.parallelism
    steady = np.ones(len(routing.dropped_frac), dtype=bool)
    steady[special] = False
    if not steady.any():
        steady[:] = True
    per_param = MASTER_WEIGHT_BYTES_PER_PARAM + GRADIENT_BYTES_PER_PARAM + OPTIMIZER_STATE_BYTES_PER_PARAM[s.training.optimizer]
    return {
        "params_total": cost.params,
        "params_active": cost.active_params_eff,
        "moe_experts": m.experts,
        "moe_experts_per_token": m.experts_per_token,
        "moe_layers": cost.moe_layers,
        "moe_capacity_factor": m.capacity_factor,
        "moe_dropped_token_frac": float(routing.dropped_frac[steady].mean()),
        "moe_busiest_expert_over_mean": float(routing.busiest_over_mean[steady].mean()),
        "moe_busiest_group_factor": float(routing.group_factor[steady].max(axis=1).mean()),
        "expert_all_to_all_s": comm.all_to_all_s,
        # model states of this chip's experts (fp32 weights, gradients, optimizer), the Memory page's expert term
        "hbm_expert_weight_bytes": cost.expert_params / (par.fsdp * par.tensor * par.expert) * per_param,
    }


def _pipeline(s: Scenario, pod, mesh, cal: Calibration, comp, comm, b_mb: int) -> PipelinePlan:
    """Bubble and stage-to-stage sends of a pipeline-parallel run (engine/pipeline.py)."""
    par, chip = s.parallelism, pod.chip
    where = pod.chip_table
    stage = axis_index_of_chips(mesh["pipeline"], [where[a] for a in "xyz"])
    if s.pipeline_spans_slices:
        stage = where["slice"] * s.pipeline_in_slice + stage
    v = par.virtual_stages if par.pipeline_schedule == "interleaved" else 1
    send_bytes = b_mb * s.model.seq_len * s.model.d_model * BYTES_PER_ELEMENT[s.training.precision]
    # a send to the next stage's chip: one ICI hop, or a host NIC's share across the DCN
    ici_s = send_bytes / (chip.ici_link_bytes_per_s * cal.ici_efficiency) + cal.ici_hop_latency_s
    hosts_share = min(chip.chips_per_host, pod.chips_per_slice)
    dcn_s = send_bytes * hosts_share / (chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency) + cal.dcn_latency_s
    boundaries = par.pipeline * v - 1
    over_dcn = (pod.slices - 1) * v if s.pipeline_spans_slices else 0
    send_s = 2.0 * ((boundaries - over_dcn) * ici_s + over_dcn * dcn_s)
    # one microbatch through one stage: its compute and its per-layer collectives
    slot_s = (comp.fwd_bwd_s + comm.forward_s + comm.backward_s) / par.pipeline
    return plan_pipeline(stage, par.pipeline, s.training.microbatches, par.pipeline_schedule, v, slot_s, send_bytes,
                         send_s, s.pipeline_spans_slices)  # fmt: skip


def _pipeline_facts(pp: PipelinePlan, mem: MemoryPlan) -> dict:
    return {
        "pipeline_stages": pp.stages,
        "pipeline_schedule": pp.schedule,
        "pipeline_virtual_stages": pp.virtual_stages,
        "pipeline_microbatches": pp.microbatches,
        "pipeline_bubble_frac": pp.bubble_frac,
        "pipeline_over_dcn": pp.over_dcn,
        "pipeline_send_bytes": pp.send_bytes,
        "pipeline_exposed_send_s": pp.send_s,
        # the busiest (first) stage's activations for every microbatch in flight, at the HBM peak
        "hbm_pipeline_activation_bytes": mem.breakdown_bytes["activations"],
    }
