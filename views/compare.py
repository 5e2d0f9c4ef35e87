"""Compare / what-if: change a base run's knobs, simulate, and see both runs side by side.

The waterfall walks from the base run's mean step time to the other run's, one bar per cause;
because events tile every chip's step, the bars add up exactly.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine import load_catalog
from profiler import queries
from views import common, figures

_HEADLINES = [
    ("step_time_s", "Step time", lambda v: f"{v * 1e3:,.2f} ms", True),
    ("samples_per_s", "Samples/s", common.si, False),
    ("tokens_per_s", "Tokens/s", common.si, False),
    ("mfu", "MFU", lambda v: f"{v * 100:.1f}%", False),
    ("peak_hbm_bytes", "HBM peak", lambda v: f"{v / 2**30:.2f} GiB", True),
]


def _knobs(base: dict) -> dict | None:
    """The what-if form; returns dotted-key overrides when submitted."""
    catalog = load_catalog()
    pod, training, par = base["pod"], base["training"], base.get("parallelism") or {}
    inp = base.get("input") or {}
    with st.form("compare_what_if"):
        c1, c2, c3, c4 = st.columns(4)
        chips = sorted(catalog)
        chip = c1.selectbox("Chip", chips, index=chips.index(pod["chip"]) if pod["chip"] in chips else 0)
        topology = c2.text_input("Topology", pod["topology"])
        slices = c3.number_input("Slices", min_value=1, value=int(pod.get("slices", 1)))
        batch = c4.number_input("Global batch", min_value=1, value=int(training["global_batch"]))
        c1, c2, c3, c4 = st.columns(4)
        data = c1.number_input("Data parallel (0 = the rest)", min_value=0, value=0)
        fsdp = c2.number_input("FSDP", min_value=1, value=int(par.get("fsdp", 1)))
        tensor = c3.number_input("Tensor", min_value=1, value=int(par.get("tensor", 1)))
        precisions = ["bf16", "int8", "fp32"]
        precision = c4.selectbox("Precision", precisions, index=precisions.index(training.get("precision", "bf16")))
        c1, c2, c3, c4 = st.columns(4)
        remats = ["none", "minimal", "selective", "full"]
        remat = c1.selectbox("Remat", remats, index=remats.index(training.get("remat", "none")) if training.get("remat", "none") in remats else 0)
        set_input = c2.checkbox("Set input pipeline", value=bool(inp), help="[input] prefetch and num_parallel_calls (tf.data)")
        prefetch = _choice(c3, "Prefetch (batches)", ["autotune", 0, 1, 2, 4, 8, 16], inp.get("prefetch", "autotune"))
        calls = _choice(c4, "Parallel calls", ["autotune", 1, 2, 4, 8, 16, 32, 64], inp.get("num_parallel_calls", "autotune"))
        submitted = st.form_submit_button("Simulate", type="primary")
    if not submitted:
        return None
    overrides = {
        "name": f"{base['name']} [what-if {chip} {topology}x{slices} b{batch}]",
        "pod.chip": chip,
        "pod.topology": topology,
        "training.global_batch": int(batch),
        "training.precision": precision,
        "training.remat": remat,
        "parallelism.data": int(data) or None,
        "parallelism.fsdp": int(fsdp),
        "parallelism.tensor": int(tensor),
    }
    if int(slices) != int(pod.get("slices", 1)) or "slices" in pod:
        overrides["pod.slices"] = int(slices)
    if set_input:
        overrides["input.prefetch"] = prefetch
        overrides["input.num_parallel_calls"] = calls
    return overrides


def _choice(col, label: str, options: list, current):
    """A select box over tf.data-style values ("autotune" or an integer), starting at the base run's value."""
    if current not in options:
        options = [*options, current]
    return col.selectbox(label, options, index=options.index(current))


def _side_by_side(a: dict, b: dict) -> None:
    cols = st.columns(len(_HEADLINES))
    for col, (key, label, fmt, lower_better) in zip(cols, _HEADLINES):
        va, vb = a.get(key), b.get(key)
        if vb is None:
            col.metric(label, "n/a")
            continue
        delta = None
        if va:
            delta = f"{(vb - va) / va * 100:+.1f}%"
        col.metric(label, fmt(vb), delta, delta_color="inverse" if lower_better else "normal", help=f"base: {fmt(va) if va is not None else 'n/a'}")
    for label, summary in (("Base step time", a), ("Other step time", b)):
        if (band := common.step_time_range_text(summary, label)) is not None:
            st.caption(band)
    if b.get("oom") and not a.get("oom"):
        st.error("The other run does not fit in HBM (see its Memory page).")


def main() -> None:
    ctx = common.run_context("Compare / what-if", key="run_id")
    if ctx is None:
        return
    run_id, base_summary = ctx
    scenario = common.query(queries.run_scenario, run_id)
    st.subheader(f"What if #{run_id} {base_summary.get('name', '')} ran with…")
    if scenario is None:
        st.info("This run was imported, so there is no scenario to vary; pick a simulated run as the base, or compare below.")
    else:
        overrides = _knobs(scenario)
        if overrides is not None:
            bar = st.progress(0.1, text="Validating and simulating...")
            summary = common.simulate_variant(scenario, overrides, source="what-if form")
            if summary is not None:
                bar.progress(1.0, text="Stored")
                common.select_run(summary["run_id"], key="cmp_id")
                st.rerun()
            bar.empty()
    runs = common.query(queries.list_runs)
    others = [int(r) for r in runs["run_id"] if int(r) != run_id]
    if not others:
        st.info("Simulate a variant above to compare it with this run.")
        return
    labels = {int(r.run_id): f"#{r.run_id} {r.name} ({r.chips} x {r.chip})" for r in runs.itertuples()}
    pending = st.session_state.pop("select_cmp_id", None)
    if pending in others:
        st.session_state["cmp_pick"] = pending
    elif st.session_state.get("cmp_pick") not in others:
        st.session_state["cmp_pick"] = others[0]
    other = st.selectbox("Compare with", others, format_func=labels.get, key="cmp_pick")
    other_summary = common.query(queries.run_summary, int(other))
    st.markdown(f"**{labels[other]}** against base **{labels[run_id]}**")
    _side_by_side(base_summary, other_summary)
    a = common.query(queries.step_kind_s, run_id).assign(run=f"#{run_id} base")
    b = common.query(queries.step_kind_s, int(other)).assign(run=f"#{other}")
    if a.empty or b.empty:
        st.info("One of the runs stored no events, so there is no breakdown to compare.")
        return
    both = pd.concat([a, b], ignore_index=True)
    deltas = a.set_index("kind")["s_per_step"].rename("a").to_frame().join(b.set_index("kind")["s_per_step"].rename("b"), how="outer").fillna(0.0)
    deltas = deltas.assign(delta_s=deltas["b"] - deltas["a"]).reset_index()
    order = [k for k in figures.KIND_COLORS if k in set(deltas["kind"])]
    deltas = deltas.set_index("kind").loc[order + sorted(set(deltas["kind"]) - set(order))].reset_index()
    left, right = st.columns(2)
    with left:
        common.chart(figures.compare_bars(both), both, "compare_breakdown.csv", "cmp_bars")
    with right:
        fig = figures.delta_waterfall(float(a["s_per_step"].sum()), deltas[["kind", "delta_s"]], float(b["s_per_step"].sum()))
        common.chart(fig, deltas, "compare_deltas.csv", "cmp_waterfall")


main()
