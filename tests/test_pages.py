"""Every dashboard page through AppTest, on runs the real engine and the real importer wrote.

The runs (``tests/real_runs.py``) are bundled scenarios made small: a full trace, stragglers,
recompiles, a chip failure, two input-bound runs, an out-of-memory run, two slices over DCN,
a summary-mode run, and an imported PyTorch trace. What a page must show is read from the
run it shows (its summary, its stored tables), never written down beside the test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.scenario import parse_topology
from profiler import advice_words
from profiler import format as fmt
from profiler import queries
from tests.real_runs import LABELS

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PAGES = [
    "views/overview.py",
    "views/idle.py",
    "views/pod.py",
    "views/timeline.py",
    "views/memory.py",
    "views/scaling.py",
    "views/recompilation.py",
    "views/compare.py",
]


def _ok(at: AppTest, what: str = "") -> AppTest:
    assert not at.exception, (what, [e.value for e in at.exception])
    return at


def _run(page: str, run_id: int | None = None) -> AppTest:
    """The page through the app's navigation (as a user reaches it), showing ``run_id``."""
    at = AppTest.from_file(APP, default_timeout=60)
    if run_id is not None:
        at.session_state["select_run_id"] = run_id
    _ok(at.run())
    if run_id is not None:
        at.session_state["select_run_id"] = run_id
    return _ok(at.switch_page(page).run(), page)


def _page(page: str, run_id: int | None = None) -> AppTest:
    """The page script alone (half the script runs of :func:`_run`), showing ``run_id``."""
    at = AppTest.from_file(str(ROOT / page), default_timeout=60)
    if run_id is not None:
        at.session_state["select_run_id"] = run_id
    return _ok(at.run(), page)


def _picked(at: AppTest) -> int:
    return at.sidebar.selectbox(key="picker_run_id").value


@pytest.fixture
def empty_db(tmp_path, monkeypatch) -> Path:
    """A database that does not exist yet: it reads as empty (app.py would seed the examples)."""
    path = tmp_path / "empty.duckdb"
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path


@pytest.mark.parametrize("page", [*PAGES, "views/validation.py"])
def test_page_through_the_navigation_on_every_real_run(page_db, page):
    """Each page, reached through app.py's st.navigation, then switched to every stored run in turn."""
    at = _run(page, page_db.run_ids["full"])
    assert at.title and at.title[0].value
    title = at.title[0].value
    if page in ("views/scaling.py", "views/validation.py"):
        return  # pages over all runs (or none): no run to pick
    for label in LABELS:
        run_id = page_db.run_ids[label]
        at.session_state["select_run_id"] = run_id
        _ok(at.run(), (page, label))
        assert _picked(at) == run_id and at.title[0].value == title, (page, label)


@pytest.mark.parametrize("page", PAGES)
def test_page_on_empty_database(empty_db, page):
    """Each page alone on a database with no runs: a message, no exception."""
    at = _page(page)
    assert at.info, "an empty database must say so"


def test_key_elements_on_a_full_trace_run(page_db):
    run_id = page_db.run_ids["full"]
    summary = page_db.summary("full")
    idle = _run("views/idle.py", run_id)
    assert {"Idle share", "Input wait", "Sync wait"} <= {m.label for m in idle.metric}
    assert len(idle.get("plotly_chart")) == 2
    memory = _page("views/memory.py", run_id)
    assert "Peak HBM per chip" in {m.label for m in memory.metric}
    assert not summary["oom"] and memory.success, "a run that fits says so"
    timeline = _page("views/timeline.py", run_id)
    assert len(timeline.get("plotly_chart")) == 1
    pod = _page("views/pod.py", run_id)
    assert any("Chip 0" in m.value for m in pod.markdown)


def test_recompilation_page_on_runs_with_and_without_compiles(page_db):
    """The counts and causes shown are the compile log the engine wrote; a run without [compile] draws nothing."""
    run_id = page_db.run_ids["recompiles"]
    summary = page_db.summary("recompiles")
    with page_db.db.read() as con:
        by_cause = queries.compiles_by_cause(con, run_id)
    engine_log = page_db.results["recompiles"].trace.extra["compiles"].to_pandas()
    assert sorted(by_cause["cause"]) == sorted(engine_log["cause"].unique())
    at = _page("views/recompilation.py", run_id)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Recompiles"] == f"{summary['recompiles']:,}" and summary["recompiles"] > 0
    assert metrics["Compile time"] == fmt.duration(summary["compile_s"])
    assert len(at.get("plotly_chart")) == 2
    shown = at.dataframe[0].value
    assert sorted(shown["cause"]) == sorted(engine_log["cause"].unique())
    assert shown["compiles"].sum() == len(engine_log)

    plain = _page("views/recompilation.py", page_db.run_ids["full"])
    assert "compiles" not in page_db.results["full"].trace.extra
    assert not plain.get("plotly_chart")
    assert next(m.value for m in plain.metric if m.label == "Recompiles") == "0"


