"""Pages that need event rows say plainly when a run was simulated in summary mode, and offer a full re-run."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from profiler.store import Database


def _page(run_id: int) -> None:  # runs as its own script inside AppTest
    import streamlit as st

    from views import common

    with common.page_connection():
        if common.require_events(run_id, "timeline to draw"):
            st.success("events")


@pytest.fixture
def runs(writable_db):
    """A copy of the real runs: a full-trace run and a summary-mode run among them."""
    assert writable_db.results["summary"].scenario.sim.trace == "summary"
    assert writable_db.results["full"].scenario.sim.trace == "full"
    return writable_db.path, writable_db.run_ids["full"], writable_db.run_ids["summary"]


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


def test_the_timeline_page_explains_a_summary_mode_run(page_db):
    """The real Timeline page on a summary-mode run: the notice, no chart."""
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "views" / "timeline.py"), default_timeout=60)
    at.session_state["select_run_id"] = page_db.run_ids["summary"]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any('trace = "summary"' in i.value and "timeline to draw" in i.value for i in at.info)
    assert not at.get("plotly_chart")
