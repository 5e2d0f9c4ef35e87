"""Simulate a scenario's training steps on every chip.

:func:`simulate` derives the step's device work (compute by roofline, per-layer
collectives, the gradient sync, the optimizer update) as :class:`~engine.model.step.Segment` s,
hands them to the idle planner (input pipeline, recompilation, stragglers,
failures), lays them out with :func:`~engine.model.step.assemble`, and collects the
run's facts and extra tables. Each mechanism contributes segments, duration
factors or tables; this module only wires them together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pyarrow as pa

from .model.analytic import activation_send_bytes, step_costs
from .model.assumptions import run_assumptions
from .scenario.calibration import Calibration, load_calibration
from .comm import overlap_table
from .model.compute import ComputeCost
from .hlo.bundle import XlaHbm
from .hlo.run import simulate_hlo, xla_oom_detail
from .idle.plan import idle_facts, plan_idle
from .model.analytic import StepCosts
from .pod.mesh import Mesh, axis_index_of_chips
from .memory.hbm import MemoryPlan
from .memory.states import optimizer_state_bytes_per_param
from .memory.oom import oom_detail
from .model.models import ModelCost, model_cost
from .model.moe import RoutingPlan, plan_routing
from .model.pipeline import PipelinePlan, plan_pipeline
from .sampling import plan_sample
from .scenario import Scenario
from .model.step import Segment, SimContext, assemble
from .pod.topology import Pod
from .pod.topology import build_pod
from .trace import CHIPS_SCHEMA, TABLES, RunFacts, RunResult, Trace
from .units import NS_PER_S, WEIGHT_BYTES_PER_ELEMENT

__all__ = ["simulate"]


def simulate(
    scenario: Scenario,
    calibration: Calibration | None = None,
    *,
    on_events: Callable[[pa.RecordBatch], None] | None = None,
    xla_memory: XlaHbm | None = None,
) -> RunResult:
    """Simulate a scenario and return its trace tables and run facts.

    Deterministic for a given scenario (including ``sim.seed``) and calibration.

    Parameters
    ----------
    on_events
        Given, it receives the events block by block as they are laid out (see
        :func:`~engine.model.step.assemble`), and the returned ``trace.events`` is empty.
    xla_memory
        The TPU compiler's HBM peak and verdict for the scenario's program (``run --xla``): the
        run's HBM peak, breakdown (arguments, the rest temporary) and out-of-memory verdict are
        XLA's (``hbm_source = "xla"``); Podscope's own peak stays in ``hbm_podscope_peak_bytes``, and the XLA options
        the program was compiled with (beyond libtpu's defaults) are ``hbm_xla_flags``.
    """
    cal = calibration or load_calibration()
    if scenario.model.kind == "hlo":  # the user's own program: engine/hlo/run.py
        return simulate_hlo(scenario, cal, on_events=on_events)
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

    costs = step_costs(scenario, cal, pod=pod, cost=cost)
    comp, comm, sync, mesh, mem = costs.comp, costs.comm, costs.sync, costs.mesh, costs.mem
    fwd_s, bwd_s = costs.forward_s, costs.backward_s

    jitter = scenario.sim.jitter_frac if scenario.sim.jitter_frac is not None else cal.jitter_frac
    noise = np.exp(jitter * ctx.rng("jitter").standard_normal((steps, chips), dtype=np.float32)) if jitter > 0 else 1.0

    # Per-layer FSDP/TP collectives are aggregated into one exposed event per pass (their per-layer
    # detail is the `layer_collectives` table), keeping events at a few per chip-step at any scale.
    model = scenario.model
    fwd_chip = bwd_chip = routing = expert_factor = None
    if cost.moe_layers:
        # the busiest expert group's chips compute more of their MoE layers (engine/model/moe.py)
        routing = plan_routing(model.experts, model.capacity_factor, par.expert, steps, ctx.rng("routing"),
                               dense=model.moe_dispatch == "dense")
        where = pod.chip_table  # slice-local torus coordinates of every chip
        expert_factor = routing.chip_factor(axis_index_of_chips(mesh["expert"], [where[a] for a in "xyz"]))
        extra_work = expert_factor - 1.0
        fwd_chip = fwd_s + comp.expert_forward_s * costs.work * extra_work
        bwd_chip = bwd_s + (comp.expert_fwd_bwd_s - comp.expert_forward_s) * costs.work * extra_work
    segments = costs.segments(noise, fwd_chip, bwd_chip)
    pp = _pipeline(scenario, pod, mesh, costs) if par.pipeline > 1 else None
    if pp is not None:
        segments[:4] = [Segment("bubble", pp.fill_s), segments[0], Segment("collective", costs.comm_forward_s + pp.send_s / 2),
                        segments[2], Segment("collective", costs.comm_backward_s + pp.send_s / 2), Segment("bubble", pp.drain_s)]  # fmt: skip
    idle = plan_idle(ctx, comp, segments)  # input waits, recompiles, stragglers, failures
    sample = plan_sample(scenario, pod, idle.segments, idle.facts.get("stragglers", ()))
    laid = assemble(idle.segments, steps, chips, detail=scenario.sim.trace, sample=None if sample is None else sample.chips,
                     on_events=on_events)
    chip_table = pa.table(pod.chip_table, schema=CHIPS_SCHEMA)

    replicas = scenario.batch_shards  # model replicas' worth of chips: each processes per_chip_batch
    extra_tables = {
        "memory_timeline": mem.timeline,
        # SPMD: every chip holds the same shard sizes, so every chip peaks alike
        "chip_memory": TABLES["extra_chip_memory"].table(
            {"chip": np.arange(chips, dtype=np.int32), "peak_bytes": np.full(chips, mem.peak_bytes)}
        ),
        "layer_collectives": comm.per_layer,
        **({"sampled_chips": sample.table()} if sample is not None else {}),
    }
    if expert_factor is not None:
        extra_tables["chip_expert_load"] = _expert_load_table(expert_factor, idle.steady_mask(steps))
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
        hardware_flops_per_step=comp.hardware_flops * (1.0 + costs.bubble_flops_frac) * par.tensor * replicas * tr.microbatches * par.context
        * idle.steady_mean(idle.work_scale),
        peak_flops_per_s_per_chip=chip.peak_flops_per_s(tr.precision),
        peak_hbm_bytes=mem.peak_bytes,
        hbm_capacity_bytes=mem.capacity_bytes,
        oom=mem.oom,
        hbm_breakdown_bytes=mem.breakdown_bytes,
        extra={
            "oom_detail": oom_detail(mem, costs.replan, costs.micro_batch, scenario.data_parallel, par.fsdp, tr.remat) if mem.oom else None,
            "hbm_usable_bytes": mem.usable_bytes,
            "hbm_source": "podscope",  # the built-in families' HBM is Podscope's model (engine/memory/hbm.py)
            "compute_source": "podscope",
            "hbm_peak_phase": mem.peak_phase,
            "hbm_recomputed_bytes": mem.recomputed_bytes,
            "mesh": mesh.describe(),
            "parallelism_strategy": scenario.parallelism.strategy,
            **run_assumptions(scenario),
            "exposed_layer_collective_s": costs.comm_forward_s + costs.comm_backward_s,
            **grad_extra,
            **idle_facts(idle, laid.step_kind, laid.steps, chips),
            **(_moe_facts(scenario, cost, comp, comm, routing, idle.steady_mask(steps)) if routing is not None else {}),
            **({"gradient_accumulation_steps": tr.microbatches} if tr.microbatches > 1 and par.pipeline == 1 else {}),
            **(_pipeline_facts(pp, mem) if pp is not None else {}),
            **_sharding_facts(scenario, costs),
        },
    )
    if xla_memory is not None:
        facts = _with_xla_memory(facts, xla_memory, mem, costs, scenario)
    trace = Trace(
        events=laid.events,
        steps=laid.steps,
        chips=chip_table,
        step_kind=laid.step_kind,
        chip_kind=laid.chip_kind,
        extra={**extra_tables, **idle.tables},
    )
    return RunResult(scenario=scenario, trace=trace, facts=facts)


def _with_xla_memory(facts: RunFacts, xla: XlaHbm, mem: MemoryPlan, costs: StepCosts, s: Scenario) -> RunFacts:
    """The run's HBM facts as the TPU compiler gave them (:class:`~engine.hlo.bundle.XlaHbm`)."""
    detail = breakdown = None
    if xla.oom is not None:
        # what would fit, by Podscope's model (XLA says only that this program does not)
        ideas = oom_detail(mem, costs.replan, costs.micro_batch, s.data_parallel, s.parallelism.fsdp, s.training.remat)["suggestions"]
        detail = xla_oom_detail(xla.oom, mem.usable_bytes / xla.devices_per_chip, ideas if mem.oom else [
            "Podscope's model says it fits, XLA does not: rematerialise (training.remat), shard the model states "
            "over more chips (parallelism.fsdp) or lower the per-chip batch, then run with --xla again"])  # fmt: skip
    if xla.memory is not None:
        args = xla.memory.argument_bytes * xla.devices_per_chip
        breakdown = {"params": args, "grads": 0.0, "optimizer": 0.0, "activations": 0.0,
                     "temporary": max(0.0, xla.peak_bytes_per_chip - args)}  # fmt: skip
    extra = {**facts.extra, "oom_detail": detail, "hbm_source": "xla", "hbm_podscope_peak_bytes": mem.peak_bytes,
             "hbm_podscope_oom": mem.oom, "hbm_xla_flags": dict(xla.xla_flags)}  # fmt: skip
    return replace(facts, peak_hbm_bytes=xla.peak_bytes_per_chip, oom=xla.oom is not None, hbm_breakdown_bytes=breakdown,
                   extra=extra)  # fmt: skip


def _pipeline(s: Scenario, pod: Pod, mesh: Mesh, costs: StepCosts) -> PipelinePlan:
    """Each chip's fill and drain bubble: stage ``k`` waits ``k`` slots for the fill (engine/model/pipeline.py)."""
    par = s.parallelism
    where = pod.chip_table
    stage = axis_index_of_chips(mesh["pipeline"], [where[a] for a in "xyz"])
    if s.pipeline_spans_slices:
        stage = where["slice"] * s.pipeline_in_slice + stage
    v = par.virtual_stages if par.pipeline_schedule == "interleaved" else 1
    slot_s = costs.bubble_s * v / (par.pipeline - 1)  # one microbatch through one stage's layers
    send_bytes = activation_send_bytes(s, costs.micro_batch)
    return plan_pipeline(stage, par.pipeline, s.training.microbatches, par.pipeline_schedule, v, slot_s, send_bytes,
                         costs.pipeline_send_s, s.pipeline_spans_slices)  # fmt: skip


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


def _expert_load_table(factor: np.ndarray, steady: np.ndarray) -> pa.Table:
    """Each chip's expert work over an even share ((steps, chips) ``factor``): steady-state mean and busiest step."""
    return TABLES["extra_chip_expert_load"].table({
        "chip": np.arange(factor.shape[1], dtype=np.int32),
        "mean_load_ratio": factor[steady].mean(axis=0),
        "max_load_ratio": factor.max(axis=0),
    })  # fmt: skip


def _moe_facts(s: Scenario, cost: ModelCost, comp: ComputeCost, comm, routing: RoutingPlan, steady: np.ndarray) -> dict:
    """Summary facts of a mixture-of-experts run: total vs active parameters, capacity, drops, imbalance, tiles."""
    m, par = s.model, s.parallelism
    per_param = 2 * WEIGHT_BYTES_PER_ELEMENT[s.training.weight_dtype] + optimizer_state_bytes_per_param(s.training.optimizer, s.training.optimizer_state)
    return {
        "params_total": cost.params,
        "params_active": cost.active_params_eff,
        "moe_experts": m.experts,
        "moe_experts_per_token": m.experts_per_token,
        "moe_layers": cost.moe_layers,
        "moe_capacity_factor": m.capacity_factor,
        "moe_dispatch": m.moe_dispatch,
        "moe_gmm_tiling": list(m.gmm_tiling) if m.moe_dispatch == "grouped" else None,
        "moe_expert_work_over_flops": comp.expert_work_over_flops,
        "moe_dropped_token_frac": float(routing.dropped_frac[steady].mean()),
        "moe_busiest_expert_over_mean": float(routing.busiest_over_mean[steady].mean()),
        "moe_busiest_group_factor": float(routing.group_factor[steady].max(axis=1).mean()),
        "expert_all_to_all_s": comm.all_to_all_s,
        # model states of this chip's experts (weights, gradients, optimizer), the Memory page's expert term
        "hbm_expert_weight_bytes": cost.expert_params / (par.fsdp * par.tensor * par.expert) * per_param,
    }


def _sharding_facts(s: Scenario, costs: StepCosts) -> dict:
    """Context parallelism, the ZeRO stage, the model states' dtypes and, under tensor parallelism, collective matmul."""
    par, tr, comm = s.parallelism, s.training, costs.comm
    out: dict = {}
    if costs.ring is not None:
        ring = costs.ring
        out.update({
            "context_parallel": ring.degree,
            "ring_block_bytes": ring.block_bytes,
            # per step: every microbatch's pass through the chip's layers
            "ring_bytes_per_step": ring.bytes_sent * costs.work,
            "ring_send_s": ring.send_s * costs.work,
            "ring_exposed_s": ring.exposed_s * costs.work,
            "hbm_ring_kv_buffer_bytes": max(ring.buffer_bytes),
            "context_grad_sync_s": comm.context_sync_s,
        })  # fmt: skip
    if par.fsdp_shard != "all":
        out.update({"fsdp_shard": par.fsdp_shard, "zero_weight_gather_s": comm.weight_gather_s,
                    "zero_grad_reduce_scatter_s": comm.fsdp_grad_sync_s})  # fmt: skip
    if tr.optimizer_state != "fp32":
        out["optimizer_state"] = tr.optimizer_state
    if tr.weight_dtype != "fp32":
        out["weight_dtype"] = tr.weight_dtype
    if tr.gradient_reduce_dtype != "compute":
        out["gradient_reduce_dtype"] = tr.gradient_reduce_dtype
    if par.tensor > 1:
        out["collective_matmul"] = par.collective_matmul
    return out
