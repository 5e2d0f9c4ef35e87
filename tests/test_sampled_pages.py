"""Pages on sampled runs: the Timeline draws the sampled chips and says which and why; the
aggregate pages show every chip, as they do for full runs.

The runs are the real engine's: the shared database's ``sampled`` run (16 chips, 6 sampled)
and, written here, a 20-slice v5e run (5,120 chips, 256 sampled) in the shape of the bundled
199-slice scenario.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import load_scenario, simulate
from profiler import sampled
from profiler.store import Database, write_run

ROOT = Path(__file__).resolve().parent.parent
AGGREGATE_PAGES = ["views/overview.py", "views/idle.py", "views/pod.py", "views/memory.py", "views/scaling.py"]


def _page(page: str, run_id: int, timeout: int = 60) -> AppTest:
    at = AppTest.from_file(str(ROOT / page), default_timeout=timeout)
    at.session_state["select_run_id"] = run_id
    at.run()
    assert not at.exception, (page, [e.value for e in at.exception])
    assert not at.error, (page, [e.value for e in at.error])
    return at


def _gantt_chips(at: AppTest) -> set[int]:
    """Chip ids on the Timeline Gantt's rows (labelled ``chip N``)."""
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (gantt,) = [s for s in specs if str(s["layout"].get("title", {}).get("text", "")).startswith("Steps ")]
    heatmap = next(t for t in gantt["data"] if t.get("type") == "heatmap")
    return {int(label.removeprefix("chip ")) for label in heatmap["y"]}


def _sample(db: Database, run_id: int):
    with db.read() as con:
        return sampled.sampled_chips(con, run_id)


def test_timeline_names_the_sample_and_draws_only_sampled_chips(page_db):
    run_id = page_db.run_ids["sampled"]
    sample = _sample(page_db.db, run_id)
    at = _page("views/timeline.py", run_id)
    (info,) = [i.value for i in at.info if "sampled" in i.value]
    assert 'trace = "sampled"' in info and f"events of {len(sample)} of 16 chips" in info
    for reason, n in sampled.reason_counts(sample).items():
        assert f"{sampled.REASON_WORDS[reason]} {n}" in info
    assert "By reason sampled" in at.radio(key="tl_how").options
    assert at.slider(key="tl_n").max == len(sample)  # Worst N picks among the sampled chips only
    assert _gantt_chips(at) == set(sample["chip"])
    at.radio(key="tl_how").set_value("By reason sampled").run()
    at.multiselect(key="tl_reasons").set_value(["straggler"]).run()
    assert not at.exception
    assert _gantt_chips(at) == set(sample.loc[sample["reason"] == "straggler", "chip"])
    assert any("sampled chips" in b.proto.label for b in at.get("download_button"))


def test_timeline_by_host_offers_only_hosts_with_sampled_chips(page_db):
    run_id = page_db.run_ids["sampled"]
    sample = _sample(page_db.db, run_id)
    hosts = set(page_db.results["sampled"].trace.chips.to_pandas().set_index("chip").loc[sample["chip"], "host"])
    at = _page("views/timeline.py", run_id)
    at.radio(key="tl_how").set_value("By host").run()
    assert {int(h) for h in at.multiselect(key="tl_hosts").options} == hosts
    assert _gantt_chips(at) <= set(sample["chip"])


@pytest.mark.parametrize("page", AGGREGATE_PAGES)
def test_aggregate_pages_show_a_sampled_run_whole(page_db, page):
    at = _page(page, page_db.run_ids["sampled"])
    assert not [i.value for i in at.info if 'trace = "summary"' in i.value]
    exports = [b.proto.label for b in at.get("download_button") if b.proto.label.startswith("Export trace")]
    assert all("6 sampled chips" in label for label in exports), exports  # the events it holds are the sample's
    assert exports or page != "views/overview.py"


@pytest.fixture(scope="module")
def many_slices(tmp_path_factory):
    """The bundled 199-slice scenario cut to 20 slices and 3 steps (5,120 chips), stored."""
    scenario = load_scenario(
        ROOT / "data" / "scenarios" / "llm-32b-v5e-199-slices-sampled.toml",
        {"pod.slices": 20, "training.global_batch": 5120, "training.steps": 3},
    )
    path = tmp_path_factory.mktemp("sampled") / "many.duckdb"
    run_id = write_run(Database(path), simulate(scenario))
    return path, run_id


@pytest.mark.parametrize("page", [*AGGREGATE_PAGES, "views/timeline.py"])
def test_pages_on_a_many_slice_sampled_run(many_slices, page, monkeypatch):
    path, run_id = many_slices
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = _page(page, run_id, timeout=120)
    if page == "views/timeline.py":
        sample = _sample(Database(path), run_id)
        assert len(sample) == 256 and sample["chip"].floordiv(256).nunique() == 20  # every slice sampled
        assert any("events of 256 of 5,120 chips" in i.value for i in at.info)
        assert _gantt_chips(at) <= set(sample["chip"])
