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

The HBM peak of a built-in scenario gets a range the same way, from the TPU compiler rather than
from published runs: over the compiler grid (:mod:`profiler.xla_grid`) each program's ratio is
``XLA's peak per chip / Podscope's`` (for a program XLA refused, the HBM its message asks for), grouped
by family and regime where XLA's choice between two orders moves the peak (:func:`hbm_regime`), else by family
and by whether Podscope's peak reaches :data:`ON_CHIP_PLACEMENT_BYTES` (below it XLA's on-chip
placement moves the peak by tens of percent), then by family, then all (:func:`hbm_keys`). ``calibrate``
writes the rows to ``[fit.hbm_ranges]``; a run's ``peak_hbm_range_bytes`` is its peak times its
group's row, and ``hbm_verdict`` reads the range against the HBM a step may use
(:func:`peak_hbm_range`): ``fits`` when its top is under it, ``out of memory`` when its bottom is
over it, ``may not fit`` between. ``validate`` checks them with each chip generation's programs
ranged by the other generations' (:func:`held_out_ranges` with the chip as the fold).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from engine import scenario_from_dict
from engine.errors import PodscopeError
from engine.memory.hbm import REMAT_TARGET_FRACTION, windowed_einsum
from engine.scenario import Scenario
from engine.scenario.calibration import DEFAULT_CALIBRATION_PATH, load_calibration

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
    "ON_CHIP_PLACEMENT_BYTES",
    "HBM_RULE",
    "HBM_VERDICTS",
    "model_family",
    "family_of",
    "hbm_keys",
    "hbm_regime",
    "PAST_TARGET_REGIME",
    "RECOMPUTE_ORDER_REGIME",
    "hbm_verdict",
    "load_hbm_range_table",
    "peak_hbm_range",
    "scenario_hbm_range",
    "family_hbm_range",
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

