"""Plan: which slice, mesh and remat should this job use? Search them, see the Pareto front, simulate a point.

The base is a stored run's scenario or a bundled scenario; the search is the planner's
(:mod:`engine.planning.search`, analytic, the same cost functions as a full run). A chosen point is
simulated fully, stored, and opened on Overview or Compare, or (with ``podscope[tpu]``) compiled for its
chip and topology by the TPU compiler, whose HBM peak and verdict are shown beside Podscope's.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from engine import PodscopeError, load_catalog, load_scenario, scenario_from_dict
from engine.errors import PlanError
from engine.planning.planner import OBJECTIVES
from engine.pod.topology import is_supported_shape
from engine.scenario import TrainingSection
from profiler import api, queries
from profiler.plan import OBJECTIVE_LABELS, hbm_verdict_of, plan_frame, plan_from_dict, run_plan, xla_check_scenario
from profiler.tpu_capture import TPU_EXTRA_HINT, tpu_compiler_missing
from views import common, figures

#: slice shapes offered per torus dimension (those the chip supports and holds are shown)
_SHAPES = {
    3: ["2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16", "16x16x16"],
    2: ["1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"],
}
_REMATS, _ = common.scenario_choices(TrainingSection, "remat")  # the policies the engine accepts


def _base() -> tuple[dict[str, Any], int | None] | None:
    """The base scenario (as a dict) and its stored run id (None for a bundled scenario)."""
    where = st.radio("Base", ["Bundled scenario", "Stored run"], horizontal=True, key="plan_base_kind")
    if where == "Stored run":
        runs = common.query(queries.list_runs)
        if runs.empty:
            st.info("No stored runs yet: pick a bundled scenario as the base.")
            return None
        labels = {int(r.run_id): f"#{r.run_id} {r.name} ({r.chips} x {r.chip})" for r in runs.itertuples()}
        run_id = st.selectbox("Stored run", list(labels), format_func=labels.get, key="plan_base_run")
        scenario = common.query(queries.run_scenario, int(run_id))
        if scenario is None:
            st.info("This run was imported, so there is no scenario to plan from; pick a simulated run.")
            return None
        return scenario, int(run_id)
    paths = {p.stem: p for p in api.bundled_scenarios()}
    name = st.selectbox("Bundled scenario", list(paths), key="plan_base_file",
                        index=list(paths).index("llm-1b-v5p-64") if "llm-1b-v5p-64" in paths else 0)  # fmt: skip
    return load_scenario(paths[name]).to_dict(), None


def _form(base: dict[str, Any]) -> dict[str, Any] | None:
    """The search form; returns the plan's [search] table when submitted."""
    chip = load_catalog()[base["pod"]["chip"]]
    shapes = [s for s in _SHAPES[chip.torus_dims] if is_supported_shape(chip, tuple(int(x) for x in s.split("x")))]
    if base["pod"]["topology"] not in shapes:
        shapes.insert(0, base["pod"]["topology"])
    i = shapes.index(base["pod"]["topology"])
    has_tokens = base["model"]["kind"] == "transformer"
    objectives = [o for o in OBJECTIVES if has_tokens or not o.startswith("tokens")]
    with st.form("plan_form"):
        c1, c2, c3 = st.columns(3)
        topologies = c1.multiselect("Slice shapes", shapes, default=shapes[i : i + 3])
        remats = c2.multiselect("Remat", _REMATS, default=[r for r in _REMATS if r != "selective"])
        objective = c3.selectbox("Objective", objectives, index=objectives.index("tokens_per_s_per_chip" if has_tokens else "samples_per_s_per_chip"),
                                 format_func=lambda o: OBJECTIVE_LABELS.get(o, o))  # fmt: skip
        c1, c2, c3 = st.columns(3)
        budget = c1.number_input("Chip budget (max chips)", min_value=1, value=4096)
        batches = c2.text_input("Global batches (comma-separated)", str(base["training"]["global_batch"]))
        slices = c3.number_input("Slices", min_value=1, value=int(base["pod"].get("slices", 1)))
        sure = st.checkbox("Only configurations the TPU compiler's HBM range says fit", key="plan_hbm_range",
                           help="rule out a point whose 80% range of XLA's peak (from the compiler grid) reaches past the usable "
                                "HBM: hbm_fit = \"range\" (docs/planner.md)")  # fmt: skip
        submitted = st.form_submit_button("Search", type="primary")
    if not submitted:
        return None
    try:
        global_batches = [int(b) for b in batches.replace(" ", "").split(",") if b]
    except ValueError:
        st.error(f"**Global batches**: {batches!r} is not a comma-separated list of integers, e.g. 256, 512")
        return None
    return {
        "objective": objective,
        "mesh": "auto",
        "max_chips": int(budget),
        "pod.topology": topologies,
        "pod.slices": [int(slices)],
        "training.remat": remats,
        "training.global_batch": global_batches,
        "hbm_fit": "range" if sure else "peak",
    }


