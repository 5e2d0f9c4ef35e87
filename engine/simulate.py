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

from .analytic import step_costs
from .assumptions import run_assumptions
from .calibration import Calibration, load_calibration
from .comm import overlap_table
from .hlo.run import simulate_hlo
from .idle import idle_facts, plan_idle
from .memory import oom_detail
from .models import model_cost
from .scenario import Scenario
from .step import SimContext, assemble
from .topology import build_pod
from .trace import CHIPS_SCHEMA, TABLES, RunFacts, RunResult, Trace
from .units import NS_PER_S

__all__ = ["simulate"]


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

    costs = step_costs(scenario, cal, pod=pod, cost=cost)
    comp, comm, sync, mesh, mem = costs.comp, costs.comm, costs.sync, costs.mesh, costs.mem
    fwd_s, bwd_s = costs.forward_s, costs.backward_s

    jitter = scenario.sim.jitter_frac if scenario.sim.jitter_frac is not None else cal.jitter_frac
    noise = np.exp(jitter * ctx.rng("jitter").standard_normal((steps, chips), dtype=np.float32)) if jitter > 0 else 1.0

    # Per-layer FSDP/TP collectives are aggregated into one exposed event per pass (their per-layer
    # detail is the `layer_collectives` table), keeping events at a few per chip-step at any scale.
    segments = costs.segments(noise)
    idle = plan_idle(ctx, comp, segments)  # input waits, recompiles, stragglers, failures
    laid = assemble(idle.segments, steps, chips, detail=scenario.sim.trace)
    chip_table = pa.table(pod.chip_table, schema=CHIPS_SCHEMA)

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
            "oom_detail": oom_detail(mem, costs.replan, b, scenario.data_parallel, par.fsdp, tr.remat) if mem.oom else None,
            "hbm_usable_bytes": mem.usable_bytes,
            "hbm_peak_phase": mem.peak_phase,
            "mesh": mesh.describe(),
            "parallelism_strategy": scenario.parallelism.strategy,
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