def test_recompilation_page_says_an_imported_run_has_no_compile_log(page_db):
    at = _page("views/recompilation.py", page_db.run_ids["imported"])
    assert not at.success, [s.value for s in at.success]
    assert at.info and "imported traces carry none" in at.info[0].value


@pytest.mark.parametrize("label", ["failures", "input_bound", "oom", "stragglers"])
def test_overview_shows_the_advisor_findings_most_severe_first(page_db, label):
    advice = page_db.summary(label)["advice"]
    assert advice, f"the {label} run is meant to give the advisor something to say"
    at = _run("views/overview.py", page_db.run_ids[label])
    order = {"critical": 0, "warning": 1, "info": 2}
    summary = page_db.summary(label)
    findings = [(order[a["severity"]], a["severity"], advice_words.describe(a, summary)) for a in advice]
    shown = {"critical": at.error, "warning": at.warning, "info": at.info}
    for severity, elements in shown.items():
        expected = [f for _, s, f in sorted(findings, key=lambda f: f[0]) if s == severity]
        texts = [e.value for e in elements if e.value.startswith("**")]  # the OOM banner is not a finding
        assert len(texts) == len(expected), (severity, texts)
        for text, finding in zip(texts, expected):
            assert text.startswith(f"**{finding.title}**: {finding.message}")
            assert "_" not in text.split("**")[1]  # a title in words, not a rule id
            for label_, value in finding.evidence:  # formatted, with its base
                assert f"{label_}: {value}" in text
    if label == "stragglers":
        names = ", ".join(str(c) for c in summary["stragglers"])
        assert any(f"They are chips {names}" in w.value for w in at.warning)


def test_overview_shows_time_and_cost_to_train_only_when_the_scenario_has_a_target(page_db):
    summary = page_db.summary("full")
    metrics = {m.label: m.value for m in _page("views/overview.py", page_db.run_ids["full"]).metric}
    assert metrics["Time to train"] == fmt.duration(summary["time_to_train_s"])
    assert metrics["Steps to target"] == fmt.count(summary["steps_to_target"])
    assert metrics["Cost"] == fmt.usd(summary["cost_usd"])
    assert "Time to train" not in {m.label for m in _page("views/overview.py", page_db.run_ids["stragglers"]).metric}


def test_memory_page_explains_oom_with_the_engine_detail(page_db):
    summary = page_db.summary("oom")
    detail = summary["oom_detail"]
    assert summary["oom"] and detail["suggestions"]
    at = _page("views/memory.py", page_db.run_ids["oom"])
    text = at.error[0].value
    assert "Out of memory" in text
    assert f"{detail['over_bytes'] / 2**30:,.2f} GiB" in text and f"**{detail['term']}**" in text
    assert all(s in text for s in detail["suggestions"])


def test_memory_page_draws_the_engine_tables(page_db):
    """Breakdown, in-step timeline (the engine's phases) and per-chip peaks; an import has none of them."""
    run_id = page_db.run_ids["full"]
    memory = _page("views/memory.py", run_id)
    charts = [json.loads(c.proto.spec) for c in memory.get("plotly_chart")]
    assert len(charts) == 3
    phases = page_db.results["full"].trace.extra["memory_timeline"].column("phase").unique().to_pylist()
    with page_db.db.read() as con:
        assert queries.memory_timeline(con, run_id)["phase"].unique().tolist() == phases
    imported = _page("views/memory.py", page_db.run_ids["imported"])
    assert not imported.get("plotly_chart") and len(imported.info) == 2


