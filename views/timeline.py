"""Timeline: a per-chip Gantt over a step range, bucketed in DuckDB so any pod size stays fast.

It opens on the first steady-state steps (after the opening compile), where the job's rhythm
shows; slide the range back to step 0 to see the compile, drawn as one labelled block.
"""

from __future__ import annotations

import streamlit as st

from profiler import format as fmt
from profiler import hlo_queries, queries, sampled, steady_state
from views import common, figures, figures_hlo

_WINDOW_DEFAULT_STEPS = 5


def _choose_chips(run_id: int, n_chips: int, sample) -> list[int]:
    """The chips to draw, picked by the user; for a sampled run only among the sampled chips (the others have no events)."""
    ways = ["Worst N", "By host", "By coordinate"] + (["By reason sampled"] if sample is not None else [])
    how = st.radio("Chips", ways, horizontal=True, key="tl_how")
    chips_df = None  # every chip's coordinates and idle share: asked only where a pick needs them
    if sample is not None:
        chips_df = common.query(queries.chip_metrics, run_id)
        chips_df = chips_df[chips_df["chip"].isin(sample["chip"])]
        n_chips = len(chips_df)
    if how == "Worst N":
        most = min(queries.TIMELINE_MAX_CHIPS, n_chips)
        n = st.slider("N (most idle chips)", 1, most, min(16, most), key="tl_n") if most > 1 else most  # one chip: nothing to choose
        if chips_df is not None:  # the same order as queries.worst_chips, within the sample
            return [int(c) for c in chips_df.sort_values(["idle_frac", "chip"], ascending=[False, True])["chip"].head(int(n))]
        return [int(c) for c in common.query(queries.worst_chips, run_id, int(n))["chip"]]
    if how == "By reason sampled":
        reasons = list(sampled.reason_counts(sample))
        picked = st.multiselect("Reasons", reasons, default=reasons, key="tl_reasons",
                                format_func=lambda r: sampled.REASON_WORDS[r])  # fmt: skip
        return [int(c) for c in sample[sample["reason"].isin(picked)]["chip"]]
    if how == "By host":
        hosts = common.query(queries.hosts, run_id)
        if chips_df is not None:
            hosts = hosts[hosts["host"].isin(chips_df["host"])]
        picked = st.multiselect("Hosts", hosts["host"].tolist(), default=hosts["host"].tolist()[:2], key="tl_hosts")
        if chips_df is not None:
            return sorted(int(c) for c in chips_df[chips_df["host"].isin(picked)]["chip"])
        return sorted(int(c) for h in hosts[hosts["host"].isin(picked)]["chips"] for c in h)
    if chips_df is None:
        chips_df = common.query(queries.chip_metrics, run_id)
    cols = st.columns(3)
    sel = chips_df
    for col, axis in zip(cols, "xyz"):
        values = sorted(chips_df[axis].dropna().unique().tolist())
        if len(values) <= 1:
            continue
        chosen = col.multiselect(axis, values, default=values[:1] if axis != "x" else values, key=f"tl_{axis}")
        sel = sel[sel[axis].isin(chosen)]
    return [int(c) for c in sel["chip"]]


_TOP_OPS_CONFIG = {
    "name": st.column_config.TextColumn("Op"),
    "opcode": st.column_config.TextColumn("Opcode"),
    "executions": st.column_config.NumberColumn("Executions per step", format="localized"),
    "bound": st.column_config.TextColumn("Bound"),
    "podscope_ms": st.column_config.NumberColumn("Podscope (ms per step)", format="%.3f"),
    "xla_ms": st.column_config.NumberColumn("XLA (ms per step)", format="%.3f"),
    "ratio": st.column_config.NumberColumn("Podscope / XLA", format="%.2f"),
}


