"""The Plan page through AppTest, on the real-run database: search, the Pareto scatter, simulate a point."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from profiler import queries

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def _plan_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()  # the default page (Overview) may show the advisor's findings as errors
    assert not at.exception
    return _ok(at.switch_page("views/plan.py").run())


def _search(at: AppTest, shapes: list[str]) -> AppTest:
    next(m for m in at.multiselect if m.label == "Slice shapes").set_value(shapes)
    next(m for m in at.multiselect if m.label == "Remat").set_value(["minimal", "full"])
    return _ok(at.button[0].click().run())


def test_search_draws_the_pareto_scatter_and_ranks(page_db):
    at = _plan_page()
    assert "Choose the knobs" in at.info[0].value
    at = _search(at, ["2x2x4", "4x4x4"])
    candidates = int(at.metric[0].value.replace(",", ""))
    assert candidates == (35 + 84) * 2  # ordered factorisations of 16 and of 64 chips over 4 axes (with context), 2 remats
    assert len(at.get("plotly_chart")) == 1
    table = at.dataframe[0].value
    assert list(table["Rank"]) == list(range(1, len(table) + 1))
    assert set(table["Remat"]) <= {"minimal", "full"}
    assert any(c.value.startswith("Ruled out") and "heads not divisible by tensor" in c.value for c in at.caption)


def test_a_stored_run_as_the_base(page_db):
    at = _plan_page()
    at.radio(key="plan_base_kind").set_value("Stored run").run()
    _ok(at)
    at.selectbox(key="plan_base_run").set_value(page_db.run_ids["full"]).run()  # ResNet-50 on a v3 4x4
    _ok(at)
    objective = at.selectbox[-1]
    assert "tokens_per_s" not in objective.options  # ResNet has no tokens
    at = _search(at, ["4x4"])
    assert int(at.metric[0].value.replace(",", "")) == 15 * 2


def test_simulating_a_point_stores_a_run_that_matches_the_plan(writable_db):
    at = _plan_page()
    at = _search(at, ["4x4x4"])
    at.button(key="plan_simulate").click().run()
    _ok(at)
    assert "Stored run" in at.success[0].value
    with writable_db.db.read() as con:
        runs = queries.list_runs(con)
        newest = int(runs["run_id"].max())
        summary = queries.run_summary(con, newest)
    planned_s = at.session_state["plan_run"][1]
    assert summary["name"].startswith("llm-1b-v5p-64 · plan")
    assert summary["step_time_s"] == pytest.approx(planned_s, rel=0.01) and not summary["oom"]
    at.button(key="plan_open_overview").click().run()
    assert not at.exception


def test_the_page_alone_on_an_empty_database(tmp_path, monkeypatch):
    """No stored runs: a bundled scenario is the base, and choosing a stored run says there is none."""
    monkeypatch.setenv("PODSCOPE_DB", str(tmp_path / "empty.duckdb"))
    at = AppTest.from_file(str(ROOT / "views" / "plan.py"), default_timeout=120)
    _ok(at.run())
    assert "Choose the knobs" in at.info[0].value
    at.radio(key="plan_base_kind").set_value("Stored run").run()
    _ok(at)
    assert "No stored runs yet" in at.info[0].value


def test_bad_knobs_are_said_on_the_page(page_db):
    at = _plan_page()
    next(m for m in at.multiselect if m.label == "Slice shapes").set_value([])
    at.button[0].click().run()
    assert not at.exception
    assert at.error and "pod.topology" in at.error[0].value and "empty list" in at.error[0].value


def test_every_objective_has_a_label_for_the_form():
    from engine.planning.planner import OBJECTIVES
    from profiler.plan import OBJECTIVE_LABELS

    assert set(OBJECTIVE_LABELS) == set(OBJECTIVES)
    assert not any("_" in label for label in OBJECTIVE_LABELS.values())


def test_checking_a_point_with_the_tpu_compiler_gives_xlas_peak_beside_podscopes(page_db, live):
    """A point of the bundled Keras MLP on a v5e 2x2 slice, compiled for it by XLA: its peak per chip beside
    Podscope's (a model this small compiles in seconds; the compiler grid checks the larger ones)."""
    at = _plan_page()
    at = _ok(at.selectbox(key="plan_base_file").set_value("keras-mlp-v5e-8").run())
    next(m for m in at.multiselect if m.label == "Slice shapes").set_value(["2x2"])
    next(m for m in at.multiselect if m.label == "Remat").set_value(["full"])
    at = _ok(at.button[0].click().run())
    result, _ = at.session_state["plan_result"]
    fsdp4 = next(p.index for p in result.points if p.feasible and p.mesh.get("fsdp") == 4)
    at = _ok(at.selectbox(key="plan_pick").set_value(fsdp4).run())
    at = _ok(at.button(key="plan_xla").click().run(timeout=300))
    text = at.success[0].value
    assert text.startswith("XLA (libtpu") and "fits this point" in text and "GiB per chip at its peak" in text
    _, row = at.session_state["plan_xla_result"]
    assert row["refusal"] is None and not row["oom"] and row["peak_hbm_bytes"] > 0
    assert f"({row['hbm_diff_pct']:+.1f}%)" in text and f"{row['peak_hbm_bytes'] / 2**30:.2f} GiB per chip" in text


def test_the_hbm_range_marks_and_rules_out_what_may_not_fit(page_db):
    """A batch that puts Podscope's peak just under v5p's usable HBM: the table says whether each point may not fit,
    and with the range asked for such points are ruled out."""
    at = _plan_page()
    next(t for t in at.text_input if t.label.startswith("Global batches")).set_value("12800, 13312")
    at = _search(at, ["4x4x4"])
    table = at.dataframe[0].value
    assert set(table["HBM verdict"]) == {"fits", "may not fit"}
    assert not any("may not fit (HBM range)" in c.value for c in at.caption)
    at.checkbox(key="plan_hbm_range").check()
    at = _search(at, ["4x4x4"])
    assert any(c.value.startswith("Ruled out") and "may not fit (HBM range)" in c.value for c in at.caption)
    assert set(at.dataframe[0].value["HBM verdict"]) == {"fits"}
