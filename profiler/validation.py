"""Validation: run every expressible reference case through the engine and report the error.

:func:`run_validation` maps a reference file to cases (:mod:`profiler.reference`),
simulates each case's scenario(s) with a calibration, reads the metric the
source published, and returns per-case errors plus a summary (median, 90th
percentile and worst absolute % error) per group: ``end_to_end`` (what the
accuracy targets and the calibration are about) and ``checks`` (collective and
formula worked examples, which test cost formulas and are never fitted).

Nothing here is stored in DuckDB: a validation is a pure function of the
reference file, the engine and the calibration, cheap enough (well under a
second for the bundled file) to recompute on demand.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine import Scenario, ScenarioError, scenario_from_dict, simulate
from engine.calibration import DEFAULT_CALIBRATION_PATH, Calibration, load_calibration
from engine.comm import all_reduce_time_s, ring_phase
from engine.models import model_cost
from engine.scenario import parse_topology

from .reference import DEFAULT_REFERENCE_PATH, Case, Skipped, load_reference, map_entries, reference_sha256

__all__ = [
    "CaseResult",
    "Validation",
    "build_scenarios",
    "step_time_s",
    "predict",
    "run_validation",
    "summarize",
    "summary_of",
    "format_report",
    "results_frame",
    "fit_record",
    "published_scaling_points",
]

_US_PER_S = 1e6


@dataclass(frozen=True)
class CaseResult:
    id: str
    kind: str
    family: str
    chip: str
    model: str
    metric: str
    unit: str
    predicted: float
    published: float
    error_pct: float  # 100 * (predicted - published) / published
    fit: bool
    note: str


@dataclass(frozen=True)
class Validation:
    cases: list[CaseResult]
    skipped: list[Skipped]
    summary: dict[str, dict[str, Any]]
    reference: str
    calibration: str

    def to_json(self) -> dict[str, Any]:
        """The ``validate --json`` object.

        Keys: ``cases`` [{id, metric, predicted, published, error_pct, ...}], ``summary``, ``skipped``.
        """
        return {
            "reference": self.reference,
            "calibration": self.calibration,
            "cases": [asdict(c) for c in self.cases],
            "summary": self.summary,
            "skipped": [asdict(s) for s in self.skipped],
        }


_SCENARIO_CACHE: dict[tuple[str, int], Scenario] = {}


def build_scenarios(case: Case) -> tuple[Scenario, ...]:
    """Validated scenarios of a case (cached: the fit simulates each many times)."""
    out = []
    for i, raw in enumerate(case.scenarios):
        key = (repr(raw), i)
        if key not in _SCENARIO_CACHE:
            _SCENARIO_CACHE[key] = scenario_from_dict(raw, source=f"reference case {case.id}")
        out.append(_SCENARIO_CACHE[key])
    return tuple(out)


def expressible(cases: list[Case], skipped: list[Skipped]) -> tuple[list[Case], list[Skipped]]:
    """Keep the cases whose scenarios the engine accepts; list the others with the engine's reason.

    The mapping in :mod:`profiler.reference` knows the entries' inputs, not every rule
    of the engine (e.g. which meshes a torus can hold), so the engine has the last word.
    """
    kept, more = [], list(skipped)
    for case in cases:
        try:
            build_scenarios(case)
        except ScenarioError as e:
            reasons = "; ".join(f"{k}: {m}" for k, m in e.problems)
            more.append(Skipped(case.id, case.kind, f"the engine rejects the scenario built from its inputs ({reasons})"))
        else:
            kept.append(case)
    return kept, more


def step_time_s(scenario: Scenario, cal: Calibration) -> float:
    """Predicted steady step time: the median simulated step, in seconds."""
    result = simulate(scenario, cal)
    return float(np.median(result.trace.steps.column("step_ns").to_numpy())) / 1e9


def predict(case: Case, cal: Calibration) -> float:
    """Podscope's prediction of a case's metric, in the case's unit."""
    if case.how == "collective":
        f = case.formula
        if f["op"] == "all_gather":
            t = ring_phase(f["bytes"], f["n"], True, f["link_bytes_per_s"], cal.ici_hop_latency_s)
        else:
            t, _ = all_reduce_time_s(f["bytes"], [f["n"]], [True], f["link_bytes_per_s"], cal.ici_hop_latency_s)
        return t * _US_PER_S
    scenarios = build_scenarios(case)
    if case.how == "flops_per_token":
        cost = model_cost(scenarios[0].model)
        return cost.train_flops_per_sample / cost.tokens_per_sample * case.work_per_step
    steps = [step_time_s(s, cal) for s in scenarios]
    if case.how == "work_per_step":
        return case.work_per_step / steps[0]
    if case.how == "step_time":
        return steps[0]
    if case.how == "weak_scaling":
        return case.scale * steps[0] / steps[1]
    raise ValueError(f"unknown prediction kind {case.how!r} for case {case.id}")


