"""Why chips sit idle: combine input pipeline, compilation, stragglers and failures into a step plan.

:func:`plan_idle` turns the scenario's ``[input]``, ``[compile]``,
``[stragglers]`` and ``[failures]`` sections into the ordered segments of every
step, so :mod:`engine.simulate` only assembles them. Each chip's step is, in order:

``input_wait`` (its host's batch is late) -> ``recompile`` (new shape signature)
-> ``compute`` (forward + backward, x straggler factor) -> ``input_wait`` (for
another host's late batch) -> barrier ->
``collective`` -> ``compute`` (update) -> ``other`` (step overhead) -> barrier ->
``other`` (checkpoint write) -> barrier -> ``other`` (restart + restore) ->
``recompile`` (after restart) -> ``other`` (re-executed lost work).

Attribution is exclusive, by this priority (after XProf's step-time breakdown,
where time waiting on the host outranks device work): a chip waiting for its
host is ``input_wait``; a chip idle at the first barrier because *another*
host's batch was late is also ``input_wait`` (up to how much later that host
was); only the remaining barrier wait, for slower chips, is ``sync_wait``.
Fault recovery and checkpointing are ``other`` except the recompile they force.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..convergence import plan_convergence
from ..memory.states import optimizer_state_bytes_per_param
from ..model.analytic import scenario_compute
from ..model.compute import PASSES_BY_REMAT, ComputeCost
from ..model.models import model_cost
from ..model.step import Segment, SimContext, StepCursor
from ..units import NS_PER_S, WEIGHT_BYTES_PER_ELEMENT
from .compilation import COMPILES, eager_fwd_bwd_s, load_compile_cost, plan_compiles, step_signatures
from .failures import (
    FailurePlan,
    FailureSection,
    checkpoint_steps,
    checkpoint_write_s,
    expected_goodput,
    failure_rate_per_s,
    plan_failures,
    young_interval_s,
)
from .input_pipeline import run_input_queue, step_lengths_s
from .stragglers import straggler_factors

__all__ = ["IdlePlan", "plan_idle", "idle_facts", "default_checkpoint_bytes"]

#: a chip is named a straggler when its compute factor exceeds 1 by more than this
STRAGGLER_MIN_SLOWDOWN = 0.01


@dataclass(frozen=True)
class IdlePlan:
    """Segments of every step, extra tables, and what the run lost."""

    segments: list[Segment]
    tables: dict[str, pa.Table]
    badput_s: float  # wall seconds that did not advance training
    facts: dict[str, Any]
    special_steps: np.ndarray  # steps holding a compile, checkpoint or failure (not steady state)
    # Per-step work relative to the scenario's nominal shape (partial batches, variable sequence
    # lengths): model FLOPs, tokens and samples actually executed. Ones when shapes are fixed.
    work_scale: np.ndarray | None = None
    token_scale: np.ndarray | None = None
    sample_scale: np.ndarray | None = None

    def steady_mask(self, steps: int) -> np.ndarray:
        """(steps,) True at the steady-state steps; all True if none is steady."""
        steady = np.ones(steps, dtype=bool)
        steady[self.special_steps] = False
        return steady if steady.any() else np.ones(steps, dtype=bool)

    def steady_mean(self, per_step: np.ndarray | None) -> float:
        """Mean of a per-step value over steady-state steps (all steps if none is steady)."""
        if per_step is None:
            return 1.0
        return float(per_step[self.steady_mask(len(per_step))].mean())


def _fwd_bwd_for(ctx: SimContext, comp: ComputeCost, jit: bool) -> Callable[[int, int], float]:
    """Seconds of forward + backward at a (per-chip batch, seq) shape, jitted or eager."""
    s = ctx.scenario
    tr = s.training
    params = load_compile_cost()
    default_seq = ctx.cost.tokens_per_sample or 0
    passes = PASSES_BY_REMAT.get(tr.remat, 3.0)

    def at(batch: int, seq: int) -> float:
        if batch == s.per_chip_batch and seq == default_seq:
            c = comp
            cost = ctx.cost
        else:
            # the same pass as ``comp``: one microbatch (comp is one of ``microbatches``), the attention
            # kernel the model picks at this length, the scenario's tensor / expert / context split
            shaped = s.model_copy(update={"model": s.model.model_copy(update={"seq_len": seq})}) if seq else s
            cost = model_cost(shaped.model) if seq else ctx.cost
            c = scenario_compute(shaped, cost, ctx.cal, -(-batch // tr.microbatches), ctx.pod.chip)
        if jit:
            return c.fwd_bwd_s
        return eager_fwd_bwd_s(c.matmul_s, c.memory_s, float(cost.ops.launches.sum()) * passes, params)

    return at


def _split_at_first_barrier(base: list[Segment]) -> tuple[list[Segment], list[Segment]]:
    for i, seg in enumerate(base):
        if seg.barrier:
            return base[:i], base[i:]
    return list(base), []


def _after_barrier_s(post: list[Segment], steps: int, chips: int) -> np.ndarray:
    """(steps,) seconds from the first barrier to the step end, laid out as the assembler does."""
    cursor = StepCursor(np.zeros((steps, 1)))
    for seg in post:
        cursor.place(seg, np.broadcast_to(np.asarray(seg.dur_s, dtype=np.float64), (steps, chips)))
    return cursor.close()[1][:, 0]


def default_checkpoint_bytes(params: int, training: Any) -> float:
    """A checkpoint's bytes when ``[failures]`` gives none: the stored weights and the optimizer state."""
    return params * (WEIGHT_BYTES_PER_ELEMENT[training.weight_dtype]
                     + optimizer_state_bytes_per_param(training.optimizer, training.optimizer_state))  # fmt: skip


