"""Simulating while storing (``simulate_and_write``) stores what ``write_run(simulate(...))`` stores, or nothing."""

from __future__ import annotations

import threading

import duckdb
import pytest

import engine.model.step as step
import profiler.chunked_write as chunked_write
import profiler.streamed_write as streamed_write
from engine import ProfilerError, SimulationError, load_scenario, scenario_from_dict, simulate
from profiler import queries, write_run
from profiler.connection import Database
from profiler.schema import per_run_tables
from profiler.streamed_write import simulate_and_write


def _tables(path) -> dict[str, list[tuple]]:
    """Every row of every table, in stored order (no ORDER BY: the insertion order is compared too)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()]
        out = {}
        for name in names:
            exclude = {"runs": " EXCLUDE (created_at)", "pending_runs": " EXCLUDE (started_at)"}.get(name, "")
            out[name] = con.execute(f'SELECT *{exclude} FROM "{name}"').fetchall()
        return out
    finally:
        con.close()


def _scenarios(small_scenario):
    from benchmarks.bench import all_causes_scenario

    # every idle cause on 64 chips over two step blocks and a bit; an MLP on 8 chips
    return [scenario_from_dict(all_causes_scenario("4x4x4", 70)), small_scenario]


@pytest.mark.parametrize("chunk_rows", [4_000_000, 1_000, 37])
def test_same_rows_as_simulate_then_write_run(tmp_path, monkeypatch, small_scenario, chunk_rows):
    monkeypatch.setattr(chunked_write, "EVENT_CHUNK_ROWS", chunk_rows)  # one transaction, a few chunks, many
    monkeypatch.setattr(chunked_write, "WRITER_YIELD_S", 0.0)
    for i, scenario in enumerate(_scenarios(small_scenario)):
        a, b = tmp_path / f"a{i}.duckdb", tmp_path / f"b{i}.duckdb"
        write_run(Database(a), simulate(scenario), name="run")
        run_id, result = simulate_and_write(Database(b), scenario, name="run")
        assert _tables(b) == _tables(a)
        assert result.trace.steps.equals(simulate(scenario).trace.steps)
        with Database(b).read() as con:
            assert queries.run_summary(con, run_id)["events"] == con.execute("SELECT count(*) FROM events").fetchone()[0]
            assert con.execute("SELECT count(*) FROM pending_runs").fetchone()[0] == 0


def _no_rows_but(db: Database, keep: int) -> None:
    with db.read() as con:
        assert [int(i) for i in queries.list_runs(con)["run_id"]] == [keep]
        for t in per_run_tables(con):
            assert con.execute(f'SELECT count(*) FROM "{t}" WHERE run_id <> ?', [keep]).fetchone()[0] == 0, t
        assert con.execute("SELECT count(*) FROM pending_runs").fetchone()[0] == 0


def _simulation_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "podscope-simulate"]


def test_a_simulation_failing_after_chunks_were_written_leaves_no_rows(tmp_path, monkeypatch, small_scenario):
    db = Database(tmp_path / "runs.duckdb")
    keep = write_run(db, simulate(small_scenario), name="keep")
    monkeypatch.setattr(chunked_write, "EVENT_CHUNK_ROWS", 1_000)
    monkeypatch.setattr(chunked_write, "WRITER_YIELD_S", 0.0)
    real_block_events, blocks = step._block_events, {"n": 0}

    def failing_third_block(*args):
        blocks["n"] += 1
        if blocks["n"] == 3:
            raise SimulationError("a phase overflows (simulated)")
        return real_block_events(*args)

    monkeypatch.setattr(step, "_block_events", failing_third_block)
    written = []
    real_insert = chunked_write.insert_events
    monkeypatch.setattr(chunked_write, "insert_events", lambda con, ev, run_id: (written.append(ev.num_rows), real_insert(con, ev, run_id)))
    scenario = _scenarios(small_scenario)[0]
    with pytest.raises(SimulationError, match="simulated"):
        simulate_and_write(db, scenario, name="bad")
    assert len(written) >= 2  # chunks were committed before the engine failed
    _no_rows_but(db, keep)
    assert _simulation_threads() == []


def test_a_failing_writer_stops_the_simulation_and_leaves_no_rows(tmp_path, monkeypatch, small_scenario):
    db = Database(tmp_path / "runs.duckdb")
    keep = write_run(db, simulate(small_scenario), name="keep")
    monkeypatch.setattr(chunked_write, "EVENT_CHUNK_ROWS", 1_000)
    real_insert, chunks = chunked_write.insert_events, {"n": 0}
    laid_out = {"n": 0}
    real_block_events = step._block_events

    def counting_block_events(*args):
        laid_out["n"] += 1
        return real_block_events(*args)

    def failing_second_chunk(con, events, run_id):
        chunks["n"] += 1
        if chunks["n"] == 2:
            raise ProfilerError("disk full (simulated)")
        real_insert(con, events, run_id)

    monkeypatch.setattr(step, "_block_events", counting_block_events)
    monkeypatch.setattr(chunked_write, "insert_events", failing_second_chunk)
    scenario = _scenarios(small_scenario)[0]  # 70 steps: three blocks of 32 steps, ~10 chunks
    with pytest.raises(ProfilerError, match="disk full"):
        simulate_and_write(db, scenario, name="bad")
    _no_rows_but(db, keep)
    assert _simulation_threads() == []
    assert laid_out["n"] < 3  # the engine stopped instead of laying out the rest


def test_the_engine_runs_at_most_one_chunk_ahead_of_the_writer(tmp_path, monkeypatch):
    from benchmarks.bench import all_causes_scenario

    monkeypatch.setattr(chunked_write, "EVENT_CHUNK_ROWS", 20_000)
    scenario = scenario_from_dict(all_causes_scenario("8x8x4", 100))  # 256 chips: ~55k events per block
    real_put, peak = streamed_write._EventStream._put, {"rows": 0, "block": 0}

    def watched_put(self, batch):
        real_put(self, batch)
        peak["rows"] = max(peak["rows"], self._rows)
        peak["block"] = max(peak["block"], batch.num_rows)

    monkeypatch.setattr(streamed_write._EventStream, "_put", watched_put)
    run_id, _ = simulate_and_write(Database(tmp_path / "runs.duckdb"), scenario)
    # a block larger than a chunk is held alone; never a second one beside it
    assert 0 < peak["rows"] <= max(chunked_write.EVENT_CHUNK_ROWS, peak["block"])


def test_a_scenario_the_engine_refuses_writes_nothing(tmp_path, small_scenario_path):
    # validates field by field, but its step overflows the nanosecond clock (engine/model/step.py assemble)
    huge = load_scenario(small_scenario_path, {"model.layer_sizes": [10**12, 10**12]})
    db = Database(tmp_path / "runs.duckdb")
    with pytest.raises(SimulationError):
        simulate_and_write(db, huge)
    assert not db.path.exists()
    assert _simulation_threads() == []
