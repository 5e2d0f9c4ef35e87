"""The run summary: the headline numbers of one stored run.

Built once at write time from the run's per-step and per-chip aggregates by kind and
the engine's run facts, then stored as JSON on the ``runs`` row; ``python -m profiler
run --json`` prints exactly this object. Keys are a contract: later features may add
keys, never remove or change one.

The few numbers that need SQL (median step time, totals by kind) are computed in one
place for both paths: :func:`build_summary` asks them of a stored run, and
:func:`batch_aggregates` of many staged runs at once (one query per batch, not one set
of queries per run, which cost more than simulating a summary-mode run). Both feed
:func:`summary_from`, so the two paths cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb

from engine.convergence import ConvergencePlan, time_to_train
from engine.trace import EVENT_KINDS

from .advisor import advise
from .ranges import peak_hbm_range, step_time_range_s

__all__ = ["build_summary", "time_to_train_keys", "TIME_TO_TRAIN_KEYS", "batch_aggregates", "summary_from", "RunAggregates", "SUMMARY_KEYS", "BATCH_VIEWS"]

SUMMARY_KEYS = (
    "run_id", "name", "source", "chip", "chips", "hosts", "slices", "topology", "steps", "params",
    "step_time_s", "step_time_range_s", "step_time_range_basis", "wall_time_s", "samples_per_s", "tokens_per_s", "mfu", "hfu", "breakdown",
    "peak_hbm_bytes", "hbm_capacity_bytes", "hbm_breakdown_bytes", "oom", "peak_hbm_range_bytes", "peak_hbm_range_basis", "hbm_verdict",
    "events", "input_wait_frac", "recompiles", "compile_s", "goodput", "stragglers",
    "steps_to_target", "samples_to_target", "time_to_train_s", "time_to_train_range_s", "chip_hours", "cost_usd", "advice",
)  # fmt: skip
#: the time-to-train keys: null without a ``[convergence]`` section
TIME_TO_TRAIN_KEYS = ("steps_to_target", "samples_to_target", "time_to_train_s", "time_to_train_range_s", "chip_hours", "cost_usd",
                      "time_to_train_breakdown_s", "batch_over_b_crit")  # fmt: skip

#: the runs-row columns a summary repeats
RUN_COLUMNS = ("name", "source", "chip", "chips", "hosts", "slices", "topology", "steps", "scenario", "facts")

_STEADY_STEP_SQL = """
WITH recompiled AS (
    SELECT DISTINCT step FROM step_kind WHERE run_id = $run_id AND kind = 'recompile' AND chip_ns > 0
)
SELECT
    median(step_ns) FILTER (WHERE step NOT IN (SELECT step FROM recompiled)) AS steady_ns,
    median(step_ns) AS all_ns,
    sum(step_ns) AS wall_ns
FROM steps WHERE run_id = $run_id
"""
_BREAKDOWN_SQL = "SELECT kind, sum(ns) FROM chip_kind WHERE run_id = $run_id GROUP BY kind"
_RUN_SQL = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE run_id = $run_id"
_EVENTS_SQL = "SELECT count(*) FROM events WHERE run_id = $run_id"

#: views :func:`batch_aggregates` reads, registered by the caller (``i``: the run's index in the batch)
BATCH_VIEWS = {
    "steps": "_podscope_batch_steps",  # (i, step, step_ns)
    "step_kind": "_podscope_batch_step_kind",  # (i, step, kind, chip_ns)
    "chip_kind": "_podscope_batch_chip_kind",  # (i, kind, ns)
}
# The same aggregates as _STEADY_STEP_SQL and _BREAKDOWN_SQL, per run of a batch. The anti-join is
# NOT IN's meaning here: steps and step_kind.step are never null (engine tables, or SQL over events).
_BATCH_STEADY_STEP_SQL = """
WITH recompiled AS (
    SELECT DISTINCT i, step FROM _podscope_batch_step_kind WHERE kind = 'recompile' AND chip_ns > 0
)
SELECT
    s.i,
    median(s.step_ns) FILTER (WHERE r.step IS NULL) AS steady_ns,
    median(s.step_ns) AS all_ns,
    sum(s.step_ns) AS wall_ns
