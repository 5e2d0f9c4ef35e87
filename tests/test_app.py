"""The dashboard, through Streamlit's AppTest: every page on a stored run and on an empty database."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import simulate
from profiler import write_run

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture
def app_db(tmp_path, monkeypatch, small_scenario):
    from profiler.store import Database

    path = tmp_path / "app.duckdb"
    write_run(Database(path), simulate(small_scenario), name="stored-run")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path


def _no_exceptions(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def test_overview_shows_headline_numbers(app_db):
    at = AppTest.from_file(APP, default_timeout=60).run()
    _no_exceptions(at)
    labels = {m.label for m in at.metric}
    assert {"Step time", "Throughput (samples/s)", "MFU", "Chips"} <= labels
    chips = next(m.value for m in at.metric if m.label == "Chips")
    assert chips.startswith("8 x tpu-v4")
    # the calibrated 80% range of the predicted step time, from the run's summary
    assert any(c.value.startswith("Step time likely between") and "80%" in c.value for c in at.caption)


def test_empty_database_seeds_bundled_examples(tmp_path, monkeypatch):
    from profiler import api
    from profiler.store import Database

    path = tmp_path / "fresh.duckdb"
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = AppTest.from_file(APP, default_timeout=120).run()
    _no_exceptions(at)
    with Database(path).read() as con:
        n = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert n == len(api.bundled_scenarios())
    assert any(m.label == "MFU" for m in at.metric)


def test_what_if_simulates_and_selects_the_new_run(app_db):
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.text_input[0].set_value("4x4x4")
    at.number_input[0].set_value(2048)
    at.button[0].click().run()
    _no_exceptions(at)
    assert not at.error
    chips = next(m.value for m in at.metric if m.label == "Chips")
    assert chips.startswith("64 x tpu-v4")


def test_what_if_bad_topology_shows_error_not_exception(app_db):
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.text_input[0].set_value("3x3x3")  # 27 chips: global batch 256 does not divide
    at.button[0].click().run()
    _no_exceptions(at)
    assert at.error and "global_batch" in at.error[0].value


def test_validation_page_shows_scatter_table_and_filters(app_db):
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/validation.py").run()
    _no_exceptions(at)
    labels = {m.label for m in at.metric}
    assert {"End-to-end cases", "Median |error|", "90th pct |error|"} <= labels
    assert len(at.dataframe) == 1
    n_all = len(at.dataframe[0].value)
    at.multiselect(key="val_chips").set_value(["tpu-v3"]).run()
    _no_exceptions(at)
    shown = at.dataframe[0].value
    assert 0 < len(shown) < n_all and set(shown["chip"]) == {"tpu-v3"}
    # the bundled calibration was fitted on the bundled reference: held-out errors and ranges are shown too
    assert shown["leave_one_generation_out_error_pct"].notna().all()
    assert shown["leave_one_family_out_error_pct"].notna().all()
    assert {"Inside their 80% range", "Median range width"} <= {m.label for m in at.metric}
    assert any("never saw its chip generation" in c.value for c in at.caption)
