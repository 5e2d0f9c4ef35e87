"""Validation: how close Podscope's predictions come to published TPU results.

Results are computed on demand from the bundled reference file and the current
calibration (:func:`profiler.validation.results_frame`, about a second) and cached. The
held-out columns (a fit without the case's chip generation, or without its family) and the
80% ranges come from the calibration's fit record, so the page never refits.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from profiler import validation, xla_compute, xla_grid
from views import figures


@st.cache_data(show_spinner="Simulating the published configurations...")
def _results():
    return validation.results_frame()


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


#: (label, column) of the three ways a case is predicted
_ERRORS = (
    ("in-sample (fitted on all cases)", "error_pct"),
    ("chip generation held out", "leave_one_generation_out_error_pct"),
    ("family held out", "leave_one_family_out_error_pct"),
)


def _error_row(label: str, cases: pd.DataFrame, col: str) -> dict:
    held = cases.dropna(subset=[col])
    s = validation.summarize(held[col].to_numpy(), list(held["case"]))
    return {"predicted by": label, "cases": s["n"], "median |error|": _pct(s["median_abs_pct"]),
            "90th pct |error|": _pct(s["p90_abs_pct"]), "worst |error|": _pct(s["worst_abs_pct"]),
            "worst case": s["worst_id"] or ""}  # fmt: skip


def _error_table(e2e: pd.DataFrame, never_fitted: pd.DataFrame) -> pd.DataFrame:
    rows = [_error_row(label, e2e, col) for label, col in _ERRORS]
    held = "leave_one_generation_out_error_pct"
    for chip, cases in e2e.dropna(subset=[held]).groupby("chip", sort=True):  # each generation by the fit that never saw it
        rows.append(_error_row(f"chip generation held out: {chip}", cases, held))
    if not never_fitted.empty:  # kinds of job no fit has seen (mixture-of-experts): pure predictions
        rows.append(_error_row("never fitted (mixture-of-experts)", never_fitted, "error_pct"))
    return pd.DataFrame(rows)


def _summary(df: pd.DataFrame) -> None:
    e2e = df[df["fit"]]
    held = "leave_one_generation_out_error_pct"
    has_held = not e2e[held].isna().all()
    # a job nobody has run yet is predicted as a held-out case is: lead with that error, the in-sample one behind it
    col = held if has_held else "error_pct"
    cases = e2e.dropna(subset=[col])
    s = validation.summarize(cases[col].to_numpy(), list(cases["id"]))
    which = "chip generation held out" if has_held else "in-sample"
    cols = st.columns(5)
    cols[0].metric("End-to-end cases", f"{s['n']}")
    cols[1].metric("Median |error|", _pct(s["median_abs_pct"]), help=f"predicted with the {which}")
    cols[2].metric("90th pct |error|", _pct(s["p90_abs_pct"]), help=f"predicted with the {which}")
    cols[3].metric("Worst |error|", _pct(s["worst_abs_pct"]), help=f"predicted with the {which}")
    if not has_held:
        st.caption(
            "In-sample errors: no held-out errors for this reference file in the calibration's fit record "
            "(`python -m profiler calibrate` computes them)."
        )
        return
    st.caption("Errors with the case's chip generation held out of the fit: what to expect of a job on a chip "
               "Podscope was not tuned on. The in-sample and family-held-out errors are in the table below.")  # fmt: skip
    never_fitted = df[(df["kind"] == "end_to_end") & ~df["fit"]]
    st.table(_error_table(e2e, never_fitted).set_index("predicted by"))
    ranged = e2e[e2e["held_out_in_range"].notna()]
    if not ranged.empty:
        inside = int(ranged["held_out_in_range"].astype(bool).sum())
        widths = [100.0 * (hi - lo) for lo, hi in ranged["held_out_range_factors"]]
        cols = st.columns(2)
        cols[0].metric("Inside their 80% range", f"{inside} of {len(ranged)} ({inside / len(ranged):.0%})")
        cols[1].metric("Median range width", f"{pd.Series(widths).median():.1f}% of the prediction")
    st.caption(
        "Held out: each case predicted by a calibration fit that never saw its chip generation (the question "
        "for a chip you have not run on) or its family; the fits never saw them, and identical configurations are "
        "never split between fit and test. Each case's 80% range comes from the held-out errors of comparable cases "
        "of *other* generations, placed around its own held-out prediction. `python -m profiler calibrate` refits "
        "and records all of this."
    )


def _time_to_train(df: pd.DataFrame) -> None:
    """MLPerf times to train: a group of their own, never fitted (step time and the convergence model together)."""
    ttt = df[df["kind"] == "time_to_train"]
    if ttt.empty:
        return
    st.subheader("Time to train")
    s = validation.summarize(ttt["error_pct"].to_numpy(), list(ttt["id"]))
    cols = st.columns(3)
    cols[0].metric("MLPerf results", f"{s['n']}")
    cols[1].metric("Median |error| (time to train)", _pct(s["median_abs_pct"]))
    cols[2].metric("90th pct |error| (time to train)", _pct(s["p90_abs_pct"]))
    st.caption("Minutes to the benchmark's target as MLPerf scores them, predicted from the step time and the bundled "
               "convergence fits (data/convergence.toml); no calibration saw them.")  # fmt: skip
    table = ttt[["case", "chip", "predicted", "published", "error_pct", "note", "id"]].sort_values("error_pct", key=abs, ascending=False)
    st.dataframe(table, hide_index=True, width="stretch", column_config={
        "case": st.column_config.TextColumn("Case"), "id": st.column_config.TextColumn("Reference id"), "predicted": st.column_config.NumberColumn("Predicted (s)", format="%.4g"),
        "published": st.column_config.NumberColumn("Published (s)", format="%.4g"),
        "error_pct": st.column_config.NumberColumn("Error", format="%+.1f%%")})  # fmt: skip


@st.cache_data(show_spinner="Setting Podscope's HBM beside the TPU compiler's...")
def _xla():
    rows = xla_grid.grid_rows(xla_grid.load_grid())  # one evaluation of the grid serves the metrics and the figure
    return xla_grid.block_of(rows), xla_grid.grid_frame(rows)


_FAMILY_CONFIG = {
    "family": st.column_config.TextColumn("Family"),
    "n": st.column_config.NumberColumn("Configurations"),
    "compiled": st.column_config.NumberColumn("Compiled"),
    "hbm_median_abs_pct": st.column_config.NumberColumn("HBM peak, median |error|", format="%.1f%%"),
    "hbm_p90_abs_pct": st.column_config.NumberColumn("p90 |error|", format="%.1f%%"),
    "verdict_agreement": st.column_config.NumberColumn("Verdicts agree", format="percent"),
    "false_fits": st.column_config.NumberColumn("False fits", help="Podscope says it fits, XLA refuses"),
}


def _against_the_compiler() -> None:
    """The HBM model against libtpu's compiler over the committed grid (``validate --json``'s ``xla`` block)."""
    block, frame = _xla()
    if not block["n"]:
        return
    st.subheader("HBM against the TPU compiler")
    cols = st.columns(5)
    cols[0].metric("Configurations", f"{block['n']}", help=", ".join(f"{c} {n}" for c, n in block["generations"].items()))
    cols[1].metric("Median |error|, HBM peak", _pct(block["hbm_median_abs_pct"]),
                   help=f"90th percentile {_pct(block['hbm_p90_abs_pct'])}, over the {block['compiled']} programs XLA compiled")
    cols[2].metric("Programs of 1 GiB and more", _pct(block["hbm_large_median_abs_pct"]),
                   help=f"median |error| over {block['large_n']} programs; 90th percentile {_pct(block['hbm_large_p90_abs_pct'])}")
    cols[3].metric("Fits / out of memory agree", f"{100 * block['verdict_agreement']:.1f}%",
                   help=f"{block['false_fits']} where Podscope says it fits and XLA refuses, "
                        f"{block['false_fits_beyond_margin']} of them by more than {xla_grid.FALSE_FIT_MARGIN:.0%} of the usable HBM")  # fmt: skip
    near = block["near_limit_verdict_agreement"]
    cols[4].metric("Near the limit, verdicts agree", "-" if near is None else f"{100 * near:.1f}%",
                   help=f"{block['near_limit_n']} configurations whose XLA peak (or what XLA asked for) is 80-125% of "
                        f"the usable HBM, {block['near_limit_refused']} of them refused; HBM peak median |error| "
                        f"{_pct(block['near_limit_hbm_median_abs_pct'])} over the compiled ones")  # fmt: skip
    st.caption("Each configuration's JAX program (profiler/xla_reference.py) compiled by libtpu for its chip and "
               "slice on a CPU (data/reference/xla_grid.json, scripts/fixtures/make_xla_grid.py); XLA's peak is its "
               f"memory analysis's. FLOPs per chip agree within {_pct(block['flops_median_abs_pct'])} (median).")  # fmt: skip
    if block["hbm_only_n"]:
        st.caption(f"Programs under {xla_grid.LARGE_PROGRAM_BYTES // 2**30} GiB per chip are also compiled with every "
                   f"buffer in HBM (XLA's placement of buffers in on-chip memory off): {block['hbm_only_n']} of them, "
                   f"Podscope's peak within {_pct(block['hbm_only_median_abs_pct'])} of that program's (median; 90th "
                   f"percentile {_pct(block['hbm_only_p90_abs_pct'])}), against {_pct(block['hbm_only_default_median_abs_pct'])} "
                   f"and {_pct(block['hbm_only_default_p90_abs_pct'])} of XLA's default peak. On programs this small "
                   "what the compiler keeps on chip moves the HBM peak either way; Podscope does not model it.")  # fmt: skip
    hr = block.get("hbm_range") or {}
    if hr.get("n"):
        maybe = hr["verdicts"]["may not fit"]
        st.caption(f"Every run's HBM peak carries the 80% range of XLA's peak around it, from these programs. Ranged by "
                   f"the other chip generations' programs only, {hr['inside']:,} of {hr['n']:,} ({100 * hr['coverage']:.0f}%) "
                   f"lie inside theirs (median width {_pct(hr['median_width_pct'])}); its verdicts: {hr['false_fits']} fits "
                   f"XLA refuses, {hr['false_ooms']} out of memory XLA compiles, {maybe['compiled'] + maybe['refused']} may "
                   f"not fit ({maybe['refused']} of them refused).")  # fmt: skip
    groups = [{"family": f, **g} for f, g in block["families"].items()]
    if block.get("accumulation"):
        groups.append({"family": "any, gradient accumulation", **block["accumulation"]})
    families = pd.DataFrame(groups)
    st.dataframe(families, hide_index=True, column_config=_FAMILY_CONFIG)
    st.plotly_chart(figures.xla_hbm_scatter(frame), width="stretch")


@st.cache_data(show_spinner="Setting Podscope's compute beside the TPU compiler's estimates...")
def _xla_compute():
    rows = xla_compute.layer_rows(xla_compute.load_layers())  # one evaluation serves the metrics and the table
    return xla_compute.block_of(rows), rows


def _compute_against_the_compiler() -> None:
    """Podscope's compute per transformer layer against libtpu's own estimate (``validate --json``'s ``xla_compute``)."""
    block, rows = _xla_compute()
    if block is None:
        return
    st.subheader("Compute against the TPU compiler")
    cols = st.columns(3)
    cols[0].metric("Layer shapes", f"{block['n']}", help=", ".join(block["generations"]))
    cols[1].metric("Median |difference|, compute per layer", _pct(block["median_abs_pct"]),
                   help=f"90th percentile {_pct(block['p90_abs_pct'])}")
    cols[2].metric("Median signed difference", f"{block['median_pct']:+.1f}%", help="below zero Podscope's compute is shorter")
    st.caption("Dense decoder layers compiled by libtpu at two depths (data/reference/xla_compute.json, "
               "scripts/fixtures/make_xla_compute.py): one layer's forward and backward by the compiler's own cycle "
               "estimate at the catalog clock, against the difference of Podscope's compute at the same depths (with the "
               "flash kernel, both without it). The compiler's estimate is its cost model, not a measurement.")  # fmt: skip
    table = pd.DataFrame(rows)[["chip", "layer", "remat", "attention", "xla_efficiency", "xla_s_per_layer", "podscope_s_per_layer",
                                "diff_pct"]]  # fmt: skip
    st.dataframe(table, hide_index=True, column_config={
        "chip": st.column_config.TextColumn("Chip"), "layer": st.column_config.TextColumn("Layer"),
        "remat": st.column_config.TextColumn("Remat"),
        "attention": st.column_config.TextColumn("Attention", help="flash: the Pallas kernel carries no cycle estimate, so "
                                                 "both sides leave it out"),
        "xla_efficiency": st.column_config.NumberColumn("Compiler, fraction of peak", format="%.2f"),
        "xla_s_per_layer": st.column_config.NumberColumn("Compiler (s)", format="%.4g"),
        "podscope_s_per_layer": st.column_config.NumberColumn("Podscope (s)", format="%.4g"),
        "diff_pct": st.column_config.NumberColumn("Podscope against the compiler", format="%+.1f%%")})  # fmt: skip


def main() -> None:
    st.title("Validation")
    st.caption(
        "Every published figure Podscope can express, predicted from the entry's inputs alone "
        "(`python -m profiler validate` prints the same table, and lists what cannot be expressed and why)."
    )
    df = _results()
    if df.empty:
        st.info("No expressible cases in the reference file.")
        return
    c1, c2 = st.columns(2)
    chips = c1.multiselect("Chip generation", sorted(df["chip"].unique()), key="val_chips")
    models = c2.multiselect("Model", sorted(df["model"].unique()), key="val_models")
    view = df
    if chips:
        view = view[view["chip"].isin(chips)]
    if models:
        view = view[view["model"].isin(models)]
    if view.empty:
        st.info("No cases match the filter.")
        return
    steps = view[view["kind"] != "time_to_train"]
    _summary(steps)
    st.plotly_chart(figures.validation_errors(steps), width="stretch")
    with st.expander("Predicted against published, one panel per unit"):
        st.plotly_chart(figures.validation_scatter(steps), width="stretch")
    pct = lambda label, help_: st.column_config.NumberColumn(label, format="%+.1f%%", help=help_)  # noqa: E731
    num = lambda label: st.column_config.NumberColumn(label, format="%.4g")  # noqa: E731
    config = {
        "case": st.column_config.TextColumn("Case"), "chip": st.column_config.TextColumn("Chip"),
        "model": st.column_config.TextColumn("Model"), "metric": st.column_config.TextColumn("Metric"),
        "unit": st.column_config.TextColumn("Unit"), "predicted": num("Predicted"), "published": num("Published"),
        "error_pct": pct("In-sample error", "(predicted - published) / published, calibration fitted on all cases"),
        "leave_one_generation_out_error_pct": pct("Generation held out", "predicted by a calibration fitted without any case of this chip generation"),
        "leave_one_family_out_error_pct": pct("Family held out", "predicted by a calibration fitted without this case's family"),
        "range_low": num("80% range low"), "range_high": num("80% range high"),
        "held_out_in_range": st.column_config.CheckboxColumn("Inside range", help="published result inside the range built without this chip generation"),
        "note": st.column_config.TextColumn("Note"),
        "id": st.column_config.TextColumn("Reference id", help="the entry's id in the reference file"),
    }  # fmt: skip
    table = steps[list(config)].sort_values("error_pct", key=abs, ascending=False)
    st.dataframe(table, hide_index=True, width="stretch", column_config=config)
    _time_to_train(view)
    _against_the_compiler()
    _compute_against_the_compiler()


main()