@pytest.mark.parametrize("label", ["full", "oom"])
def test_pod_page_shows_hbm_and_link_load_when_the_run_has_them(page_db, label):
    run_id = page_db.run_ids[label]
    with page_db.db.read() as con:
        links = queries.link_load(con, run_id)
    assert (links is None) == ("link_load" not in page_db.results[label].trace.extra)
    pod = _page("views/pod.py", run_id)
    assert "HBM peak (GiB)" in pod.selectbox(key="pod_metric").options
    assert any(e.label == "Busiest links" for e in pod.expander) == (links is not None and not links.empty)


def test_pod_3d_slices_and_timeline_chip_choices_on_a_multi_slice_run(page_db):
    run_id = page_db.run_ids["multi_slice"]
    summary = page_db.summary("multi_slice")
    assert summary["slices"] == 2
    pod = _page("views/pod.py", run_id)
    assert pod.selectbox(key="pod_slice").options == [str(s) for s in range(summary["slices"])]
    pod.radio(key="pod_view").set_value("3D").run()
    _ok(pod)
    assert [c.key for c in pod.get("plotly_chart")] == ["chart_pod_slices", "chart_pod3d"]  # the slices, then one slice's torus
    pod.selectbox(key="pod_metric").set_value("hbm_peak_bytes").run()
    _ok(pod)
    pod.selectbox(key="pod_slice").set_value(1).run()
    _ok(pod)
    timeline = _page("views/timeline.py", run_id)
    for how in ("By host", "By coordinate"):
        timeline.radio(key="tl_how").set_value(how).run()
        _ok(timeline, how)
        assert len(timeline.get("plotly_chart")) == 1, how


def test_compare_what_if_changes_the_input_pipeline(writable_db):
    """The Keras example is input-bound with one parallel call; autotune on the Compare page cuts the wait."""
    base_id = writable_db.run_ids["keras"]
    assert writable_db.results["keras"].scenario.input.num_parallel_calls == 1
    at = _run("views/compare.py", base_id)
    assert at.checkbox[0].value  # the base run has an [input] section
    next(sb for sb in at.selectbox if sb.label == "Parallel calls").set_value("autotune")
    at.button[0].click().run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    with writable_db.db.read() as con:
        rows = con.execute(
            "SELECT json_extract_string(scenario, '$.input.num_parallel_calls'), CAST(summary->>'input_wait_frac' AS DOUBLE) "
            "FROM runs WHERE run_id = ? OR run_id > ? ORDER BY run_id",
            [base_id, max(writable_db.run_ids.values())],
        ).fetchall()
    assert len(rows) == 2 and rows[0][0] == "1" and rows[1][0] == "autotune"
    assert rows[1][1] < rows[0][1]
    at.run()  # the new run is selected for comparison: both step-time ranges are shown
    captions = [c.value for c in at.caption]
    assert any(c.startswith("Base step time likely ") for c in captions)
    assert any(c.startswith("Other step time likely ") for c in captions)


def test_scaling_sweep_adds_runs_and_plots_the_curve(writable_db):
    base_id = writable_db.run_ids["recompiles"]
    base = writable_db.results["recompiles"].scenario
    at = _page("views/scaling.py")
    at.selectbox[0].set_value(base_id)
    shapes = ["2x2x1", "2x2x4", "3x3x3"]
    bad = [t for t in shapes if base.training.global_batch % math.prod(parse_topology(t))]
    assert bad == ["3x3x3"]  # 27 chips: the batch does not divide -> shown, not raised
    at.text_input[0].set_value(", ".join(shapes))
    at.button[0].click().run()
    _ok(at)
    assert at.error and "global_batch" in at.error[0].value and "3x3x3" in at.warning[0].value
    with writable_db.db.read() as con:
        new = con.execute("SELECT chips FROM runs WHERE run_id > ? ORDER BY chips", [max(writable_db.run_ids.values())]).fetchall()
    assert [c for (c,) in new] == sorted(math.prod(parse_topology(t)) for t in shapes if t not in bad)
    at = _page("views/scaling.py")
    charts = {c.key for c in at.get("plotly_chart")}
    assert {f"chart_sc_{m}" for m in ("step_time_s", "throughput", "efficiency", "mfu")} <= charts
    # the base trains to a target ([convergence]), so its points have a time to train too
    assert {"chart_sc_time_to_train", "chart_sc_cost_to_train"} <= charts
    assert at.multiselect[0].value  # the 3-point series is picked by default


