"""Large runs are written in chunk transactions: same stored result as one transaction, nothing left on failure."""

from __future__ import annotations

import duckdb
import pytest

import profiler.chunked_write as chunked_write
import profiler.connection as connection
from engine import ProfilerError, simulate
from engine.trace import TABLES, Trace
from profiler import queries, write_run, write_runs
from profiler.connection import Database, DatabaseBusyError
from profiler.schema import per_run_tables


def _stored(db: Database, run_id: int) -> tuple:
    with db.read() as con:
        events = con.execute(
            "SELECT chip, step, kind, start_ns, dur_ns FROM events WHERE run_id = ? ORDER BY chip, start_ns", [run_id]
        ).fetchall()
        small = tuple(
            con.execute(f'SELECT * EXCLUDE (run_id) FROM "{t}" WHERE run_id = ? ORDER BY ALL', [run_id]).fetchall()
            for t in ("steps", "chips", "step_kind", "chip_kind")
        )
        summary = {k: v for k, v in queries.run_summary(con, run_id).items() if k != "run_id"}
    return events, small, summary


def test_chunked_write_stores_the_same_run_as_one_transaction(tmp_path, monkeypatch, small_scenario):
    result = simulate(small_scenario)
    one = Database(tmp_path / "one.duckdb")
    one_id = write_run(one, result)
    monkeypatch.setattr(chunked_write, "EVENT_CHUNK_ROWS", 37)  # ~20 chunks for the small run
    monkeypatch.setattr(chunked_write, "WRITER_YIELD_S", 0.0)
    chunked = Database(tmp_path / "chunked.duckdb")
    chunked_id = write_run(chunked, result)
    assert _stored(chunked, chunked_id) == _stored(one, one_id)
    with chunked.read() as con:
        assert con.execute("SELECT count(*) FROM pending_runs").fetchone()[0] == 0


def test_failure_after_some_chunks_leaves_no_rows(tmp_path, monkeypatch, small_scenario):
    db = Database(tmp_path / "runs.duckdb")
    good = simulate(small_scenario)
    keep = write_run(db, good, name="keep")
    monkeypatch.setattr(chunked_write, "EVENT_CHUNK_ROWS", 37)
    monkeypatch.setattr(chunked_write, "WRITER_YIELD_S", 0.0)
    bad = type(good)(good.scenario, Trace(good.trace.events, good.trace.steps, good.trace.chips, {"chip_memory": TABLES["extra_chip_memory"].table({"chip": [0], "peak_bytes": [1.0]})}), good.facts)
    real_publish = chunked_write.publish

    def failing_publish(con, staged, run_id):
        real_publish(con, staged, run_id)
        raise ProfilerError("disk full (simulated)")

    monkeypatch.setattr(chunked_write, "publish", failing_publish)
    with pytest.raises(ProfilerError, match="disk full"):
        write_run(db, bad, name="bad")
    with db.read() as con:
        assert [int(i) for i in queries.list_runs(con)["run_id"]] == [keep]
        for table in per_run_tables(con):
            assert con.execute(f'SELECT count(*) FROM "{table}" WHERE run_id <> ?', [keep]).fetchone()[0] == 0, table
        assert con.execute("SELECT count(*) FROM pending_runs").fetchone()[0] == 0


def test_write_runs_mixes_whole_and_chunked_runs(tmp_path, monkeypatch, small_scenario, small_scenario_path):
    """A sweep's batch writer: small runs share a connection, a large one goes through the chunked path."""
    from engine import load_scenario

    small = simulate(small_scenario)
    monkeypatch.setattr(chunked_write, "WRITER_YIELD_S", 0.0)
    monkeypatch.setattr(chunked_write, "EVENT_CHUNK_ROWS", small.trace.events.num_rows)  # small fits exactly; longer runs chunk
    longer = simulate(load_scenario(small_scenario_path, {"training.steps": 40}))
    db = Database(tmp_path / "runs.duckdb")
    ids = write_runs(db, [small, longer, small])
    assert len(set(ids)) == 3
    with db.read() as con:
        for run_id, result in zip(ids, [small, longer, small]):
            stored = con.execute("SELECT count(*) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]
            assert stored == result.trace.events.num_rows == queries.run_summary(con, run_id)["events"]
        assert con.execute("SELECT count(*) FROM pending_runs").fetchone()[0] == 0


def test_a_chunked_writer_keeps_the_file_unless_a_reader_waits(tmp_path, monkeypatch):
    """Between chunks the writer reuses its connection; a fresh wait marker makes it let go and pause."""
    monkeypatch.setattr(chunked_write, "WRITER_YIELD_S", 0.0)
    db = Database(tmp_path / "runs.duckdb")
    with chunked_write.HeldWriter(db) as held:
        with held.connection() as first:
            pass
        with held.connection() as again:
            assert again is first  # nobody waiting: no close, no checkpoint
        db.wait_marker.touch()  # what a polling reader does
        assert db.reader_waiting()
        with held.connection() as after:
            assert after is not first
        with pytest.raises(duckdb.ConnectionException):
            first.execute("SELECT 1")  # the first connection was closed, so the file was free


def test_a_reader_that_finds_the_file_locked_leaves_a_fresh_wait_marker(tmp_path, monkeypatch, small_scenario):
    import subprocess
    import sys

    db = Database(tmp_path / "runs.duckdb")
    write_run(db, simulate(small_scenario))
    assert not db.reader_waiting()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(60)", str(db.path)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(connection, "LOCK_RETRY_S", 0.2)
        with pytest.raises(DatabaseBusyError):
            with db.read():
                pass
        assert db.reader_waiting()
    finally:
        holder.kill()
        holder.wait()
