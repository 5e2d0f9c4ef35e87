"""Validation: how close Podscope's predictions come to published TPU results.

Results are computed on demand from the bundled reference file and the current
calibration (:func:`profiler.validation.results_frame`, about a second) and cached.
"""

from __future__ import annotations

import streamlit as st

from profiler import validation
from views import figures


@st.cache_data(show_spinner="Simulating the published configurations...")
def _results():
    return validation.results_frame()


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def _summary(df) -> None:
    e2e = df[df["fit"]]
    s = validation.summarize(e2e["error_pct"].to_numpy(), list(e2e["id"]))
    cols = st.columns(4)
    cols[0].metric("End-to-end cases", f"{s['n']}")
    cols[1].metric("Median |error|", _pct(s["median_abs_pct"]))
    cols[2].metric("90th pct |error|", _pct(s["p90_abs_pct"]))
    cols[3].metric("Worst |error|", _pct(s["worst_abs_pct"]))
    held = e2e.dropna(subset=["held_out_error_pct"])
    if not held.empty:
        h = validation.summarize(held["held_out_error_pct"].to_numpy(), list(held["id"]))
        st.caption(
            f"Predicted by a fit that never saw them (5-fold cross-validation of the calibration, "
            f"{len(held)} of these cases): median |error| {_pct(h['median_abs_pct'])}, "
            f"90th percentile {_pct(h['p90_abs_pct'])}, worst {_pct(h['worst_abs_pct'])}. "
            "`python -m profiler calibrate` refits and recomputes this."
        )


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
    _summary(view)
    st.plotly_chart(figures.validation_errors(view), width="stretch")
    with st.expander("Predicted against published, one panel per unit"):
        st.plotly_chart(figures.validation_scatter(view), width="stretch")
    cols = ["id", "chip", "model", "metric", "unit", "predicted", "published", "error_pct", "held_out_error_pct", "note"]
    st.dataframe(view[cols].sort_values("error_pct", key=abs, ascending=False), hide_index=True, width="stretch", column_config={
        "id": st.column_config.TextColumn("Case"), "chip": st.column_config.TextColumn("Chip"),
        "model": st.column_config.TextColumn("Model"), "metric": st.column_config.TextColumn("Metric"),
        "unit": st.column_config.TextColumn("Unit"),
        "predicted": st.column_config.NumberColumn("Predicted", format="%.4g"),
        "published": st.column_config.NumberColumn("Published", format="%.4g"),
        "error_pct": st.column_config.NumberColumn("Error", format="%+.1f%%", help="(predicted - published) / published"),
        "held_out_error_pct": st.column_config.NumberColumn("Held-out error", format="%+.1f%%",
                                                            help="predicted by a calibration fitted without this case"),
        "note": st.column_config.TextColumn("Note"),
    })  # fmt: skip


main()