def test_scaling_overlays_published_points_for_the_shown_chip_and_model(page_db):
    """Two ResNet-50 runs on v4 at 128 images per chip (one and two slices) make a weak-scaling series;
    the throughput chart carries the MLPerf v4 ResNet-50 points from data/reference."""
    facts = [page_db.results[label].facts for label in ("input_bound", "multi_slice")]
    assert len({f.samples_per_step / f.chips for f in facts}) == 1 and len({f.chips for f in facts}) == 2
    at = _run("views/scaling.py")
    at.radio(key="sc_mode").set_value("weak").run()
    _ok(at)
    shown = at.multiselect(key="sc_series_weak").value
    assert len(shown) == 1 and "ResNet-50" in shown[0] and "tpu-v4" in shown[0]
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    published = [t for f in figs for t in f["data"] if t.get("name") == "published"]
    assert len(published) == 1  # on the throughput chart only
    ids = {row[0] for row in published[0]["customdata"]}
    assert "mlperf_v0.7_tpu-v4-128-TF_resnet" in ids and not any("v3" in i for i in ids)
    owners = {row[2] for row in published[0]["customdata"]}  # each diamond says which series it belongs to
    assert all(o.startswith("for ") or o.startswith("same chip and model") for o in owners)


def test_imported_run_pages_say_what_the_trace_does_not_carry(page_db):
    """A real import stores no scenario and None for the model's numbers: pages say n/a, not zero."""
    run_id = page_db.run_ids["imported"]
    summary = page_db.summary("imported")
    assert summary["source"] == "imported" and summary["params"] is None and summary["mfu"] is None
    overview = _run("views/overview.py", run_id)
    metrics = {m.label: m.value for m in overview.metric}
    assert metrics["MFU"] == "n/a" and metrics["HBM peak"] == "n/a"
    assert metrics["Chips"] == f"{summary['chips']:,} x {summary['chip']}"
    assert any("this run was imported" in c.value for c in overview.caption)
    memory = _page("views/memory.py", run_id)
    assert {m.label: m.value for m in memory.metric}["Peak HBM per chip"] == "n/a"


def test_memory_page_shows_expert_weights_and_pipeline_activations(page_db):
    moe = _page("views/memory.py", page_db.run_ids["moe"])
    labels = [m.label for m in moe.metric]
    assert "Expert weights (states) per chip" in labels and "Pipeline activations in flight" not in labels
    pipe = _page("views/memory.py", page_db.run_ids["pipeline"])
    want = page_db.summary("pipeline")["hbm_pipeline_activation_bytes"]
    assert any(m.label == "Pipeline activations in flight" and m.value == f"{want / 2**30:,.2f} GiB" for m in pipe.metric)


def test_idle_page_counts_the_pipeline_bubble(page_db):
    at = _page("views/idle.py", page_db.run_ids["pipeline"])
    share = page_db.summary("pipeline")["breakdown"]["bubble"]
    assert share > 0.1
    assert any(m.label == "Pipeline bubble" and m.value == f"{share * 100:.1f}%" for m in at.metric)


def test_overview_states_the_kernel_remat_and_precision_the_run_assumed(page_db):
    summary = page_db.summary("summary")  # llm-1b-v5p-64: no attention kernel named
    assert summary["attention_kernel"] == "flash"
    at = _run("views/overview.py", page_db.run_ids["summary"])
    captions = [c.value for c in at.caption]
    assumed = next(c for c in captions if c.startswith("Assumed:"))
    assert "attention kernel **flash**" in assumed and "remat **full**" in assumed
    assert "`model.attention` = autoselected -> flash" in assumed


def test_memory_page_shows_ring_buffers_zero_stage_and_optimizer_state(tmp_path, monkeypatch):
    from engine import scenario_from_dict, simulate
    from profiler import write_run
    from profiler.store import Database

    raw = {"name": "cp-zero", "pod": {"chip": "tpu-v5p", "topology": "2x2x2"},
           "model": {"kind": "transformer", "layers": 2, "d_model": 512, "heads": 8, "d_ff": 2048, "vocab": 1000, "seq_len": 4096},
           "training": {"global_batch": 4, "steps": 3, "optimizer_state": "bf16", "weight_dtype": "bf16"},
           "parallelism": {"fsdp": 2, "context": 2, "fsdp_shard": "grads+optimizer"}}  # fmt: skip
    result = simulate(scenario_from_dict(raw))
    path = tmp_path / "cp.duckdb"
    run_id = write_run(Database(path), result, name="cp-zero")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    memory = _page("views/memory.py", run_id)
    metrics = {m.label: m.value for m in memory.metric}
    want = result.facts.extra["hbm_ring_kv_buffer_bytes"]
    assert metrics["Ring attention K/V buffers"] == fmt.gib(want, 2)
    assert metrics["FSDP shards"] == "ZeRO-2: grads+optimizer" and metrics["Optimizer moments"] == "bf16"
    assert metrics["Weights"] == "bf16"


