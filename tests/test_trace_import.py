"""Import of real traces: a torch.profiler fixture, a device trace worked by hand, bad files, flattening invariants."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import TraceImportError
from engine.trace import EVENT_KINDS
from profiler import queries
from profiler.trace_import import ImportLimits, _flatten, classify, import_trace, read_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TORCH = FIXTURES / "torch_cpu_mlp.trace.json.gz"


def test_torch_profiler_trace_imports_as_a_run(db):
    run_id = import_trace(db, TORCH)
    with db.read() as con:
        s = queries.run_summary(con, run_id)
        raw = con.execute("SELECT count(*), count(DISTINCT name) FROM extra_import_events WHERE run_id = ?", [run_id]).fetchone()
        kinds = dict(con.execute("SELECT kind, count(*) FROM extra_import_events WHERE run_id = ? GROUP BY kind", [run_id]).fetchall())
    assert s["source"] == "imported" and s["name"] == "torch_cpu_mlp" and s["chip"] == "cpu"
    assert s["chips"] == 1 and s["steps"] == 4  # four active ProfilerStep#N markers
    assert s["import"]["format"] == "torch.profiler"
    assert sum(s["breakdown"].values()) == pytest.approx(1.0)
    # the fixture's DataLoader and gloo all-reduce are real input and collective events
    assert s["breakdown"]["input_wait"] > 0 and s["breakdown"]["collective"] > 0 and s["breakdown"]["compute"] > 0
    assert s["mfu"] is None and s["samples_per_s"] is None and s["peak_hbm_bytes"] is None
    assert raw[0] == s["import"]["complete_events"]  # nothing dropped: every complete event kept with its name
    assert kinds["other"] > 0 and kinds["step"] == 4


def test_classification_rules():
    assert classify("gloo:all_reduce") == "collective"
    assert classify("all-reduce.3", thread="XLA Ops") == "collective"
    assert classify("ncclDevKernel_AllGather_RING_LL", "kernel") == "collective"
    assert classify("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation") == "input_wait"
    assert classify("Iterator::Prefetch") == "input_wait"
    assert classify("backend_compile") == "recompile"
    assert classify("Torch-Compiled Region") == "other"  # running compiled code is not compiling
    assert classify("aten::addmm", "cpu_op") == "compute"
    assert classify("fusion.12", thread="XLA Ops") == "compute"
    assert classify("Optimizer.step#SGD.step", "user_annotation") == "other"


def _device_trace() -> dict:
    """A TensorBoard-style device trace worked by hand (microseconds).

    Two TPU devices and a host; steps 7 and 8 on each device's "Steps" line.
    Device 0, step 7 [0, 10): fusion [0, 6), all-reduce [4, 9) -> compute 6, collective 3 (hidden 2), idle 1.
    Device 0, step 8 [10, 20): fusion [10, 20) -> compute 10.
    Device 1, step 7: infeed [0, 2), convolution [1, 10) -> input 2, compute 8 (input beats compute).
    Device 1, step 8: nothing -> other 10.
    """
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:TPU:0"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:TPU:1"}},
        {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "/host:CPU"}},
        *({"ph": "M", "name": "thread_name", "pid": p, "tid": 1, "args": {"name": "Steps"}} for p in (1, 2)),
        *({"ph": "M", "name": "thread_name", "pid": p, "tid": 2, "args": {"name": "XLA Ops"}} for p in (1, 2)),
    ]

    def x(pid, tid, name, ts, dur):
        return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur}

    events = [
        x(1, 1, "7", 100, 10), x(1, 1, "8", 110, 10), x(2, 1, "7", 100, 10), x(2, 1, "8", 110, 10),
        x(1, 2, "fusion.1", 100, 6), x(1, 2, "all-reduce.2", 104, 5), x(1, 2, "fusion.3", 110, 10),
        x(2, 2, "infeed", 100, 2), x(2, 2, "convolution.4", 101, 9),
        x(9, 5, "Iterator::GetNext", 95, 30),
        {"ph": "C", "pid": 1, "name": "mem", "ts": 100, "args": {"v": 1}},
    ]  # fmt: skip
    return {"displayTimeUnit": "ns", "traceEvents": meta + events}


def test_device_trace_known_answer(db, tmp_path):
    path = tmp_path / "host.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(_device_trace(), f)
    trace, facts = read_trace(path)
    assert facts.chip == "tpu" and facts.chips == 2 and facts.steps == 2
    assert trace.steps.to_pydict() == {"step": [0, 1], "start_ns": [0, 10_000], "step_ns": [10_000, 10_000]}
    got: dict[tuple[int, int, str], int] = {}
    for r in trace.events.to_pylist():
        got[(r["chip"], r["step"], r["kind"])] = got.get((r["chip"], r["step"], r["kind"]), 0) + r["dur_ns"]
    assert got == {
        (0, 0, "compute"): 6000, (0, 0, "collective"): 3000, (0, 0, "other"): 1000, (0, 1, "compute"): 10_000,
        (1, 0, "input_wait"): 2000, (1, 0, "compute"): 8000, (1, 1, "other"): 10_000,
    }  # fmt: skip
    assert facts.extra["import"]["host_events"] == 1 and facts.extra["import"]["skipped_by_phase"] == {"C": 1}
    run_id = import_trace(db, path)
    with db.read() as con:
        s = queries.run_summary(con, run_id)
    assert s["step_time_s"] == pytest.approx(10e-6) and s["breakdown"]["compute"] == pytest.approx(24 / 40)


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, ImportLimits, str]]:
    good = json.dumps(_device_trace()).encode()
    files = {
        "not json": (b"this is not json", "not Chrome Trace Event JSON"),
        "truncated json": (good[: len(good) // 2], "malformed or truncated JSON"),
        "truncated gzip": (gzip.compress(good)[:-20], "gzip"),
        "missing ts": (json.dumps({"traceEvents": [{"ph": "X", "pid": 1, "name": "a", "dur": 1}]}).encode(), "numeric 'ts'"),
        "negative dur": (json.dumps({"traceEvents": [{"ph": "X", "pid": 1, "ts": 0, "name": "a", "dur": -5}]}).encode(), "absurd duration"),
        "string ts": (json.dumps([{"ph": "X", "pid": 1, "ts": "soon", "dur": 1}]).encode(), "numeric 'ts'"),
        "absurd ts": (json.dumps([{"ph": "X", "pid": 1, "ts": 1e300, "dur": 1}]).encode(), "absurd timestamp"),
        "no events": (json.dumps({"traceEvents": []}).encode(), "no complete"),
        "bad podscope chip": (json.dumps({"traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "chip", "podscope": {"chip": "zero"}}},
            {"ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 1, "name": "compute", "cat": "compute"}]}).encode(), "valid 'chip' id"),
        "empty": (b"", "empty file"),
    }
    out = {k: (v[0], ImportLimits(), v[1]) for k, v in files.items()}
    # a gzip bomb: 64 MiB of spaces compress to ~64 KiB; the cap stops it at 1 MiB read
    bomb = gzip.compress(b"[" + b" " * (64 * 2**20) + b"]", compresslevel=9)
    out["gzip bomb"] = (bomb, ImportLimits(max_json_bytes=2**20), "gzip bomb")
    out["over size"] = (good, ImportLimits(max_file_bytes=100), "over the import limit")
    out["too many events"] = (good, ImportLimits(max_events=5), "more than 5 events")
    paths = {}
    for i, (key, (data, limits, msg)) in enumerate(out.items()):
        p = tmp_path / f"bad{i}.json"
        p.write_bytes(data)
        paths[key] = (p, limits, msg)
    return paths


def test_bad_files_give_a_clear_error_and_write_nothing(db, tmp_path):
    for key, (path, limits, msg) in _bad_files(tmp_path).items():
        with pytest.raises(TraceImportError, match=None) as err:
            import_trace(db, path, limits=limits)
        assert msg in str(err.value) and str(path) in str(err.value), key
    assert not db.path.exists()  # nothing written, not even an empty database


def test_missing_file(db, tmp_path):
    with pytest.raises(TraceImportError, match="cannot read"):
        import_trace(db, tmp_path / "nope.json")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40), st.integers(1, 15), st.integers(0, len(EVENT_KINDS) - 1)), min_size=1, max_size=25),
    st.lists(st.integers(1, 12), min_size=1, max_size=4),
)
def test_flattening_tiles_steps_and_picks_the_top_priority_kind(events, step_lengths):
    """Against a brute force over every nanosecond: pieces tile each chip's steps exactly."""
    n_chips = 3
    starts = np.concatenate([[0], np.cumsum(step_lengths)[:-1]]) + 2  # steps back to back from t=2
    ends = starts + np.array(step_lengths)
    bounds = np.empty(2 * len(starts), np.int64)
    bounds[0::2], bounds[1::2] = starts, ends
    chip = np.array([e[0] for e in events])
    s = np.array([e[1] for e in events], np.int64)
    e_end = s + np.array([e[2] for e in events])
    code = np.array([e[3] for e in events], np.int8)
    c, st_, k, t0, dur = _flatten(chip, s, e_end, code, n_chips, bounds)
    assert (dur > 0).all()
    for ch in range(n_chips):
        for step, (a, b) in enumerate(zip(starts, ends)):
            sel = (c == ch) & (st_ == step)
            assert dur[sel].sum() == b - a  # tiles the step exactly
            for t in range(a, b):
                cover = code[(chip == ch) & (s <= t) & (e_end > t)]
                want = cover.min() if len(cover) else EVENT_KINDS.index("other")
                piece = sel & (t0 <= t) & (t0 + dur > t)
                assert piece.sum() == 1 and k[piece][0] == want


def test_imported_run_shows_on_the_overview_page(page_db):
    """The shared real database holds this trace imported (tests/real_runs.py)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=60)
    at.session_state["select_run_id"] = page_db.run_ids["imported"]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["MFU"] == "n/a" and metrics["Chips"] == "1 x cpu" and metrics["Step time"].endswith("ms")