def plan_idle(ctx: SimContext, comp: ComputeCost, base: list[Segment]) -> IdlePlan:
    """Wrap a step's base segments with the idle-time mechanisms.

    Parameters
    ----------
    ctx
        The run's :class:`~engine.model.step.SimContext`.
    comp
        Compute of one chip at the scenario's shape (jitted), as used by ``base``.
    base
        The step's device work as :class:`~engine.model.step.Segment` s. Contract:
        the ``compute`` before the first barrier is the forward/backward pass (it is
        rescaled per step to the step's input shape); every ``compute`` segment is
        multiplied by the chip's straggler factor.

    Returns
    -------
    IdlePlan
        ``segments`` ready for :func:`~engine.model.step.assemble`.
    """
    s = ctx.scenario
    tr = s.training
    steps, chips = ctx.steps, ctx.chips
    host_of_chip = ctx.pod.chip_table["host"]
    factors = straggler_factors(s.stragglers, host_of_chip, ctx.rng("stragglers"))

    cc = s.compile
    shape_factor = np.ones((steps, 1))
    compile_s = np.zeros(steps)
    program_compile_s = 0.0
    compiles = COMPILES.empty()
    signatures: list[str] = []
    if cc is not None:
        batch, seq = step_signatures(
            cc,
            steps=steps,
            per_chip_batch=s.per_chip_batch,
            batch_shards=s.batch_shards,
            global_batch=tr.global_batch,
            seq_len=ctx.cost.tokens_per_sample,
            dataset_samples=s.input.dataset_samples if s.input is not None else None,
            rng=ctx.rng("shapes"),
        )
        plan = plan_compiles(
            cc,
            batch=batch,
            seq=seq,
            fwd_bwd_for=_fwd_bwd_for(ctx, comp, cc.jit),
            program_ops=len(ctx.cost.ops.names),
            chips=chips,
            params=load_compile_cost(),
        )
        if comp.fwd_bwd_s > 0:
            shape_factor = (plan.fwd_bwd_s / comp.fwd_bwd_s)[:, None]
        compile_s, program_compile_s = plan.compile_s, plan.program_compile_s
        compiles, signatures = plan.compiles, plan.signatures

    work_scale = token_scale = sample_scale = None
    if cc is not None:
        work_scale, token_scale, sample_scale = _work_scales(ctx, batch, seq)
    rescale = cc is not None or s.stragglers is not None

    def scaled(seg: Segment, shape: bool) -> Segment:
        if seg.kind != "compute" or not rescale:
            return seg
        dur = np.asarray(seg.dur_s, dtype=np.float64)
        # scalar / (chips,) stay 1-D: the assembler reads any 2-D duration as (steps, ...)
        dur = dur * factors if dur.ndim < 2 else dur * factors[None, :]
        return Segment(seg.kind, dur * shape_factor if shape else dur, seg.barrier)

    head, tail = _split_at_first_barrier(base)
    head = [scaled(seg, shape=True) for seg in head]
    tail = [scaled(seg, shape=False) for seg in tail]

    fl = s.failures
    ckpt_bytes = default_checkpoint_bytes(ctx.cost.params, tr)
    ckpt_s = np.zeros(steps)
    if fl is not None:
        size = fl.checkpoint_bytes if fl.checkpoint_bytes is not None else ckpt_bytes
        ckpt_s = np.where(checkpoint_steps(fl, steps), checkpoint_write_s(fl, size, ctx.pod.hosts), 0.0)
        tail.append(Segment("other", ckpt_s[:, None], barrier=True))

    if s.input is not None or fl is not None:  # only the queue and lost work need step lengths up front
        pre = np.broadcast_to(compile_s[:, None], (steps, chips)).copy()  # each chip's work before the first barrier
        for seg in head:
            pre += np.broadcast_to(np.asarray(seg.dur_s, dtype=np.float64), (steps, chips))
        post = _after_barrier_s(tail, steps, chips)

    segments: list[Segment] = []
    input_facts: dict[str, Any] = {}
    peer: list[Segment] = []
    if s.input is not None:
        q = run_input_queue(
            s.input,
            global_batch=tr.global_batch,
            hosts=ctx.pod.hosts,
            host_of_chip=host_of_chip,
            pre_s=pre,
            post_s=post,
            rng=ctx.rng("input"),
        )
        own = q.wait_s[:, host_of_chip]
        segments.append(Segment("input_wait", own))
        step_s = q.step_s
        # Priority: a chip idle at the first barrier because another host's batch was late
        # is waiting on input, not on a slow peer. Up to (latest host's wait - own wait) of
        # its barrier slack becomes input_wait; the rest stays sync_wait.
        slack = q.front_s[:, None] - (own + pre)
        late = q.wait_s.max(axis=1, keepdims=True) - own
        peer = [Segment("input_wait", np.clip(np.minimum(slack, late), 0.0, None))]
        input_facts = {"input_batch_s": float(np.median(q.produce_s))}
    elif fl is not None:
        step_s = step_lengths_s(pre, post)
    else:
        step_s = np.zeros(steps)  # unused: no failures to cost
    if cc is not None:
        segments.append(Segment("recompile", compile_s[:, None]))
    segments += head + peer + tail

    fail = plan_failures(
        fl,
        step_s=step_s,
        chips=chips,
        hosts=ctx.pod.hosts,
        default_checkpoint_bytes=ckpt_bytes,
        program_compile_s=program_compile_s,
        rng=ctx.rng("failures"),
    )
    if fl is not None:
        segments += [
            Segment("other", fail.restart_s[:, None], barrier=True),
            Segment("recompile", fail.recompile_s[:, None]),
            Segment("other", fail.lost_s[:, None]),
        ]
        if program_compile_s > 0 and len(fail.failed_steps):
            restart_rows = COMPILES.table(
                {
                    "step": fail.failed_steps.astype(np.int32),
                    "signature": [signatures[i] for i in fail.failed_steps],
                    "cause": ["restart"] * len(fail.failed_steps),
                    "compile_ns": np.full(len(fail.failed_steps), round(program_compile_s * NS_PER_S), dtype=np.int64),
                }
            )
            compiles = pa.concat_tables([compiles, restart_rows]).sort_by([("step", "ascending"), ("cause", "ascending")])

    total_compile_s = float(compile_s.sum() + fail.recompile_s.sum())
    badput_s = total_compile_s + float(ckpt_s.sum() + fail.restart_s.sum() + fail.lost_s.sum())
    stragglers = np.flatnonzero(factors > 1.0 + STRAGGLER_MIN_SLOWDOWN)
    facts = {
        "recompiles": max(compiles.num_rows - 1, 0),
        "compile_s": total_compile_s,
        "stragglers": [int(c) for c in stragglers],
        "straggler_slowdown_max": float(factors.max()),
        "failures": int(len(fail.failed_steps)),
        "lost_steps": fail.lost_steps,
        "checkpoint_s": float(ckpt_s.sum()),
        **input_facts,
    }
    if s.convergence is not None:
        plan = plan_convergence(
            s.convergence, global_batch=tr.global_batch, tokens_per_sample=ctx.cost.tokens_per_sample, chips=chips,
            hosts=ctx.pod.hosts, compile_s=float(compile_s.sum()), failures=fl, checkpoint_bytes=ckpt_bytes, cost=s.cost,
        )  # fmt: skip
        facts["time_to_train_inputs"] = plan.to_dict()
    if fl is not None:
        facts |= _checkpoint_facts(fl, step_s, ckpt_s, fail, program_compile_s, ckpt_bytes, ctx.pod.hosts, chips)
    special = np.flatnonzero((compile_s > 0) | (ckpt_s > 0) | (fail.restart_s > 0))
    return IdlePlan(
        segments=segments,
        # no [compile] section: compilation is not modelled, so there is no log (not an empty one)
        tables={"compiles": compiles} if cc is not None or compiles.num_rows else {},
        badput_s=badput_s,
        facts=facts,
        special_steps=special,
        work_scale=work_scale,
        token_scale=token_scale,
        sample_scale=sample_scale,
    )


