"""Pages of a many-slice run (AppTest): the Pod page's slices grid and one slice's torus, the slice in
the URL, expert load for mixture-of-experts runs, and Idle and Memory drawn as distributions.

The run is the bundled 1.3B LLM on 72 slices of TPU v5e 2x2 over DCN (288 chips on 72 hosts, past the
Idle page's 64 host bars), simulated by the real engine in summary mode and stored by the real store.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from engine import load_scenario, simulate
from profiler import distributions, queries, slice_queries
from profiler.store import Database, write_run
from views import figures, figures_scale, idle, pod_slices

ROOT = Path(__file__).resolve().parent.parent
POD = str(ROOT / "views" / "pod.py")
SLICES = 72


@pytest.fixture(scope="module")
def many_slices(tmp_path_factory):
    path = tmp_path_factory.mktemp("slices") / "slices.duckdb"
    overrides = {
        "pod.chip": "tpu-v5e", "pod.topology": "2x2", "pod.slices": SLICES, "training.global_batch": 4 * SLICES,
        "training.steps": 4, "parallelism.data": None, "parallelism.fsdp": 4, "sim.trace": "summary",
    }  # fmt: skip
    result = simulate(load_scenario(ROOT / "data" / "scenarios" / "llm-1b-v5p-64.toml", overrides))
    run_id = write_run(Database(path), result)
    return path, run_id, result


@pytest.fixture
def run(many_slices, monkeypatch):
    path, run_id, result = many_slices
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return run_id, result


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def _pod(run_id: int, url_slice: str | None = None) -> AppTest:
    at = AppTest.from_file(POD, default_timeout=60)
    at.session_state["select_run_id"] = run_id
    if url_slice is not None:
        at.query_params["slice"] = url_slice
    return _ok(at.run())


def _values(array) -> list:
    """A Plotly JSON array as a list (a list, or a typed array as base64 ``bdata``)."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).tolist()
    return list(array)


def _spec(at: AppTest, key: str) -> dict:
    return next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == key)


def _torus_chips(at: AppTest) -> list[int]:
    chips = next(t for t in _spec(at, "chart_pod2d")["data"] if t.get("name") == "chips")
    return sorted(int(c) for c in _values(chips["customdata"]))


def _chips_of(result, slice_: int) -> list[int]:
    table = result.trace.chips.to_pandas()
    return sorted(table.loc[table["slice"] == slice_, "chip"].tolist())


def test_the_slices_grid_comes_first_then_the_torus_of_the_chosen_slice(run):
    run_id, result = run
    at = _pod(run_id)
    assert [c.key for c in at.get("plotly_chart")] == ["chart_pod_slices", "chart_pod2d"]
    cells = _spec(at, "chart_pod_slices")["data"][0]
    assert sorted(_values(cells["customdata"])) == list(range(SLICES))  # one cell per slice, carrying its id
    cols, rows = figures_scale.slice_grid_shape(SLICES)
    assert cols * rows >= SLICES > cols * (rows - 1) and cols <= 2.5 * rows  # compact, not one long row
    assert at.selectbox(key="pod_slice").value == 0
    assert _torus_chips(at) == _chips_of(result, 0)
    at.selectbox(key="pod_slice").set_value(41).run()
    _ok(at)
    assert _torus_chips(at) == _chips_of(result, 41)
    assert at.query_params["slice"] == "41"
    assert any(h.value == "Slice 41" for h in at.subheader)
    outlined = [t for t in _spec(at, "chart_pod_slices")["data"] if t.get("name", "").startswith("slice 41")]
    assert len(outlined) == 1  # the chosen slice is marked in the grid


def test_the_slice_in_the_url_opens_that_slice_and_a_bad_one_falls_back(run):
    run_id, result = run
    at = _pod(run_id, "17")
    assert at.selectbox(key="pod_slice").value == 17
    assert _torus_chips(at) == _chips_of(result, 17)
    assert at.query_params["slice"] == "17"
    for bad in ("999", "x"):
        at = _pod(run_id, bad)
        assert at.selectbox(key="pod_slice").value == 0 and at.query_params["slice"] == "0"


