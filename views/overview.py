"""Overview: headline numbers, where chip time goes, step time, and a quick what-if."""

from __future__ import annotations

import streamlit as st

from engine import ScenarioError, load_catalog, scenario_from_dict
from engine.errors import PodscopeError
from engine.scenario import apply_overrides
from profiler import advice_words, queries
from profiler import format as fmt
from views import common, figures


def _headline(summary: dict) -> None:
    cols = st.columns(5)
    step = summary.get("step_time_s")
    cols[0].metric("Step time", fmt.duration(step) if step else "n/a", help="median of the steady-state steps (steps without a compile)")
    sps = summary.get("samples_per_s")
    tps = summary.get("tokens_per_s")
    if tps:
        cols[1].metric("Throughput (tokens/s)", fmt.si(tps), help=f"{tps:,.0f} tokens/s, steady state")
    else:
        cols[1].metric("Throughput (samples/s)", fmt.si(sps) if sps else "n/a", help=f"{sps:,.0f} samples/s, steady state" if sps else None)
    mfu = summary.get("mfu")
    cols[2].metric("MFU", fmt.percent(mfu), help="model FLOP/s achieved over the slice's peak FLOP/s")
    topo = summary.get("topology")
    cols[3].metric("Chips", fmt.chips_label(summary.get("chips"), summary.get("chip")),
                   help=f"{summary.get('chips'):,} x {summary.get('chip')}" + (f", {topo} torus" if topo else ""))  # fmt: skip
    peak, cap = summary.get("peak_hbm_bytes"), summary.get("hbm_capacity_bytes")
    band = summary.get("peak_hbm_range_bytes")
    hbm_help = "peak HBM of the busiest chip / capacity per chip" + (
        f"; 80% range of the TPU compiler's peak {fmt.gib(band[0], 1)} to {fmt.gib(band[1], 1)}" if band else "")  # fmt: skip
    cols[4].metric("HBM peak", fmt.gib_of(peak, cap) if peak and cap else "n/a", help=hbm_help)
    if (band := common.step_time_range_text(summary)) is not None:
        st.caption(band)
    _time_to_train(summary)
    if (assumed := _assumptions_text(summary)) is not None:
        st.caption(assumed)
    if summary.get("oom"):
        st.error("This run does not fit in HBM: it is out of memory. See the Memory page for what overflowed.")


def _time_to_train(summary: dict) -> None:
    """Steps, wall time, chip-hours and cost to the scenario's target; nothing without a ``[convergence]`` section."""
    total = summary.get("time_to_train_s")
    if total is None:
        return
    cols = st.columns(4)
    cols[0].metric("Steps to target", fmt.count(summary.get("steps_to_target")),
                   help=f"{fmt.si(summary.get('samples_to_target'))} samples to the scenario's target")  # fmt: skip
    lo, hi = summary.get("time_to_train_range_s") or (None, None)
    cols[1].metric("Time to train", fmt.duration(total),
                   help=f"likely {fmt.duration(lo)} to {fmt.duration(hi)}: compile, steps, evaluations, checkpoints and failures")  # fmt: skip
    cols[2].metric("Chip-hours", fmt.si(summary.get("chip_hours")))
    cols[3].metric("Cost", fmt.usd(summary.get("cost_usd")), help="chip-hours x [cost] usd_per_chip_hour" if summary.get("cost_usd") is not None
                   else "set [cost] usd_per_chip_hour in the scenario to price the chip-hours")  # fmt: skip
    parts = summary.get("time_to_train_breakdown_s") or {}
    if parts:
        st.caption("Time to train: " + ", ".join(f"{k.replace('_', ' ')} {fmt.duration(v)}" for k, v in parts.items() if v)
                   + f"; likely between {fmt.duration(lo)} and {fmt.duration(hi)} (the step-time range and the "
                   "convergence fit's leave-one-out range together).")  # fmt: skip


def _assumptions_text(summary: dict) -> str | None:
    """How the run assumed the job runs (summary keys from engine/model/assumptions.py); None for imported runs."""
    if "remat_policy" not in summary:
        return None
    parts = []
    if summary.get("attention_kernel"):
        parts.append(f"attention kernel **{summary['attention_kernel']}**")
    parts.append(f"remat **{summary['remat_policy']}**")
    parts.append(f"precision {summary.get('precision_recipe')}")
    text = "Assumed: " + "; ".join(parts) + "."
    defaults = summary.get("defaults_assumed") or {}
    if defaults:
        text += " Not named by the scenario, so the default was taken: " + ", ".join(f"`{k}` = {v}" for k, v in defaults.items()) + "."
    return text


