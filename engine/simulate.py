"""Simulate a scenario's training steps on every chip, vectorised with numpy.

A step is an ordered list of :class:`Segment` s, each a duration for every
(step, chip) pair. Segments marked ``barrier`` start only when every chip has
reached them: the difference is charged to ``sync_wait``, which is how a
synchronous data-parallel step (TPUStrategy, pjit) makes fast chips wait for the
slowest. A final barrier closes each step. All steps and chips are laid out at
once with array arithmetic on integer nanoseconds, so events tile each chip's
timeline exactly; the only Python loop is over blocks of steps, to bound memory.

Mechanisms (input pipeline, recompilation, stragglers, failures, per-layer
collectives) each contribute segments or duration factors to the plan; this
module only assembles them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .calibration import Calibration, load_calibration
from .compute import step_compute
from .errors import SimulationError
from .idle import idle_facts, plan_idle
from .memory import OPTIMIZER_STATE_BYTES_PER_PARAM, MemoryPlan, hbm_plan, oom_detail
from .models import ModelCost, model_cost
from .interconnect import gradient_sync, mesh_gradient_sync, mesh_link_penalties, overlap_table
from .parallelism import plan_collectives, resolve_mesh, whole_torus_axes
from .scenario import ParameterServerSection, Scenario
from .topology import Pod, build_pod
from .trace import (
    CHIP_KIND_SCHEMA,
    CHIPS_SCHEMA,
    EVENT_KINDS,
    EVENTS_SCHEMA,
    KIND_CODE,
    STEP_KIND_SCHEMA,
    STEPS_SCHEMA,
    RunFacts,
    RunResult,
    Trace,
    events_batch,
    kind_array,
)
from .units import GB_BYTES, MAX_RUN_NS, NS_PER_S, seconds_to_ns

__all__ = ["Segment", "SimContext", "Assembled", "simulate", "assemble", "assemble_steps", "STEP_BLOCK"]

#: steps laid out per block; bounds peak memory at ~STEP_BLOCK x chips x segments x 8 bytes x a few.
#: Events are chip-major within a block, so a Timeline window reads whole blocks of the chips it
#: shows: 32 steps halved the rows read for 256 chips spread over the pod x 100 steps against 128
#: (Timeline p95, README Performance), for ~30% more for a few chips over all 1,000 steps.
STEP_BLOCK = 32
#: a summary-mode run lays out no events, so its block only bounds memory: larger, fewer numpy calls
SUMMARY_STEP_BLOCK = 128

#: bytes read + written per parameter by the optimizer update (fp32 master weights)
_UPDATE_BASE_BYTES_PER_PARAM = 4 + 4 + 4  # read weight and gradient, write weight


@dataclass(frozen=True)
class Segment:
    """One phase of a step: a duration in seconds broadcastable to (steps, chips)."""

    kind: str
    dur_s: np.ndarray | float
    barrier: bool = False




@dataclass(frozen=True)
class Assembled:
    """Laid-out steps: events (empty in summary mode), step boundaries, and exact aggregates by kind."""

    events: pa.Table
    steps: pa.Table
    step_kind: pa.Table
    chip_kind: pa.Table


def assemble(segments: list[Segment], steps: int, chips: int, detail: str = "full") -> Assembled:
    """Lay segments out on every chip's timeline.

    A segment's duration is a scalar, a (chips,) array, or a 2-D array whose first
    axis is steps ((steps, 1) or (steps, chips)). Zero-length events are dropped.
    Within a step, a chip's events are contiguous from the step start to its end.

    Parameters
    ----------
    detail
        ``"full"`` emits one row per event; ``"summary"`` emits no events, only the
        per-step and per-chip aggregates (for sweeps and very large pods).
    """
    seg_ns = [seconds_to_ns(seg.kind, seg.dur_s) for seg in segments]
    # A step never exceeds the sum of its segments' longest durations (barrier waits only
    # pad up to the slowest chip), so bounding that sum in float keeps every int64 sum exact.
    longest_step_ns = sum(float(ns.max()) for ns in seg_ns if ns.size)
    if longest_step_ns * steps >= MAX_RUN_NS:
        raise SimulationError(
            f"{steps} steps of up to {longest_step_ns / NS_PER_S:.3g} s overflow the trace clock "
            f"({MAX_RUN_NS / NS_PER_S:.3g} s per run): the model, batch or steps are implausibly large"
        )
    n_kinds = len(EVENT_KINDS)
    step_ns = np.zeros(steps, dtype=np.int64)
    step_kind_sum = np.zeros((steps, n_kinds), dtype=np.int64)
    step_kind_max = np.zeros((steps, n_kinds), dtype=np.int64)
    chip_kind_sum = np.zeros((n_kinds, chips), dtype=np.int64)
    blocks = []
    block = STEP_BLOCK if detail == "full" else SUMMARY_STEP_BLOCK
    for s0 in range(0, steps, block):
        s1 = min(steps, s0 + block)
        shape = (s1 - s0, chips)
        cursor = np.zeros(shape, dtype=np.int64)
        parts = []  # (kind_code, start_rel, dur), each (steps in block, chips)
        for seg, ns in zip(segments, seg_ns):
            dur = np.broadcast_to(ns[s0:s1] if ns.ndim == 2 else ns, shape)
            if seg.barrier:
                front = cursor.max(axis=1, keepdims=True)
                parts.append((KIND_CODE["sync_wait"], cursor, front - cursor))
                cursor = np.broadcast_to(front, shape)
            parts.append((KIND_CODE[seg.kind], cursor, dur))
            cursor = cursor + dur
        end = cursor.max(axis=1, keepdims=True)
        parts.append((KIND_CODE["sync_wait"], cursor, end - cursor))
        step_ns[s0:s1] = end[:, 0]
        # Exact per-chip totals by kind (a chip may have several events of one kind in a step).
        per_kind = np.zeros((n_kinds, *shape), dtype=np.int64)
        for code, _, dur in parts:
            per_kind[code] += dur
        step_kind_sum[s0:s1] = per_kind.sum(axis=2).T
        step_kind_max[s0:s1] = per_kind.max(axis=2).T
        chip_kind_sum += per_kind.sum(axis=1)
        if detail == "full":
            blocks.append((s0, s1, parts))
    step_start = np.concatenate([[0], np.cumsum(step_ns)[:-1]]).astype(np.int64)

    batches = []
    chip_ids = np.arange(chips, dtype=np.int32)
    for s0, s1, parts in blocks:
        n_steps = s1 - s0
        k = len(parts)
        # (chips, steps, parts) order within a block: each chip's events of the block are adjacent
        # and time-ordered, so DuckDB's row groups (~123k rows) each hold a few hundred chips, and a
        # timeline of a few chips over many steps reads a few row groups per block, not the table.
        starts = np.stack([np.broadcast_to(p[1], (n_steps, chips)).T for p in parts], axis=2)
        durs = np.stack([np.broadcast_to(p[2], (n_steps, chips)).T for p in parts], axis=2)
        codes = np.broadcast_to(np.array([p[0] for p in parts], dtype=np.int8), (chips, n_steps, k))
        keep = durs > 0
        step_col = np.broadcast_to(np.arange(s0, s1, dtype=np.int32)[None, :, None], (chips, n_steps, k))
        chip_col = np.broadcast_to(chip_ids[:, None, None], (chips, n_steps, k))
        abs_start = starts + step_start[None, s0:s1, None]
        batches.append(events_batch(chip_col[keep], step_col[keep], codes[keep], abs_start[keep], durs[keep]))
    events = pa.Table.from_batches(batches, schema=EVENTS_SCHEMA)
    steps_table = pa.table(
        {"step": np.arange(steps, dtype=np.int32), "start_ns": step_start, "step_ns": step_ns}, schema=STEPS_SCHEMA
    )
    sk_step, sk_kind = np.nonzero(step_kind_sum)
    step_kind = pa.table(
        [
            pa.array(sk_step.astype(np.int32)),
            kind_array(sk_kind),
            pa.array(step_kind_sum[sk_step, sk_kind]),
            pa.array(step_kind_max[sk_step, sk_kind]),
        ],
        schema=STEP_KIND_SCHEMA,
    )
    ck_kind, ck_chip = np.nonzero(chip_kind_sum)
    chip_kind = pa.table(
        [pa.array(ck_chip.astype(np.int32)), kind_array(ck_kind), pa.array(chip_kind_sum[ck_kind, ck_chip])],
        schema=CHIP_KIND_SCHEMA,
    )
    return Assembled(events=events, steps=steps_table, step_kind=step_kind, chip_kind=chip_kind)


def assemble_steps(segments: list[Segment], steps: int, chips: int) -> tuple[pa.Table, pa.Table]:
    """Full-detail layout; returns (events, steps). See :func:`assemble`."""
    out = assemble(segments, steps, chips)
    return out.events, out.steps


@dataclass(frozen=True)
class SimContext:
    """Everything a mechanism needs to contribute to a run, derived once from the scenario."""

    scenario: Scenario
    cal: Calibration
    pod: Pod
    cost: ModelCost

    @property
    def steps(self) -> int:
        return self.scenario.training.steps

    @property
    def chips(self) -> int:
        return self.pod.chips

    def rng(self, stream: str) -> np.random.Generator:
        """An independent random stream per mechanism, derived from the scenario's seed.

        Streams are keyed by name, so adding a mechanism never changes another's draws.
        """
        key = int.from_bytes(hashlib.sha256(stream.encode()).digest()[:8], "little")
        return np.random.default_rng([self.scenario.sim.seed, key])


def simulate(scenario: Scenario, calibration: Calibration | None = None) -> RunResult:
    """Simulate a scenario and return its trace tables and run facts.

    Deterministic for a given scenario (including ``sim.seed``) and calibration.
    """
    cal = calibration or load_calibration()
    if scenario.model.kind == "hlo":
        from .hlo.run import simulate_hlo  # the user's own program: engine/hlo/run.py

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

    flash = getattr(scenario.model, "attention", "standard") == "flash"
    comp = step_compute(cost, chip, cal, b, tr.precision, tr.remat, tensor=par.tensor, flash=flash)
    fwd_s = comp.forward_s
    bwd_s = comp.fwd_bwd_s - fwd_s
    mesh_sizes = {"data": scenario.data_parallel, "fsdp": par.fsdp, "tensor": par.tensor}
    mesh = resolve_mesh(pod.slice.shape, pod.slice.wrap, mesh_sizes, par.mapping)
    ps = par.parameter_server or ParameterServerSection()
    use_ps = par.strategy == "parameter_server"
    comm = plan_collectives(
        cost,
        mesh,
        fwd_compute_s=fwd_s,
        bwd_compute_s=bwd_s,
        per_chip_batch=b,
        precision=tr.precision,
        slices=pod.slices,
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
    )
    shard = par.fsdp * par.tensor
    dense_params = cost.params - (cost.sparse_params if use_ps else 0)
    update_bytes = dense_params / shard * (_UPDATE_BASE_BYTES_PER_PARAM + 2 * OPTIMIZER_STATE_BYTES_PER_PARAM[tr.optimizer])
    update_s = update_bytes / (chip.hbm_bytes_per_s * cal.hbm_efficiency)

    jitter = scenario.sim.jitter_frac if scenario.sim.jitter_frac is not None else cal.jitter_frac
    noise = np.exp(jitter * ctx.rng("jitter").standard_normal((steps, chips), dtype=np.float32)) if jitter > 0 else 1.0

    # Per-layer FSDP/TP collectives are aggregated into one exposed event per pass (their per-layer
    # detail is the `layer_collectives` table), keeping events at a few per chip-step at any scale.
    # Data-parallel gradient sync: on whole torus axes the interconnect model prices it (schedule,
    # bucketed overlap with the backward pass, link faults, per-link load); a `data` axis that splits
    # a torus axis keeps the mesh model's strided-ring estimate, with the same links' faults, one-way
    # links, overlap and link load laid on top (engine/interconnect.py mesh_gradient_sync).
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
        "chip_memory": pa.table({"chip": np.arange(chips, dtype=np.int32), "peak_bytes": np.full(chips, mem.peak_bytes)}),
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
