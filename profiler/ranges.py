"""A calibrated range on every prediction, from held-out errors of comparable cases.

Every simulated run's summary carries ``step_time_range_s = [low, high]``: an interval meant to
contain the real step time 80% of the time. It comes from how wrong Podscope was on published
results it had *not* been fitted on, not from the engine's own noise:

1. ``profiler calibrate`` predicts every end-to-end reference case with a fit that never saw
   its chip generation (leave-one-generation-out, :mod:`profiler.crossval`) and turns each
   error into a step-time ratio ``r = real step / predicted step`` (:func:`step_time_ratio`).
2. Cases are grouped by what makes them comparable (:func:`comparable_keys`), most specific
   first: model kind, parallelism kind (which mesh axes are larger than 1) and one slice or
   several; then model kind alone; then all cases. A group is used only with at least
   :data:`MIN_CASES` ratios, else the next broader one.
3. A group's range is ``[exp(-q), exp(q)]`` with ``q`` the split-conformal 80% quantile of its
   ``n`` values of ``|ln r|``: the ``ceil((n + 1) 0.8)``-th smallest (the largest when that exceeds
   ``n``). For exchangeable errors that rank contains a new case's error with probability at least
   80% (Lei, G'Sell, Rinaldo, Tibshirani & Wasserman 2018, "Distribution-Free Predictive Inference
   for Regression", JASA, sec. 2.2, split conformal); the plain sample percentile of a dozen values
   sits below it and covers less than it says. The range is symmetric in log space, so it always contains
   the point prediction. Symmetric because the *sign* of a held-out error does not carry over
   from one chip generation to another (the modelling error a fit absorbs differs by chip, so
   one generation's held-out cases can all be too fast and another's all too slow), while its
   size does: percentiles of the signed ratios ([P10, P90]) carried one generation's bias onto
   the next and covered fewer than half of the held-out cases. ``calibrate`` writes one row per usable group to
   the calibration file's ``[fit.step_time_ranges]``; a run multiplies its predicted step time
   by its group's row (:func:`step_time_range_s`). Nothing is refitted at run time.

``validate`` checks the ranges honestly (:func:`held_out_ranges`): each case gets the range
built from the ratios of cases *outside its own generation* only, and counts as covered when
its published result lies inside the range around its held-out prediction.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from engine.scenario.calibration import DEFAULT_CALIBRATION_PATH

from .reference import Case

__all__ = [
    "NOMINAL_COVERAGE",
    "MIN_CASES",
    "RULE",
    "parallelism_kind",
    "comparable_keys",
    "case_keys",
    "step_time_ratio",
    "range_factors",
    "range_table",
    "lookup",
    "held_out_ranges",
    "coverage_summary",
    "metric_range",
    "load_range_table",
    "step_time_range_s",
]

#: share of real step times a range is meant to contain (the split-conformal level of |ln(real / predicted)|)
NOMINAL_COVERAGE = 0.8
#: fewest held-out ratios a group needs for its own range: below that its 80th percentile is little more
#: than its largest error or two, so the next broader group is used
MIN_CASES = 8
#: the whole rule in one line (written beside the table in the calibration file)
RULE = (
    "predicted step x [exp(-q), exp(q)], q = the ceil((n + 1) x 0.8)-th smallest of the n values of "
    "|ln(real step / predicted step)| (split conformal, Lei et al. 2018) over the "
    "leave-one-generation-out predictions of comparable cases (model kind / parallelism kind / single- or "
    f"multi-slice, else model kind, else all cases; a group needs >= {MIN_CASES} cases)"
)

_ALL = "all"
#: mesh axes whose size > 1 names a parallelism kind (axes a scenario does not have count as 1)
_AXES = ("fsdp", "tensor", "expert", "pipeline", "context")


def parallelism_kind(parallelism: Mapping[str, Any] | None) -> str:
    """``data``, or the mesh axes larger than 1 joined by ``+`` (``fsdp+tensor``), from a scenario's ``[parallelism]``."""
    par = parallelism or {}
    axes = [a for a in _AXES if int(par.get(a) or 1) > 1]
    kind = "+".join(axes) or "data"
    return f"parameter-server/{kind}" if par.get("strategy") == "parameter_server" else kind


def comparable_keys(model_kind: str, parallelism: str, slices: int) -> tuple[str, ...]:
    """Group keys of a configuration, most specific first, ending with ``all``."""
    regime = "multi-slice" if slices > 1 else "single-slice"
    return (f"{model_kind}/{parallelism}/{regime}", model_kind, _ALL)


def _scenario_keys(scenario: Mapping[str, Any]) -> tuple[str, ...]:
    return comparable_keys(
        str(scenario["model"]["kind"]), parallelism_kind(scenario.get("parallelism")), int(scenario["pod"].get("slices", 1))
    )


def case_keys(case: Case) -> tuple[str, ...]:
    """Group keys of a reference case, from the scenario whose step time its metric reads."""
    return _scenario_keys(case.scenarios[0]) if case.scenarios else (_ALL,)


def step_time_ratio(case: Case, error_pct: float) -> float | None:
    """``real step / predicted step`` implied by a case's % error, or None if its metric is not a step time.

    A throughput (``work_per_step / step``) that is ``e`` % too high means a step ``1 + e/100``
    times too short; a step time ``e`` % too long means a ratio of ``1 / (1 + e/100)``.
    """
    if case.how == "work_per_step":
        return 1.0 + error_pct / 100.0
    if case.how == "step_time":
        return 1.0 / (1.0 + error_pct / 100.0)
    return None


