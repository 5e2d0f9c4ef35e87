"""Steps to target -> wall time, chip-hours and dollars.

A job's time to train is

    compile + steps x step / goodput + evaluations,

``steps`` from the convergence plan, ``step`` the steady-state step time, and ``goodput`` the
long-run share of wall time that advances training under the scenario's checkpoints and
failures (:func:`engine.idle.failures.expected_goodput`: checkpoint writes, restarts, restores,
recompiles and re-executed work, first order). Without a ``[failures]`` section goodput is 1.
An evaluation costs ``eval_s``, or ``eval_samples`` forward passes at one third of a training
sample's time (forward ~2N FLOPs per token of a training step's ~6N: Kaplan et al. 2020,
arXiv:2001.08361, sec. 2.1). ``compile`` is what the simulated run compiled.

The inputs are gathered once per run (:func:`plan_convergence`, JSON-able, stored in the run's
facts) so that the summary and the planner evaluate the same formula at their own step time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..idle.failures import FailureSection, checkpoint_write_s, expected_goodput, failure_rate_per_s
from .critical_batch import CriticalBatch
from .section import ConvergenceSection, CostSection
from .tasks import load_tasks

__all__ = ["ConvergencePlan", "TimeToTrain", "plan_convergence", "time_to_train", "FORWARD_SHARE_OF_STEP"]

_HOUR_S = 3600.0
#: forward pass share of a training step's work: 2N of 6N FLOPs per token (Kaplan et al. 2020, sec. 2.1)
FORWARD_SHARE_OF_STEP = 1.0 / 3.0


@dataclass(frozen=True)
class ConvergencePlan:
    """Everything but the step time that a job's time to train depends on (seconds, samples, steps)."""

    basis: str  # the task key, "critical batch" (the user's fit), "samples" or "tokens" (a budget)
    global_batch: int
    samples_to_target: float
    steps_to_target: int
    steps_range: tuple[int, int] | None  # the task fit's 80% range on the steps; None: exact or unknown
    evals: int
    eval_s: float | None  # seconds per evaluation, when given in seconds
    eval_samples: float | None  # samples per evaluation, when given in samples
    compile_s: float
    checkpoint_write_s: float
    checkpoint_every_steps: int
    failure_rate_per_s: float
    recovery_s: float
    chips: int
    usd_per_chip_hour: float | None
    b_crit_samples: float | None = None  # the critical batch, when the target comes from a fit (not a budget)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["steps_range"] = list(self.steps_range) if self.steps_range else None
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ConvergencePlan":
        d = dict(d)
        d["steps_range"] = tuple(d["steps_range"]) if d.get("steps_range") else None
        return cls(**d)


@dataclass(frozen=True)
class TimeToTrain:
    """A job's time to train, its parts (seconds), chip-hours and cost (None when unpriced)."""

    total_s: float
    train_s: float
    eval_s: float
    compile_s: float
    checkpoint_and_failures_s: float
    chip_hours: float
    cost_usd: float | None


def _samples(c: ConvergenceSection, batch: int, tokens_per_sample: int | None) -> tuple[str, float, float | None, float | None]:
    """(basis, samples to target, conformal q of the steps or None, B_crit or None)."""
    if c.task is not None:
        task = load_tasks()[c.task]
        return c.task, task.model.samples_to_target(batch), task.loo_q, task.model.b_crit_samples
    if c.e_min_samples is not None and c.b_crit_samples is not None:
        fit = CriticalBatch(c.e_min_samples, c.b_crit_samples)
        return "critical batch", fit.samples_to_target(batch), None, fit.b_crit_samples
    if c.samples is not None:
        return "samples", c.samples, None, None
    assert c.tokens is not None and tokens_per_sample, "validated by convergence_problems"
    return "tokens", c.tokens / tokens_per_sample, None, None


