"""The scenario's ``[convergence]`` and ``[cost]`` tables, and the checks that need the rest of the scenario.

``[convergence]`` says when training is done, in exactly one way:

* ``task = "mlperf-resnet50"``: a bundled task (``data/convergence.toml``), whose critical-batch
  fit gives the samples to its target at the scenario's batch;
* ``e_min_samples`` and ``b_crit_samples``: the user's own critical-batch fit;
* ``samples = N`` or ``tokens = N``: a fixed budget (pre-training), whatever the batch.

Optional evaluation: every ``eval_every_samples`` training samples the job evaluates, costing
``eval_s`` seconds, or ``eval_samples`` forward-only samples priced from the step time. A job that
stops at its target can only stop at an evaluation: ``eval_first_samples`` (the first evaluation's
point, the later ones every ``eval_every_samples`` after it) is the earliest it can stop.
``[cost] usd_per_chip_hour`` prices the chip-hours; there is no built-in price list.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from .tasks import load_tasks, tokens_per_param_default

__all__ = ["ConvergenceSection", "CostSection", "convergence_problems"]

#: most samples a budget, fit or evaluation may name: 10^15, far past any training run (a 15T-token run of
#: 8,192-token sequences is 2 x 10^9 samples); a larger number is a typo, not a job
MAX_SAMPLES = 1e15
#: most tokens a budget may name: 10^18, about 67,000 times Llama 3's 15T training tokens (Meta, 2024)
MAX_TOKENS = 1e18
#: the longest evaluation: 10^7 s (116 days)
MAX_EVAL_S = 1e7
#: the highest price per chip-hour: US$10,000, a thousand times any published cloud TPU price
MAX_USD_PER_CHIP_HOUR = 1e4
Samples = Annotated[float, Field(gt=0, le=MAX_SAMPLES)]


class ConvergenceSection(BaseModel):
    """``[convergence]``: what "trained" means (a task, a critical-batch fit, or a budget) and how often it evaluates."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # as engine/scenario/sections.py Section

    task: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    e_min_samples: Samples | None = None
    b_crit_samples: Samples | None = None
    samples: Samples | None = None
    tokens: Annotated[float, Field(gt=0, le=MAX_TOKENS)] | None = None
    eval_every_samples: Samples | None = None
    eval_first_samples: Samples | None = None  # the first evaluation's point; default: after eval_every_samples
    eval_s: Annotated[float, Field(ge=0, le=MAX_EVAL_S)] | None = None  # seconds per evaluation
    eval_samples: Samples | None = None  # samples per evaluation (forward only)


class CostSection(BaseModel):
    """``[cost]``: the price of one chip for one hour, in US dollars."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    usd_per_chip_hour: Annotated[float, Field(ge=0, le=MAX_USD_PER_CHIP_HOUR)]


def convergence_problems(section: ConvergenceSection | None, model_kind: str, tokens_per_sample: int | None,
                         params: int | None = None) -> list[tuple[str, str]]:  # fmt: skip
    """Problems of a ``[convergence]`` table in the context of its scenario, each with its dotted key."""
    if section is None:
        return []
    c = section
    problems: list[tuple[str, str]] = []
    ways = {
        "task": c.task is not None,
        "e_min_samples + b_crit_samples": c.e_min_samples is not None or c.b_crit_samples is not None,
        "samples": c.samples is not None,
        "tokens": c.tokens is not None,
    }
    given = [k for k, v in ways.items() if v]
    tasks = load_tasks()
    per_param = tokens_per_param_default()
    chinchilla = f" (a compute-optimal pre-training budget is ~{per_param:g} tokens per parameter, Hoffmann et al. 2022"
    chinchilla += f": tokens = {per_param * params:.3g})" if params else ")"
    if not given:
        problems.append(("convergence", "says neither a task nor a budget; valid: task = one of " + ", ".join(tasks)
                         + ", or e_min_samples + b_crit_samples, or samples = N, or tokens = N" + chinchilla))  # fmt: skip
    elif len(given) > 1:
        key = "convergence." + given[1].split(" ")[0]
        problems.append((key, f"{' and '.join(given)} are both given; valid: exactly one of task, "
                         "e_min_samples + b_crit_samples, samples, tokens"))  # fmt: skip
    if c.task is not None and c.task not in tasks:
        problems.append(("convergence.task", f"unknown task {c.task!r}; valid: {', '.join(tasks)}"))
    elif c.task is not None and tasks[c.task].model_kind != model_kind:
        same = [k for k, t in tasks.items() if t.model_kind == model_kind]
        problems.append(("convergence.task", f"{c.task} is fitted to a {tasks[c.task].model_kind} model, the scenario's is "
                         f"{model_kind}; valid: {', '.join(same) or 'e_min_samples + b_crit_samples, or a budget'}"))  # fmt: skip
    if (c.e_min_samples is None) != (c.b_crit_samples is None):
        missing = "b_crit_samples" if c.b_crit_samples is None else "e_min_samples"
        problems.append((f"convergence.{missing}", "e_min_samples and b_crit_samples go together; valid: both, > 0"))
    if c.tokens is not None and not tokens_per_sample:
        problems.append(("convergence.tokens", f"a {model_kind} model has no tokens; valid: samples = N"))
    if c.eval_s is not None and c.eval_samples is not None:
        problems.append(("convergence.eval_samples", "eval_s and eval_samples both price an evaluation; valid: one of them"))
    if (c.eval_s is not None or c.eval_samples is not None) and c.eval_every_samples is None:
        problems.append(("convergence.eval_every_samples", "an evaluation cost needs how often it runs; valid: > 0 samples"))
    if c.eval_first_samples is not None and c.eval_every_samples is None:
        problems.append(("convergence.eval_first_samples", "the first evaluation's point needs how often the later ones "
                         "run; valid: eval_every_samples > 0 beside it"))  # fmt: skip
    if c.eval_first_samples is not None and (c.samples is not None or c.tokens is not None):
        problems.append(("convergence.eval_first_samples", "a fixed budget stops at its budget, not at an evaluation; "
                         "valid: with task or e_min_samples + b_crit_samples"))  # fmt: skip
    return problems
