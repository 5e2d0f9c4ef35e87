"""Validation: run every expressible reference case through the engine and report the error.

:func:`run_validation` maps a reference file to cases (:mod:`profiler.reference`),
simulates each case's scenario(s) with a calibration, reads the metric the
source published, and returns per-case errors plus a summary (median, 90th
percentile and worst absolute % error) per group: ``end_to_end`` (in-sample: the
cases the calibration is fitted on) and ``checks`` (collective and formula worked
examples, which test cost formulas and are never fitted).

Beside the in-sample error, each end-to-end case carries its held-out errors:
predicted by a fit that never saw its chip generation (``leave_one_generation_out``,
the headline) or its family (``leave_one_family_out``), and whether its published
result lies inside the 80% step-time range built without its generation
(:mod:`profiler.ranges`). Those come from the calibration file's ``[fit]`` record,
written by ``profiler calibrate`` (the refits are the expensive part); they are
shown only when that record was fitted on the same reference file.

Nothing here is stored in DuckDB: a validation is a pure function of the
reference file, the engine and the calibration, cheap enough (about a second for
the bundled file) to recompute on demand.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine import Scenario, ScenarioError, scenario_from_dict, simulate
from engine.comm import all_reduce_time_s, ring_phase
from engine.convergence import ConvergencePlan, time_to_train
from engine.model.models import model_cost
from engine.scenario import parse_topology
from engine.scenario.calibration import DEFAULT_CALIBRATION_PATH, Calibration, load_calibration

from . import crossval, ranges
from .reference import DEFAULT_REFERENCE_PATH, Case, Skipped, load_reference, map_entries, reference_sha256

__all__ = [
    "CaseResult",
    "Validation",
    "build_scenarios",
    "step_time_s",
    "predict",
    "run_validation",
    "with_held_out",
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
    error_pct: float  # 100 * (predicted - published) / published, in-sample
    fit: bool
    note: str
    # Held-out (from the calibration's [fit] record; None for checks or without a matching record):
    leave_one_generation_out_error_pct: float | None = None
    leave_one_family_out_error_pct: float | None = None
    held_out_range: tuple[float, float] | None = None  # 80% range around the generation-held-out prediction, case's unit
    held_out_in_range: bool | None = None
    held_out_range_factors: tuple[float, float] | None = None  # the same range as multipliers of the predicted step time
    range_group: str | None = None  # the comparable-case group the range came from


@dataclass(frozen=True)
class Validation:
    cases: list[CaseResult]
    skipped: list[Skipped]
    summary: dict[str, dict[str, Any]]
    reference: str
    calibration: str
    xla: dict[str, Any] = dataclasses.field(default_factory=dict)  # profiler.xla_grid.xla_block
    xla_compute: dict[str, Any] | None = None  # profiler.xla_compute.compute_block

    def to_json(self) -> dict[str, Any]:
        """The ``validate --json`` object.

        Keys: ``cases`` [{id, metric, predicted, published, error_pct, leave_one_generation_out_error_pct,
        leave_one_family_out_error_pct, held_out_range, held_out_in_range, ...}], ``summary`` (``end_to_end``,
        ``end_to_end_never_fitted``, ``checks``, ``all``, ``leave_one_generation_out``, ``leave_one_family_out``, ``step_time_range``,
        ``time_to_train``, ``leave_one_generation_out_by_chip``: the generation-held-out summary of each chip's cases),
        ``skipped``, ``xla`` (Podscope's HBM peak, verdict and FLOPs against the TPU compiler's
        over ``data/reference/xla_grid.json``: :func:`profiler.xla_grid.xla_block`) and ``xla_compute`` (Podscope's
        compute per transformer layer against the compiler's estimate over ``data/reference/xla_compute.json``:
        :func:`profiler.xla_compute.compute_block`; None without that file).
        """
        return {
            "reference": self.reference,
            "calibration": self.calibration,
            "cases": [asdict(c) for c in self.cases],
            "summary": self.summary,
            "skipped": [asdict(s) for s in self.skipped],
            "xla": self.xla,
            "xla_compute": self.xla_compute,
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
        link = f["link_bytes_per_s"] * (cal.ici_efficiency if f.get("efficiency") else 1.0)
        if f["op"] == "all_gather":
            t = ring_phase(f["bytes"], f["n"], True, link, cal.ici_hop_latency_s)
        else:
            t, _ = all_reduce_time_s(f["bytes"], [f["n"]], [True], link, cal.ici_hop_latency_s)
        return (t + (cal.collective_fixed_s if f.get("efficiency") else 0.0)) * _US_PER_S
    if case.how == "hbm_copy":
        return case.formula["bytes"] / (case.formula["bytes_per_s"] * cal.hbm_efficiency) * _US_PER_S
    scenarios = build_scenarios(case)
    if case.how == "flops_per_token":
        cost = model_cost(scenarios[0].model)
        return cost.train_flops_per_sample / cost.tokens_per_sample * case.work_per_step
    if case.how == "time_to_train":
        result = simulate(scenarios[0], cal)
        step_s = float(np.median(result.trace.steps.column("step_ns").to_numpy())) / 1e9
        plan = ConvergencePlan.from_dict(result.facts.extra["time_to_train_inputs"])
        return time_to_train(plan, step_s).total_s
    steps = [step_time_s(s, cal) * (1.0 + case.eval_share) for s in scenarios]
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


def run_validation(
    reference: str | Path | None = None, calibration: str | Path | None = None, xla_grid: str | Path | None = None
) -> Validation:
    """Validate the engine against a reference file.

    Parameters
    ----------
    reference
        A file in the format of ``data/reference/published.json`` (default: that file).
    calibration
        A calibration TOML (default: ``data/calibration.toml``).
    xla_grid
        A TPU compiler grid (default: ``data/reference/xla_grid.json``) for the ``xla`` block.

    Raises
    ------
    ReferenceFileError
        If the reference file is unreadable or malformed.
    """
    ref_path = Path(reference) if reference is not None else DEFAULT_REFERENCE_PATH
    cal_path = Path(calibration) if calibration is not None else DEFAULT_CALIBRATION_PATH
    cal = load_calibration(cal_path)
    cases, skipped = expressible(*map_entries(load_reference(ref_path)))
    results = with_held_out(cases, [_result(c, predict(c, cal)) for c in cases], fit_record(ref_path, cal_path))
    from .xla_compute import compute_block  # the compiler's files are simulated only when a validation is asked for
    from .xla_grid import xla_block

    return Validation(
        cases=results, skipped=skipped, summary=summary_of(results), reference=str(ref_path), calibration=str(cal_path),
        xla=xla_block(xla_grid, cal), xla_compute=compute_block(None, cal),
    )


def with_held_out(cases: list[Case], results: list[CaseResult], record: dict[str, Any]) -> list[CaseResult]:
    """Results with the record's held-out errors and each case's honest range attached (no refit).

    The range of case ``i`` is built from the generation-held-out errors of comparable cases of
    *other* generations (:func:`profiler.ranges.held_out_ranges`) and placed around ``i``'s own
    generation-held-out prediction; ``held_out_in_range`` says whether the published figure is inside.
    """
    by_gen = record.get("leave_one_generation_out_pct") or {}
    by_fam = record.get("leave_one_family_out_pct") or {}
    held = [c for c in cases if c.fit and c.id in by_gen]
    ratios = {c.id: r for c in held if (r := ranges.step_time_ratio(c, float(by_gen[c.id]))) is not None}
    fold_of = {c.id: label for label, group in crossval.grouped_folds(held, crossval.generation).items() for c in group}
    keys = {c.id: ranges.case_keys(c) for c in held}
    honest = ranges.held_out_ranges(ratios, keys, fold_of)
    by_id = {c.id: c for c in cases}
    out = []
    for r in results:
        if not r.fit:
            out.append(r)
            continue
        gen = float(by_gen[r.id]) if r.id in by_gen else None
        fam = float(by_fam[r.id]) if r.id in by_fam else None
        extra: dict[str, Any] = {"leave_one_generation_out_error_pct": gen, "leave_one_family_out_error_pct": fam}
        h = honest.get(r.id)
        if h is not None and gen is not None:
            held_out_prediction = r.published * (1.0 + gen / 100.0)
            band = ranges.metric_range(by_id[r.id], held_out_prediction, h["low_factor"], h["high_factor"])
            extra |= {
                "held_out_range": tuple(band) if band else None,
                "held_out_in_range": h["inside"],
                "held_out_range_factors": (h["low_factor"], h["high_factor"]),
                "range_group": h["group"],
            }
        out.append(dataclasses.replace(r, **extra))
    return out


def summary_of(results: list[CaseResult]) -> dict[str, dict[str, Any]]:
    """In-sample (``end_to_end``), never-fitted end-to-end (``end_to_end_never_fitted``: kinds of job the fit
    never sees), ``checks`` and ``all`` (every per-step figure) summaries, the two held-out ones, the range
    check, ``time_to_train`` (MLPerf's measured times to train, a group no fit ever sees), and
    ``leave_one_generation_out_by_chip``: the held-out summary of each chip generation's own cases, each predicted by
    the fit that never saw that generation."""
    e2e = [r for r in results if r.fit]
    never_fitted = [r for r in results if r.kind == "end_to_end" and not r.fit]
    checks = [r for r in results if r.kind not in ("end_to_end", "time_to_train")]
    ttt = [r for r in results if r.kind == "time_to_train"]
    per_step = [r for r in results if r.kind != "time_to_train"]
    gen = [r for r in e2e if r.leave_one_generation_out_error_pct is not None]
    fam = [r for r in e2e if r.leave_one_family_out_error_pct is not None]
    coverage = ranges.coverage_summary(
        {
            r.id: {"inside": r.held_out_in_range, "low_factor": r.held_out_range_factors[0], "high_factor": r.held_out_range_factors[1]}
            for r in e2e
            if r.held_out_in_range is not None
        }
    )
    return {
        "end_to_end": summarize([r.error_pct for r in e2e], [r.id for r in e2e]),
        "end_to_end_never_fitted": summarize([r.error_pct for r in never_fitted], [r.id for r in never_fitted]),
        "checks": summarize([r.error_pct for r in checks], [r.id for r in checks]),
        "all": summarize([r.error_pct for r in per_step], [r.id for r in per_step]),
        "time_to_train": summarize([r.error_pct for r in ttt], [r.id for r in ttt]),
        "leave_one_generation_out": summarize([r.leave_one_generation_out_error_pct for r in gen], [r.id for r in gen]),
        "leave_one_family_out": summarize([r.leave_one_family_out_error_pct for r in fam], [r.id for r in fam]),
        "leave_one_generation_out_by_chip": {
            chip: summarize([r.leave_one_generation_out_error_pct for r in gen if r.chip == chip], [r.id for r in gen if r.chip == chip])
            for chip in sorted({r.chip for r in gen})
        },
        "step_time_range": {**coverage, "rule": ranges.RULE},
    }


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def _pct_cell(x: float | None) -> str:
    return "" if x is None else f"{x:+.1f}%"


def _range_cell(c: CaseResult) -> str:
    if c.held_out_range is None:
        return ""
    lo, hi = c.held_out_range
    return f"{'in ' if c.held_out_in_range else 'OUT'} {_fmt(lo)}-{_fmt(hi)}"


def _summary_line(label: str, s: dict[str, Any]) -> str:
    return (
        f"{label:<20} n={s['n']:<3} median |err| {s['median_abs_pct']:5.1f}%   p90 {s['p90_abs_pct']:5.1f}%   "
        f"worst {s['worst_abs_pct']:5.1f}% ({s['worst_id']})"
    )


def format_report(v: Validation) -> str:
    """The human-readable table, summary and skipped list printed by ``python -m profiler validate``.

    Columns: in-sample error, error held out by generation (``gen out``) and by family
    (``fam out``), and the held-out 80% range with whether the published figure is inside.
    """
    from .xla_grid import FALSE_FIT_MARGIN

    w = max(len(c.id) for c in v.cases) if v.cases else 10
    lines = [
        f"{'case':<{w}}  {'metric':<44} {'predicted':>11} {'published':>11} {'error':>8} {'gen out':>8} {'fam out':>8}"
        "  held-out 80% range"
    ]
    for c in v.cases:
        row = (
            f"{c.id:<{w}}  {c.metric[:44]:<44} {_fmt(c.predicted):>11} {_fmt(c.published):>11} {c.error_pct:>+7.1f}% "
            f"{_pct_cell(c.leave_one_generation_out_error_pct):>8} {_pct_cell(c.leave_one_family_out_error_pct):>8}  "
            f"{_range_cell(c)}"
        )
        lines.append(row.rstrip())
    lines.append("")
    labels = (
        ("end_to_end", "in-sample"),
        ("leave_one_generation_out", "generation held out"),
        ("leave_one_family_out", "family held out"),
        ("end_to_end_never_fitted", "never fitted"),
        ("checks", "checks"),
        ("all", "all per-step"),
        ("time_to_train", "time to train"),
    )
    for key, label in labels:
        if v.summary[key]["n"]:
            lines.append(_summary_line(label, v.summary[key]))
        if key == "leave_one_generation_out":
            for chip, held in v.summary["leave_one_generation_out_by_chip"].items():
                lines.append(_summary_line(f"  {chip}", held))
    x = v.xla
    if x.get("compiled"):
        lines.append(
            f"{'TPU compiler HBM':<20} n={x['n']:<3} median |err| {x['hbm_median_abs_pct']:5.1f}%   p90 {x['hbm_p90_abs_pct']:5.1f}%   "
            f"verdicts agree {100 * x['verdict_agreement']:.0f}%, {x['false_fits']} false fits (data/reference/xla_grid.json)"
        )
        if x.get("hbm_only_n"):
            from .xla_check import ON_CHIP_PLACEMENT_BYTES

            lines.append(
                f"{'  with all in HBM':<20} n={x['hbm_only_n']:<3} median |err| {x['hbm_only_median_abs_pct']:5.1f}%   "
                f"p90 {x['hbm_only_p90_abs_pct']:5.1f}%   programs under {ON_CHIP_PLACEMENT_BYTES // 2**30} GiB per chip "
                "against the same program compiled "
                f"with memory-space assignment off ({x['hbm_only_default_median_abs_pct']:.1f}% / "
                f"{x['hbm_only_default_p90_abs_pct']:.1f}% against XLA's default peak)"
            )
        hr = x.get("hbm_range") or {}
        if hr.get("n"):
            maybe = hr["verdicts"]["may not fit"]
            lines.append(
                f"{'  80% HBM range':<20} n={hr['n']:<3} {100 * hr['coverage']:.0f}% inside the range built without their "
                f"generation (nominal {100 * hr['nominal_coverage']:.0f}%), median width {hr['median_width_pct']:.1f}%; "
                f"its verdicts: {hr['false_fits']} fits XLA refuses ({hr['false_fits_beyond_margin']} by more than "
                f"{100 * FALSE_FIT_MARGIN:.0f}%), {hr['false_ooms']} out of memory XLA compiles, "
                f"{maybe['compiled'] + maybe['refused']} may not fit ({maybe['refused']} refused)"
            )
    c = v.xla_compute
    if c:
        lines.append(
            f"{'TPU compiler compute':<20} n={c['n']:<3} median |err| {c['median_abs_pct']:5.1f}%   p90 {c['p90_abs_pct']:5.1f}%   "
            f"compute per transformer layer against the compiler's estimate, median {c['median_pct']:+.1f}% "
            "(data/reference/xla_compute.json)"
        )
    rng = v.summary["step_time_range"]
    if rng["n"]:
        lines.append(
            f"{'80% step-time range':<20} n={rng['n']:<3} {rng['inside']} inside ({100 * rng['coverage']:.0f}% coverage, "
            f"nominal {100 * rng['nominal_coverage']:.0f}%), median width {rng['median_width_pct']:.1f}% of the prediction"
        )
    record = fit_record(v.reference, v.calibration)
    if record and not v.summary["leave_one_generation_out"]["n"]:
        lines.append("(no held-out errors in the calibration's [fit] record: run `profiler calibrate` to compute them)")
    elif record:
        lines.append(
            "(held out: each end-to-end case predicted by a fit without its chip generation, or without its family; "
            "its range built from the held-out errors of comparable cases of other generations; recorded by "
            f"`profiler calibrate` on {record.get('date', '?')})"
        )
    else:
        lines.append("(no held-out errors: the calibration's [fit] record was not fitted on this reference file)")
    lines.append("")
    lines.append(f"not expressible ({len(v.skipped)} entries):")
    for s in v.skipped:
        lines.append(f"  {s.id} [{s.kind}]: {s.reason}")
    return "\n".join(lines)


def fit_record(reference: str | Path | None = None, calibration: str | Path | None = None) -> dict[str, Any]:
    """The calibration file's ``[fit]`` record, if it was fitted on this reference file.

    Returns the record (date, fitted parameters, in-sample / generation-held-out /
    family-held-out summaries and per-case errors, folds, the step-time range table, see
    :mod:`profiler.calibrate`) when its
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


def case_labels(df: pd.DataFrame, reference: str | Path | None = None) -> list[str]:
    """A label a person reads for each case: what was measured, of what, and where it was published."""
    ref_path = Path(reference) if reference is not None else DEFAULT_REFERENCE_PATH
    titles = {e["id"]: str(e.get("source", {}).get("title", "")) for e in json.loads(ref_path.read_text())}
    out = []
    for case_id, model, metric in zip(df["id"], df["model"], df["metric"]):
        base = case_id.removesuffix("_time_to_train")
        title = titles.get(base, "")
        title = title if len(title) <= 48 else title[:47].rstrip() + "…"
        out.append(f"{model}: {metric}" + (f" ({title})" if title else ""))
    return out


def results_frame(reference: str | Path | None = None, calibration: str | Path | None = None) -> pd.DataFrame:
    """Per-case results as a DataFrame (the dashboard's Validation page): one row per case.

    Columns of :class:`CaseResult` plus ``abs_error_pct``; the held-out columns
    (``leave_one_generation_out_error_pct``, ``leave_one_family_out_error_pct``: the case's error
    when predicted by a calibration fit that never saw its chip generation or family, from
    :func:`fit_record`) are NaN for cases that are not fitted or when the calibration was fitted
    on another reference file. ``held_out_range`` is split into ``range_low`` and ``range_high``.
    """
    v = run_validation(reference, calibration)
    df = pd.DataFrame([asdict(c) for c in v.cases])
    if not df.empty:
        df["case"] = case_labels(df, reference)
        df["abs_error_pct"] = df["error_pct"].abs()
        for col in ("leave_one_generation_out_error_pct", "leave_one_family_out_error_pct"):
            df[col] = df[col].astype("float64")
        df["range_low"] = [r[0] if r is not None else math.nan for r in df["held_out_range"]]
        df["range_high"] = [r[1] if r is not None else math.nan for r in df["held_out_range"]]
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