def summarize(errors_pct: list[float] | np.ndarray, ids: list[str] | None = None) -> dict[str, Any]:
    """Median, 90th percentile and worst absolute % error (None when there are no cases)."""
    a = np.abs(np.asarray(errors_pct, dtype=np.float64))
    if a.size == 0:
        return {"n": 0, "median_abs_pct": None, "p90_abs_pct": None, "worst_abs_pct": None, "worst_id": None}
    worst = int(np.argmax(a))
    return {
        "n": int(a.size),
        "median_abs_pct": float(np.median(a)),
        "p90_abs_pct": float(np.percentile(a, 90)),
        "worst_abs_pct": float(a[worst]),
        "worst_id": ids[worst] if ids else None,
    }


def _result(case: Case, predicted: float) -> CaseResult:
    err = 100.0 * (predicted - case.published) / case.published
    return CaseResult(
        id=case.id, kind=case.kind, family=case.family, chip=case.chip, model=case.model, metric=case.metric,
        unit=case.unit, predicted=float(predicted), published=case.published, error_pct=float(err), fit=case.fit, note=case.note,
    )  # fmt: skip


def run_validation(reference: str | Path | None = None, calibration: str | Path | None = None) -> Validation:
    """Validate the engine against a reference file.

    Parameters
    ----------
    reference
        A file in the format of ``data/reference/published.json`` (default: that file).
    calibration
        A calibration TOML (default: ``data/calibration.toml``).

    Raises
    ------
    ReferenceFileError
        If the reference file is unreadable or malformed.
    """
    ref_path = Path(reference) if reference is not None else DEFAULT_REFERENCE_PATH
    cal_path = Path(calibration) if calibration is not None else DEFAULT_CALIBRATION_PATH
    cal = load_calibration(cal_path)
    cases, skipped = expressible(*map_entries(load_reference(ref_path)))
    results = [_result(c, predict(c, cal)) for c in cases]
    return Validation(
        cases=results, skipped=skipped, summary=summary_of(results), reference=str(ref_path), calibration=str(cal_path)
    )


def summary_of(results: list[CaseResult]) -> dict[str, dict[str, Any]]:
    e2e = [r for r in results if r.fit]
    checks = [r for r in results if not r.fit]
    return {
        "end_to_end": summarize([r.error_pct for r in e2e], [r.id for r in e2e]),
        "checks": summarize([r.error_pct for r in checks], [r.id for r in checks]),
        "all": summarize([r.error_pct for r in results], [r.id for r in results]),
    }


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def format_report(v: Validation) -> str:
    """The human-readable table, summary and skipped list printed by ``python -m profiler validate``."""
    w = max(len(c.id) for c in v.cases) if v.cases else 10
    lines = [f"{'case':<{w}}  {'metric':<44} {'predicted':>11} {'published':>11} {'error':>8}"]
    for c in v.cases:
        lines.append(f"{c.id:<{w}}  {c.metric[:44]:<44} {_fmt(c.predicted):>11} {_fmt(c.published):>11} {c.error_pct:>+7.1f}%")
    lines.append("")
    for group, s in v.summary.items():
        if s["n"]:
            lines.append(
                f"{group:<11} n={s['n']:<3} median |err| {s['median_abs_pct']:5.1f}%   p90 {s['p90_abs_pct']:5.1f}%   "
                f"worst {s['worst_abs_pct']:5.1f}% ({s['worst_id']})"
            )
    record = fit_record(v.reference, v.calibration)
    for label, key in (("held out", "held_out"), ("family out", "family_held_out")):
        s = record.get(key, {})
        if s.get("n"):
            lines.append(
                f"{label:<11} n={s['n']:<3} median |err| {s['median_abs_pct']:5.1f}%   p90 {s['p90_abs_pct']:5.1f}%   "
                f"worst {s['worst_abs_pct']:5.1f}% ({s['worst_id']})"
            )
    if record:
        lines.append(
            f"(end-to-end cases predicted by fits that never saw them: {record.get('folds', '?')}-fold and leave-one-family-out "
            f"cross-validation recorded by `profiler calibrate` on {record.get('date', '?')})"
        )
    lines.append("")
    lines.append(f"not expressible ({len(v.skipped)} entries):")
    for s in v.skipped:
        lines.append(f"  {s.id} [{s.kind}]: {s.reason}")
    return "\n".join(lines)