FROM _podscope_batch_steps s LEFT JOIN recompiled r ON r.i = s.i AND r.step = s.step
GROUP BY s.i
"""
_BATCH_BREAKDOWN_SQL = "SELECT i, kind, sum(ns) FROM _podscope_batch_chip_kind GROUP BY i, kind"


@dataclass(frozen=True)
class RunAggregates:
    """What a summary needs from a run's tables.

    ``steady_ns``: median step time over steps without a recompile (None if every step
    recompiled); ``all_ns``: median over all steps; ``wall_ns``: sum of step times; all in
    ns, None without steps. ``by_kind_ns``: chip time summed over chips and steps, by kind.
    ``events``: stored event rows.
    """

    steady_ns: float | None
    all_ns: float | None
    wall_ns: int | None
    by_kind_ns: dict[str, int] = field(default_factory=dict)
    events: int = 0


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


def summary_from(run_id: int, run: Mapping[str, Any], agg: RunAggregates) -> dict[str, Any]:
    """The summary object of a run from its runs-row values (``RUN_COLUMNS``; scenario and facts as JSON text) and aggregates.

    ``step_time_range_s`` is the calibrated 80% range of the predicted step time and
    ``step_time_range_basis`` the held-out cases it rests on (:mod:`profiler.ranges`); both
    None for imported runs, which are measurements, not predictions. ``peak_hbm_range_bytes`` is the
    80% range of XLA's HBM peak per chip around Podscope's, ``peak_hbm_range_basis`` the compiler-grid
    programs it rests on and ``hbm_verdict`` what it says of the fit (``fits``, ``may not fit``, ``out of
    memory``; :func:`profiler.ranges.peak_hbm_range`); all None unless the peak is Podscope's model of a
    built-in scenario (a run whose HBM is XLA's, or an imported one, has none).
    """
    facts = json.loads(run["facts"]) if run["facts"] else {}
    scenario = json.loads(run["scenario"]) if run.get("scenario") else None
    step_ns = agg.steady_ns if agg.steady_ns is not None else agg.all_ns
    step_s = float(step_ns) / 1e9 if step_ns is not None else None
    step_range_s, range_basis = step_time_range_s(step_s, scenario)
    extra = facts.get("extra") or {}
    hbm_range, hbm_basis, hbm_verdict = (
        peak_hbm_range(facts.get("peak_hbm_bytes"), extra.get("hbm_usable_bytes"), scenario)
        if extra.get("hbm_source") == "podscope" else (None, None, None)
    )  # fmt: skip
    by_kind = agg.by_kind_ns
    total = sum(by_kind.values())
    kinds = list(EVENT_KINDS) + sorted(k for k in by_kind if k not in EVENT_KINDS)
    breakdown = {k: (by_kind.get(k, 0) / total if total else 0.0) for k in kinds}
    chips = run["chips"]
    peak = facts.get("peak_flops_per_s_per_chip")
    job_peak = peak * chips if peak else None
    summary: dict[str, Any] = {
        "run_id": run_id,
        "name": run["name"],
        "source": run["source"],
        "chip": run["chip"],
        "chips": chips,
        "hosts": run["hosts"],
        "slices": run["slices"],
        "topology": run["topology"],
        "steps": run["steps"],
        "params": facts.get("params"),
        "step_time_s": step_s,
        "step_time_range_s": step_range_s,
        "step_time_range_basis": range_basis,
        "wall_time_s": float(agg.wall_ns) / 1e9 if agg.wall_ns is not None else None,
        "samples_per_s": _ratio(facts.get("samples_per_step"), step_s),
        "tokens_per_s": _ratio(facts.get("tokens_per_step"), step_s),
        "mfu": _ratio(_ratio(facts.get("model_flops_per_step"), step_s), job_peak),
        "hfu": _ratio(_ratio(facts.get("hardware_flops_per_step"), step_s), job_peak),
        "breakdown": breakdown,
        "peak_hbm_bytes": facts.get("peak_hbm_bytes"),
        "hbm_capacity_bytes": facts.get("hbm_capacity_bytes"),
        "hbm_breakdown_bytes": facts.get("hbm_breakdown_bytes"),
        "oom": bool(facts.get("oom", False)),
        "peak_hbm_range_bytes": hbm_range,
        "peak_hbm_range_basis": hbm_basis,
        "hbm_verdict": hbm_verdict,
        "events": agg.events,
    }
    for key, value in extra.items():
        summary.setdefault(key, value)
    # Runs without the engine's idle-time facts (e.g. imported traces): the input-wait share of
    # all chip time stands in; what only the engine knows is null.
    summary.setdefault("input_wait_frac", breakdown.get("input_wait", 0.0))
    for key in ("recompiles", "compile_s", "goodput", "stragglers"):
        summary.setdefault(key, None)
    summary.update(time_to_train_keys(summary.get("time_to_train_inputs"), step_s, step_range_s))
    summary.setdefault("advice", advise(summary))  # last: rules read every other key
    return summary


def time_to_train_keys(inputs: Mapping[str, Any] | None, step_s: float | None,
                       step_range_s: list[float] | None) -> dict[str, Any]:  # fmt: skip
    """The time-to-train summary keys from a run's convergence plan (its ``time_to_train_inputs`` fact).

    ``time_to_train_s`` prices the plan's steps at the steady step time
    (:func:`engine.convergence.time_to_train`). ``time_to_train_range_s`` pairs the step-time range's
    ends with the ends of the task fit's range on the steps (exact for a fixed budget): the low end
    is the short step and the fewer steps, the high end the long step and the more steps.
    All None without a plan (no ``[convergence]``) or without a step time.
    """
    if not inputs or not step_s:
        return dict.fromkeys(TIME_TO_TRAIN_KEYS)
    plan = ConvergencePlan.from_dict(dict(inputs))
    t = time_to_train(plan, step_s)
    lo_step, hi_step = step_range_s if step_range_s else (step_s, step_s)
    lo_n, hi_n = plan.steps_range or (plan.steps_to_target, plan.steps_to_target)
    return {
        "steps_to_target": plan.steps_to_target,
        "samples_to_target": plan.samples_to_target,
        "time_to_train_s": t.total_s,
        "time_to_train_range_s": [time_to_train(plan, lo_step, lo_n).total_s, time_to_train(plan, hi_step, hi_n).total_s],
        "chip_hours": t.chip_hours,
        "cost_usd": t.cost_usd,
        "time_to_train_breakdown_s": {"train": t.train_s, "eval": t.eval_s, "compile": t.compile_s,
                                      "checkpoints_and_failures": t.checkpoint_and_failures_s},  # fmt: skip
        # the global batch over the critical batch (None for a fixed budget): past ~1 more chips buy little time
        "batch_over_b_crit": plan.global_batch / plan.b_crit_samples if plan.b_crit_samples else None,
    }


def build_summary(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, Any]:
    """Compute the summary object of a stored run (its ``runs`` row and summary tables)."""
    p = {"run_id": run_id}
    run = dict(zip(RUN_COLUMNS, con.execute(_RUN_SQL, p).fetchone()))
    steady_ns, all_ns, wall_ns = con.execute(_STEADY_STEP_SQL, p).fetchone()
    by_kind = dict(con.execute(_BREAKDOWN_SQL, p).fetchall())
    events = con.execute(_EVENTS_SQL, p).fetchone()[0]
    return summary_from(run_id, run, RunAggregates(steady_ns, all_ns, wall_ns, by_kind, events))


def batch_aggregates(con: duckdb.DuckDBPyConnection, events: list[int]) -> list[RunAggregates]:
    """Aggregates of runs ``0 .. len(events) - 1`` from the :data:`BATCH_VIEWS` on ``con``: two queries for the batch.

    ``events`` gives each run's event row count (the caller holds the events as Arrow).
    """
    steady = {i: row for i, *row in con.execute(_BATCH_STEADY_STEP_SQL).fetchall()}
    by_kind: dict[int, dict[str, int]] = {}
    for i, kind, ns in con.execute(_BATCH_BREAKDOWN_SQL).fetchall():
        by_kind.setdefault(i, {})[kind] = ns
    return [
        RunAggregates(*steady.get(i, (None, None, None)), by_kind.get(i, {}), n)  # type: ignore[misc]
        for i, n in enumerate(events)
    ]
