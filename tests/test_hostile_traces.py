"""Traces built to exhaust memory or time: each refused with the limit named, exit 2, under a memory cap."""

from __future__ import annotations

import gzip
import json

import pytest

from profiler.trace_file import DEFAULT_MAX_DEPTH, DEFAULT_MAX_STRING_BYTES, MAX_ID_CHARS, ImportLimits, _JsonShape, read_raw_trace
from engine.errors import TraceImportError
from tests.hostile import run_cli

NEST = 1500


def _event(**fields) -> dict:
    return {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "name": "a", **fields}


CASES = {
    "brackets x100000": lambda: b"[" * 100_000,
    "objects x100000": lambda: b'{"traceEvents":[' + b'{"a":' * 100_000,
    "name nested 1500": lambda: ('[{"ph":"X","pid":1,"tid":1,"ts":0,"dur":1,"name":' + "[" * NEST + "1" + "]" * NEST + "}]").encode(),
    "pid nested 1500": lambda: ('[{"ph":"X","pid":' + '{"a":' * NEST + "1" + "}" * NEST + ',"tid":1,"ts":0,"dur":1}]').encode(),
    "100 MB pid": lambda: b'[{"ph":"X","pid":"' + b"p" * (100 * 2**20) + b'","tid":1,"ts":0,"dur":1,"name":"a"}]',
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_trace_is_refused_with_its_limit(tmp_path, case):
    path = tmp_path / "hostile.json"
    path.write_bytes(CASES[case]())
    db = tmp_path / "x.duckdb"
    out = run_cli("import", str(path), "--db", str(db), timeout_s=120)
    assert out.returncode == 2, out.stderr[-2000:]
    limit = "max_string_bytes" if "MB" in case else "max_depth"
    assert limit in out.stderr and str(path) in out.stderr and "Traceback" not in out.stderr
    assert out.seconds < 60 and not db.exists()


def test_multi_gib_string_inside_gzip_stops_at_the_string_limit(tmp_path):
    """1.9 GiB of one string, as 30 gzip members of 64 MiB each (a few MB on disk)."""
    path = tmp_path / "bomb.json.gz"
    with open(path, "wb") as f:
        f.write(gzip.compress(b'[{"ph":"X","pid":1,"tid":1,"ts":0,"dur":1,"name":"'))
        member = gzip.compress(b"a" * (64 * 2**20), 1)
        for _ in range(30):
            f.write(member)
        f.write(gzip.compress(b'"}]'))
    out = run_cli("import", str(path), "--db", str(tmp_path / "x.duckdb"), timeout_s=120)
    assert out.returncode == 2 and "max_string_bytes" in out.stderr, out.stderr[-2000:]
    assert out.seconds < 60


def test_long_ids_and_structured_ids_are_refused(tmp_path):
    for pid, fragment in (("q" * (MAX_ID_CHARS + 1), f"at most {MAX_ID_CHARS}"), ([1, 2], "a list as 'pid'")):
        path = tmp_path / "t.json"
        path.write_text(json.dumps([_event(pid=pid)]))
        with pytest.raises(TraceImportError, match=fragment):
            read_raw_trace(path, ImportLimits())


def test_slow_events_hit_the_time_limit(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([_event() for _ in range(20_000)]))
    with pytest.raises(TraceImportError, match="max_seconds_per_event"):
        read_raw_trace(path, ImportLimits(max_seconds_per_event=0.0))
    assert len(read_raw_trace(path, ImportLimits()).ts_us) == 20_000


def test_limits_are_just_wide_enough(tmp_path):
    """At the limit is accepted; one past it is not."""
    ok = tmp_path / "ok.json"
    # the event list is depth 1, an event 2, args 3: nest args up to exactly the limit
    args = 1
    for _ in range(DEFAULT_MAX_DEPTH - 3):
        args = [args]
    ok.write_text(json.dumps([_event(args={"x": args}, name="n" * (DEFAULT_MAX_STRING_BYTES - 2))]))
    assert len(read_raw_trace(ok, ImportLimits()).ts_us) == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([_event(args={"x": [args]})]))
    with pytest.raises(TraceImportError, match="max_depth"):
        read_raw_trace(bad, ImportLimits())


def test_scanner_tracks_strings_and_escapes_across_any_chunking():
    import random

    rng = random.Random(0)
    for _ in range(200):
        obj = {"a": ['x\\"y\\\\', {"b": 'q"' * rng.randint(0, 5) + "\\" * rng.randint(0, 4)}], "c": [[['\\\\\\"']]], "[": "{{"}
        text = json.dumps(obj).encode()
        shape = _JsonShape(64, 10**6, "t")
        i = 0
        while i < len(text):
            k = rng.randint(1, 7)
            shape.feed(text[i : i + k])
            i += k
        assert shape.depth == 0 and not shape.in_string, text
