"""Fit the engine's few general parameters to published end-to-end results, with cross-validation.

``python -m profiler calibrate`` maps the reference file to cases, fits the
parameters in :data:`FITTED` (achievable fractions of peak and a per-op overhead:
general physics, never per-entry constants) by minimising the mean absolute log
error ``mean |ln(predicted / published)|`` over the *end-to-end* cases, and writes
``data/calibration.toml`` with the fitted values, the fit's date, its inputs
(reference file and hash, case ids) and its residuals.

The optimiser is a bounded coordinate search: each parameter in turn is scanned
over a grid inside its physical bounds and the best value kept; the grid then
narrows around the optimum. Cheap (a few hundred evaluations of ~20 small
simulations), deterministic, and with so few parameters good enough.

Honesty: the same search is rerun with one whole chip generation held out each
time (leave-one-generation-out), and again with one source family held out
(leave-one-family-out); folds never split an identical configuration
(:mod:`profiler.crossval`). Each held-out case is predicted by the fit that never
saw it, and its error is recorded beside the in-sample residual, so ``validate``
reports both without refitting. The leave-one-generation-out errors also give the
step-time ranges every run carries (:mod:`profiler.ranges`), recorded as a small
table. The fit always starts from the priors
(:class:`~engine.scenario.calibration.Calibration` defaults), never from a previous fit,
so refits are reproducible.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.scenario.calibration import DEFAULT_CALIBRATION_PATH, Calibration

from . import crossval, ranges, xla_grid
from .reference import DEFAULT_REFERENCE_PATH, Case, load_reference, map_entries, reference_sha256
from .validation import expressible, predict, summarize

__all__ = [
    "FITTED",
    "Bound",
    "FitResult",
    "fit",
    "leave_one_generation_out",
    "leave_one_family_out",
    "calibrate",
    "write_calibration_toml",
    "format_fit",
]


@dataclass(frozen=True)
class Bound:
    """Range one fitted parameter may take (in the Calibration field's internal unit), the measurement
    that supports it and why the range follows from it."""

    lo: float
    hi: float
    why: str = ""
    measurement: str = ""


#: The fitted parameters and the ranges measurements allow them, fixed before any fit (never from
#: end-to-end residuals); ``tests/test_calibration_bounds.py`` recomputes each range from its
#: measurement. Priors are the :class:`~engine.scenario.calibration.Calibration` defaults.
#: The per-step overhead is deliberately not fitted: every published case has steps of 50 ms
#: or more, so it is not identifiable there, and a fit used it as a fudge (2.4 ms) that then
#: hid the input bottleneck of small models, whose steps are ~1 ms.
FITTED: dict[str, Bound] = {
    "mxu_efficiency": Bound(
        0.70, 0.928,
        "the TPU compiler's own estimate for one 8192^3 bf16 matmul, at each generation's catalog clock, is "
        "0.704 (v6e) to 0.928 (v4, one megacore device) of peak: a large MXU-padded GEMM runs inside that range",
        "libtpu 0.0.42.1 estimated_cycles of tests/fixtures/tpu/matmul_{v4,v5e,v5p,v6e,tpu7x} (docs/hlo.md)"),
    "hbm_efficiency": Bound(
        0.80, 0.90,
        "an 8 GiB copy reaches 0.87 of the device's share of HBM bandwidth; fused elementwise ops stream the same "
        "way, so within a few points of it",
        "accelerator-microbenchmarks TPU7x HBM copy (reference coll_tpu7x_hbm_copy_microbench)"),
    "ici_efficiency": Bound(
        0.85, 0.95,
        "the 16M- and 4M-element f32 all-gathers over 4-device rings (two rings per chip's links) run at 0.88-0.89 "
        "of link bandwidth under the engine's ring model with its hop latency",
        "accelerator-microbenchmarks TPU7x all-gather (reference coll_tpu7x_allgather_microbench)"),
    # Fixed cost per op launch and pass: it is what makes small per-chip batches (ResNet-50 at 16-32
    # images per chip) slower per image than large ones.
    "op_overhead_s": Bound(
        0.0, 4.86e-6,
        "one engine op stands for the ~4 XLA fusions of a layer per pass (the compiler emits 2.9 to 5.9 per engine op "
        "and pass in the transformer bundles: a matmul, its normalisation, its activation, their gradients); it "
        "charges a fusion that moves under 1 MiB 1.21 us (v5e, v5p: its fixed cost), so at most 4 x 1.21 us per engine op",
        "libtpu 0.0.42.1 estimated_cycles of the smallest fusion in the transformer bundles of tests/fixtures/tpu, "
        "at the catalog clock"),
}

#: calibration.toml section, key and unit factor (file unit per internal unit) of every Calibration field
_TOML_KEYS = {
    "mxu_efficiency": ("compute", "mxu_efficiency", 1.0),
    "hbm_efficiency": ("compute", "hbm_efficiency", 1.0),
    "op_overhead_s": ("compute", "op_overhead_us", 1e6),
    "step_overhead_s": ("compute", "step_overhead_us", 1e6),
    "jitter_frac": ("compute", "jitter_frac", 1.0),
    "ici_efficiency": ("interconnect", "ici_efficiency", 1.0),
    "ici_hop_latency_s": ("interconnect", "ici_hop_latency_us", 1e6),
    "dcn_efficiency": ("interconnect", "dcn_efficiency", 1.0),
    "dcn_latency_s": ("interconnect", "dcn_latency_us", 1e6),
    "collective_fixed_s": ("interconnect", "collective_fixed_us", 1e6),
}

#: What each key means and where its prior comes from (written beside the value).
_DOC = {
    "mxu_efficiency": "achievable fraction of peak MXU FLOP/s on large, padded GEMMs (prior 0.80)",
    "hbm_efficiency": "achievable fraction of HBM bandwidth for streaming ops (prior 0.85; ~87% measured on a TPU7x "
                      "HBM copy microbenchmark, reference id coll_tpu7x_hbm_copy_microbench)",
    "op_overhead_us": "fixed cost per engine op per pass: one op stands for a layer's few fused kernels "
                      "(pipeline fill, DMA setup, launch) (prior 2)",
    "step_overhead_us": "host dispatch / infeed handshake per step (prior 200)",
    "jitter_frac": "std-dev of per-chip, per-step multiplicative compute noise (prior)",
    "ici_efficiency": "achievable fraction of ICI link bandwidth in ring collectives (prior 0.90)",
    "ici_hop_latency_us": "per-hop latency; scaling book sharding.md Q5 uses ~1 us for TPU v5e (prior)",
    "dcn_efficiency": "achievable fraction of per-host DCN NIC bandwidth (prior)",
    "dcn_latency_us": "per-step latency of a DCN ring step (prior)",
    "collective_fixed_us": "fixed cost of one collective beyond its ring's hops; the TPU7x all-gather microbenchmark's "
                           "256 KiB and 1 MiB shards take 10.6 and 9.7 us more than the ring model (reference "
                           "coll_tpu7x_allgather_microbench; prior)",
}  # fmt: skip

_GRID_POINTS = 9
_PASSES = 3


def _loss(cases: Sequence[Case], cal: Calibration) -> float:
    pred = np.array([predict(c, cal) for c in cases])
    pub = np.array([c.published for c in cases])
    return float(np.mean(np.abs(np.log(pred / pub))))


@dataclass(frozen=True)
class FitResult:
    calibration: Calibration
    loss: float
    evaluations: int


def fit(cases: Sequence[Case], start: Calibration | None = None, params: dict[str, Bound] | None = None) -> FitResult:
    """Bounded coordinate search for the parameters in ``params`` (default :data:`FITTED`)."""
    params = params or FITTED
    cal = start or Calibration()
    best = _loss(cases, cal)
    evals = 1
    span = {k: b.hi - b.lo for k, b in params.items()}
    for _ in range(_PASSES):
        for name, bound in params.items():
            centre = getattr(cal, name)
            lo, hi = max(bound.lo, centre - span[name] / 2), min(bound.hi, centre + span[name] / 2)
            for value in np.linspace(lo, hi, _GRID_POINTS):
                trial = dataclasses.replace(cal, **{name: float(value)})
                loss = _loss(cases, trial)
                evals += 1
                if loss < best - 1e-12:
                    best, cal = loss, trial
            span[name] /= 3.0  # next pass searches a narrower window around the optimum
    return FitResult(calibration=cal, loss=best, evaluations=evals)


def leave_one_generation_out(cases: Sequence[Case], fitter: Callable[..., FitResult] = fit) -> dict[str, float]:
    """Held-out % error of every case when its whole chip generation is left out of the fit.

    The question a user moving to a new chip asks: how wrong is Podscope on a generation it
    was never fitted on? Folds by :func:`profiler.crossval.generation`, identical
    configurations kept on one side.
    """
    return crossval.held_out_errors(crossval.grouped_folds(cases, crossval.generation), cases, fitter, predict)


def leave_one_family_out(cases: Sequence[Case], fitter: Callable[..., FitResult] = fit) -> dict[str, float]:
    """Held-out % error when a whole family (MaxText, MLPerf ResNet-50, PaLM, ...) is left out of the fit.

    Near-duplicate configurations of one source cannot vouch for each other.
    """
    return crossval.held_out_errors(crossval.grouped_folds(cases, crossval.family), cases, fitter, predict)


def _fold_ids(cases: Sequence[Case], key: Callable[[Case], str]) -> dict[str, list[str]]:
    return {label: [c.id for c in members] for label, members in crossval.grouped_folds(cases, key).items()}


def step_time_range_record(cases: Sequence[Case], generation_pct: dict[str, float]) -> dict[str, Any]:
    """The range table runs read, and its honest check, from leave-one-generation-out errors.

    Returns
    -------
    dict with ``step_time_ranges`` (group -> n, low_factor, high_factor; all generations'
    ratios, what a new run uses) and ``step_time_range_check`` (coverage of each case by the
    range built without its own generation, see :func:`profiler.ranges.held_out_ranges`).
    """
    by_id = {c.id: c for c in cases}
    ratios = {i: r for i, e in generation_pct.items() if (r := ranges.step_time_ratio(by_id[i], e)) is not None}
    keys = {i: ranges.case_keys(by_id[i]) for i in ratios}
    fold_of = {c.id: label for label, members in crossval.grouped_folds(cases, crossval.generation).items() for c in members}
    return {
        "step_time_ranges": ranges.range_table(ratios, keys),
        "step_time_range_check": ranges.coverage_summary(ranges.held_out_ranges(ratios, keys, fold_of)),
    }


def hbm_range_record(cal: Calibration, grid: str | Path | None = None) -> dict[str, Any]:
    """The HBM range table runs read, and its check with each chip generation held out, from the TPU compiler grid.

    Returns
    -------
    dict with ``hbm_range_rule``, ``hbm_ranges`` (group -> n, low_factor, high_factor, over every program of the
    grid) and ``hbm_range_check`` (:func:`profiler.xla_grid.hbm_range_check` without its per-verdict and per-generation
    tables); empty without a grid file.
    """
    rows = xla_grid.grid_rows(xla_grid.load_grid(grid), cal)
    if not rows:
        return {}
    check = xla_grid.hbm_range_check(rows)
    return {
        "hbm_range_rule": ranges.HBM_RULE,
        "hbm_ranges": xla_grid.hbm_range_table(rows),
        "hbm_range_check": {k: v for k, v in check.items() if k not in ("verdicts", "by_generation")},
    }


def _display_path(path: Path) -> str:
    """Repository-relative when inside the repository, so the written file does not name a machine's paths."""
    root = DEFAULT_CALIBRATION_PATH.parent.parent
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def calibrate(
    reference: str | Path | None = None,
    out: str | Path | None = None,
    family_folds: bool = True,
    today: dt.date | None = None,
    params: dict[str, Bound] | None = None,
    grid: str | Path | None = None,
) -> dict[str, Any]:
    """Fit on the reference file's end-to-end cases, cross-validate, write the calibration file.

    One fit on all cases gives the parameters; one more per chip generation
    (leave-one-generation-out) and, unless ``family_folds`` is False, one per family
    (leave-one-family-out) give the held-out errors and the step-time range table.
    ``params`` fits a subset of :data:`FITTED` (default: all of them). The TPU compiler grid
    (``grid``, default the bundled one) gives the HBM range table (:func:`hbm_range_record`).

    Returns
    -------
    dict with ``fitted`` (parameter -> value), ``in_sample`` / ``leave_one_generation_out`` /
    ``leave_one_family_out`` summaries, ``residuals_pct`` / ``leave_one_generation_out_pct`` /
    ``leave_one_family_out_pct`` (case id -> % error; the family ones empty when ``family_folds``
    is False), ``generation_folds`` / ``family_folds`` (fold -> case ids), ``step_time_ranges``,
    ``step_time_range_check``, ``hbm_ranges``, ``hbm_range_check``, ``cases``, ``path``.
    """
    ref_path = Path(reference) if reference is not None else DEFAULT_REFERENCE_PATH
    out_path = Path(out) if out is not None else DEFAULT_CALIBRATION_PATH
    cases, _ = expressible(*map_entries(load_reference(ref_path)))
    e2e = [c for c in cases if c.fit]
    params = params or FITTED
    fitter = functools.partial(fit, params=params)
    result = fitter(e2e)
    cal = result.calibration
    residuals = {c.id: 100.0 * (predict(c, cal) - c.published) / c.published for c in e2e}
    by_generation = leave_one_generation_out(e2e, fitter)
    by_family = leave_one_family_out(e2e, fitter) if family_folds else {}
    ids = [c.id for c in e2e]
    report = {
        "path": str(out_path),
        "date": (today or dt.date.today()).isoformat(),
        "reference": _display_path(ref_path),
        "reference_sha256": reference_sha256(ref_path),
        "cases": ids,
        "evaluations": result.evaluations,
        "loss": result.loss,
        "fitted": {k: getattr(cal, k) for k in params},
        "prior": {k: getattr(Calibration(), k) for k in params},
        "in_sample": summarize([residuals[i] for i in ids], ids),
        "leave_one_generation_out": summarize(list(by_generation.values()), list(by_generation)),
        "leave_one_family_out": summarize(list(by_family.values()), list(by_family)),
        "residuals_pct": residuals,
        "leave_one_generation_out_pct": by_generation,
        "leave_one_family_out_pct": by_family,
        "generation_folds": _fold_ids(e2e, crossval.generation),
        "family_folds": _fold_ids(e2e, crossval.family) if family_folds else {},
        "step_time_range_rule": ranges.RULE,
        **step_time_range_record(e2e, by_generation),
        **hbm_range_record(cal, grid),
    }
    write_calibration_toml(out_path, cal, report)
    return report


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(round(float(v), 6)) if isinstance(v, float) else str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if v is None:
        return '"n/a"'
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


#: [fit] tables written after the scalar keys, in this order (flat: key -> value; nested: key -> table)
_RECORD_TABLES = (
    "prior", "in_sample", "leave_one_generation_out", "leave_one_family_out", "step_time_range_check", "hbm_range_check",
    "residuals_pct", "leave_one_generation_out_pct", "leave_one_family_out_pct", "generation_folds", "family_folds",
)  # fmt: skip


def write_calibration_toml(path: str | Path, cal: Calibration, report: dict[str, Any]) -> None:
    """Write ``cal`` as calibration TOML, fitted keys marked, with the fit record under ``[fit]``."""
    date = report["date"]
    lines = [
        "# General model parameters of Podscope's engine: the few knobs calibration may tune.",
        "#",
        f"# Written by `python -m profiler calibrate` on {date}: the keys marked FITTED were fitted to the",
        f"# {len(report['cases'])} end-to-end cases of {Path(report['reference']).name} "
        "(objective: mean |ln(predicted/published)|);",
        "# the rest are priors. [fit] records the inputs and the residuals. No entry here encodes a published outcome:",
        "# residuals are errors of the fitted model, kept so a reader can judge the fit. Held-out errors come from",
        "# fits without the case's chip generation (leave_one_generation_out) or family (leave_one_family_out);",
        "# [fit.step_time_ranges] is the range table runs read (profiler/ranges.py); [fit.hbm_ranges] the range of a",
        "# run's HBM peak, from the TPU compiler grid (data/reference/xla_grid.json): no fit, XLA's peaks against Podscope's.",
    ]
    for section in ("compute", "interconnect"):
        lines += ["", f"[{section}]"]
        for field_name, (sec, key, factor) in _TOML_KEYS.items():
            if sec != section:
                continue
            value = round(getattr(cal, field_name) * factor, 6)
            tag = "FITTED " if field_name in report["fitted"] else ""
            lines.append(f"{key} = {value!r:<12} # {tag}{_DOC[key]}")
    lines += ["", "[fit]"]
    for key in ("date", "reference", "reference_sha256", "evaluations", "loss", "cases"):
        lines.append(f"{key} = {_toml_value(report[key])}")
    lines.append('objective = "mean |ln(predicted / published)| over end-to-end cases"')
    lines.append(f"fitted = {_toml_value(list(report['fitted']))}")
    for rule in ("step_time_range_rule", "hbm_range_rule"):
        if rule in report:
            lines.append(f"{rule} = {_toml_value(report[rule])}")
    for table in _RECORD_TABLES:
        if table not in report:
            continue
        lines += ["", f"[fit.{table}]"]
        for k, v in report[table].items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    lines += _bounds_lines(report["fitted"])
    for table in ("step_time_ranges", "hbm_ranges"):
        for group, row in report.get(table, {}).items():
            lines += ["", f"[fit.{table}.{_toml_key(group)}]"]
            for k, v in row.items():
                lines.append(f"{k} = {_toml_value(v)}")
    Path(path).write_text("\n".join(lines) + "\n")


def _bounds_lines(fitted) -> list[str]:
    """One ``[fit.bounds.KEY]`` table per fitted parameter: its prior, bounds (in the file's unit) and why."""
    prior = Calibration()
    lines: list[str] = []
    for name in fitted:
        b = FITTED.get(name)
        if b is None:
            continue
        _, key, factor = _TOML_KEYS[name]
        lines += ["", f"[fit.bounds.{key}]"]
        lines.append(f"prior = {_toml_value(round(getattr(prior, name) * factor, 6))}")
        lines.append(f"lo = {_toml_value(round(b.lo * factor, 6))}")
        lines.append(f"hi = {_toml_value(round(b.hi * factor, 6))}")
        lines.append(f"why = {_toml_value(b.why)}")
        lines.append(f"measurement = {_toml_value(b.measurement)}")
    return lines


def _toml_key(k: str) -> str:
    return '"' + str(k).replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_fit(report: dict[str, Any]) -> str:
    """Human-readable summary of a :func:`calibrate` report."""
    lines = [f"fitted on {len(report['cases'])} end-to-end cases of {report['reference']} ({report['evaluations']} evaluations)"]
    for k, v in report["fitted"].items():
        lines.append(f"  {k:<18} {v:.6g}   (prior {report['prior'][k]:.6g})")
    for label, key in (
        ("in-sample", "in_sample"),
        ("generation held out", "leave_one_generation_out"),
        ("family held out", "leave_one_family_out"),
    ):
        s = report[key]
        if not s.get("n"):
            continue
        lines.append(
            f"{label:<20} n={s['n']:<3} median |err| {s['median_abs_pct']:5.1f}%   p90 {s['p90_abs_pct']:5.1f}%   "
            f"worst {s['worst_abs_pct']:5.1f}% ({s['worst_id']})"
        )
    for key, label, members, of in (("step_time_range_check", "step-time ranges", "published results", "the prediction"),
                                    ("hbm_range_check", "HBM ranges", "compiler-grid programs", "Podscope's peak")):  # fmt: skip
        check = report.get(key) or {}
        if check.get("n"):
            lines.append(
                f"{label:<20} {check['inside']} of {check['n']} {members} inside the range built without "
                f"their generation ({100 * check['coverage']:.0f}%, nominal {100 * check['nominal_coverage']:.0f}%), "
                f"median width {check['median_width_pct']:.1f}% of {of}"
            )
    lines += _bounds_lines(report["fitted"])
    for group, row in report.get("step_time_ranges", {}).items():
        lines.append(f"  range {group:<36} n={row['n']:<3} x{row['low_factor']:.3f} .. x{row['high_factor']:.3f}")
    for group, row in report.get("hbm_ranges", {}).items():
        lines.append(f"  HBM range {group:<32} n={row['n']:<4} x{row['low_factor']:.3f} .. x{row['high_factor']:.3f}")
    lines.append(f"wrote {report['path']}")
    return "\n".join(lines)
