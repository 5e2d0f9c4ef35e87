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

from .assumptions import run_assumptions
from .calibration import Calibration, load_calibration
from .compute import step_compute
from .hlo.run import simulate_hlo
from .idle import idle_facts, plan_idle
from .memory import OPTIMIZER_STATE_BYTES_PER_PARAM, MemoryPlan, hbm_plan, oom_detail
from .comm import gradient_sync, mesh_gradient_sync, mesh_link_penalties, overlap_table, plan_step_comm
from .mesh import resolve_mesh, whole_torus_axes
from .models import model_cost
from .scenario import ParameterServerSection, Scenario
from .step import Segment, SimContext, assemble
from .topology import build_pod
from .trace import CHIPS_SCHEMA, TABLES, RunFacts, RunResult, Trace
from .units import GB_BYTES, NS_PER_S

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

    flash = getattr(scenario.model, "attention_kernel", None) == "flash"
    comp = step_compute(cost, chip, cal, b, tr.precision, tr.remat, tensor=par.tensor, flash=flash)
    fwd_s = comp.forward_s
    bwd_s = comp.fwd_bwd_s - fwd_s
    mesh_sizes = {"data": scenario.data_parallel, "fsdp": par.fsdp, "tensor": par.tensor}
    mesh = resolve_mesh(pod.slice.shape, pod.slice.wrap, mesh_sizes, par.mapping)
    ps = par.parameter_server or ParameterServerSection()
    use_ps = par.strategy == "parameter_server"
    comm = plan_step_comm(
        cost,
        mesh,
        fwd_compute_s=fwd_s,
        bwd_compute_s=bwd_s,
        per_chip_batch=b,
        precision=tr.precision,
        slices=pod.slices,
        chips_per_host=pod.chips_per_host,
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
    )
    shard = par.fsdp * par.tensor
    dense_params = cost.params - (cost.sparse_params if use_ps else 0)
    update_bytes = dense_params / shard * (_UPDATE_BASE_BYTES_PER_PARAM + 2 * OPTIMIZER_STATE_BYTES_PER_PARAM[tr.optimizer])
    if par.shard_weight_update:
        # Each replica updates 1/replicas of the weights (Xu et al. 2020); a ring all-reduce is already
        # reduce-scatter + all-gather, so the collective's cost is unchanged.
        update_bytes /= scenario.data_parallel * pod.slices
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
    if comm.grad_shard_bytes > 0 and (mesh["data"].size > 1 or pod.slices > 1):
        if data_axes is not None:
            sync = gradient_sync(pod, comm.grad_shard_bytes, cal, scenario.interconnect, bwd_s, axes=data_axes)
        else:
            sync = mesh_gradient_sync(pod, comm.grad_shard_bytes, cal, scenario.interconnect, bwd_s,
                                      mesh["data"].segments, comm.data_sync_s, mesh["data"].size)  # fmt: skip
        grad_sync_s = sync.exposed_s

    segments = [
        Segment("compute", fwd_s * noise),
        Segment("collective", comm.forward_s),
        Segment("compute", bwd_s * noise),
        Segment("collective", comm.backward_s),
        Segment("collective", grad_sync_s + comm.ps_push_s, barrier=True),
        Segment("compute", update_s),
        Segment("other", cal.step_overhead_s),
    ]
    idle = plan_idle(ctx, comp, segments)  # input waits, recompiles, stragglers, failures
    laid = assemble(idle.segments, steps, chips, detail=scenario.sim.trace)
    chip_table = pa.table(pod.chip_table, schema=CHIPS_SCHEMA)

    def memory(**changes) -> MemoryPlan:
        args = dict(
            per_chip_batch=b, precision=tr.precision, optimizer=tr.optimizer, remat=tr.remat, fsdp=par.fsdp,
            tensor=par.tensor, capacity_bytes=chip.hbm_bytes, reserved_frac=cal.hbm_reserved_frac, sparse_off_chip=use_ps,
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
        hardware_flops_per_step=comp.hardware_flops * par.tensor * replicas * idle.steady_mean(idle.work_scale),
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
            **run_assumptions(scenario),
            "exposed_layer_collective_s": comm.forward_s + comm.backward_s,
            **grad_extra,
            **idle_facts(idle, laid.step_kind, laid.steps, chips),
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