def test_slices_are_coloured_by_aggregates_and_dcn_traffic_the_run_stored(run, many_slices):
    run_id, _ = run
    with Database(many_slices[0]).read() as con:
        slices = slice_queries.slice_metrics(con, run_id)
    assert len(slices) == SLICES and (slices["chips"] == 4).all()
    assert slices["dcn_bytes_per_step"].gt(0).all()  # data parallel over DCN: every slice sends
    at = _pod(run_id)
    assert set(at.selectbox(key="pod_slice_value").options) >= {"its highest chip", "DCN traffic out per step"}
    at.selectbox(key="pod_slice_value").set_value("dcn_bytes_per_step").run()
    _ok(at)
    colours = _values(_spec(at, "chart_pod_slices")["data"][0]["marker"]["color"])
    assert colours == pytest.approx((slices["dcn_bytes_per_step"] / 2**30).tolist())
    at.selectbox(key="pod_slice_value").set_value("max").run()
    _ok(at)
    colours = _values(_spec(at, "chart_pod_slices")["data"][0]["marker"]["color"])
    assert colours == pytest.approx((slices["idle_frac_max"] * 100).tolist())
    assert any(c.value.startswith("DCN: the slices' host NICs send") for c in at.caption)


def test_a_grid_click_picks_the_slice(run):
    """The grid's selection (what a click on a cell sends) opens that slice, once; the select box then moves on."""
    run_id, result = run
    at = _pod(run_id)
    at.session_state[pod_slices.GRID_KEY] = {"selection": {"points": [{"customdata": 9}]}}
    _ok(at.run())
    assert at.selectbox(key="pod_slice").value == 9 and _torus_chips(at) == _chips_of(result, 9)
    at.selectbox(key="pod_slice").set_value(3).run()
    _ok(at)
    assert at.selectbox(key="pod_slice").value == 3  # the old click does not pull it back


def test_expert_load_is_a_colour_for_moe_runs_only(page_db):
    moe = page_db.run_ids["moe"]
    table = page_db.results["moe"].trace.extra["chip_expert_load"].to_pandas()
    at = AppTest.from_file(POD, default_timeout=60)
    at.session_state["select_run_id"] = moe
    _ok(at.run())
    assert "Expert load (x even share)" in at.selectbox(key="pod_metric").options
    at.selectbox(key="pod_metric").set_value("expert_load_ratio").run()
    _ok(at)
    shown = {}
    for index in range(4):  # a 4x4x4 torus, one z plane at a time
        at.select_slider(key="pod_index_z").set_value(index).run()
        chips = next(t for t in _spec(at, "chart_pod2d")["data"] if t.get("name") == "chips")
        shown.update(zip(_values(chips["customdata"]), _values(chips["marker"]["color"])))
    assert shown == pytest.approx(dict(zip(table["chip"], table["mean_load_ratio"])))
    assert any("Expert load" in m.label for m in at.metric)
    dense = AppTest.from_file(POD, default_timeout=60)
    dense.session_state["select_run_id"] = page_db.run_ids["full"]
    _ok(dense.run())
    assert not any("Expert" in o for o in dense.selectbox(key="pod_metric").options)


def test_expert_load_table_follows_the_routing_plan(page_db):
    """One value per expert group; a chip's steady mean is at most the busiest group's mean factor, and its busiest step at least its mean."""
    result = page_db.results["moe"]
    table = result.trace.extra["chip_expert_load"].to_pandas()
    assert len(table) == result.facts.chips
    assert table["mean_load_ratio"].round(12).nunique() == result.scenario.parallelism.expert
    assert (table["max_load_ratio"] >= table["mean_load_ratio"]).all()
    assert table["mean_load_ratio"].max() <= result.facts.extra["moe_busiest_group_factor"] + 1e-12
    assert "chip_expert_load" not in page_db.results["full"].trace.extra


