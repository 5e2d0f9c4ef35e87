"""The dashboard, through Streamlit's AppTest: the Overview on a real run, the first start on an empty database."""

from __future__ import annotations

import math
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from engine.scenario import parse_topology
from profiler import validation

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _app(run_id: int, timeout: int = 60) -> AppTest:
    """The app's first page showing ``run_id``, after one script run."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.session_state["select_run_id"] = run_id
    return at.run()


def _no_exceptions(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def test_overview_shows_headline_numbers(page_db):
    summary = page_db.summary("full")
    at = _app(page_db.run_ids["full"])
    _no_exceptions(at)
    labels = {m.label for m in at.metric}
    assert {"Step time", "Throughput (samples/s)", "MFU", "Chips"} <= labels
    chips = next(m.value for m in at.metric if m.label == "Chips")
    assert chips == f"{summary['chips']:,} x {summary['chip'].removeprefix('tpu-')}"
    assert next(m.value for m in at.metric if m.label == "MFU") == f"{summary['mfu'] * 100:.1f}%"
    # the calibrated 80% range of the predicted step time, from the run's summary
    assert any(re.match(r"Step time likely [0-9.,]+–[0-9.,]+ (ms|s|min) \(", c.value) and "80%" in c.value for c in at.caption)


def test_empty_database_seeds_bundled_examples(tmp_path, monkeypatch):
    from profiler import api
    from profiler.store import Database

    path = tmp_path / "fresh.duckdb"
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = AppTest.from_file(APP, default_timeout=120).run()
    _no_exceptions(at)
    from profiler.sweep import expand_points, load_sweep
    from views.common import SEED_SWEEPS

    total = 0
    for sweep in SEED_SWEEPS:
        spec, base = load_sweep(sweep)
        with Database(path).read() as con:
            swept = con.execute("SELECT count(*) FROM runs WHERE json_extract_string(summary, '$.sweep.name') = ?", [spec.name]).fetchone()[0]
        assert swept == len(expand_points(spec, base)) > 1, sweep.name
        total += swept
    with Database(path).read() as con:
        n = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    assert n == len(api.bundled_scenarios()) + total
    assert any(m.label == "MFU" for m in at.metric)


def test_what_if_simulates_and_selects_the_new_run(writable_db):
    """ResNet-50 on a v3 4x4: the same global batch on a 4x8 slice of the same chip."""
    base = writable_db.results["full"].scenario
    at = _app(writable_db.run_ids["full"])
    at.text_input[0].set_value("4x8")
    at.number_input[0].set_value(base.training.global_batch)
    at.button[0].click().run()
    _no_exceptions(at)
    assert not at.error
    chips = next(m.value for m in at.metric if m.label == "Chips")
    assert chips == f"{math.prod(parse_topology('4x8'))} x {base.pod.chip.removeprefix('tpu-')}"


def test_what_if_bad_topology_shows_error_not_exception(writable_db):
    base = writable_db.results["full"].scenario
    assert base.training.global_batch % 9  # 3x3 = 9 chips: the global batch does not divide
    at = _app(writable_db.run_ids["full"])
    at.text_input[0].set_value("3x3")
    at.button[0].click().run()
    _no_exceptions(at)
    assert at.error and "global_batch" in at.error[0].value


def test_validation_page_shows_scatter_table_and_filters(page_db):
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.switch_page("views/validation.py").run()
    _no_exceptions(at)
    labels = {m.label for m in at.metric}
    assert {"End-to-end cases", "Median |error|", "90th pct |error|"} <= labels
    assert len(at.dataframe) == 4  # the per-step cases, the MLPerf times to train, the compiler grid's families, its layers
    n_all = len(at.dataframe[0].value)
    errors = at.table[0].value  # held out per generation: each generation's cases by the fit that never saw it
    by_chip = validation.run_validation().summary["leave_one_generation_out_by_chip"]
    for chip, held in by_chip.items():
        row = errors.loc[f"chip generation held out: {chip}"]
        assert row["cases"] == held["n"] and row["median |error|"] == f"{held['median_abs_pct']:.1f}%"
    at.multiselect(key="val_chips").set_value(["tpu-v3"]).run()
    _no_exceptions(at)
    shown = at.dataframe[0].value
    assert 0 < len(shown) < n_all and set(shown["chip"]) == {"tpu-v3"}
    # the bundled calibration was fitted on the bundled reference: held-out errors and ranges are shown too
    assert shown["leave_one_generation_out_error_pct"].notna().all()
    assert shown["leave_one_family_out_error_pct"].notna().all()
    assert {"Inside their 80% range", "Median range width"} <= {m.label for m in at.metric}
    assert any("never saw its chip generation" in c.value for c in at.caption)
    assert any("chip generation held out of the fit" in c.value for c in at.caption)  # the headline is held out
    # the HBM model against the TPU compiler, from the committed grid (validate --json's xla block)
    from profiler.xla_grid import xla_block

    block = xla_block()
    assert any(h.value == "HBM against the TPU compiler" for h in at.subheader)
    shown_metrics = {m.label: m.value for m in at.metric}
    assert shown_metrics["Configurations"] == str(block["n"])
    assert shown_metrics["Fits / out of memory agree"] == f"{100 * block['verdict_agreement']:.1f}%"
    assert shown_metrics["Near the limit, verdicts agree"] == f"{100 * block['near_limit_verdict_agreement']:.1f}%"
    families = at.dataframe[2].value
    groups = list(block["families"].values()) + [block["accumulation"]]
    assert list(families["family"]) == [*block["families"], "any, gradient accumulation"]
    assert list(families["false_fits"]) == [g["false_fits"] for g in groups]
    assert list(families["n"]) == [g["n"] for g in groups]
    # compute per layer against the compiler's estimate (validate --json's xla_compute block)
    from profiler.xla_compute import compute_block

    compute = compute_block()
    assert any(h.value == "Compute against the TPU compiler" for h in at.subheader)
    assert shown_metrics["Layer shapes"] == str(compute["n"])
    assert shown_metrics["Median |difference|, compute per layer"] == f"{compute['median_abs_pct']:.1f}%"
    layers = at.dataframe[3].value
    assert len(layers) == compute["n"] and set(layers["chip"]) == set(compute["generations"])
