"""Compare / what-if: change a base run's knobs, simulate, and see both runs side by side.

The waterfall walks from the base run's steady-state step time (the tile above it) to the other
run's, one bar per cause. Each run's steady-state step is split by cause in the proportions its
steady steps spend on each (events tile every chip's step), so the bars add up exactly.
"""

from __future__ import annotations


import pandas as pd
import streamlit as st

from engine import load_catalog
from engine.scenario import HloModel, ParallelismSection, TrainingSection, TransformerModel
from profiler import format as fmt
from profiler import hlo_queries, queries, steady_state
from views import common, compare_model, figures, figures_hlo, figures_train

#: (summary key, label, formatter, lower is better, a fraction whose change is in percentage points)
_HEADLINES = [
    ("step_time_s", "Step time", fmt.duration, True, False),
    ("samples_per_s", "Samples/s", fmt.si, False, False),
    ("tokens_per_s", "Tokens/s", fmt.si, False, False),
    ("mfu", "MFU", fmt.percent, False, True),
    ("peak_hbm_bytes", "HBM peak", fmt.gib, True, False),
]

#: the form's choices and defaults, as the scenario declares them
_PRECISIONS, _PRECISION = common.scenario_choices(TrainingSection, "precision")
_REMATS, _REMAT = common.scenario_choices(TrainingSection, "remat")
_STATES, _STATE = common.scenario_choices(TrainingSection, "optimizer_state")
_WEIGHTS, _WEIGHT = common.scenario_choices(TrainingSection, "weight_dtype")
_REDUCES, _REDUCE = common.scenario_choices(TrainingSection, "gradient_reduce_dtype")
_SCHEDULES, _SCHEDULE = common.scenario_choices(ParallelismSection, "pipeline_schedule")
_SHARDS, _SHARD = common.scenario_choices(ParallelismSection, "fsdp_shard")
_COLLECTIVE_MATMUL_DEFAULT = ParallelismSection.model_fields["collective_matmul"].default
#: a mixture of experts' knobs (its default dispatch first)
_CAPACITY_DEFAULT = TransformerModel.model_fields["capacity_factor"].default
_DISPATCHES, _DISPATCH = common.scenario_choices(TransformerModel, "moe_dispatch")
#: an HLO model's per-op times: the compiler's estimates or Podscope's roofline
_COMPUTE_SOURCES, _COMPUTE_SOURCE = common.scenario_choices(HloModel, "compute_source")


def _hlo_knobs(base: dict) -> dict | None:
    """The what-if form of an HLO run: the module fixes the model, precision, remat and mesh, so only
    where it runs, the batch and the op times' source vary."""
    catalog = load_catalog()
    pod, training, model = base["pod"], base["training"], base["model"]
    with st.form("compare_what_if"):
        c1, c2, c3, c4 = st.columns(4)
        chips = sorted(catalog)
        chip = c1.selectbox("Chip", chips, index=chips.index(pod["chip"]) if pod["chip"] in chips else 0)
        topology = c2.text_input("Topology", pod["topology"])
        batch = c3.number_input("Global batch", min_value=1, value=int(training["global_batch"]))
        compute_source = c4.selectbox(
            "Compute source", _COMPUTE_SOURCES, index=_COMPUTE_SOURCES.index(model.get("compute_source", _COMPUTE_SOURCE)),
            help="each op's time: xla = XLA:TPU's estimated cycles where the module has them (a module compiled "
                 "for a TPU), podscope = Podscope's roofline for every op")  # fmt: skip
        st.caption("The HLO module fixes the model, precision, remat and mesh; compile it again to change those.")
        submitted = st.form_submit_button("Simulate", type="primary")
    if not submitted:
        return None
    overrides = {"pod.chip": chip, "pod.topology": topology, "training.global_batch": int(batch)}
    if compute_source != model.get("compute_source", _COMPUTE_SOURCE) or "compute_source" in model:
        overrides["model.compute_source"] = compute_source
    return {"name": common.what_if_name(base, overrides), **overrides}


