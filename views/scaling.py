"""Scaling: step time, throughput, efficiency and MFU against chip count, from stored runs or a sweep."""

from __future__ import annotations

import math

import streamlit as st

from engine.scenario import parse_topology

from profiler import queries, validation
from views import common, figures
from views.scaling_model import ideal_table, scaling_table

_METRICS = {"step_time_s": "Step time", "throughput": "Throughput", "efficiency": "Scaling efficiency", "mfu": "MFU"}


@st.cache_data(show_spinner=False)
def _published_points():
    """Published whole-job throughput by chip count (data/reference/published.json), read once."""
    return validation.published_scaling_points()


def _published_for(shown):
    """The published points measured on the shown series' chip and model (all batches: hover says which)."""
    points = _published_points()
    pairs = set(zip(shown["chip"], shown["model_kind"]))
    return points[[(c, m) in pairs for c, m in zip(points["chip"], points["model_kind"])]]


def _sweep(runs) -> None:
    simulated = runs[runs["source"] != "imported"]
    if simulated.empty:
        return
    with st.expander("Sweep: simulate a base run at several slice shapes"):
        labels = {int(r.run_id): f"#{r.run_id} {r.name} ({r.chips} x {r.chip})" for r in simulated.itertuples()}
        with st.form("sweep"):
            base_id = st.selectbox("Base run", list(labels)[::-1], format_func=labels.get)
            shapes = st.text_input("Topologies (comma-separated)", "2x2x1, 2x2x2, 2x2x4", help="chips per torus axis for each point")
            mode = st.radio("Batch", ["strong (keep global batch)", "weak (keep per-chip batch)"], horizontal=True)
            submitted = st.form_submit_button("Run sweep")
        if not submitted:
            return
        base = common.query(queries.run_scenario, int(base_id))
        base_chips = int(runs.loc[runs["run_id"] == base_id, "chips"].iloc[0])
        topologies = [t.strip() for t in shapes.split(",") if t.strip()]
        bar = st.progress(0.0, text="Sweeping...")
        failed: list[str] = []
        for i, topo in enumerate(topologies):
            bar.progress(i / len(topologies), text=f"Simulating {topo} ({i + 1}/{len(topologies)})")
            overrides = {"name": f"{base['name']} [sweep {topo}]", "pod.topology": topo, "parallelism.data": None}
            if mode.startswith("weak"):
                try:
                    chips = math.prod(parse_topology(topo)) * int(base["pod"].get("slices", 1))
                except ValueError:
                    chips = base_chips  # the loader reports the bad topology by key below
                overrides["training.global_batch"] = max(1, base["training"]["global_batch"] * chips // base_chips)
            if common.simulate_variant(base, overrides, source=f"sweep {topo}") is None:
                failed.append(topo)
        bar.progress(1.0, text="Sweep done")
        if failed:  # keep the errors on screen; the stored points show on the next interaction
            st.warning(f"Not simulated: {', '.join(failed)} (see above). The other points are stored.")
        else:
            st.rerun()


def main() -> None:
    st.title("Scaling")
    runs = common.query(queries.scaling_runs)
    if runs.empty:
        st.info("No runs yet. Simulate a few slice sizes (the sweep below, or the CLI) to see how the job scales.")
        return
    mode = st.radio("Scaling", ["strong", "weak"], horizontal=True, key="sc_mode",
                    help="strong: same global batch on more chips; weak: same per-chip batch")  # fmt: skip
    table = scaling_table(runs, mode)
    if table.empty:
        st.info("No simulated, in-memory runs with a step time to plot.")
    else:
        counts = table.groupby("series")["chips"].nunique().sort_values(ascending=False)
        default = [s for s in counts.index if counts[s] > 1][:3] or list(counts.index[:1])
        series = st.multiselect("Series (runs sharing model, chip and batch)", list(counts.index), default=default, key=f"sc_series_{mode}")
        shown = table[table["series"].isin(series)]
        if shown.empty:
            st.info("Pick at least one series.")
        else:
            ideal = ideal_table(shown, mode)
            cols = st.columns(2)
            for i, (metric, label) in enumerate(_METRICS.items()):
                with cols[i % 2]:
                    published = _published_for(shown) if metric == "throughput" else None
                    fig = figures.scaling_figure(shown, metric, ideal if metric != "mfu" else None, title=label, published=published)
                    common.chart(fig, None, "", f"sc_{metric}")
            if (counts[series] < 2).all():
                st.caption("Each series has one chip count so far; add points with the sweep below to see a scaling curve.")
            common.download_csv(shown, "scaling.csv", key="csv_scaling")
            st.dataframe(shown[["run_id", "name", "chips", "global_batch", "step_time_s", "throughput", "efficiency", "mfu"]], hide_index=True)
    _sweep(runs)


main()
