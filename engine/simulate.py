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
from .errors import SimulationError
from .collectives import all_reduce_time_s, dcn_all_reduce_time_s
from .compute import step_compute
from .memory import GRADIENT_BYTES_PER_PARAM, OPTIMIZER_STATE_BYTES_PER_PARAM, hbm_footprint
from .models import ModelCost, model_cost
from .scenario import Scenario
from .topology import Pod, build_pod
from .trace import CHIPS_SCHEMA, KIND_CODE, STEPS_SCHEMA, RunFacts, RunResult, Trace, events_batch
from .units import NS_PER_S

__all__ = ["Segment", "SimContext", "simulate", "assemble_steps", "STEP_BLOCK"]

#: steps laid out per block; bounds peak memory at ~STEP_BLOCK x chips x segments x 8 bytes x a few
STEP_BLOCK = 128

#: bytes read + written per parameter by the optimizer update (fp32 master weights)
_UPDATE_BASE_BYTES_PER_PARAM = 4 + 4 + 4  # read weight and gradient, write weight


@dataclass(frozen=True)
class Segment:
    """One phase of a step: a duration in seconds broadcastable to (steps, chips)."""

    kind: str
    dur_s: np.ndarray | float
    barrier: bool = False


#: largest run the int64 nanosecond clock holds, with headroom for sums inside a step (~146 years)
MAX_RUN_NS = 2**62


def _to_ns(kind: str, dur_s: np.ndarray | float) -> np.ndarray:
    ns = np.asarray(dur_s, dtype=np.float64) * NS_PER_S
    # Absurd sizes validate field by field but overflow int64 nanoseconds; casting would wrap silently.
    if not np.all(np.isfinite(ns)) or np.any(ns < 0) or np.any(ns >= MAX_RUN_NS):
        worst = float(np.nanmax(np.abs(ns))) / NS_PER_S if np.any(~np.isnan(ns)) else float("nan")
        raise SimulationError(
            f"a {kind!r} phase lasts {worst:.3g} s (or is not a finite non-negative time); trace times must stay below "
            f"{MAX_RUN_NS / NS_PER_S:.3g} s per run: the model, batch or steps are implausibly large"
        )
    return np.rint(ns).astype(np.int64)


def assemble_steps(segments: list[Segment], steps: int, chips: int) -> tuple[pa.Table, pa.Table]:
    """Lay segments out on every chip's timeline; returns (events, steps) tables.

    A segment's duration is a scalar, a (chips,) array, or a 2-D array whose first
    axis is steps ((steps, 1) or (steps, chips)). Zero-length events are dropped.
    Within a step, a chip's events are contiguous from the step start to its end.
    """
    seg_ns = [_to_ns(seg.kind, seg.dur_s) for seg in segments]
    # A step never exceeds the sum of its segments' longest durations (barrier waits only
    # pad up to the slowest chip), so bounding that sum in float keeps every int64 sum exact.
    longest_step_ns = sum(float(ns.max()) for ns in seg_ns if ns.size)
    if longest_step_ns * steps >= MAX_RUN_NS:
        raise SimulationError(
            f"{steps} steps of up to {longest_step_ns / NS_PER_S:.3g} s overflow the trace clock "
            f"({MAX_RUN_NS / NS_PER_S:.3g} s per run): the model, batch or steps are implausibly large"
        )
    step_ns = np.zeros(steps, dtype=np.int64)
    # First pass: relative times within each step, per block, to find step lengths.
    blocks = []
    for s0 in range(0, steps, STEP_BLOCK):
        s1 = min(steps, s0 + STEP_BLOCK)
        shape = (s1 - s0, chips)
        cursor = np.zeros(shape, dtype=np.int64)
        parts = []  # (kind_code, start_rel, dur)
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
        blocks.append((s0, s1, parts))
    step_start = np.concatenate([[0], np.cumsum(step_ns)[:-1]]).astype(np.int64)

    batches = []
    chip_ids = np.arange(chips, dtype=np.int32)
    for s0, s1, parts in blocks:
        n_steps = s1 - s0
        k = len(parts)
        # (steps, chips, parts) order: each chip's events of a step are adjacent and time-ordered.
        starts = np.stack([np.broadcast_to(p[1], (n_steps, chips)) for p in parts], axis=2)
        durs = np.stack([np.broadcast_to(p[2], (n_steps, chips)) for p in parts], axis=2)
        codes = np.broadcast_to(np.array([p[0] for p in parts], dtype=np.int8), (n_steps, chips, k))
        keep = durs > 0
        step_col = np.broadcast_to(np.arange(s0, s1, dtype=np.int32)[:, None, None], (n_steps, chips, k))
        chip_col = np.broadcast_to(chip_ids[None, :, None], (n_steps, chips, k))
        abs_start = starts + step_start[s0:s1, None, None]
        batches.append(events_batch(chip_col[keep], step_col[keep], codes[keep], abs_start[keep], durs[keep]))
    events = pa.Table.from_batches(batches)
    steps_table = pa.table(
        {"step": np.arange(steps, dtype=np.int32), "start_ns": step_start, "step_ns": step_ns}, schema=STEPS_SCHEMA
    )
    return events, steps_table


