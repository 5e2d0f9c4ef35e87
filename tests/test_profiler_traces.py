"""Traces the real JAX and TensorFlow profilers wrote (tests/fixtures/traces), imported.

Made by scripts/fixtures/make_profiler_traces.py: an 8-device data-parallel MLP under
``jax.profiler.trace`` with five StepTraceAnnotation steps (CPU virtual devices), and the
Keras MLP under ``tf.profiler`` converted by XProf, with an AUTOTUNE tf.data pipeline and an
input-bound one (a one-threaded map with a slow py_function, prefetch 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from profiler import xplane
from profiler.cli import main
from profiler.store import Database
from profiler.trace_import import import_trace, read_trace

TRACES = Path(__file__).parent / "fixtures" / "traces"


def breakdown(trace) -> dict[str, float]:
    kinds = trace.events.column("kind").to_pylist()
    dur = trace.events.column("dur_ns").to_numpy()
    total = dur.sum()
    return {k: float(dur[np.array(kinds) == k].sum() / total) for k in set(kinds)}


@pytest.mark.parametrize("name", ["jax_mlp_dp8.perfetto_trace.json.gz", "jax_mlp_dp8.trace.json.gz"])
def test_jax_data_parallel_mlp(name):
    trace, facts = read_trace(TRACES / name)
    assert facts.chips == 8 and facts.extra["import"]["format"] == "xla devices"
    assert trace.chips.column("chip").to_pylist() == list(range(8))
    assert facts.steps == 5 and trace.steps.num_rows == 5
    b = breakdown(trace)
    # XLA ops are compute; the all-reduce and its rendezvous (8 devices on a shared CPU) collective
    assert b["compute"] > 0.05 and b["collective"] > 0.2
    assert b.get("input_wait", 0.0) == 0.0
    assert sorted(set(trace.events.column("chip").to_pylist())) == list(range(8))


def test_keras_input_bound_against_autotune():
    autotune, f_auto = read_trace(TRACES / "keras_mlp_autotune.trace.json.gz")
    bound, f_bound = read_trace(TRACES / "keras_mlp_input_bound.trace.json.gz")
    assert (f_auto.steps, f_bound.steps) == (6, 3)  # one per Keras train-function call
    a, b = breakdown(autotune), breakdown(bound)
    assert b["input_wait"] > 0.9  # the step waits on the one-threaded map
    assert a["input_wait"] < 0.3 and a["compute"] > 0.1  # prefetching hides the pipeline's own work
    med = lambda t: float(np.median(t.steps.column("step_ns").to_numpy()))  # noqa: E731
    assert med(bound) > 20 * med(autotune)


def test_xplane_imports_like_the_json_trace(tmp_path):
    pytest.importorskip("xprof", reason="the optional xprof package converts .xplane.pb (requirements-xprof.txt)")
    db = Database(tmp_path / "runs.duckdb")
    run_id = import_trace(db, TRACES / "jax_mlp_dp8.xplane.pb.gz")
    with db.read() as con:
        steps = con.execute("SELECT count(*) FROM steps WHERE run_id = ?", [run_id]).fetchone()[0]
        chips = con.execute("SELECT count(*) FROM chips WHERE run_id = ?", [run_id]).fetchone()[0]
    assert (steps, chips) == (5, 8)


def test_xplane_without_xprof_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(xplane, "_converter", lambda: None)
    db = tmp_path / "runs.duckdb"
    assert main(["import", str(TRACES / "jax_mlp_dp8.xplane.pb.gz"), "--db", str(db)]) == 2
    assert "pip install xprof==2.24.2" in capsys.readouterr().err
    with Database(db).read() as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_cli_import_json_summary(tmp_path, capsys):
    assert main(["import", str(TRACES / "keras_mlp_input_bound.trace.json.gz"), "--db", str(tmp_path / "r.duckdb"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["steps"] == 3 and s["input_wait_frac"] > 0.9