def _table(result: Any, df: pd.DataFrame, unit: str) -> pd.DataFrame:
    best = df[df["feasible"]].sort_values("rank").head(10)
    verdicts = [hbm_verdict_of(result, result.points[int(i)])[1] for i in best["index"]]
    return pd.DataFrame(
        {
            "Rank": best["rank"].astype(int),
            "Chips": best["chips"],
            "Slice": best["topology"],
            "Remat": best["remat"],
            "Mesh": best["mesh"],  # each axis named: "data 8 fsdp 8 tensor 1 context 1"
            "Step (s)": best["step_time_s"].round(4),
            f"{unit} per chip": best["throughput_per_chip"].round(1),
            "HBM peak (GiB)": (best["peak_hbm_bytes"] / 2**30).round(1),
            # the 80% range of the TPU compiler's peak against the usable HBM (profiler.ranges.peak_hbm_range)
            "HBM verdict": verdicts,
            "Pareto": best["pareto"].map({True: "yes", False: ""}),
        }
    )


def _simulate_point(result: Any, df: pd.DataFrame, base_run: int | None) -> None:
    best = df[df["feasible"]].sort_values("rank").head(20)
    if best.empty:
        return
    labels = {int(r.index): f"#{int(r.rank)}: {r.chips} chips, {r.topology}, remat {r.remat}, mesh {r.mesh}" for r in best.itertuples()}
    pick = st.selectbox("Point to simulate fully", list(labels), format_func=labels.get, key="plan_pick")
    if st.button("Simulate this point and store it", key="plan_simulate"):
        candidate = result.points[int(pick)]
        try:
            scenario = scenario_from_dict(result.scenario(candidate), source="Plan page")
            summary = common.simulate_and_store(scenario)
        except PodscopeError as e:
            st.error(str(e))
            return
        st.session_state["plan_run"] = (summary["run_id"], candidate.step_time_s)
    _xla_check(result, int(pick))
    stored = st.session_state.get("plan_run")
    if stored is None:
        return
    run_id, planned_s = stored
    summary = common.query(queries.run_summary, run_id)
    st.success(
        f"Stored run #{run_id} {summary['name']}: step {summary['step_time_s']:.4f} s "
        f"(the plan said {planned_s:.4f} s), {'OUT OF MEMORY' if summary['oom'] else 'fits in HBM'}."
    )
    c1, c2 = st.columns(2)
    if c1.button("Open on Overview", key="plan_open_overview"):
        common.select_run(run_id)
        st.switch_page("views/overview.py")
    if c2.button("Open on Compare", key="plan_open_compare"):
        common.select_run(base_run if base_run is not None else run_id)
        common.select_run(run_id, key="cmp_id")
        st.switch_page("views/compare.py")


