"""Recompilation: when XLA compiled during the run, what it cost, and which shape change caused it."""

from __future__ import annotations

import streamlit as st

from profiler import format as fmt
from profiler import queries
from views import common, figures


def main() -> None:
    ctx = common.run_context("Recompilation")
    if ctx is None:
        return
    run_id, summary = ctx
    by_step = common.query(queries.compiles_by_step, run_id)
    cols = st.columns(3)
    n = summary.get("recompiles")
    cols[0].metric("Recompiles", f"{n:,}" if n is not None else ("0" if by_step is not None and by_step.empty else "n/a"))
    comp_s = summary.get("compile_s")
    cols[1].metric("Compile time", fmt.duration(comp_s))
    cols[2].metric("Share of chip time", fmt.percent((summary.get("breakdown") or {}).get("recompile", 0)), help="of all chip time in the run")
    if by_step is None or summary.get("source") == "imported":
        st.info("No compilation log stored for this run: compilation is modelled only for scenarios with a [compile] section, and imported traces carry none.")
        return
    if by_step.empty:
        st.success("No compilations in this run: every step reused the compiled program.")
        return
    common.chart(figures.compiles_over_steps(by_step, int(summary.get("steps") or by_step["step"].max() + 1)), by_step, f"run{run_id}_compiles.csv", "comp_steps")
    by_cause = common.query(queries.compiles_by_cause, run_id)
    common.chart(figures.compiles_by_cause_bar(by_cause), by_cause, f"run{run_id}_compile_causes.csv", "comp_cause")
    st.dataframe(by_cause, hide_index=True, column_config={
        "cause": st.column_config.TextColumn("Cause"), "compiles": st.column_config.NumberColumn("Compiles", format="localized"),
        "compile_s": st.column_config.NumberColumn("Compile time", format="%.1f s"),
        "signatures": st.column_config.NumberColumn("Distinct signatures", format="localized"),
        "first_step": st.column_config.NumberColumn("First step"), "last_step": st.column_config.NumberColumn("Last step"),
    })  # fmt: skip


main()