def plan_convergence(
    section: ConvergenceSection,
    *,
    global_batch: int,
    tokens_per_sample: int | None,
    chips: int,
    hosts: int,
    compile_s: float = 0.0,
    failures: FailureSection | None = None,
    checkpoint_bytes: float = 0.0,
    cost: CostSection | None = None,
) -> ConvergencePlan:
    """The steps, evaluations and overheads of training a validated scenario to its target.

    Parameters
    ----------
    checkpoint_bytes
        The checkpoint's size when ``failures.checkpoint_bytes`` is not given (the engine's default:
        stored weights and optimizer state).
    compile_s
        Compile seconds the job pays once (what the simulated run compiled).
    """
    basis, samples, q, b_crit = _samples(section, global_batch, tokens_per_sample)
    first = section.eval_first_samples
    steps_range = None
    if q is not None:  # the fit's range, before the first evaluation bounds it from below
        raw = max(1, math.ceil(samples / global_batch))
        low, high = max(1, math.floor(raw * math.exp(-q))), math.ceil(raw * math.exp(q))
        if first is not None:
            floor_steps = math.ceil(first / global_batch)
            low, high = max(low, floor_steps), max(high, floor_steps)
        steps_range = (low, high)
    if first is not None:  # the job stops at an evaluation that reaches the target: none comes before the first
        samples = max(samples, first)
    steps = max(1, math.ceil(samples / global_batch))
    evals = 0
    if section.eval_every_samples and first is not None:
        evals = 1 + math.floor((samples - first) / section.eval_every_samples)
    elif section.eval_every_samples:
        evals = math.ceil(samples / section.eval_every_samples)
    write_s = rate = recovery_s = 0.0
    every = 0
    if failures is not None:
        size = failures.checkpoint_bytes if failures.checkpoint_bytes is not None else checkpoint_bytes
        write_s = checkpoint_write_s(failures, size, hosts)
        every = failures.checkpoint_every_steps
        rate = failure_rate_per_s(failures, chips, hosts)
        restore_s = size / (hosts * failures.storage_read_bytes_per_s_per_host) if every else 0.0
        recovery_s = failures.restart_s + restore_s + compile_s
    return ConvergencePlan(
        basis=basis, global_batch=global_batch, samples_to_target=float(samples), steps_to_target=steps,
        steps_range=steps_range, evals=evals, eval_s=section.eval_s, eval_samples=section.eval_samples,
        compile_s=float(compile_s), checkpoint_write_s=write_s, checkpoint_every_steps=every,
        failure_rate_per_s=rate, recovery_s=recovery_s, chips=chips,
        usd_per_chip_hour=cost.usd_per_chip_hour if cost is not None else None, b_crit_samples=b_crit,
    )  # fmt: skip


def time_to_train(plan: ConvergencePlan, step_s: float, steps: int | None = None) -> TimeToTrain:
    """Wall time of ``steps`` (default: the plan's steps to target) at ``step_s`` seconds per steady step.

    Raises
    ------
    ValueError
        If ``step_s`` is not positive.
    """
    if not step_s > 0:
        raise ValueError(f"step time must be > 0 s, got {step_s}")
    n = plan.steps_to_target if steps is None else steps
    train_s = n * step_s
    if plan.checkpoint_every_steps:
        interval_s, write_s = plan.checkpoint_every_steps * step_s, plan.checkpoint_write_s
    else:  # no checkpoints: a failure restarts the job from the beginning
        interval_s, write_s = train_s, 0.0
    goodput = expected_goodput(interval_s, write_s, plan.recovery_s, plan.failure_rate_per_s)
    each_eval_s = plan.eval_s if plan.eval_s is not None else (
        (plan.eval_samples or 0.0) * step_s / plan.global_batch * FORWARD_SHARE_OF_STEP
    )  # fmt: skip
    eval_s = plan.evals * each_eval_s
    overhead_s = train_s / goodput - train_s
    total_s = plan.compile_s + train_s + overhead_s + eval_s
    chip_hours = total_s * plan.chips / _HOUR_S
    cost = chip_hours * plan.usd_per_chip_hour if plan.usd_per_chip_hour is not None else None
    return TimeToTrain(total_s, train_s, eval_s, plan.compile_s, overhead_s, chip_hours, cost)