def _xla_check(result: Any, pick: int) -> None:
    """Compile the chosen point's JAX program with the TPU compiler and say what XLA holds beside Podscope's peak."""
    installed = not tpu_compiler_missing()
    clicked = st.button("Check this point with the TPU compiler", key="plan_xla", disabled=not installed,
                        help=None if installed else f"needs jax[tpu]: {TPU_EXTRA_HINT}")  # fmt: skip
    if clicked:
        scenario = scenario_from_dict(result.scenario(result.points[pick]), source="Plan page")
        with st.spinner("Compiling the point's JAX program with XLA (seconds for a small one, about a minute for a large one)..."):
            try:
                row = xla_check_scenario(scenario)
            except PodscopeError as e:
                st.error(str(e))
                return
        st.session_state["plan_xla_result"] = (pick, row)
    checked = st.session_state.get("plan_xla_result")
    if checked is None or checked[0] != pick:
        return
    x, gib = checked[1], 2**30
    if x["refusal"] is not None:
        st.warning(f"Not compiled: {x['refusal']}")
    elif x["oom"]:
        need = f", needs {x['required_bytes'] / gib:.1f} GiB per chip" if x.get("required_bytes") else ""
        st.warning(f"XLA refuses this point{need} ({x['usable_hbm_bytes'] / gib:.1f} GiB usable), where Podscope puts its peak at "
                   f"{x['podscope_peak_hbm_bytes'] / gib:.1f} GiB: {x['oom_message']}")  # fmt: skip
    else:
        st.success(f"XLA (libtpu {x['libtpu_version']}) fits this point: {x['peak_hbm_bytes'] / gib:.2f} GiB per chip at its peak, "
                   f"Podscope {x['podscope_peak_hbm_bytes'] / gib:.2f} GiB ({x['hbm_diff_pct']:+.1f}%); compiled in {x['compile_s']:.1f} s.")  # fmt: skip


def main() -> None:
    st.title("Plan")
    st.caption("Which slice, mesh and remat give the best throughput per chip that fits? Every factorisation of each slice "
               "is searched analytically (the same cost functions as a full run); pick a point to simulate it fully.")  # fmt: skip
    picked = _base()
    if picked is None:
        return
    base, base_run = picked
    search = _form(base)
    if search is not None:
        try:
            plan = plan_from_dict({"base": base, "search": search}, source="Plan page")
        except PlanError as e:
            st.error("\n\n".join(f"**{k or 'plan'}**: {m}" for k, m in e.problems))
            return
        with st.spinner("Searching..."):
            result = run_plan(plan)
        st.session_state["plan_result"] = (result, base_run)
        st.session_state.pop("plan_run", None)
    if "plan_result" not in st.session_state:
        st.info("Choose the knobs to vary and press Search.")
        return
    result, base_run = st.session_state["plan_result"]
    df = plan_frame(result)
    unit = "tokens/s" if result.throughput_key == "tokens_per_s" else "samples/s"
    c = st.columns(4)
    c[0].metric("Candidates", f"{result.candidates:,}")
    c[1].metric("Feasible", f"{result.feasible:,}")
    c[2].metric("Search time", f"{result.elapsed_s:.2f} s")
    c[3].metric("Candidates per second", f"{result.candidates / max(result.elapsed_s, 1e-9):,.0f}")
    if result.infeasible:
        st.caption("Ruled out: " + ", ".join(f"{n:,} {why}" for why, n in sorted(result.infeasible.items(), key=lambda kv: -kv[1])))
    color_by = st.radio("Colour by", ["remat", "mesh"], horizontal=True, key="plan_color")
    common.chart(figures.plan_scatter(df, color_by=color_by, unit=unit), df, "plan_candidates.csv", "plan_scatter")
    if not result.feasible:
        st.warning("No configuration fits: add bigger slices or more remat, or lower the global batch.")
        return
    st.subheader("Best configurations")
    st.dataframe(_table(result, df, unit), hide_index=True)
    _simulate_point(result, df, base_run)


main()
