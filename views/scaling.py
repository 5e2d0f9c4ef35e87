"""Scaling: step time, throughput, efficiency and MFU against chips, and the time and cost to train.

The scaling curves come from stored runs or a sweep; the time and cost to train are drawn against
global batch or chips for the runs with a convergence task.

On first start the bundled strong-scaling and batch-scaling sweeps are seeded, so the page opens
on curves, and the time to train bends where the batch passes the critical batch. When a sweep run
here finishes, its series is selected; points that do not fit in HBM are named rather than
silently left off.
"""

from __future__ import annotations

import math

import streamlit as st

from engine.scenario import parse_topology

from profiler import queries, validation
from views import common, figures, figures_train
from views.scaling_model import ideal_table, oom_points, scaling_table, series_labels

_METRICS = {"step_time_s": "Step time", "throughput": "Throughput", "efficiency": "Scaling efficiency", "mfu": "MFU"}


@st.cache_data(show_spinner=False)
def _published_points():
    """Published whole-job throughput by chip count (data/reference/published.json), read once."""
    return validation.published_scaling_points()


def _published_for(shown, mode: str):
    """The published points measured on the shown series' chip and model, each saying which series it belongs to:
    the one at its batch (its global batch under strong scaling, its per-chip batch under weak), else none."""
    points = _published_points()
    pairs = set(zip(shown["chip"], shown["model_kind"]))
    points = points[[(c, m) in pairs for c, m in zip(points["chip"], points["model_kind"])]].copy()
    scale = "global_batch" if mode == "strong" else "per_chip_batch"
    points["per_chip_batch"] = points["global_batch"] / points["chips"]
    owners = shown.drop_duplicates("series")
    belongs = []
    for p in points.itertuples():
        match = owners[(owners["chip"] == p.chip) & (owners["model_kind"] == p.model_kind) & (owners[scale] == getattr(p, scale))]
        belongs.append(f"for {match['series'].iloc[0]}" if not match.empty else "same chip and model, another batch: no series shown")
    points["series"] = belongs
    return points


