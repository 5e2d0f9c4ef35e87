"""Idle time: where each chip's time goes, by cause, over steps and per host, and the worst offenders.

Attribution is exclusive (events tile every chip's step), so the causes sum to wall time. The
per-step chart opens on the steady state; the warm-up (steps that compiled) is shown apart, since
one compile step can be a hundred steady steps long and would flatten everything else.
"""

from __future__ import annotations

import streamlit as st

from profiler import format as fmt
from profiler import distributions, queries, slice_queries, steady_state
from views import common, figures

#: most hosts drawn bar by bar; a larger run draws its slices (or its most idle hosts) and the spread across chips
HOST_BARS_MAX = 64


def _pct_columns(columns, labels: dict[str, str]) -> dict:
    return {c: st.column_config.NumberColumn(labels.get(c, c), format="percent") for c in columns}


def _by_host(run_id: int, summary: dict) -> None:
    """Chip time by host; past HOST_BARS_MAX hosts, by slice (or the most idle hosts) and the spread of idle across chips."""
    hosts = int(summary.get("hosts") or 0)
    if hosts <= HOST_BARS_MAX:
        by_host = common.query(queries.kind_by_host, run_id)
        common.chart(figures.host_bars(by_host), by_host, f"run{run_id}_time_by_host.csv", "idle_hosts")
        return
    if int(summary.get("slices") or 1) > 1:
        by_slice = common.query(slice_queries.kind_by_slice, run_id)
        fig = figures.host_bars(by_slice, f"Chip time by slice ({by_slice['slice'].nunique():,} slices, {hosts:,} hosts)", by="slice")
        common.chart(fig, by_slice, f"run{run_id}_time_by_slice.csv", "idle_slices")
    else:
        worst = common.query(distributions.worst_hosts_by_kind, run_id, HOST_BARS_MAX)
        fig = figures.host_bars(worst, f"Chip time of the {HOST_BARS_MAX} most idle of {hosts:,} hosts")
        common.chart(fig, worst, f"run{run_id}_time_worst_hosts.csv", "idle_hosts")
    bins = common.query(distributions.chip_histogram, run_id, "idle_frac", 40)
    q = common.query(distributions.chip_quantiles, run_id, "idle_frac")
    if bins is not None and q is not None:
        title = (f"Idle share across {int(q['chips']):,} chips: median {fmt.percent(q['p50'], 2)}, "
                 f"p99 {fmt.percent(q['p99'], 2)}, worst {fmt.percent(q['max'], 2)}")  # fmt: skip
        fig = figures.binned_histogram(bins, "idle share of a chip's time", 100, "%", title)
        common.chart(fig, bins, f"run{run_id}_idle_histogram.csv", "idle_hist")


def main() -> None:
    ctx = common.run_context("Idle time")
    if ctx is None:
        return
    run_id, summary = ctx
    by_step = common.query(queries.kind_by_step, run_id)
    if by_step.empty:
        # Summary-mode runs keep these per-step totals; only a run without any (an imported
        # trace with no device events) gets here.
        st.info(
            f"Run #{run_id} stored no chip time by step (no events and no per-step totals; an imported "
            "trace without device events?), so there is nothing to attribute. Pick another run."
        )
        return
    if summary.get("oom"):
        st.warning("This run does not fit in HBM; the timings below are what it would do if it did.")
    breakdown = summary.get("breakdown") or {}
    idle = sum(v for k, v in breakdown.items() if k not in ("compute", "collective"))
    base = "of all chip time in the run, compile included"
    cols = st.columns(5)
    cols[0].metric("Idle share", fmt.percent(idle), help=f"chip time neither computing nor in exposed collectives, {base}")
    cols[1].metric("Input wait", fmt.percent(breakdown.get("input_wait", 0)), help=base)
    cols[2].metric("Sync wait", fmt.percent(breakdown.get("sync_wait", 0)), help=base)
    cols[3].metric("Recompile", fmt.percent(breakdown.get("recompile", 0)), help=base)
    cols[4].metric("Pipeline bubble", fmt.percent(breakdown.get("bubble", 0)), help=f"stages idle while the pipeline fills and drains, {base}")
    caption = f"Shares above are {base}."
    if summary.get("input_wait_frac") is not None:
        caption += f" Of the steady-state step alone (as the advisor counts), input wait is {fmt.percent(summary['input_wait_frac'])}."
    st.caption(caption)

    warmup = set(common.query(steady_state.warmup_steps, run_id))
    steady = by_step[~by_step["step"].isin(warmup)]
    show_all = st.toggle("Include warm-up steps", value=steady.empty, key="idle_all_steps",
                         help="steps that compiled; one can be a hundred steady steps long")  # fmt: skip
    if show_all or steady.empty:
        common.chart(figures.kind_area(by_step), by_step, f"run{run_id}_time_by_step.csv", "idle_steps")
    else:
        title = "Chip time per steady-state step by cause" + (f" ({len(warmup)} warm-up step(s) shown below)" if warmup else "")
        common.chart(figures.kind_area(steady, title), steady, f"run{run_id}_time_by_step.csv", "idle_steps")
        if warmup:
            warm = by_step[by_step["step"].isin(warmup)]
            per_step = warm.groupby("step")["chip_s_per_step"].sum()
            compile_s = warm[warm["kind"] == "recompile"].groupby("step")["chip_s_per_step"].sum()
            rows = [{"Step": int(st_), "Step time": fmt.duration(t), "Compiling": fmt.duration(compile_s.get(st_, 0.0))} for st_, t in per_step.items()]
            with st.expander(f"Warm-up: {len(rows)} step(s) that compiled, {fmt.duration(float(per_step.sum()))} in all", expanded=False):
                st.dataframe(rows, hide_index=True)
    _by_host(run_id, summary)

    left, right = st.columns(2)
    with left:
        st.subheader("Worst hosts")
        idle_hosts = common.query(distributions.worst_hosts, run_id, 10)
        st.dataframe(idle_hosts, hide_index=True, column_config={
            "host": st.column_config.NumberColumn("Host"), "slice": st.column_config.NumberColumn("Slice"),
            "idle_frac": st.column_config.ProgressColumn("Idle (of the host's chip time)", format="percent", min_value=0, max_value=1),
        })  # fmt: skip
    with right:
        st.subheader("Worst chips")
        n = st.number_input("How many", min_value=1, max_value=100, value=10, key="idle_worst_n")
        worst = common.query(queries.worst_chips, run_id, int(n))
        labels = {"idle_frac": "Idle", "input_wait_frac": "Input wait", "sync_wait_frac": "Sync wait"}
        config = _pct_columns([c for c in labels if c in worst.columns], labels)
        config.update({"chip": st.column_config.NumberColumn("Chip"), "host": st.column_config.NumberColumn("Host")})
        st.dataframe(worst, hide_index=True, column_config=config)
        st.caption("Shares of each chip's own time over the whole run.")
        common.download_csv(worst, f"run{run_id}_worst_chips.csv", key="csv_worst")


main()