def _gradient_sync_s(pod: Pod, grad_bytes_per_chip: float, cal: Calibration) -> float:
    """Exposed gradient all-reduce: over all torus axes, then across slices over DCN."""
    link = pod.chip.ici_link_bytes_per_s * cal.ici_efficiency
    ici_s, _ = all_reduce_time_s(grad_bytes_per_chip, pod.slice.shape, pod.slice.wrap, link, cal.ici_hop_latency_s)
    dcn_s = dcn_all_reduce_time_s(
        grad_bytes_per_chip / pod.chips_per_slice,
        pod.slices,
        min(pod.chip.chips_per_host, pod.chips_per_slice),
        pod.chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency,
        cal.dcn_latency_s,
    )
    return ici_s + dcn_s


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

    comp = step_compute(cost, chip, cal, b, tr.precision, tr.remat, tensor=par.tensor)
    shard = par.fsdp * par.tensor
    grad_bytes = cost.params * GRADIENT_BYTES_PER_PARAM / par.tensor
    sync_s = _gradient_sync_s(pod, grad_bytes, cal)
    update_bytes = cost.params / shard * (_UPDATE_BASE_BYTES_PER_PARAM + 2 * OPTIMIZER_STATE_BYTES_PER_PARAM[tr.optimizer])
    update_s = update_bytes / (chip.hbm_bytes_per_s * cal.hbm_efficiency)

    jitter = scenario.sim.jitter_frac if scenario.sim.jitter_frac is not None else cal.jitter_frac
    noise = np.exp(jitter * ctx.rng("jitter").standard_normal((steps, chips), dtype=np.float32)) if jitter > 0 else 1.0

    segments = [
        Segment("compute", comp.fwd_bwd_s * noise),
        Segment("collective", sync_s, barrier=True),
        Segment("compute", update_s),
        Segment("other", cal.step_overhead_s),
    ]
    events, steps_table = assemble_steps(segments, steps, chips)
    chip_table = pa.table(pod.chip_table, schema=CHIPS_SCHEMA)

    mem = hbm_footprint(
        cost,
        per_chip_batch=b,
        precision=tr.precision,
        optimizer=tr.optimizer,
        remat=tr.remat,
        fsdp=par.fsdp,
        tensor=par.tensor,
        capacity_bytes=chip.hbm_bytes,
    )
    replicas = scenario.batch_shards  # model replicas' worth of chips: each processes per_chip_batch
    facts = RunFacts(
        chip=chip.key,
        chips=chips,
        hosts=pod.hosts,
        slices=pod.slices,
        topology=scenario.pod.topology,
        steps=steps,
        params=cost.params,
        samples_per_step=tr.global_batch,
        tokens_per_step=tr.global_batch * cost.tokens_per_sample if cost.tokens_per_sample else None,
        model_flops_per_step=cost.train_flops_per_sample * tr.global_batch,
        hardware_flops_per_step=comp.hardware_flops * par.tensor * replicas,
        peak_flops_per_s_per_chip=chip.peak_flops_per_s(tr.precision),
        peak_hbm_bytes=mem.peak_bytes,
        hbm_capacity_bytes=mem.capacity_bytes,
        oom=mem.oom,
        hbm_breakdown_bytes=mem.breakdown_bytes,
    )
    return RunResult(scenario=scenario, trace=Trace(events=events, steps=steps_table, chips=chip_table), facts=facts)