def _work_scales(ctx: SimContext, batch: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Model FLOPs, tokens and samples of each step's executed shape, relative to the nominal shape.

    MFU counts the FLOPs of the shape a step executes (padding included, as MaxText
    does); attention makes FLOPs per token grow with the sequence, hence a cost per
    distinct length rather than a token ratio.
    """
    s = ctx.scenario
    nominal_b = float(s.per_chip_batch)
    nominal_seq = ctx.cost.tokens_per_sample
    sample_scale = batch / nominal_b
    if not nominal_seq:
        return sample_scale, sample_scale, sample_scale
    lengths, inverse = np.unique(seq, return_inverse=True)
    per_sample = np.array(
        [
            ctx.cost.train_flops_per_sample
            if length == nominal_seq
            else model_cost(s.model.model_copy(update={"seq_len": int(length)})).train_flops_per_sample
            for length in lengths
        ]
    )[inverse]
    work_scale = batch * per_sample / (nominal_b * ctx.cost.train_flops_per_sample)
    token_scale = batch * seq / (nominal_b * nominal_seq)
    return work_scale, token_scale, sample_scale


def _checkpoint_facts(fl: FailureSection, step_s: np.ndarray, ckpt_s: np.ndarray, fail: FailurePlan, compile_s: float,
                      default_bytes: float, hosts: int, chips: int) -> dict[str, Any]:  # fmt: skip
    """Long-run view of the checkpoint policy: Young's optimal interval and the expected goodput."""
    size = fl.checkpoint_bytes if fl.checkpoint_bytes is not None else default_bytes
    write_s = checkpoint_write_s(fl, size, hosts)
    rate = failure_rate_per_s(fl, chips, hosts)
    step = float(np.median(step_s)) if len(step_s) else 0.0
    recovery_s = fl.restart_s + size / (hosts * fl.storage_read_bytes_per_s_per_host) + compile_s
    opt_s = young_interval_s(write_s, rate)
    out: dict[str, Any] = {"job_mtbf_hours": (1.0 / rate / 3600.0) if rate > 0 else None}
    out["checkpoint_every_steps_optimal"] = max(1, round(opt_s / step)) if opt_s is not None and step > 0 else None
    if fl.checkpoint_every_steps and step > 0:
        out["goodput_expected"] = expected_goodput(fl.checkpoint_every_steps * step, write_s, recovery_s, rate)
        if out["checkpoint_every_steps_optimal"]:
            out["checkpoint_interval_ratio"] = fl.checkpoint_every_steps / out["checkpoint_every_steps_optimal"]
    return out


def idle_facts(plan: IdlePlan, step_kind: pa.Table, steps_table: pa.Table, chips: int) -> dict[str, Any]:
    """Run facts measured on the assembled steps: input-wait share and goodput.

    ``input_wait_frac`` is the share of chip time spent in ``input_wait`` over the
    steady-state steps (no compile, checkpoint or failure), i.e. of step time, so a
    long one-off compile does not hide an input-bound step. If every step is
    special, all steps count. Read from the per-step aggregates, so it costs the same
    with or without event rows (summary mode).
    """
    step_ns = steps_table.column("step_ns").to_numpy()
    steady = np.ones(len(step_ns), dtype=bool)
    steady[plan.special_steps] = False
    if not steady.any():
        steady[:] = True
    sk_step = step_kind.column("step").to_numpy()
    is_wait = pc.equal(step_kind.column("kind").cast(pa.string()), "input_wait").to_numpy(zero_copy_only=False)
    wait_ns = float(step_kind.column("chip_ns").to_numpy()[is_wait & steady[sk_step]].sum())
    steady_chip_ns = float(step_ns[steady].sum()) * chips
    wall_s = float(step_ns.sum()) / NS_PER_S
    return {
        **plan.facts,
        "input_wait_frac": wait_ns / steady_chip_ns if steady_chip_ns else 0.0,
        "goodput": max(0.0, 1.0 - plan.badput_s / wall_s) if wall_s else None,
    }