#: below this peak per chip, what XLA's memory-space assignment keeps in on-chip memory (or prefetches beside its HBM
#: buffer) moves the HBM peak by tens of percent either way, chip by chip, and Podscope does not model it (the
#: compiler grid's programs compiled again with it off, docs/validation.md): a program whose peak (Podscope's)
#: reaches it has its own HBM range row
ON_CHIP_PLACEMENT_BYTES = 2**30
#: the HBM range rule in one line (written beside the table in the calibration file)
HBM_RULE = (
    "peak HBM per chip x [exp(-q), exp(q)], q = the ceil((n + 1) x 0.8)-th smallest of the n values of "
    "|ln(XLA's peak / Podscope's peak)| (for a program XLA refused: the HBM its message asks for) over the TPU "
    "compiler grid's programs of the same family and regime (an MLP under full remat over 8 to 32 FSDP devices; a "
    "transformer with standard attention under a recomputing policy past 95% of the usable HBM), or "
    "outside a regime of the same family and size (Podscope's peak under or over 1 GiB per chip), else "
    f"family, else all programs (a group needs >= {MIN_CASES} programs)"
)
#: a run's HBM verdict read against its range: the range under the HBM a step may use, across it, over it
HBM_VERDICTS = ("fits", "may not fit", "out of memory")
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
    tables: dict[str, dict[str, dict[str, Any]]] = {}  # one table per fold: it leaves out that fold's cases only
    for case_id, r in sorted(ratios.items()):
        fold = fold_of[case_id]
        if fold not in tables:
            tables[fold] = range_table({j: rj for j, rj in ratios.items() if fold_of[j] != fold}, keys)
        found = lookup(tables[fold], keys[case_id])
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
def load_range_table(path: Path = DEFAULT_CALIBRATION_PATH, section: str = "step_time_ranges") -> dict[str, dict[str, Any]]:
    """The ``[fit.step_time_ranges]`` table (or another ``[fit.SECTION]`` range table) of a calibration file (empty
    when absent or unreadable)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    table = (raw.get("fit") or {}).get(section) or {}
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


def model_family(kind: str, experts: int = 0, pipeline: int = 1) -> str:
    """The compiler grid's family of a built-in model: its kind; ``moe`` for a transformer with experts,
    ``pipeline`` for a transformer over pipeline stages."""
    if kind != "transformer":
        return kind
    if experts:
        return "moe"
    return "pipeline" if pipeline > 1 else "transformer"


def family_of(scenario: Scenario) -> str:
    """:func:`model_family` of a scenario (an MLP or ResNet-50 has no experts)."""
    return model_family(scenario.model.kind, getattr(scenario.model, "experts", 0), scenario.parallelism.pipeline)


#: the HBM range group of an unrolled MLP under ``full`` remat over the FSDP devices where XLA:TPU writes windowed-einsum
#: loops (:func:`engine.memory.hbm.windowed_einsum`): there XLA's scheduler interleaves the weight-gradient loops with
#: the backward's chain of input gradients where the recomputation's weight gathers run beside compute, else runs them
#: after it (``xla_async_all_gather`` of data/chips.toml), and how many layers it holds either way moves with the batch
#: (the compiler grid's 8- and 16-device programs, docs/validation.md)
RECOMPUTE_ORDER_REGIME = "full-windowed"
#: the HBM range group of a transformer with standard attention under a policy that recomputes, which Podscope puts past
#: the rematerialization target (:data:`engine.memory.hbm.REMAT_TARGET_FRACTION` of the usable HBM). Podscope counts the
#: recomputed layer whole during its MLP's backward. Past the target, XLA's scheduler (given the memory limit) may
#: recompute the attention after the MLP's backward instead, and the layer's backward then peaks at the attention's
#: phase (libtpu's live ranges of BERT-Large under `full` on v4: at 399 sequences per chip a d_ff-wide gradient
#: beside the recomputed scores, at 510 none, 14.5 KB per token less). Whether the program then compiles rests on how
#: its buffer assignment packs the score-sized buffers (on v5e, 2,048 tokens, 54 sequences per chip: 15.04 GiB live
#: at the peak, within the 15.48 GiB usable, and refused, its temporaries asking for 16.97 GiB)
PAST_TARGET_REGIME = "standard-past-target"


def hbm_regime(scenario: Scenario, peak_bytes: float | None = None, usable_bytes: float | None = None) -> str | None:
    """The HBM range regime of a scenario at Podscope's peak (bytes per chip, against the usable HBM), or None:
    :data:`RECOMPUTE_ORDER_REGIME`, or :data:`PAST_TARGET_REGIME` (which needs the peak and the usable HBM)."""
    m, par, tr = scenario.model, scenario.parallelism, scenario.training
    if m.kind == "transformer" and tr.remat != "none" and m.attention_kernel == "standard":
        past = peak_bytes is not None and usable_bytes is not None and peak_bytes > REMAT_TARGET_FRACTION * usable_bytes
        return PAST_TARGET_REGIME if past else None
    if m.kind != "mlp" or tr.remat != "full" or tr.microbatches > 1 or par.pipeline > 1:
        return None
    return RECOMPUTE_ORDER_REGIME if windowed_einsum(par.fsdp, scenario.chip_spec().devices_per_chip, par.fsdp_shard) else None


def hbm_keys(family: str, peak_bytes: float, regime: str | None = None) -> tuple[str, ...]:
    """HBM range group keys of a program, most specific first: ``family/regime`` for a program in a regime
    (:func:`hbm_regime`), else ``family/large`` or ``family/small`` (Podscope's peak per chip over or under
    :data:`ON_CHIP_PLACEMENT_BYTES`); then ``family``, ``all``."""
    if regime:
        return (f"{family}/{regime}", family, _ALL)
    size = "large" if peak_bytes >= ON_CHIP_PLACEMENT_BYTES else "small"
    return (f"{family}/{size}", family, _ALL)


def load_hbm_range_table(path: Path = DEFAULT_CALIBRATION_PATH) -> dict[str, dict[str, Any]]:
    """The ``[fit.hbm_ranges]`` table of a calibration file (empty when absent or unreadable)."""
    return load_range_table(path, "hbm_ranges")


def hbm_verdict(range_bytes: Sequence[float], usable_bytes: float) -> str:
    """One of :data:`HBM_VERDICTS`: ``fits`` when the range's top is within the usable HBM, ``out of memory`` when its
    bottom is beyond it, ``may not fit`` when the range holds it."""
    low, high = range_bytes
    if high <= usable_bytes:
        return HBM_VERDICTS[0]
    return HBM_VERDICTS[2] if low > usable_bytes else HBM_VERDICTS[1]


def peak_hbm_range(
    peak_bytes: float | None, usable_bytes: float | None, scenario: Mapping[str, Any] | None,
    table: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[float] | None, dict[str, Any] | None, str | None]:  # fmt: skip
    """The 80% range of XLA's HBM peak per chip around Podscope's, what it rests on, and the verdict it gives.

    Parameters
    ----------
    peak_bytes, usable_bytes
        Podscope's peak HBM per chip and the HBM a step may use, bytes.
    scenario
        The run's scenario as a dict (None for imported runs: no model, no range).
    table
        Range rows (default: the bundled calibration's, :func:`load_hbm_range_table`).

    Returns
    -------
    ``([low_bytes, high_bytes], {"group", "programs", "nominal_coverage"}, verdict)`` (:func:`hbm_verdict`;
    None without ``usable_bytes``), or ``(None, None, None)``.
    """
    if peak_bytes is None or scenario is None:
        return None, None, None
    model, par = scenario.get("model") or {}, scenario.get("parallelism") or {}
    family = model_family(str(model.get("kind")), int(model.get("experts") or 0), int(par.get("pipeline") or 1))
    try:
        regime = hbm_regime(scenario_from_dict(dict(scenario), source="the run's scenario"), peak_bytes, usable_bytes)
    except PodscopeError:  # a stored scenario this catalog no longer reads: the family's range
        regime = None
    return family_hbm_range(peak_bytes, usable_bytes, family, table, regime)


def scenario_hbm_range(
    scenario: Scenario, peak_bytes: float, usable_bytes: float | None, table: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[float] | None, dict[str, Any] | None, str | None]:  # fmt: skip
    """:func:`peak_hbm_range` of a loaded scenario: its family (:func:`family_of`) and its regime at ``peak_bytes``
    (:func:`hbm_regime`), read against ``usable_bytes`` (default: the chip's usable HBM under the bundled calibration)."""
    if usable_bytes is None:
        usable_bytes = scenario.chip_spec().usable_hbm_bytes(load_calibration().hbm_reserved_frac)
    return family_hbm_range(peak_bytes, usable_bytes, family_of(scenario), table, hbm_regime(scenario, peak_bytes, usable_bytes))


def family_hbm_range(
    peak_bytes: float, usable_bytes: float | None, family: str, table: Mapping[str, Mapping[str, Any]] | None = None,
    regime: str | None = None,
) -> tuple[list[float] | None, dict[str, Any] | None, str | None]:  # fmt: skip
    """:func:`peak_hbm_range` of a program of a known family (:func:`model_family`) and regime (:func:`hbm_regime`)."""
    found = lookup(load_hbm_range_table() if table is None else table, hbm_keys(family, peak_bytes, regime))
    if found is None:
        return None, None, None
    group, row = found
    band = [peak_bytes * float(row["low_factor"]), peak_bytes * float(row["high_factor"])]
    basis = {"group": group, "programs": int(row["n"]), "nominal_coverage": NOMINAL_COVERAGE}
    return band, basis, (hbm_verdict(band, usable_bytes) if usable_bytes else None)