def test_idle_and_memory_draw_distributions_past_64_hosts(run):
    run_id, result = run
    assert result.facts.hosts > idle.HOST_BARS_MAX
    at = _ok(AppTest.from_file(str(ROOT / "views" / "idle.py"), default_timeout=60))
    at.session_state["select_run_id"] = run_id
    _ok(at.run())
    keys = [c.key for c in at.get("plotly_chart")]
    assert keys == ["chart_idle_steps", "chart_idle_slices", "chart_idle_hist"]
    by_slice = _spec(at, "chart_idle_slices")
    assert all(len(_values(t["x"])) == SLICES for t in by_slice["data"])  # one bar per slice, not per host or chip
    hist = _spec(at, "chart_idle_hist")["data"][0]
    assert sum(_values(hist["y"])) == result.facts.chips and len(_values(hist["y"])) <= 40
    memory = AppTest.from_file(str(ROOT / "views" / "memory.py"), default_timeout=60)
    memory.session_state["select_run_id"] = run_id
    _ok(memory.run())
    peaks = _spec(memory, "chart_mem_chips")["data"][0]
    assert sum(_values(peaks["y"])) == result.facts.chips and len(_values(peaks["y"])) <= 40


def test_distributions_count_every_chip(run, many_slices):
    run_id, result = run
    with Database(many_slices[0]).read() as con:
        bins = distributions.chip_histogram(con, run_id, "idle_frac", 10)
        q = distributions.chip_quantiles(con, run_id, "idle_frac")
        top = distributions.top_chips(con, run_id, "idle_frac", 5)
        chips = queries.chip_metrics(con, run_id)
        assert distributions.chip_histogram(con, run_id, "expert_load_ratio") is None  # a dense run
        with pytest.raises(ValueError, match="no per-chip quantity"):
            distributions.chip_histogram(con, run_id, "made_up")
    assert bins["chips"].sum() == result.facts.chips and len(bins) <= 10
    assert q["max"] == pytest.approx(chips["idle_frac"].max()) and q["p50"] == pytest.approx(chips["idle_frac"].median())
    assert top["value"].tolist() == pytest.approx(sorted(chips["idle_frac"], reverse=True)[:5])


def test_figures_for_a_pod_sized_aggregate_stay_small():
    """The figures a 199 x 256-chip run draws take its aggregates: their size does not grow with chips."""
    n = 199
    slices = pd.DataFrame({
        "slice": range(n), "chips": 256, "hosts": 32, "idle_frac_max": [0.03 + 0.0001 * i for i in range(n)],
        "dcn_bytes_per_step": 1e10, "dcn_busy_ns_per_step": 1.6e7,
    })  # fmt: skip
    kinds = ["compute", "collective", "sync_wait", "input_wait", "recompile", "bubble", "other"]
    by_slice = pd.DataFrame([{"slice": s, "kind": k, "frac": 1 / len(kinds)} for s in range(n) for k in kinds])
    bins = pd.DataFrame({"lo": [i / 40 for i in range(40)], "hi": [(i + 1) / 40 for i in range(40)], "chips": [1274] * 40})
    sizes = {
        "grid": figures.figure_bytes(figures.slice_grid(slices, "idle_frac_max", "Idle %", True, selected=5)),
        "by slice": figures.figure_bytes(figures.host_bars(by_slice, by="slice")),
        "histogram": figures.figure_bytes(figures.binned_histogram(bins, "idle", 100, "%")),
        "memory": figures.figure_bytes(figures.chip_memory_histogram(bins.assign(lo=bins["lo"] * 2**34, hi=bins["hi"] * 2**34), 16 * 2**30)),
    }
    assert all(v < 200_000 for v in sizes.values()), sizes  # far below the 5 MB budget
