"""Idle time: where each chip's time goes, by cause, over steps and per host, and the worst offenders.

Attribution is exclusive (events tile every chip's step), so the causes sum to wall time.
"""

from __future__ import annotations

import streamlit as st

from profiler import queries
from views import common, figures


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
    cols = st.columns(5)
    cols[0].metric("Idle share", f"{idle * 100:.1f}%", help="chip time neither computing nor in exposed collectives")
    cols[1].metric("Input wait", f"{breakdown.get('input_wait', 0) * 100:.1f}%")
    cols[2].metric("Sync wait", f"{breakdown.get('sync_wait', 0) * 100:.1f}%")
    cols[3].metric("Recompile", f"{breakdown.get('recompile', 0) * 100:.1f}%")
    cols[4].metric("Pipeline bubble", f"{breakdown.get('bubble', 0) * 100:.1f}%", help="stages idle while the pipeline fills and drains")

    common.chart(figures.kind_area(by_step), by_step, f"run{run_id}_time_by_step.csv", "idle_steps")
    by_host = common.query(queries.kind_by_host, run_id)
    common.chart(figures.host_bars(by_host), by_host, f"run{run_id}_time_by_host.csv", "idle_hosts")

    left, right = st.columns(2)
    with left:
        st.subheader("Worst hosts")
        idle_hosts = (
            by_host[~by_host["kind"].isin(["compute", "collective"])].groupby("host", as_index=False)["frac"].sum()
            .rename(columns={"frac": "idle_frac"}).sort_values("idle_frac", ascending=False).head(10)
        )  # fmt: skip
        st.dataframe(idle_hosts, hide_index=True, column_config={"idle_frac": st.column_config.ProgressColumn("idle", format="percent", min_value=0, max_value=1)})
    with right:
        st.subheader("Worst chips")
        n = st.number_input("How many", min_value=1, max_value=100, value=10, key="idle_worst_n")
        worst = common.query(queries.worst_chips, run_id, int(n))
        st.dataframe(worst, hide_index=True, column_config={
            c: st.column_config.NumberColumn(c.removesuffix("_frac").replace("_", " "), format="percent")
            for c in ("idle_frac", "input_wait_frac", "sync_wait_frac")
        })  # fmt: skip
        common.download_csv(worst, f"run{run_id}_worst_chips.csv", key="csv_worst")


main()
