"""Every dashboard page through AppTest: a small stored run, an empty database, an OOM run, an imported run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import load_scenario, simulate
from profiler import write_run
from profiler.store import Database
from tests.dashboard_fixtures import extras_result

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

OOM_TOML = """
name = "oom"
[pod]
chip = "tpu-v4"
topology = "2x2x1"
[model]
kind = "transformer"
layers = 48
d_model = 8192
heads = 64
d_ff = 32768
vocab = 32000
seq_len = 2048
[training]
global_batch = 8
steps = 3
[sim]
seed = 1
"""


def _run(path: Path, page: str) -> AppTest:
    """The page through the app's navigation (as a user reaches it)."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _page(page: str) -> AppTest:
    """The page script alone: half the script runs of :func:`_run`, for the many database variants."""
    at = AppTest.from_file(str(Path(APP).parent / page), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def small_db(tmp_path, monkeypatch, small_scenario) -> Path:
    path = tmp_path / "small.duckdb"
    write_run(Database(path), simulate(small_scenario), name="stored-run")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path


@pytest.fixture
def oom_db(tmp_path, monkeypatch, write_toml) -> Path:
    path = tmp_path / "oom.duckdb"
    result = simulate(load_scenario(write_toml(OOM_TOML, "oom.toml")))
    assert result.facts.oom, "the fixture must be an out-of-memory run"
    write_run(Database(path), result, name="oom-run")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path


@pytest.fixture
def imported_db(tmp_path, monkeypatch, small_scenario) -> Path:
    """A run stored as an imported trace: no scenario, and facts without the model's numbers."""
    path = tmp_path / "imported.duckdb"
    result = simulate(small_scenario)
    facts = dataclasses.replace(result.facts, params=0, model_flops_per_step=0.0, hardware_flops_per_step=0.0, hbm_breakdown_bytes={})
    write_run(Database(path), dataclasses.replace(result, scenario=None, facts=facts), name="imported-run", source="imported")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path


@pytest.fixture
def empty_db(tmp_path, monkeypatch) -> Path:
    """An empty database that stays empty: the file exists with its schema, and seeding is skipped by a run-less page check."""
    path = tmp_path / "empty.duckdb"
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path


@pytest.mark.parametrize("page", PAGES)
def test_page_on_small_run(small_db, page):
    at = _run(small_db, page)
    assert at.title and at.title[0].value


@pytest.mark.parametrize("page", PAGES)
def test_page_on_oom_run(oom_db, page):
    _page(page)


@pytest.mark.parametrize("page", PAGES)
def test_page_on_imported_run(imported_db, page):
    _page(page)


@pytest.mark.parametrize("page", PAGES)
def test_page_on_empty_database(empty_db, page):
    """Each page alone (app.py would seed the examples) on a database with no runs: a message, no exception."""
    at = _page(page)
    assert at.info, "an empty database must say so"


def test_key_elements_on_small_run(small_db):
    idle = _run(small_db, "views/idle.py")
    assert {"Idle share", "Input wait", "Sync wait"} <= {m.label for m in idle.metric}
    assert len(idle.get("plotly_chart")) == 2
    memory = _page("views/memory.py")
    assert "Peak HBM per chip" in {m.label for m in memory.metric}
    assert memory.success, "a run that fits says so"
    timeline = _page("views/timeline.py")
    assert len(timeline.get("plotly_chart")) == 1
    pod = _page("views/pod.py")
    assert any("Chip 0" in m.value for m in pod.markdown)
    recompile = _page("views/recompilation.py")
    assert recompile.info  # no compile log on main's engine yet


def test_memory_page_explains_oom(oom_db):
    at = _page("views/memory.py")
    assert at.error and "Out of memory" in at.error[0].value


def test_compare_what_if_changes_the_input_pipeline(tmp_path, monkeypatch):
    """The Keras example is input-bound with one parallel call; autotune on the Compare page cuts the wait."""
    from engine import load_scenario
    from profiler import api

    path = tmp_path / "keras.duckdb"
    base = load_scenario(api.BUNDLED_SCENARIOS_DIR / "keras-mlp-v5e-8.toml", overrides={"training.steps": 60})
    assert base.input.num_parallel_calls == 1
    write_run(Database(path), simulate(base))
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = _run(path, "views/compare.py")
    assert at.checkbox[0].value  # the base run has an [input] section
    next(sb for sb in at.selectbox if sb.label == "Parallel calls").set_value("autotune")
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    with Database(path).read() as con:
        rows = con.execute(
            "SELECT json_extract_string(scenario, '$.input.num_parallel_calls'), CAST(summary->>'input_wait_frac' AS DOUBLE) "
            "FROM runs ORDER BY run_id"
        ).fetchall()
    assert len(rows) == 2 and rows[0][0] == "1" and rows[1][0] == "autotune"
    assert rows[1][1] < rows[0][1]
    at.run()  # the new run is selected for comparison: both step-time ranges are shown
    captions = [c.value for c in at.caption]
    assert any(c.startswith("Base step time likely between") for c in captions)
    assert any(c.startswith("Other step time likely between") for c in captions)


@pytest.fixture
def extras_db(tmp_path, monkeypatch, small_scenario) -> Path:
    """A run carrying every table and summary key the engine helpers add (per the contracts), filled by hand."""
    path = tmp_path / "extras.duckdb"
    write_run(Database(path), extras_result(small_scenario), name="extras-run")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path


@pytest.mark.parametrize("page", PAGES)
def test_page_with_every_extra_table(extras_db, page):
    _page(page)


def test_extras_are_shown(extras_db):
    overview = _run(extras_db, "views/overview.py")
    assert overview.error and "Shapes change every step" in overview.error[0].value  # critical first
    assert overview.warning and "Input pipeline" in overview.warning[0].value
    recompile = _page("views/recompilation.py")
    assert next(m.value for m in recompile.metric if m.label == "Recompiles") == "3"
    assert len(recompile.get("plotly_chart")) == 2
    memory = _page("views/memory.py")
    assert len(memory.get("plotly_chart")) == 3  # breakdown, in-step timeline, per-chip peaks
    pod = _page("views/pod.py")
    assert "HBM peak (GiB)" in pod.selectbox[0].options
    assert any(e.label == "Busiest links" for e in pod.expander)


def test_scaling_sweep_adds_runs_and_plots_the_curve(small_db):
    at = _page("views/scaling.py")
    at.text_input[0].set_value("2x2x1, 2x2x4, 3x3x3")  # 27 chips: batch 256 does not divide -> shown, not raised
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.error and "global_batch" in at.error[0].value and "3x3x3" in at.warning[0].value
    with Database(small_db).read() as con:
        chips = sorted(r[0] for r in con.execute("SELECT chips FROM runs").fetchall())
    assert chips == [4, 8, 16]
    at = _page("views/scaling.py")
    assert len(at.get("plotly_chart")) == 4
    assert at.multiselect[0].value  # the 3-point series is picked by default


def test_pod_3d_and_timeline_chip_choices(extras_db):
    pod = _page("views/pod.py")
    pod.radio(key="pod_view").set_value("3D").run()
    assert not pod.exception, [e.value for e in pod.exception]
    assert len(pod.get("plotly_chart")) == 1
    pod.selectbox(key="pod_metric").set_value("hbm_peak_bytes").run()
    assert not pod.exception
    timeline = _page("views/timeline.py")
    for how in ("By host", "By coordinate"):
        timeline.radio(key="tl_how").set_value(how).run()
        assert not timeline.exception, [e.value for e in timeline.exception]
        assert len(timeline.get("plotly_chart")) == 1, how


def test_memory_page_shows_oom_detail(tmp_path, monkeypatch, write_toml):
    result = simulate(load_scenario(write_toml(OOM_TOML, "oom.toml")))
    detail = {"chip": 0, "term": "activations", "over_bytes": 3 * 2**30, "suggestions": ["Turn on remat", "Shard with FSDP"]}
    result = dataclasses.replace(result, facts=dataclasses.replace(result.facts, extra={"oom_detail": detail}))
    path = tmp_path / "oom_detail.duckdb"
    write_run(Database(path), result)
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = _page("views/memory.py")
    text = at.error[0].value
    assert "3.00 GiB" in text and "activations" in text and "Shard with FSDP" in text


def test_scaling_overlays_published_points_for_the_shown_chip_and_model(tmp_path, monkeypatch):
    """ResNet-50 runs on v4: the throughput chart carries the MLPerf v4 ResNet-50 points from data/reference."""
    import json

    path = tmp_path / "scaling.duckdb"
    db = Database(path)
    for topology, batch in (("2x2x2", 1024), ("4x4x4", 8192)):  # 128 images per chip: one weak-scaling series
        over = {"pod.topology": topology, "training.global_batch": batch, "parallelism.data": None, "training.steps": 3}
        write_run(db, simulate(load_scenario(ROOT / "data" / "scenarios" / "resnet50-v4-128.toml", overrides=over)))
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = _run(path, "views/scaling.py")
    at.radio(key="sc_mode").set_value("weak").run()
    assert not at.exception, [e.value for e in at.exception]
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    published = [t for f in figs for t in f["data"] if t.get("name") == "published"]
    assert len(published) == 1  # on the throughput chart only
    ids = {row[0] for row in published[0]["customdata"]}
    assert "mlperf_v0.7_tpu-v4-128-TF_resnet" in ids and not any("v3" in i for i in ids)