def _knobs(base: dict) -> dict | None:
    """The what-if form; returns dotted-key overrides when submitted."""
    if (base.get("model") or {}).get("kind") == "hlo":
        return _hlo_knobs(base)
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
        precision = c4.selectbox("Precision", _PRECISIONS, index=_PRECISIONS.index(training.get("precision", _PRECISION)))
        c1, c2, c3, c4 = st.columns(4)
        expert = c1.number_input("Expert parallel", min_value=1, value=int(par.get("expert", 1)),
                                 help="chips each MoE layer's experts are spread over (the model needs experts)")
        pipeline = c2.number_input("Pipeline stages", min_value=1, value=int(par.get("pipeline", 1)))
        microbatches = c3.number_input("Microbatches", min_value=1, value=int(training.get("microbatches", 1)),
                                       help="pipeline microbatches; without a pipeline, gradient accumulation steps")
        schedule = c4.selectbox("Pipeline schedule", _SCHEDULES, index=_SCHEDULES.index(par.get("pipeline_schedule", _SCHEDULE)))
        c1, c2, c3, c4 = st.columns(4)
        context = c1.number_input("Context parallel", min_value=1, value=int(par.get("context", 1)),
                                  help="chips each sequence is split over (ring attention; transformers, a divisor of seq_len)")
        fsdp_shard = c2.selectbox("FSDP shards", _SHARDS, index=_SHARDS.index(par.get("fsdp_shard", _SHARD)),
                                  help="ZeRO stage: all = ZeRO-3, grads+optimizer = ZeRO-2, optimizer = ZeRO-1")
        optimizer_state = c3.selectbox("Optimizer state", _STATES, index=_STATES.index(training.get("optimizer_state", _STATE)),
                                       help="dtype of the optimizer's moments, whatever the weights' dtype")
        weight_dtype = c4.selectbox("Weights", _WEIGHTS, index=_WEIGHTS.index(training.get("weight_dtype", _WEIGHT)),
                                    help="dtype the weights and their gradients are stored and updated in: "
                                         "fp32 = mixed precision's master copy, bf16 = no master copy")
        c1, c2, c3, c4 = st.columns(4)
        remat = c1.selectbox("Remat", _REMATS, index=_REMATS.index(training.get("remat", _REMAT)))
        set_input = c2.checkbox("Set input pipeline", value=bool(inp), help="[input] prefetch and num_parallel_calls (tf.data)")
        prefetch = _choice(c3, "Prefetch (batches)", ["autotune", 0, 1, 2, 4, 8, 16], inp.get("prefetch", "autotune"))
        calls = _choice(c4, "Parallel calls", ["autotune", 1, 2, 4, 8, 16, 32, 64], inp.get("num_parallel_calls", "autotune"))
        c1, c2, _, _ = st.columns(4)
        collective_matmul = c1.checkbox(
            "Collective matmul", value=bool(par.get("collective_matmul", _COLLECTIVE_MATMUL_DEFAULT)),
            help="tensor-parallel collectives overlap the matmuls beside them, as a compile tuned for it "
                 "(MaxText's XLA options) schedules them; off: blocking, fully exposed, as libtpu's default options "
                 "leave many")  # fmt: skip
        reduce_dtype = c2.selectbox(
            "Gradients reduced in", _REDUCES, index=_REDUCES.index(training.get("gradient_reduce_dtype", _REDUCE)),
            help="compute: as the matmuls write them (bf16 unless fp32 training; XLA's SPMD partitioner); "
                 "weights: in the weights' dtype (pmap's psum, TF's CrossShardOptimizer)")  # fmt: skip
        model = base.get("model") or {}
        bn_group = capacity = dispatch = None
        if model.get("kind") == "transformer" and int(model.get("experts", 0)) > 0:
            c1, c2, _, _ = st.columns(4)
            capacity = c1.number_input("Capacity factor", min_value=0.0, value=float(model.get("capacity_factor", _CAPACITY_DEFAULT)), step=0.25,
                                       help="expert capacity over an even share of the routed tokens; 0 = dropless (grouped only)")
            dispatch = c2.selectbox("MoE dispatch", _DISPATCHES, index=_DISPATCHES.index(model.get("moe_dispatch", _DISPATCH)),
                                    help="grouped: a grouped matmul over the tokens each expert kept; dense: GShard einsums, "
                                         "every expert computes its whole capacity buffer")  # fmt: skip
        if model.get("kind") == "resnet50":
            bn_group = st.columns(4)[0].number_input(
                "Batch-norm group", min_value=1, value=int(model.get("batch_norm_group", 1)),
                help="chips that pool batch-norm statistics (distributed batch norm: one all-reduce per layer and pass); "
                     "a divisor of the data-parallel replicas")  # fmt: skip
        submitted = st.form_submit_button("Simulate", type="primary")
    if not submitted:
        return None
    overrides = {
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
    # the newer knobs are written only when set or changed, so older scenarios keep their shape
    for dotted, value, section, default in (
        ("parallelism.expert", int(expert), par, 1),
        ("parallelism.pipeline", int(pipeline), par, 1),
        ("parallelism.pipeline_schedule", schedule, par, _SCHEDULE),
        ("training.microbatches", int(microbatches), training, 1),
        ("parallelism.context", int(context), par, 1),
        ("parallelism.fsdp_shard", fsdp_shard, par, _SHARD),
        ("parallelism.collective_matmul", bool(collective_matmul), par, _COLLECTIVE_MATMUL_DEFAULT),
        ("training.optimizer_state", optimizer_state, training, _STATE),
        ("training.weight_dtype", weight_dtype, training, _WEIGHT),
        ("training.gradient_reduce_dtype", reduce_dtype, training, _REDUCE),
        *((("model.batch_norm_group", int(bn_group), model, 1),) if bn_group is not None else ()),
        *((("model.capacity_factor", float(capacity), model, _CAPACITY_DEFAULT), ("model.moe_dispatch", dispatch, model, _DISPATCH))
          if capacity is not None else ()),
    ):
        key = dotted.split(".")[1]
        if value != section.get(key, default) or key in section:
            overrides[dotted] = value
    if set_input:
        overrides["input.prefetch"] = prefetch
        overrides["input.num_parallel_calls"] = calls
    return {"name": common.what_if_name(base, overrides), **overrides}


def _choice(col, label: str, options: list, current):
    """A select box over tf.data-style values ("autotune" or an integer), starting at the base run's value."""
    if current not in options:
        options = [*options, current]
    return col.selectbox(label, options, index=options.index(current))


def _side_by_side(a: dict, b: dict) -> None:
    cols = st.columns(len(_HEADLINES))
    for col, (key, label, show, lower_better, fraction) in zip(cols, _HEADLINES):
        va, vb = a.get(key), b.get(key)
        if vb is None:
            col.metric(label, "n/a")
            continue
        delta, zero = fmt.change(vb, va, fraction=fraction)
        color = "off" if zero else ("inverse" if lower_better else "normal")
        base_text = show(va) if va is not None else "n/a"
        unit = "percentage points" if fraction else "relative change"
        col.metric(label, show(vb), delta, delta_color=color, delta_arrow="off" if zero else "auto", help=f"base: {base_text} ({unit})")
    for label, summary in (("Base step time", a), ("Other step time", b)):
        if (band := common.step_time_range_text(summary, label)) is not None:
            st.caption(band)
    if b.get("oom") and not a.get("oom"):
        st.error("The other run does not fit in HBM (see its Memory page).")


def _steady_split(run_id: int, summary: dict) -> pd.DataFrame:
    """The run's steady-state step time (the tile's number) split by cause: kind, s_per_step."""
    df = common.query(steady_state.steady_step_kind_s, run_id)
    total = float(df["s_per_step"].sum()) if not df.empty else 0.0
    step = summary.get("step_time_s")
    if total > 0 and step:
        df = df.assign(s_per_step=df["s_per_step"] * (float(step) / total))
    return df


def _differences(a: dict, b: dict, deltas: pd.DataFrame) -> None:
    """Name the causes that differ most; for a simulation beside an imported trace, say it is predicted vs measured."""
    lines = compare_model.cause_difference_lines(deltas)
    if not lines:
        st.caption("Both runs spend their steady-state step the same way, cause by cause.")
        return
    sources = {a.get("source"), b.get("source")}
    title = "Predicted against measured: the causes that differ most" if sources == {"simulated", "imported"} else "The causes that differ most"
    st.markdown(f"**{title}** (base → other):\n" + "\n".join(f"- {line}" for line in lines))


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
    labels = {int(r.run_id): common.run_label(r) for r in runs.itertuples()}
    same_model = common.query(queries.same_model_runs, run_id)
    default, related = compare_model.default_other_run(runs, run_id, base_summary.get("name"), base_summary.get("chip"), same_model)
    st.session_state["picker_cmp_id"] = common.picked_run(others, "cmp_id", default=default)
    other = st.selectbox("Compare with", others, format_func=labels.get, key="picker_cmp_id",
                         on_change=lambda: common.remember_run("cmp_id", st.session_state["picker_cmp_id"]))  # fmt: skip
    common.remember_run("cmp_id", int(other))
    if int(other) == default and not related:
        st.caption("No other run of this model yet, so this is the newest run on the same chip: pick the run to compare "
                   "above, or simulate a what-if of this one in the form.")  # fmt: skip
    other_summary = common.query(queries.run_summary, int(other))
    st.markdown(f"**{labels[other]}** against base **{labels[run_id]}**")
    _side_by_side(base_summary, other_summary)
    deltas = _breakdown(run_id, base_summary, int(other), other_summary)
    if deltas is not None:
        _time_to_train(base_summary, other_summary, deltas)
    _hlo_ops(run_id, base_summary, int(other), other_summary)


def _breakdown(run_id: int, base_summary: dict, other: int, other_summary: dict) -> pd.DataFrame | None:
    """Both runs' steady step by cause and the waterfall between them; returns the per-cause deltas (None without events)."""
    a = _steady_split(run_id, base_summary).assign(run=f"#{run_id} (base)")
    b = _steady_split(other, other_summary).assign(run=f"#{other}")
    if a.empty or b.empty:
        st.info("One of the runs stored no events, so there is no breakdown to compare.")
        return None
    both = pd.concat([a, b], ignore_index=True)
    deltas = a.set_index("kind")["s_per_step"].rename("a").to_frame().join(b.set_index("kind")["s_per_step"].rename("b"), how="outer").fillna(0.0)
    deltas = deltas.assign(delta_s=deltas["b"] - deltas["a"]).reset_index()
    order = [k for k in figures.KIND_COLORS if k in set(deltas["kind"])]
    deltas = deltas.set_index("kind").loc[order + sorted(set(deltas["kind"]) - set(order))].reset_index()
    _differences(base_summary, other_summary, deltas)
    left, right = st.columns(2)
    with left:
        common.chart(figures.compare_bars(both), both, "compare_breakdown.csv", "cmp_bars")
    st.caption(
        "Both charts split each run's steady-state step time (the Step time tile: median of the steps without a "
        "compile) by cause, in the proportions its steady steps spend on each."
    )
    with right:
        fig = figures.delta_waterfall(float(a["s_per_step"].sum()), deltas[["kind", "delta_s"]], float(b["s_per_step"].sum()))
        common.chart(fig, deltas, "compare_deltas.csv", "cmp_waterfall")
    return deltas


def _time_to_train(a: dict, b: dict, deltas: pd.DataFrame) -> None:
    """When both runs train to a target: the change in time to train, by step-time cause and by steps to target."""
    parts = compare_model.time_to_train_parts(a, b, deltas)
    if parts is None:
        return
    st.markdown(
        f"**Time to train**: {fmt.duration(a['time_to_train_s'])} → {fmt.duration(b['time_to_train_s'])} "
        f"({fmt.count(a['steps_to_target'])} → {fmt.count(b['steps_to_target'])} steps to target)"
    )
    fig = figures_train.train_time_waterfall(float(a["time_to_train_s"]), parts, float(b["time_to_train_s"]))
    common.chart(fig, parts, "compare_time_to_train.csv", "cmp_ttt_waterfall")
    st.caption(
        "Each step-time cause moves the time to train by its change in seconds per step times the mean of the two runs' "
        "steps to target; the steps to target move it by their change times the mean of the two step times. The two "
        "parts add up exactly; evaluation, compiles and checkpoints are the rest."
    )


_OP_PAIRS_CONFIG = {
    "name": st.column_config.TextColumn("Op"),
    "opcode": st.column_config.TextColumn("Opcode"),
    "a_ms": st.column_config.NumberColumn("Base (ms per step)", format="%.3f"),
    "b_ms": st.column_config.NumberColumn("Other (ms per step)", format="%.3f"),
    "delta_ms": st.column_config.NumberColumn("Change (ms per step)", format="%+.3f"),
}


def _hlo_ops(run_id: int, a: dict, other: int, b: dict) -> None:
    """Two HLO runs: each op's time per step in both, matched by instruction name."""
    xla_a, xla_b = a.get("compute_source") == "xla", b.get("compute_source") == "xla"
    pairs = common.query(hlo_queries.hlo_op_pairs, run_id, other, xla_a, xla_b)
    if pairs is None:
        return
    st.subheader("Per op: the two HLO runs")
    ta = common.query(hlo_queries.hlo_op_totals, run_id, xla_a)
    tb = common.query(hlo_queries.hlo_op_totals, other, xla_b)
    cols = st.columns(3)
    cols[0].metric("Compute, base", fmt.duration(ta["charged_s"]), help=f"per step, compute source {a.get('compute_source')}")
    delta, zero = fmt.change(tb["charged_s"], ta["charged_s"])
    cols[1].metric("Compute, other", fmt.duration(tb["charged_s"]), delta, delta_color="off" if zero else "inverse",
                   help=f"per step, compute source {b.get('compute_source')}")  # fmt: skip
    matched = int(pairs["matched"].iloc[0]) if not pairs.empty else 0
    cols[2].metric("Ops matched", fmt.count(matched), help="top-level ops with the same instruction name and a time in both runs")
    if a.get("hlo_sha256") != b.get("hlo_sha256"):
        st.caption("The runs simulate different modules: ops are matched by instruction name.")
    if pairs.empty:
        st.info("The two modules share no op by name.")
        return
    shown = f"the {len(pairs):,} ops whose time moved most" if len(pairs) < matched else f"all {len(pairs):,} matched ops"
    fig = figures_hlo.op_pair_scatter(pairs, f"base (#{run_id}, {a.get('compute_source')})", f"other (#{other}, {b.get('compute_source')})",
                                      title=f"Each op's time per step ({shown})")  # fmt: skip
    common.chart(fig, pairs, f"compare_hlo_ops_{run_id}_{other}.csv", "cmp_hlo_ops")
    view = pairs.head(hlo_queries.HLO_TOP_OPS).assign(a_ms=pairs["a_s"] * 1e3, b_ms=pairs["b_s"] * 1e3, delta_ms=pairs["delta_s"] * 1e3)
    st.markdown(f"**The {len(view)} ops whose time per step moved most**")
    st.dataframe(view[list(_OP_PAIRS_CONFIG)], hide_index=True, column_config=_OP_PAIRS_CONFIG)

main()
