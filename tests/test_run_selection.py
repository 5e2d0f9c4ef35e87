"""The run picked in the sidebar follows the user across pages and lives in the URL (AppTest).

Databases are written by the real engine: a plain small run, and the bundled straggler scenario
(which the advisor has something to say about).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import load_scenario, simulate
from profiler import write_run
from profiler.store import Database

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
STRAGGLER = ROOT / "data" / "scenarios" / "resnet50-v3-32-straggler.toml"


@pytest.fixture
def two_runs(tmp_path, monkeypatch, small_scenario) -> dict[str, int]:
    path = tmp_path / "two.duckdb"
    db = Database(path)
    ids = {
        "straggler": write_run(db, simulate(load_scenario(STRAGGLER, {"training.steps": 6})), name="straggler-run"),
        "plain": write_run(db, simulate(small_scenario), name="plain-run"),  # the newest
    }
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return ids


def _picker(at: AppTest):
    return at.sidebar.selectbox(key="picker_run_id")


def _ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_opens_on_the_run_with_the_most_to_say(two_runs):
    at = _ok(AppTest.from_file(APP, default_timeout=120).run())
    assert _picker(at).value == two_runs["straggler"]  # not the newest, which the advisor has nothing on
    assert at.query_params["run"] == str(two_runs["straggler"])


@pytest.mark.parametrize("page", ["views/idle.py", "views/pod.py", "views/memory.py", "views/timeline.py", "views/compare.py"])
def test_the_picked_run_follows_the_user_to_every_page(two_runs, page):
    at = _ok(AppTest.from_file(APP, default_timeout=120).run())
    _picker(at).set_value(two_runs["plain"]).run()
    _ok(at)
    assert at.query_params["run"] == str(two_runs["plain"])
    at.switch_page(page).run()
    _ok(at)
    assert _picker(at).value == two_runs["plain"], page
    assert at.query_params["run"] == str(two_runs["plain"])
    at.switch_page("views/overview.py").run()
    assert _picker(at).value == two_runs["plain"]


def test_the_url_picks_the_run_on_a_fresh_session(two_runs):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["run"] = str(two_runs["plain"])
    at.run()
    _ok(at)
    assert _picker(at).value == two_runs["plain"]
    chips = next(m.value for m in at.metric if m.label == "Chips")
    assert chips == "8 x v4"


def test_a_url_naming_no_stored_run_falls_back_to_the_default(two_runs):
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["run"] = "9999"
    at.run()
    _ok(at)
    assert _picker(at).value == two_runs["straggler"]
