"""Memory: HBM by category against capacity, HBM through a step, per-chip peaks, and the OOM verdict."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from engine.memory.hbm import REMAT_TARGET_FRACTION
from profiler import format as fmt
from profiler import distributions, queries
from views import common, figures, palette


def _gib(x: float | None) -> str:
    return fmt.gib(x, 2)


def _verdict(summary: dict) -> None:
    peak, cap = summary.get("peak_hbm_bytes"), summary.get("hbm_capacity_bytes")
    cols = st.columns(3)
    cols[0].metric("Peak HBM per chip", _gib(peak))
    cols[1].metric("Capacity per chip", _gib(cap))
    cols[2].metric("Headroom", _gib(cap - peak) if peak is not None and cap else "n/a")
    band, basis, usable = summary.get("peak_hbm_range_bytes"), summary.get("peak_hbm_range_basis"), summary.get("hbm_usable_bytes")
    if band and basis:
        st.caption(f"80% range of the TPU compiler's peak: {_gib(band[0])} to {_gib(band[1])}, from its spread around "
                   f"Podscope's over {basis['programs']:,} compiled '{basis['group']}' programs.")  # fmt: skip
    uncertain = summary.get("hbm_verdict") == "may not fit" and usable
    if uncertain:
        st.warning(f"{'May fit' if summary.get('oom') else 'May not fit'}: that range holds the {_gib(usable)} a step may "
                   "use. `podscope run --xla` compiles the scenario for XLA's own peak and verdict.")  # fmt: skip
    if not summary.get("oom"):
        if peak is not None and cap and not uncertain:
            st.success(f"Fits: the busiest chip uses {fmt.percent(peak / cap)} of its HBM capacity.")
        recomputed = summary.get("hbm_recomputed_bytes") or 0.0
        if recomputed > 0 and summary.get("hbm_source") != "xla":
            st.info(f"It fits because XLA's rematerialization recomputes {_gib(recomputed)} at the peak that the program "
                    f"would otherwise keep (activations, or weights gathered again), as XLA does past "
                    f"{fmt.percent(REMAT_TARGET_FRACTION)} of the HBM a program may use. Those FLOPs are not in the step "
                    "time.")  # fmt: skip
        return
    detail = summary.get("oom_detail")
    lines = ["**Out of memory**: this job does not fit in HBM."]
    if isinstance(detail, dict):
        over = detail.get("over_bytes")
        lines.append(
            f"Chip {detail.get('chip', '?')} overflows by {_gib(over)}; the largest term is **{palette.memory_label(str(detail.get('term', '?'))).lower()}**."
        )
        for s in detail.get("suggestions") or []:
            lines.append(f"- {s}")
    elif peak is not None and cap:
        lines.append(f"Peak {_gib(peak)} exceeds capacity {_gib(cap)} by {_gib(peak - cap)}.")
    st.error("\n\n".join(lines))


def _parallel_terms(summary: dict) -> None:
    """Mixture-of-experts, pipeline, context-ring, ZeRO-stage and optimizer-state terms of the footprint, when the run has them."""
    items = []
    if summary.get("hbm_expert_weight_bytes") is not None:
        items.append(("Expert weights (states) per chip", _gib(summary["hbm_expert_weight_bytes"]),
                      f"this chip's {summary.get('moe_experts', '?')} / expert-axis share of the routed experts' fp32 weights, "
                      "gradients and optimizer state (inside params/grads/optimizer above)"))  # fmt: skip
    if summary.get("hbm_pipeline_activation_bytes") is not None:
        items.append(("Pipeline activations in flight", _gib(summary["hbm_pipeline_activation_bytes"]),
                      f"the first stage's activations for the microbatches in flight under {summary.get('pipeline_schedule')} "
                      f"({summary.get('pipeline_microbatches')} microbatches, {summary.get('pipeline_stages')} stages)"))  # fmt: skip
    if summary.get("hbm_ring_kv_buffer_bytes") is not None:
        items.append(("Ring attention K/V buffers", _gib(summary["hbm_ring_kv_buffer_bytes"]),
                      f"two K/V blocks in flight per chip (with dK/dV in the backward pass) over a {summary.get('context_parallel')}-chip "
                      "context ring; inside temporary above; activations hold 1 / context of each sequence"))  # fmt: skip
    if summary.get("fsdp_shard") is not None:
        stage = {"grads+optimizer": "ZeRO-2", "optimizer": "ZeRO-1"}.get(summary["fsdp_shard"], "ZeRO-3")
        replicated = "weights" if summary["fsdp_shard"] == "grads+optimizer" else "weights and gradients"
        items.append(("FSDP shards", f"{stage}: {summary['fsdp_shard']}",
                      f"{replicated} replicated over the fsdp axis (params/grads above hold the whole tensor shard); "
                      "the optimizer state stays sharded"))  # fmt: skip
    if summary.get("optimizer_state") is not None:
        items.append(("Optimizer moments", str(summary["optimizer_state"]),
                      "the optimizer's moments in this dtype (the optimizer term above), whatever the weights' dtype"))
    if summary.get("weight_dtype") is not None:
        items.append(("Weights", str(summary["weight_dtype"]),
                      "weights and their gradients stored, reduced and updated in this dtype, without an fp32 master copy "
                      "(the params and grads terms above)"))
    if not items:
        return
    cols = st.columns(len(items))
    for col, (label, value, why) in zip(cols, items):
        col.metric(label, value, help=why)


def main() -> None:
    ctx = common.run_context("Memory")
    if ctx is None:
        return
    run_id, summary = ctx
    _verdict(summary)
    _parallel_terms(summary)
    cap = summary.get("hbm_capacity_bytes")
    breakdown = summary.get("hbm_breakdown_bytes") or {}
    timeline = common.query(queries.memory_timeline, run_id)
    left, right = st.columns(2)
    with left:
        if breakdown:
            df = pd.DataFrame({"category": list(breakdown), "bytes": [float(v) for v in breakdown.values()]})
            common.chart(figures.hbm_bar(df, cap), df, f"run{run_id}_hbm_breakdown.csv", "mem_bar")
        else:
            st.info("This run carries no HBM breakdown (an imported trace without memory data).")
    with right:
        if timeline is not None:
            common.chart(figures.memory_timeline_area(timeline, cap), timeline, f"run{run_id}_hbm_timeline.csv", "mem_tl")
        else:
            st.info("No in-step memory timeline stored for this run (the engine's memory timeline adds it).")
    bins = common.query(distributions.chip_histogram, run_id, "hbm_peak_bytes", 40)
    if bins is not None:
        common.chart(figures.chip_memory_histogram(bins, cap), bins, f"run{run_id}_chip_memory_histogram.csv", "mem_chips")
        top = common.query(distributions.top_chips, run_id, "hbm_peak_bytes", 10)
        st.markdown("**Chips with the highest peak**")
        st.dataframe(
            top.assign(peak_gib=top["value"] / fmt.GIB).drop(columns="value"), hide_index=True,
            column_config={
                "chip": st.column_config.NumberColumn("Chip"), "host": st.column_config.NumberColumn("Host"),
                "slice": st.column_config.NumberColumn("Slice"),
                "x": st.column_config.NumberColumn("x"), "y": st.column_config.NumberColumn("y"), "z": st.column_config.NumberColumn("z"),
                "peak_gib": st.column_config.NumberColumn("Peak HBM", format="%.2f GiB"),
            },
        )  # fmt: skip
    else:
        st.caption("Per-chip peaks are not stored for this run; every chip is taken to hold the same footprint as above.")

main()