def range_factors(ratios: Sequence[float]) -> tuple[float, float]:
    """(low, high) multipliers of a predicted step time from step-time ratios: ``exp(-q), exp(q)``.

    ``q`` is the split-conformal :data:`NOMINAL_COVERAGE` quantile of the ``n`` values of ``|ln r|``: the
    ``ceil((n + 1) x NOMINAL_COVERAGE)``-th smallest, the largest when that rank exceeds ``n`` (module docstring).
    """
    errors = np.sort(np.abs(np.log(np.asarray(ratios, dtype=np.float64))))
    rank = min(math.ceil(round((errors.size + 1) * NOMINAL_COVERAGE, 9)), errors.size)
    q = float(errors[rank - 1])
    return math.exp(-q), math.exp(q)


def range_table(ratios: Mapping[str, float], keys: Mapping[str, Sequence[str]]) -> dict[str, dict[str, Any]]:
    """One row per group with at least :data:`MIN_CASES` ratios (``all`` whenever there is any ratio).

    Returns
    -------
    dict group key -> {"n", "low_factor", "high_factor"}, sorted by key.
    """
    members: dict[str, list[float]] = {}
    for case_id, r in ratios.items():
        for k in keys[case_id]:
            members.setdefault(k, []).append(r)
    table = {}
    for k, rs in sorted(members.items()):
        if len(rs) >= MIN_CASES or (k == _ALL and rs):
            low, high = range_factors(rs)
            table[k] = {"n": len(rs), "low_factor": low, "high_factor": high}
    return table


def lookup(table: Mapping[str, Mapping[str, Any]], keys: Sequence[str]) -> tuple[str, Mapping[str, Any]] | None:
    """The most specific of ``keys`` that has a row in ``table``, with its row."""
    for k in keys:
        if k in table:
            return k, table[k]
    return None


def held_out_ranges(
    ratios: Mapping[str, float], keys: Mapping[str, Sequence[str]], fold_of: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """Each case's range built without its own generation, and whether its real step time falls inside.

    ``ratios`` are leave-one-generation-out step-time ratios; ``fold_of`` maps a case to its
    generation fold. Case ``i``'s range comes from :func:`range_table` over the cases of the
    other folds only, so neither the fit nor the range saw ``i``'s generation.

    Returns
    -------
    dict case id -> {"group", "n", "low_factor", "high_factor", "inside"}; cases with no other fold are left out.
    """
    out = {}
    for case_id, r in sorted(ratios.items()):
        pool = {j: rj for j, rj in ratios.items() if fold_of[j] != fold_of[case_id]}
        found = lookup(range_table(pool, keys), keys[case_id])
        if found is None:
            continue
        group, row = found
        low, high = row["low_factor"], row["high_factor"]
        out[case_id] = {"group": group, "n": row["n"], "low_factor": low, "high_factor": high, "inside": bool(low <= r <= high)}
    return out


def coverage_summary(ranges: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Share of cases inside their held-out range, and the median range width in % of the prediction."""
    n = len(ranges)
    inside = sum(bool(r["inside"]) for r in ranges.values())
    widths = [100.0 * (r["high_factor"] - r["low_factor"]) for r in ranges.values()]
    return {
        "n": n,
        "nominal_coverage": NOMINAL_COVERAGE,
        "inside": inside,
        "coverage": inside / n if n else None,
        "median_width_pct": float(np.median(widths)) if widths else None,
    }


def metric_range(case: Case, predicted: float, low_factor: float, high_factor: float) -> list[float] | None:
    """A step-time range around ``predicted`` expressed in the case's metric ([low, high], ascending)."""
    if case.how == "work_per_step":
        return [predicted / high_factor, predicted / low_factor]
    if case.how == "step_time":
        return [predicted * low_factor, predicted * high_factor]
    return None


@lru_cache(maxsize=8)
def load_range_table(path: Path = DEFAULT_CALIBRATION_PATH) -> dict[str, dict[str, Any]]:
    """The ``[fit.step_time_ranges]`` table of a calibration file (empty when absent or unreadable)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    table = (raw.get("fit") or {}).get("step_time_ranges") or {}
    return {
        k: row
        for k, row in table.items()
        if isinstance(row, dict) and all(isinstance(row.get(f), (int, float)) for f in ("n", "low_factor", "high_factor"))
    }


def step_time_range_s(
    step_s: float | None, scenario: Mapping[str, Any] | None, table: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[list[float] | None, dict[str, Any] | None]:
    """The 80% range of a simulated step time, and what it was derived from.

    Parameters
    ----------
    step_s
        Predicted step time, s.
    scenario
        The run's scenario as a dict (None for imported runs: no prediction, no range).
    table
        Range rows (default: the bundled calibration's, :func:`load_range_table`).

    Returns
    -------
    ``([low_s, high_s], {"group", "cases", "nominal_coverage"})``, or ``(None, None)``.
    """
    if step_s is None or scenario is None:
        return None, None
    found = lookup(load_range_table() if table is None else table, _scenario_keys(scenario))
    if found is None:
        return None, None
    group, row = found
    basis = {"group": group, "cases": int(row["n"]), "nominal_coverage": NOMINAL_COVERAGE}
    return [step_s * float(row["low_factor"]), step_s * float(row["high_factor"])], basis
