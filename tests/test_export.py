"""Export: Perfetto JSON structure and window, Parquet/CSV through DuckDB, a real viewer's parser, round trip."""

from __future__ import annotations

import base64
import gzip
import json
import os
from pathlib import Path

import duckdb
import pytest

from engine import simulate
from engine.errors import InputError
from profiler import queries
from profiler.export import LANES, MAX_COUNTER_POINTS, export_run, format_chips, parse_chips, parse_steps
from profiler.store import write_run
from profiler.trace_import import import_trace, read_trace

ROOT = Path(__file__).resolve().parent.parent
SPEEDSCOPE = ROOT / "tests" / "js" / "node_modules" / "speedscope" / "dist" / "release" / "index.html"


@pytest.fixture
def stored(db, small_scenario):
    result = simulate(small_scenario)
    return write_run(db, result), result


def _load(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def test_perfetto_structure_matches_the_stored_run(db, stored, tmp_path):
    run_id, result = stored
    out = tmp_path / "trace.json.gz"
    report = export_run(db, run_id, "perfetto", out)
    assert not report.cut and "all 20 steps, all 8 chips" in report.message()
    doc = _load(out)
    events = doc["traceEvents"]
    assert len(events) == report.events
    names = {e["pid"]: e["args"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(names) == list(range(1, 9))  # one process per chip, pid = chip + 1
    assert names[1]["name"] == "chip 0 host 0 slice 0 (0,0,0)"
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    coords = {pid: (a["podscope"]["x"], a["podscope"]["y"], a["podscope"]["z"]) for pid, a in names.items()}
    assert sorted(coords, key=coords.get) == sorted(sort, key=sort.get)  # sorted by torus coordinate
    xs = [e for e in events if e["ph"] == "X" and e["cat"] != "step"]
    assert len(xs) == result.trace.events.num_rows
    ev = result.trace.events.to_pylist()[0]
    first = next(e for e in xs if e["pid"] == ev["chip"] + 1)
    assert first["ts"] == pytest.approx(ev["start_ns"] / 1000) and first["dur"] == pytest.approx(ev["dur_ns"] / 1000)
    assert first["tid"] == LANES[ev["kind"]][0]
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert len(steps) == 8 * 20
    counters = [e for e in events if e["ph"] == "C"]
    timeline = result.trace.extra.get("memory_timeline")
    if timeline is None:  # the summary's peak as a flat line
        assert counters and all(e["args"]["peak"] == result.facts.peak_hbm_bytes for e in counters)
    else:  # the memory model's timeline, every point of it in every step of every chip
        points = min(MAX_COUNTER_POINTS, len(set(timeline.column("point").to_pylist())))
        assert len(counters) == 8 * 20 * points
        assert set().union(*(e["args"] for e in counters)) == set(timeline.column("category").to_pylist())


def test_default_window_is_capped_and_says_how_to_widen(db, stored, tmp_path):
    run_id, _ = stored
    report = export_run(db, run_id, "perfetto", tmp_path / "t.json", max_events=200)
    doc = _load(tmp_path / "t.json")
    timed = [e for e in doc["traceEvents"] if e["ph"] in ("X", "C")]  # what the budget counts (not metadata)
    assert report.cut and len(timed) <= 200 < len(timed) * (report.steps[1] + 1) / report.steps[1]  # one more step would not fit
    assert report.steps[0] == 0 and report.steps[1] < 20
    assert "--steps 0:20 --chips 0-7" in report.message()
    few = export_run(db, run_id, "perfetto", tmp_path / "u.json", steps="2:4", chips="1,3-4")
    doc = _load(tmp_path / "u.json")
    assert {e["pid"] for e in doc["traceEvents"]} == {2, 4, 5}
    assert {e["args"]["step"] for e in doc["traceEvents"] if e["ph"] == "X"} == {2, 3}
    assert few.chips == (1, 3, 4) and "3 of 8 chips (1,3-4)" in few.message()
    back, facts = read_trace(tmp_path / "u.json")  # a window imports as just those chips and steps
    assert back.chips.column("chip").to_pylist() == [1, 3, 4] and facts.chips == 3 and facts.steps == 2
    assert set(back.events.column("chip").to_pylist()) == {1, 3, 4}


def test_window_arguments_are_checked():
    assert parse_steps("3:", 10) == (3, 10) and parse_steps(":4", 10) == (0, 4) and parse_steps("5", 10) == (5, 6)
    assert format_chips((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    import numpy as np

    assert parse_chips("0-2,5", np.arange(8)) == (0, 1, 2, 5)
    for bad in ("a:b", "9:3", "20:30"):
        with pytest.raises(InputError):
            parse_steps(bad, 10)
    for bad in ("x", "3-1", "0-99"):
        with pytest.raises(InputError):
            parse_chips(bad, np.arange(8))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_tables_through_duckdb_writers(db, stored, tmp_path, fmt):
    run_id, result = stored
    out = tmp_path / "export"
    report = export_run(db, run_id, fmt, out)
    assert set(report.files) >= {f"{t}.{fmt}" for t in ("runs", "chips", "steps", "events", "step_kind", "chip_kind")}
    con = duckdb.connect()
    reader = "read_parquet" if fmt == "parquet" else "read_csv_auto"
    n, total = con.execute(f"SELECT count(*), sum(dur_ns) FROM {reader}(?)", [str(out / f"events.{fmt}")]).fetchone()
    assert n == result.trace.events.num_rows == report.events
    assert total == result.trace.events.column("dur_ns").to_numpy().sum()
    with pytest.raises(InputError):  # a non-empty directory is never overwritten
        export_run(db, run_id, fmt, out)


def test_round_trip_through_own_importer(db, stored, tmp_path):
    run_id, _ = stored
    out = tmp_path / "trace.json"
    export_run(db, run_id, "perfetto", out)
    back = import_trace(db, out, name="back")
    with db.read() as con:
        a, b = queries.run_summary(con, run_id), queries.run_summary(con, back)
        by_kind = "SELECT chip, step, kind, sum(dur_ns), min(start_ns) FROM events WHERE run_id = ? GROUP BY ALL ORDER BY ALL"
        ea, eb = con.execute(by_kind, [run_id]).fetchall(), con.execute(by_kind, [back]).fetchall()
        steps = "SELECT step, start_ns, step_ns FROM steps WHERE run_id = ? ORDER BY step"
        sa, sb = con.execute(steps, [run_id]).fetchall(), con.execute(steps, [back]).fetchall()
        ca = con.execute("SELECT chip, host, slice, x, y, z FROM chips WHERE run_id = ? ORDER BY chip", [run_id]).fetchall()
        cb = con.execute("SELECT chip, host, slice, x, y, z FROM chips WHERE run_id = ? ORDER BY chip", [back]).fetchall()
    # exact: microseconds with 3 decimals carry every nanosecond (adjacent events of one kind come back merged)
    assert ea == eb and sa == sb and ca == cb
    assert b["source"] == "imported" and b["step_time_s"] == a["step_time_s"] and b["breakdown"] == a["breakdown"]
    assert b["chip"] == a["chip"] and b["topology"] == a["topology"]


def _speedscope_title(page, name: str, data: bytes, timeout_ms: int = 15000) -> str:
    page.goto(SPEEDSCOPE.as_uri() + "#localProfilePath=/nonexistent.js")  # the hash makes speedscope expose its loader
    page.wait_for_function("typeof window.speedscope !== 'undefined'", timeout=20000)
    page.evaluate("([n, b]) => speedscope.loadFileFromBase64(n, b)", [name, base64.b64encode(data).decode()])
    try:
        page.wait_for_function(f"document.title.startsWith({json.dumps(name)})", timeout=timeout_ms)
    except Exception:  # playwright's TimeoutError: the profile was not shown (the bad file's case)
        pass
    return page.inner_text("body")


@pytest.mark.browser
def test_speedscope_parses_the_export(db, stored, tmp_path):
    """speedscope's own Trace Event importer (npm, in headless Chromium) reads the export."""
    if not SPEEDSCOPE.exists() or not Path("/usr/bin/chromium").exists():
        if os.environ.get("CI"):
            pytest.fail("speedscope (npm ci --prefix tests/js) and /usr/bin/chromium are required in CI")
        pytest.skip("needs tests/js/node_modules (npm ci --prefix tests/js) and /usr/bin/chromium")
    from playwright.sync_api import sync_playwright

    run_id, _ = stored
    out = tmp_path / "podscope.json"
    export_run(db, run_id, "perfetto", out, steps="0:2", chips="0-1")
    logs: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: logs.append(m.text))
            body = _speedscope_title(page, "podscope.json", out.read_bytes())
            bad_page = browser.new_page()
            bad_body = _speedscope_title(bad_page, "bad.json", b'{"traceEvents": [{"ph": "X", tru', timeout_ms=3000)
        finally:
            browser.close()
    assert "Importing as Trace Event Format profile" in logs
    # one speedscope profile per (process, thread) with events: 2 chips x 4 lanes used (steps, compute, collectives, other)
    assert "chip 0 host 0 slice 0 (0,0,0) (pid 1), steps (tid 1) (1/8)" in body
    assert "Welcome to" in bad_body  # the negative control: a broken file is not shown as a profile


def test_cli_export_import_exit_codes(tmp_path, capsys):
    import subprocess
    import sys

    from profiler.cli import main

    db = str(tmp_path / "cli.duckdb")
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    # one real subprocess for the whole path (stdout is exactly one JSON object); the rest in-process
    env = {**os.environ, "PODSCOPE_DB": db}
    p = subprocess.run([sys.executable, "-m", "profiler", "import", str(bad)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "bad.json" in p.stderr and p.stdout == "" and not Path(db).exists()
    torch = str(ROOT / "tests" / "fixtures" / "torch_cpu_mlp.trace.json.gz")
    assert main(["import", torch, "--json", "--name", "torch", "--db", db]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "imported"
    out = tmp_path / "t.json.gz"
    assert main(["export", "torch", "--format", "perfetto", "-o", str(out), "--db", db]) == 0
    assert "wrote" in capsys.readouterr().err and out.exists()
    assert main(["export", "nosuchrun", "--format", "csv", "-o", str(tmp_path / "x"), "--db", db]) == 1
    assert main(["export", "torch", "--format", "csv", "-o", str(out), "--db", db]) == 2  # exists as a file
    assert main(["export", "torch", "--format", "perfetto", "-o", str(tmp_path / "y.json"), "--steps", "9:3", "--db", db]) == 2
    assert not (tmp_path / "x").exists() and not (tmp_path / "y.json").exists()


def test_hbm_counters_follow_the_memory_timeline(real_db, tmp_path):
    """The engine's ``memory_timeline`` points become C events placed at their share of each exported step
    (thinned to at most MAX_COUNTER_POINTS per step, keeping the first, the last and the peak)."""
    result = real_db.results["full"]
    timeline = result.trace.extra["memory_timeline"].to_pandas()
    points = {int(pt): dict(zip(g["category"], g["bytes"].astype(float))) for pt, g in timeline.groupby("point")}
    order = sorted(points)
    peak = max(order, key=lambda pt: sum(points[pt].values()))
    export_run(real_db.db, real_db.run_ids["full"], "perfetto", tmp_path / "m.json", steps="3:5", chips="2")
    counters = [e for e in _load(tmp_path / "m.json")["traceEvents"] if e["ph"] == "C"]
    assert {e["pid"] for e in counters} == {3}
    steps = result.trace.steps.to_pylist()
    per_step = min(MAX_COUNTER_POINTS, len(order))
    assert len(counters) == 2 * per_step
    for k, step in enumerate(steps[3:5]):
        mine = counters[k * per_step : (k + 1) * per_step]
        shown = []
        for e in mine:
            frac = (e["ts"] * 1000 - step["start_ns"]) / step["step_ns"]
            i = round(frac * len(order))
            assert frac == pytest.approx(i / len(order), abs=1e-6)
            assert e["args"] == pytest.approx(points[order[i]])
            shown.append(order[i])
        assert shown == sorted(shown) and shown[0] == order[0] and shown[-1] == order[-1] and peak in shown
