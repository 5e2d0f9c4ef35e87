"""Pages that need event rows say plainly when a run was simulated in summary mode, and offer a full re-run."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import load_scenario, simulate
from profiler import write_run
from profiler.store import Database
from tests.conftest import SMALL_TOML



def _page(run_id: int) -> None:  # runs as its own script inside AppTest
    import streamlit as st

    from views import common

    with common.page_connection():
        if common.require_events(run_id, "timeline to draw"):
            st.success("events")


@pytest.fixture
def runs(tmp_path, monkeypatch, write_toml):
    path = tmp_path / "pages.duckdb"
    db = Database(path)
    full = write_run(db, simulate(load_scenario(write_toml(SMALL_TOML))), name="full")
    summary = write_run(db, simulate(load_scenario(write_toml(SMALL_TOML + 'trace = "summary"\n'))), name="summ")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path, full, summary


def test_a_full_run_passes(runs):
    _, full, _ = runs
    at = AppTest.from_function(_page, args=(full,), default_timeout=60).run()
    assert not at.exception and not at.info
    assert [s.value for s in at.success] == ["events"]


def test_a_summary_run_says_why_and_re_simulates_with_a_full_trace(runs):
    path, _, summ = runs
    at = AppTest.from_function(_page, args=(summ,), default_timeout=60).run()
    assert not at.exception and not at.success
    (info,) = at.info
    assert 'trace = "summary"' in info.value and "no timeline to draw" in info.value and "sim.trace=full" in info.value
    at.button[0].click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    with Database(path).read() as con:
        name, events = con.execute(
            "SELECT r.name, (SELECT count(*) FROM events e WHERE e.run_id = r.run_id) FROM runs r ORDER BY run_id DESC LIMIT 1"
        ).fetchone()
    assert name.endswith("[full trace]") and events > 0
    assert at.session_state["select_run_id"] > summ  # the new run is picked on the next render


def test_the_timeline_page_explains_a_summary_mode_run(runs):
    """The real Timeline page on a summary-mode run (selected as the newest): the notice, no chart."""
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "views" / "timeline.py"), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any('trace = "summary"' in i.value and "timeline to draw" in i.value for i in at.info)
    assert not at.get("plotly_chart")