def fit_record(reference: str | Path | None = None, calibration: str | Path | None = None) -> dict[str, Any]:
    """The calibration file's ``[fit]`` record, if it was fitted on this reference file.

    Returns the record (date, fitted parameters, in-sample / held-out / family-held-out
    summaries and per-case errors, see :mod:`profiler.calibrate`) when its
    ``reference_sha256`` matches the reference file's content, else an empty dict: held-out
    errors of a fit on other data would not describe these cases.
    """
    ref_path = Path(reference) if reference is not None else DEFAULT_REFERENCE_PATH
    cal_path = Path(calibration) if calibration is not None else DEFAULT_CALIBRATION_PATH
    try:
        record = tomllib.loads(cal_path.read_text()).get("fit", {})
        digest = reference_sha256(ref_path)
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return record if isinstance(record, dict) and record.get("reference_sha256") == digest else {}


def results_frame(reference: str | Path | None = None, calibration: str | Path | None = None) -> pd.DataFrame:
    """Per-case results as a DataFrame (the dashboard's Validation page): one row per case.

    ``held_out_error_pct`` is the case's error when predicted by the calibration fit that
    never saw it (5-fold cross-validation, from :func:`fit_record`); NaN for cases that are
    not fitted or when the calibration was fitted on another reference file.
    """
    v = run_validation(reference, calibration)
    df = pd.DataFrame([asdict(c) for c in v.cases])
    if not df.empty:
        df["abs_error_pct"] = df["error_pct"].abs()
        held_out = fit_record(reference, calibration).get("held_out_pct", {})
        df["held_out_error_pct"] = [float(held_out[i]) if i in held_out else math.nan for i in df["id"]]
    return df


#: per-chip throughput metrics that convert to the Scaling page's whole-job throughput
_PER_CHIP_THROUGHPUT_UNITS = ("images/s per chip", "tokens/s per chip")


def published_scaling_points(reference: str | Path | None = None) -> pd.DataFrame:
    """Published whole-job throughput by chip count, for overlaying on scaling curves.

    Taken from the reference cases whose metric is a per-chip throughput (images or tokens
    per second per chip): the published value times the chips of the case's scenario. Only
    inputs decide chip, model and chip count; nothing is simulated.

    Returns
    -------
    DataFrame with id, family, chip, model_kind, chips, global_batch, throughput (samples/s or
    tokens/s for the whole job), metric.
    """
    ref_path = Path(reference) if reference is not None else DEFAULT_REFERENCE_PATH
    cases, _ = map_entries(load_reference(ref_path))
    rows = []
    for case in cases:
        if case.how != "work_per_step" or not case.scenarios or not case.metric.startswith(_PER_CHIP_THROUGHPUT_UNITS):
            continue
        raw = case.scenarios[0]
        chips = math.prod(parse_topology(raw["pod"]["topology"])) * int(raw["pod"].get("slices", 1))
        rows.append(
            {
                "id": case.id,
                "family": case.family,
                "chip": raw["pod"]["chip"],
                "model_kind": raw["model"]["kind"],
                "chips": chips,
                "global_batch": int(raw["training"]["global_batch"]),
                "throughput": case.published * chips,
                "metric": case.metric,
            }
        )
    columns = ["id", "family", "chip", "model_kind", "chips", "global_batch", "throughput", "metric"]
    return pd.DataFrame(rows, columns=columns)