def _sweep(runs) -> None:
    simulated = runs[runs["source"] != "imported"]
    if simulated.empty:
        return
    with st.expander("Sweep: simulate a base run at several slice shapes"):
        labels = {int(r.run_id): common.run_label(r) for r in simulated.itertuples()}
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
        new_ids: list[int] = []
        for i, topo in enumerate(topologies):
            bar.progress(i / len(topologies), text=f"Simulating {topo} ({i + 1}/{len(topologies)})")
            overrides = {"pod.topology": topo, "parallelism.data": None}
            if mode.startswith("weak"):
                try:
                    chips = math.prod(parse_topology(topo)) * int(base["pod"].get("slices", 1))
                except ValueError:
                    chips = base_chips  # the loader reports the bad topology by key below
                overrides["training.global_batch"] = max(1, base["training"]["global_batch"] * chips // base_chips)
            overrides["name"] = common.what_if_name(base, overrides)
            summary = common.simulate_variant(base, overrides, source=f"sweep {topo}")
            if summary is None:
                failed.append(topo)
            else:
                new_ids.append(int(summary["run_id"]))
        bar.progress(1.0, text="Sweep done")
        _select_series_of(new_ids, "weak" if mode.startswith("weak") else "strong")
        if failed:  # keep the errors on screen; the stored points show on the next interaction
            st.warning(f"Not simulated: {', '.join(failed)} (see above). The other points are stored.")
        else:
            st.rerun()


def _select_series_of(run_ids: list[int], mode: str) -> None:
    """After a sweep: show its series (in the mode it swept in) on the next render."""
    if not run_ids:
        return
    runs = common.query(queries.scaling_runs)
    mine = runs[runs["run_id"].isin(run_ids)]
    series = list(dict.fromkeys(series_labels(mine, mode)))
    st.session_state["sc_pending"] = (mode, series)  # applied before the widgets on the next render


def _apply_pending() -> None:
    pending = st.session_state.pop("sc_pending", None)
    if pending is not None:
        mode, series = pending
        st.session_state["sc_mode"] = mode
        st.session_state[f"sc_series_{mode}"] = series


def _say_oom(runs, shown, mode: str) -> None:
    """Name the points left off because they do not fit in HBM, and what the ideal line starts from."""
    oom = oom_points(runs, mode)
    oom = oom[oom["series"].isin(set(shown["series"]))]
    for series, part in oom.groupby("series"):
        fitted = shown[shown["series"] == series]
        chips = ", ".join(f"{int(c):,}" for c in sorted(part["chips"].unique()))
        base = f"; the ideal line and efficiency start from the smallest point that fits ({int(fitted['chips'].min()):,} chips)" if not fitted.empty else ""
        below = not fitted.empty and part["chips"].min() < fitted["chips"].min()
        whose = "the TPU compiler's verdict" if part["by_compiler"].all() else "out of memory"
        st.warning(f"**{series}**: the {chips}-chip point(s) do not fit in HBM ({whose}) and are not drawn"
                   + (base if below else "") + ".")  # fmt: skip


def _say_superlinear(shown) -> None:
    """A point above 100% efficiency needs its cause on the page: name it where the engine knows it."""
    for series, part in shown.groupby("series"):
        part = part.sort_values("chips")
        over = part[part["efficiency"] > 1.02]
        if over.empty:
            continue
        base = part.iloc[0]
        top = over.loc[over["efficiency"].idxmax()]
        head = (f"**{series}**: {top['efficiency']:.0%} efficient at {int(top['chips']):,} chips, more than linear from "
                f"{int(base['chips']):,} chips.")  # fmt: skip
        st.info(f"{head} Each chip's share of the step shrinks faster than its batch there: compare the two runs' "
                "step time by cause on the Compare page.")  # fmt: skip


_TABLE_CONFIG = {
    "run_id": st.column_config.NumberColumn("Run"),
    "name": st.column_config.TextColumn("Name"),
    "chips": st.column_config.NumberColumn("Chips", format="localized"),
    "global_batch": st.column_config.NumberColumn("Global batch", format="localized"),
    "step_ms": st.column_config.NumberColumn("Step time", format="%.2f ms"),
    "throughput": st.column_config.NumberColumn("Throughput (per s)", format="compact"),
    "efficiency": st.column_config.NumberColumn("Scaling efficiency", format="percent"),
    "mfu": st.column_config.NumberColumn("MFU", format="percent"),
}


def main() -> None:
    st.title("Scaling")
    runs = common.query(queries.scaling_runs)
    if runs.empty:
        st.info("No runs yet. Simulate a few slice sizes (the sweep below, or the CLI) to see how the job scales.")
        return
    _apply_pending()
    mode = st.radio("Scaling", ["strong", "weak"], horizontal=True, key="sc_mode",
                    help="strong: same global batch on more chips; weak: same per-chip batch")  # fmt: skip
    table = scaling_table(runs, mode)
    if table.empty:
        st.info("No simulated, in-memory runs with a step time to plot.")
    else:
        counts = table.groupby("series")["chips"].nunique().sort_values(ascending=False)
        default = [s for s in counts.index if counts[s] > 1][:3] or list(counts.index[:1])
        key = f"sc_series_{mode}"
        kept = [s for s in st.session_state.get(key) or [] if s in counts.index]
        st.session_state[key] = kept if kept or key in st.session_state and st.session_state[key] == [] else default
        series = st.multiselect("Series (runs sharing model, chip and batch)", list(counts.index), key=key,
                                format_func=lambda s: f"{s} ({counts[s]} chip count{'s' if counts[s] > 1 else ''})")  # fmt: skip
        shown = table[table["series"].isin(series)]
        if shown.empty:
            st.info("Pick at least one series.")
        else:
            ideal = ideal_table(shown, mode)
            cols = st.columns(2)
            for i, (metric, label) in enumerate(_METRICS.items()):
                with cols[i % 2]:
                    published = _published_for(shown, mode) if metric == "throughput" else None
                    fig = figures.scaling_figure(shown, metric, ideal if metric != "mfu" else None, title=label, published=published)
                    common.chart(fig, None, "", f"sc_{metric}")
            _say_oom(runs, shown, mode)
            _say_superlinear(shown)
            if (counts[series] < 2).all():
                st.caption("Each series has one chip count so far; add points with the sweep below to see a scaling curve.")
            common.download_csv(shown, "scaling.csv", key="csv_scaling")
            table_view = shown.assign(step_ms=shown["step_time_s"] * 1e3)
            st.dataframe(table_view[list(_TABLE_CONFIG)], hide_index=True, column_config=_TABLE_CONFIG)
    _time_to_train(runs)
    _sweep(runs)


def _time_to_train(runs) -> None:
    """Time and cost (or chip-hours) to train of the runs with a convergence task, by series."""
    trained = runs[runs["time_to_train_s"].notna()]
    if trained.empty:
        st.caption("No run has a `[convergence]` task yet, so there is no time to train to plot "
                   "(add `[convergence] task = \"mlperf-resnet50\"` to a scenario).")  # fmt: skip
        return
    st.subheader("Time and cost to train")
    c1, c2 = st.columns(2)
    mode = c1.radio("Series", ["weak", "strong"], horizontal=True, key="sc_ttt_mode",
                    help="weak: same per-chip batch, so the global batch grows with the chips; strong: same global batch")  # fmt: skip
    x = c2.radio("Against", ["global_batch", "chips"], horizontal=True, key="sc_ttt_x",
                 format_func={"global_batch": "global batch", "chips": "chips"}.get)  # fmt: skip
    table = scaling_table(trained, mode)
    if table.empty:
        st.info("No run with a time to train fits in HBM.")
        return
    counts = table.groupby("series")["chips"].nunique().sort_values(ascending=False)
    default = [s for s in counts.index if counts[s] > 2][:2] or list(counts.index[:1])
    series = st.multiselect("Series with a time to train", list(counts.index), default=default, key=f"sc_ttt_series_{mode}",
                            format_func=lambda s: f"{s} ({counts[s]} point{'s' if counts[s] > 1 else ''})")  # fmt: skip
    shown = table[table["series"].isin(series)]
    if shown.empty:
        st.info("Pick at least one series.")
        return
    cost = "cost_usd" if shown["cost_usd"].notna().all() else "chip_hours"
    cols = st.columns(2)
    with cols[0]:
        fig = figures_train.train_figure(shown, "time_to_train_s", x, title="Time to train")
        common.chart(fig, None, "", "sc_time_to_train")
    with cols[1]:
        fig = figures_train.train_figure(shown, cost, x, title="Cost to train" if cost == "cost_usd" else "Chip-hours to train")
        common.chart(fig, None, "", "sc_cost_to_train")
    priced = "" if cost == "cost_usd" else " Chip-hours stand in for cost: not every shown run has `[cost] usd_per_chip_hour`."
    st.caption(
        "Time to train = steps to target (the convergence task's fit of MLPerf reference runs) x the steady step time, "
        "plus evaluation, compiles and checkpoints. Below the critical batch B_crit a doubled batch nearly halves the "
        "steps; past it the steps barely fall, so the time flattens and the chip-hours grow." + priced
    )
    columns = ["run_id", "name", "chips", "global_batch", "steps_to_target", "batch_over_b_crit", "time_to_train_s", "chip_hours", "cost_usd"]
    common.download_csv(shown[columns], "time_to_train.csv", key="csv_time_to_train")


main()