def _what_if(run_id: int) -> None:
    scenario = common.query(queries.run_scenario, run_id)
    if scenario is None:
        st.caption("What-if needs a simulated run as its base; this run was imported.")
        return
    catalog = load_catalog()
    with st.form("what_if"):
        st.markdown(f"**What if…** this run (`{scenario['name']}`) ran with:")
        c1, c2, c3 = st.columns(3)
        chips = sorted(catalog)
        chip = c1.selectbox("Chip", chips, index=chips.index(scenario["pod"]["chip"]))
        topology = c2.text_input("Topology", scenario["pod"]["topology"], help="chips per torus axis, e.g. 16x16 or 4x4x8")
        batch = c3.number_input("Global batch", min_value=1, value=int(scenario["training"]["global_batch"]), step=1)
        submitted = st.form_submit_button("Simulate")
    if not submitted:
        return
    raw = apply_overrides(
        scenario,
        {
            "name": common.what_if_name(scenario, {"pod.chip": chip, "pod.topology": topology, "training.global_batch": int(batch)}),
            "pod.chip": chip,
            "pod.topology": topology,
            "training.global_batch": int(batch),
            "parallelism.data": None,  # the data axis follows the new slice; fsdp and tensor stay
        },
    )
    try:
        new = scenario_from_dict(raw, source="what-if form")
        with st.spinner("Simulating..."):
            summary = common.simulate_and_store(new)  # simulates with the file released
    except ScenarioError as e:
        st.error("\n\n".join(f"**{k or 'scenario'}**: {m}" for k, m in e.problems))
        return
    except PodscopeError as e:
        st.error(str(e))
        return
    common.select_run(summary["run_id"])
    st.rerun()


_SEVERITY = {"critical": st.error, "warning": st.warning, "info": st.info}
_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def _advice(summary: dict) -> None:
    """The advisor's findings (summary key ``advice``), most severe first; absent when a run has none."""
    advice = summary.get("advice")
    if advice is None:
        return
    st.subheader("Advisor")
    if not advice:
        st.success("The advisor found nothing to flag in this run.")
        return
    for item in sorted(advice, key=lambda a: _SEVERITY_ORDER.get(a.get("severity"), 3)):
        show = _SEVERITY.get(item.get("severity"), st.info)
        finding = advice_words.describe(item, summary)
        ev = finding.evidence_text()
        show(f"**{finding.title}**: {finding.message}" + (f"\n\n_{ev}_" if ev else ""))


def _fact(key: str, value) -> str:
    if value is None:
        return "n/a"
    if key in ("params", "events", "chips", "hosts", "steps"):
        return fmt.count(value)
    return str(value)


def _metadata(run_id: int, summary: dict) -> None:
    with st.expander("Run metadata"):
        facts = {
            k: summary.get(k)
            for k in ("run_id", "name", "source", "chip", "chips", "hosts", "slices", "topology", "steps", "params", "events")
        }
        st.dataframe(
            [{"Field": k.replace("_", " "), "Value": _fact(k, v)} for k, v in facts.items()], hide_index=True, width="stretch"
        )
        st.markdown("**Stored tables** (rows of this run)")
        st.dataframe(
            [{"Table": t, "Rows": n} for t, n in common.query(queries.run_tables, run_id).items()], hide_index=True,
            column_config={"Rows": st.column_config.NumberColumn("Rows", format="localized")},
        )  # fmt: skip
        scenario = common.query(queries.run_scenario, run_id)
        if scenario is not None:
            st.markdown("**Scenario**")
            st.json(scenario, expanded=False)
        st.markdown("**Summary**")
        st.json(summary, expanded=False)
        rng = common.query(queries.step_range, run_id)
        if rng is not None:
            common.export_button(run_id, rng[0], min(rng[1], rng[0] + 9), key="ov_export")


def main() -> None:
    st.title("Overview")
    run_id = common.run_picker()
    if run_id is None:
        return
    summary = common.query(queries.run_summary, run_id)
    _headline(summary)
    left, right = st.columns([1, 1])
    with left:
        df = common.query(queries.breakdown, run_id)
        fig = figures.breakdown_bar(df, "Where chip time goes (whole run, compile included)") if not df.empty else figures.empty_figure("No events in this run")
        st.plotly_chart(fig, width="stretch")
    with right:
        steps = common.query(queries.step_times, run_id)
        fig = figures.step_time_line(steps) if not steps.empty else figures.empty_figure("No steps in this run")
        st.plotly_chart(fig, width="stretch")
    _advice(summary)
    _what_if(run_id)
    _metadata(run_id, summary)


main()