def _hlo_ops(run_id: int, summary: dict) -> None:
    """An HLO run of a TPU-compiled module: each op's time by Podscope and by XLA:TPU, and its collectives."""
    xla_charged = summary.get("compute_source") == "xla"
    totals = common.query(hlo_queries.hlo_op_totals, run_id, xla_charged)
    if totals is None:
        return
    st.subheader("Per op: Podscope vs the compiler")
    if not totals["ops_with_xla"]:
        st.caption(f"The module's {fmt.count(totals['ops'])} ops carry no compiler estimate (a module compiled for a CPU), "
                   "so Podscope's roofline sets every op's time.")  # fmt: skip
    else:
        source = "XLA:TPU's estimate where an op has one" if xla_charged else "Podscope's roofline (compute_source = \"podscope\")"
        cols = st.columns(4)
        cols[0].metric("Compute, XLA estimate", fmt.duration(summary.get("hlo_xla_compute_s")), help="per step, the ops with an estimate at XLA's time, the rest at Podscope's")
        cols[1].metric("Compute, Podscope", fmt.duration(summary.get("hlo_podscope_compute_s")), help="per step, every op at Podscope's roofline time")
        cols[2].metric("Per-op ratio, median", f"{totals['ratio_median']:.2f}", help="Podscope / XLA per op, each op counted once")
        cols[3].metric("Per-op ratio, p90", f"{totals['ratio_p90']:.2f}", help="Podscope / XLA per op, each op counted once")
        st.caption(
            f"The run charges {source}. Ratio = Podscope's time / XLA's estimate, over the "
            f"{fmt.count(totals['ops_compared'])} of {fmt.count(totals['ops'])} ops both estimates time. Weighted by each op's XLA "
            f"time per step (executions included): median {totals['ratio_median_weighted']:.2f}, p90 {totals['ratio_p90_weighted']:.2f}."
        )
        points = common.query(hlo_queries.hlo_op_points, run_id)
        shown = f"the {len(points):,} heaviest and a sample" if len(points) < totals["ops_compared"] else f"all {len(points):,}"
        fig = figures_hlo.op_estimate_scatter(points, title=f"Each op, one execution ({shown} of the ops both estimates time)")
        common.chart(fig, points, f"run{run_id}_hlo_ops.csv", "hlo_ops")
        top = common.query(hlo_queries.hlo_top_ops, run_id, xla_charged)
        st.markdown(f"**The {len(top)} ops the run charges the most time per step** (one execution's time x executions)")
        view = top.assign(podscope_ms=top["podscope_s"] * 1e3, xla_ms=top["xla_s"] * 1e3)
        st.dataframe(view[list(_TOP_OPS_CONFIG)], hide_index=True, column_config=_TOP_OPS_CONFIG)
    coll = common.query(hlo_queries.hlo_collectives, run_id)
    if coll is not None and not coll.empty:
        st.caption(
            f"Collectives per step: {fmt.duration(summary.get('hlo_collective_total_s'))} in all, "
            f"{fmt.duration(summary.get('hlo_collective_s'))} exposed, {fmt.duration(summary.get('hlo_collective_hidden_s'))} "
            "hidden under compute by the module's schedule (asynchronous start/done pairs)."
        )
        common.chart(figures_hlo.collective_exposure_bars(coll), coll, f"run{run_id}_hlo_collectives.csv", "hlo_collectives")


def main() -> None:
    ctx = common.run_context("Timeline")
    if ctx is None:
        return
    run_id, summary = ctx
    _gantt(run_id, summary)
    _hlo_ops(run_id, summary)


def _gantt(run_id: int, summary: dict) -> None:
    if not common.require_events(run_id, "timeline to draw"):
        return
    rng = common.query(queries.step_range, run_id)
    if rng is None:
        st.info("This run stored no steps, so there is no timeline to draw.")
        return
    first, last = rng
    if last > first:
        start = common.query(steady_state.first_steady_step, run_id)
        start = first if start is None else max(first, min(int(start), last))
        start = max(first, min(start, last - _WINDOW_DEFAULT_STEPS + 1))
        step0, step1 = st.slider(
            "Steps", first, last, (start, min(last, start + _WINDOW_DEFAULT_STEPS - 1)), key=f"tl_steps_{run_id}",
            help="Opens on the first steady-state steps (after the opening compile). Any range works: "
                 "the window is bucketed in the database to a fixed number of cells.",
        )  # fmt: skip
    else:
        step0, step1 = first, last
    n_chips = int(summary.get("chips") or 1)
    sample = common.query(sampled.sampled_chips, run_id)
    if sample is not None:
        st.info(
            f'Run #{run_id} was simulated with `[sim] trace = "sampled"`: it stored the '
            f"{sampled.describe_sample(sample, n_chips)}. The Timeline draws only these chips; "
            "Overview, Idle time, Pod and Memory show every chip's totals."
        )
    chips = _choose_chips(run_id, n_chips, sample)
    if not chips:
        st.info("No chips selected.")
        return
    if len(chips) > queries.TIMELINE_MAX_CHIPS:
        st.caption(f"Showing the first {queries.TIMELINE_MAX_CHIPS} of {len(chips)} chips.")
        chips = chips[: queries.TIMELINE_MAX_CHIPS]
    buckets = st.select_slider("Resolution (time buckets)", [200, 400, 800, 1600], value=800, key="tl_buckets",
                               help=f"capped at {queries.TIMELINE_MAX_CELLS:,} cells (chips x buckets)")
    cells, steps = common.query(queries.timeline, run_id, tuple(chips), int(step0), int(step1), int(buckets))
    if cells.empty:
        st.info("No events for these chips in this window.")
        return
    fig = figures.timeline_gantt(cells, steps, chips, title=f"Steps {step0}-{step1}, {len(chips)} chips")
    common.chart(fig, cells, f"run{run_id}_timeline_{step0}-{step1}.csv", "timeline")
    st.caption("Each cell shows the cause that covered most of its time bucket; zoom the step range in for exact events.")
    common.export_button(run_id, int(step0), int(step1), key="tl_export")


main()