def test_a_scaling_series_is_one_job(page_db):
    """Every series on the Scaling page is one model with one recipe and mesh, whatever the database holds."""
    from profiler import queries
    from views.scaling_model import scaling_table

    from profiler.store import Database

    with Database(page_db.path).read() as con:
        runs = queries.scaling_runs(con)
    for mode in ("strong", "weak"):
        table = scaling_table(runs, mode)
        assert not table.empty
        jobs = table.groupby("series")[["model_json", "recipe_json", "mesh_json", "chip"]].nunique()
        assert (jobs == 1).all().all(), jobs[(jobs > 1).any(axis=1)]


def test_two_models_that_read_alike_are_two_series_told_apart():
    import pandas as pd

    from views.scaling_model import series_labels

    row = {"model_kind": "transformer", "params": 1.3e9, "chip": "tpu-v5p", "global_batch": 256, "chips": 64,
           "per_chip_batch": 4.0, "model_json": '{"layers": 24}', "mesh_json": '{"fsdp": 64}'}  # fmt: skip
    df = pd.DataFrame([{**row, "recipe_json": '{"remat": "full"}'}, {**row, "recipe_json": '{"remat": "none"}'},
                       {**row, "model_json": '{"layers": 25}', "recipe_json": '{"remat": "none"}'}])  # fmt: skip
    labels = series_labels(df, "strong").tolist()
    assert len(set(labels)) == 3
    assert labels[0] == "transformer 1.3B on tpu-v5p, batch 256, remat full"


def test_memory_page_says_when_the_fit_counts_on_xlas_rematerialization(tmp_path, monkeypatch):
    from engine import scenario_from_dict, simulate
    from profiler import write_run
    from profiler.store import Database

    def run(per_chip_batch: int) -> int:
        raw = {"name": f"mlp-{per_chip_batch}", "pod": {"chip": "tpu-v5e", "topology": "2x2"},
               "model": {"kind": "mlp", "layer_sizes": [1024] * 9 + [1000]},
               "training": {"global_batch": 4 * per_chip_batch, "steps": 2, "remat": "none"}, "parallelism": {"data": 4}}  # fmt: skip
        return write_run(Database(path), simulate(scenario_from_dict(raw)), name=raw["name"])

    path = tmp_path / "remat.duckdb"
    past, small = run(889_088), run(4096)
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    infos = [i.value for i in _page("views/memory.py", past).info]
    assert any("XLA's rematerialization recomputes 5.09 GiB at the peak" in i for i in infos), infos
    assert not [i.value for i in _page("views/memory.py", small).info if "rematerialization" in i.value]


def test_scaling_says_when_the_compiler_refused_a_point(tmp_path, monkeypatch):
    """A point the TPU compiler refused (``run --xla`` / ``sweep --xla``) is named off the curve with whose verdict it is."""
    from engine import scenario_from_dict, simulate
    from engine.hlo.bundle import XlaHbm, XlaOom
    from profiler import write_run
    from profiler.store import Database

    path = tmp_path / "xla.duckdb"
    refused = XlaHbm(memory=None, oom=XlaOom("RESOURCE_EXHAUSTED: exceeds available HBM (15.75G)", 20e9, 15.75e9))
    for topology in ("2x2", "2x4", "4x4"):
        raw = {"name": f"mlp-{topology}", "pod": {"chip": "tpu-v5e", "topology": topology},
               "model": {"kind": "mlp", "layer_sizes": [1024, 4096, 1024]}, "training": {"global_batch": 1024, "steps": 2}}  # fmt: skip
        result = simulate(scenario_from_dict(raw), xla_memory=refused if topology == "2x2" else None)
        write_run(Database(path), result, name=raw["name"])
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = _page("views/scaling.py")
    warnings = [w.value for w in at.warning if "do not fit in HBM" in w.value]
    assert len(warnings) == 1 and "the 4-chip point(s)" in warnings[0] and "the TPU compiler's verdict" in warnings[0], warnings
