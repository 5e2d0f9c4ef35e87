"""DuckDB round trips in a real file: write, summarise, query, delete, and all-or-nothing writes."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pytest

from engine import ProfilerError, RunNotFoundError, simulate
from engine.trace import TABLES, Trace
from profiler import SUMMARY_KEYS, delete_run, queries, write_run
from profiler.store import resolve_db_path

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def test_round_trip_preserves_tables_and_summary(db, small_scenario):
    result = simulate(small_scenario)
    run_id = write_run(db, result)
    with db.read() as con:
        n_events = con.execute("SELECT count(*) FROM events WHERE run_id = ?", [run_id]).fetchone()[0]
        stored_steps = con.execute("SELECT step_ns FROM steps WHERE run_id = ? ORDER BY step", [run_id]).fetchnumpy()["step_ns"]
        summary = queries.run_summary(con, run_id)
        bd = queries.breakdown(con, run_id)
        st = queries.step_times(con, run_id)
    assert n_events == result.trace.events.num_rows
    assert (stored_steps == result.trace.steps.column("step_ns").to_numpy()).all()
    assert set(SUMMARY_KEYS) <= set(summary)
    assert sum(summary["breakdown"].values()) == pytest.approx(1.0)
    assert bd["frac"].sum() == pytest.approx(1.0)
    assert len(st) == 20
    assert summary["events"] == n_events
    # steady-state median from SQL equals numpy's median of the engine's step lengths
    import numpy as np

    assert summary["step_time_s"] == pytest.approx(np.median(result.trace.steps.column("step_ns").to_numpy()) / 1e9)
    assert summary["mfu"] == pytest.approx(
        result.facts.model_flops_per_step / summary["step_time_s"] / (8 * result.facts.peak_flops_per_s_per_chip)
    )


def test_many_runs_in_one_file_and_lookup_by_name(db, small_scenario):
    a = write_run(db, simulate(small_scenario), name="first")
    b = write_run(db, simulate(small_scenario), name="second")
    assert b == a + 1
    with db.read() as con:
        assert len(queries.list_runs(con)) == 2
        from profiler import resolve_run

        assert resolve_run(con, "second") == b
        assert resolve_run(con, str(a)) == a
        with pytest.raises(RunNotFoundError):
            resolve_run(con, "third")


def test_step_times_are_bucketed_to_max_points(db, small_scenario):
    run_id = write_run(db, simulate(small_scenario))
    with db.read() as con:
        df = queries.step_times(con, run_id, max_points=7)
    assert len(df) <= 7
    assert df["step"].iloc[0] == 0


def test_delete_removes_every_row(db, small_scenario):
    keep = write_run(db, simulate(small_scenario), name="keep")
    gone = write_run(db, simulate(small_scenario), name="gone")
    delete_run(db, "gone")
    with db.read() as con:
        for table in ("runs", "events", "steps", "chips", "step_kind", "chip_kind"):
            assert con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [gone]).fetchone()[0] == 0
            assert con.execute(f"SELECT count(*) FROM {table} WHERE run_id = ?", [keep]).fetchone()[0] > 0


def test_failed_write_leaves_no_partial_run(db, small_scenario):
    good = simulate(small_scenario)
    write_run(db, good)
    bad_extra = pa.table({"x": [1, 2]})
    broken = type(good)(
        scenario=good.scenario,
        trace=Trace(events=good.trace.events, steps=good.trace.steps, chips=good.trace.chips, extra={"Bad Name;": bad_extra}),
        facts=good.facts,
    )
    with pytest.raises(ProfilerError):
        write_run(db, broken)
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
        assert con.execute("SELECT count(DISTINCT run_id) FROM events").fetchone()[0] == 1


def test_extra_tables_are_stored_by_name(db, small_scenario):
    good = simulate(small_scenario)
    extra = {"chip_memory": TABLES["extra_chip_memory"].table({"chip": [1, 0], "peak_bytes": [20.0, 10.0]})}
    result = type(good)(good.scenario, Trace(good.trace.events, good.trace.steps, good.trace.chips, extra), good.facts)
    run_id = write_run(db, result)
    with db.read() as con:
        rows = con.execute("SELECT chip, peak_bytes FROM extra_chip_memory WHERE run_id = ? ORDER BY chip", [run_id]).fetchall()
    assert rows == [(0, 10.0), (1, 20.0)]


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"made_up": pa.table({"x": [1]})}, "'made_up' is not declared in engine.trace.TABLES; declared: chip_expert_load, chip_memory"),
        ({"chip_memory": pa.table({"chip": pa.array([0], pa.int32())})}, "'chip_memory' has columns ['chip']; declared: ['chip', 'peak_bytes']"),
        ({"chip_memory": pa.table({"chip": ["zero"], "peak_bytes": [1.0]})}, "'chip_memory' does not fit its declared types"),
    ],
)
def test_an_extra_table_off_its_declaration_is_refused_and_nothing_written(db, small_scenario, extra, message):
    good = simulate(small_scenario)
    bad = type(good)(good.scenario, Trace(good.trace.events, good.trace.steps, good.trace.chips, extra), good.facts)
    with pytest.raises(ProfilerError) as info:
        write_run(db, bad)
    assert message in str(info.value)
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM events").fetchone()[0] == 0


def test_every_stored_table_has_its_declared_columns_and_types(db, small_scenario_path):
    """The store creates each table from engine.trace.TABLES (profiler.schema for its own): what DuckDB holds is
    run_id then the declared columns, in the declared types, whichever run wrote first."""
    from engine import RunResult, load_scenario
    from profiler.schema import PROFILER_TABLES, duckdb_type
    from profiler.trace_import import read_trace

    scenarios = ROOT / "data" / "scenarios"
    write_run(db, simulate(load_scenario(scenarios / "llm-1b-v5p-64-failures.toml", {"training.steps": 12})))
    write_run(db, simulate(load_scenario(small_scenario_path)))
    trace, facts = read_trace(ROOT / "tests" / "fixtures" / "torch_cpu_mlp.trace.json.gz")
    write_run(db, RunResult(None, trace, facts))
    with db.read() as con:
        stored = {
            t: con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $t ORDER BY ordinal_position",
                {"t": t},
            ).fetchall()
            for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
    assert {"extra_import_events", "extra_memory_timeline", "extra_compiles"} <= set(stored)
    for name, columns in stored.items():
        spec = TABLES.get(name) or PROFILER_TABLES[name]
        lead = [("run_id", "INTEGER")] if name in TABLES else []
        assert columns == lead + [(c.name, duckdb_type(c.type)) for c in spec.columns], name


def test_names_with_sql_metacharacters_are_stored_verbatim(db, small_scenario):
    nasty = "x'; DROP TABLE runs; -- \"SELECT\""
    run_id = write_run(db, simulate(small_scenario), name=nasty)
    with db.read() as con:
        assert queries.run_summary(con, run_id)["name"] == nasty
        from profiler import resolve_run

        assert resolve_run(con, nasty) == run_id


def test_reading_a_missing_database_is_empty(tmp_path):
    from profiler.store import Database

    db = Database(tmp_path / "absent.duckdb")
    with db.read() as con:
        assert queries.list_runs(con).empty
    assert not (tmp_path / "absent.duckdb").exists()


def test_db_path_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("PODSCOPE_DB", str(tmp_path / "env.duckdb"))
    assert resolve_db_path(None) == tmp_path / "env.duckdb"
    assert resolve_db_path(tmp_path / "flag.duckdb") == tmp_path / "flag.duckdb"


def test_scenario_is_stored_as_json(db, small_scenario):
    run_id = write_run(db, simulate(small_scenario))
    with duckdb.connect(str(db.path), read_only=True) as con:
        raw = con.execute("SELECT scenario FROM runs WHERE run_id = ?", [run_id]).fetchone()[0]
    assert json.loads(raw)["pod"]["topology"] == "2x2x2"


def test_engine_aggregates_equal_sql_aggregates_from_events(db, small_scenario_path):
    """The engine's exact step/chip aggregates must match what SQL derives from the stored events."""
    from engine import load_scenario
    from profiler.staging import CHIP_KIND_FROM_EVENTS_SQL, STEP_KIND_FROM_EVENTS_SQL

    # jitter makes every chip's compute differ, and each chip has two compute events per step
    result = simulate(load_scenario(small_scenario_path, overrides={"sim.jitter_frac": 0.2}))
    run_id = write_run(db, result)
    with db.write() as con:
        con.execute("CREATE TEMP TABLE step_kind_sql AS SELECT * FROM step_kind LIMIT 0")
        con.execute("CREATE TEMP TABLE chip_kind_sql AS SELECT * FROM chip_kind LIMIT 0")
        for table, sql in (("step_kind_sql", STEP_KIND_FROM_EVENTS_SQL), ("chip_kind_sql", CHIP_KIND_FROM_EVENTS_SQL)):
            con.execute(f"INSERT INTO {table} SELECT $run_id, * FROM ({sql})", {"run_id": run_id})
        diff_step = con.execute(
            "SELECT count(*) FROM (SELECT * FROM step_kind WHERE run_id = ? EXCEPT SELECT * FROM step_kind_sql)", [run_id]
        ).fetchone()[0]
        diff_chip = con.execute(
            "SELECT count(*) FROM (SELECT * FROM chip_kind WHERE run_id = ? EXCEPT SELECT * FROM chip_kind_sql)", [run_id]
        ).fetchone()[0]
        n = con.execute("SELECT count(*) FROM step_kind_sql").fetchone()[0]
        sums = con.execute("SELECT max_chip_ns < chip_ns FROM step_kind WHERE run_id = ? AND kind = 'compute'", [run_id]).fetchall()
    assert n > 0 and diff_step == 0 and diff_chip == 0
    assert all(row[0] for row in sums)  # 8 chips: the max chip is less than the sum


def test_summary_mode_stores_no_events_and_the_same_headline(db, small_scenario_path):
    from engine import load_scenario

    full = write_run(db, simulate(load_scenario(small_scenario_path)), name="full")
    summ = write_run(db, simulate(load_scenario(small_scenario_path, overrides={"sim.trace": "summary"})), name="summary")
    with db.read() as con:
        a, b = queries.run_summary(con, full), queries.run_summary(con, summ)
    assert b["events"] == 0 and a["events"] > 0
    for key in ("step_time_s", "mfu", "samples_per_s", "wall_time_s"):
        assert a[key] == b[key]
    assert a["breakdown"] == pytest.approx(b["breakdown"])


def test_write_runs_batches_with_one_transaction_per_run(db, small_scenario):
    from profiler.store import write_runs

    good = simulate(small_scenario)
    bad = type(good)(
        scenario=good.scenario,
        trace=Trace(good.trace.events, good.trace.steps, good.trace.chips, {"not valid!": pa.table({"x": [1]})}),
        facts=good.facts,
    )
    ids = write_runs(db, [good, good])
    assert len(ids) == 2
    with pytest.raises(ProfilerError):
        write_runs(db, [good, bad, good])
    with db.read() as con:
        # the two first runs, plus the good run written before the failure; nothing of the bad one
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 3
        assert con.execute("SELECT count(DISTINCT run_id) FROM events").fetchone()[0] == 3


def _stored_rows(db, run_id: int) -> dict[str, list]:
    """Every per-run table's rows of one run (run_id column dropped), sorted, plus the summary without run_id."""
    from profiler.schema import per_run_tables

    with db.read() as con:
        out = {
            t: sorted(map(repr, con.execute(f'SELECT * EXCLUDE (run_id) FROM "{t}" WHERE run_id = ?', [run_id]).fetchall()))
            for t in per_run_tables(con)
        }
        summary = queries.run_summary(con, run_id)
    summary.pop("run_id")
    out["summary"] = [json.dumps(summary, sort_keys=True)]
    return out


def test_write_runs_batch_stores_each_run_exactly_as_write_run(tmp_path, small_scenario):
    """One batch transaction for several runs (one INSERT per table) stores the same rows as one run at a time."""
    from profiler.store import Database, write_runs

    results = [simulate(small_scenario.model_copy(update={"name": f"r{i}"})) for i in range(3)]
    one, batch = Database(tmp_path / "one.duckdb"), Database(tmp_path / "batch.duckdb")
    ids_one = [write_run(one, r) for r in results]
    ids_batch = write_runs(batch, results)
    assert ids_batch == [1, 2, 3]
    for a, b in zip(ids_one, ids_batch):
        assert _stored_rows(one, a) == _stored_rows(batch, b)


def _diverse_runs(small_scenario_path):
    """Runs that exercise every part of the summary: full and summary mode, recompiles, stragglers,
    a failure with restart, input waits, an OOM run, and traces without the engine's aggregates."""
    from engine import RunResult, load_scenario
    from profiler.trace_import import read_trace

    scenarios = ROOT / "data" / "scenarios"
    runs = [
        simulate(load_scenario(small_scenario_path)),
        simulate(load_scenario(small_scenario_path, {"sim.trace": "summary", "sim.jitter_frac": 0.1})),
        simulate(load_scenario(scenarios / "llm-1b-v5p-64-failures.toml", {"training.steps": 40, "failures.fail_at_steps": [25],
                                                                           "failures.checkpoint_every_steps": 10})),  # fmt: skip
        simulate(load_scenario(scenarios / "resnet50-v3-32-straggler.toml", {"training.steps": 12, "sim.trace": "summary"})),
        simulate(load_scenario(scenarios / "resnet50-v4-gcs-input-bound.toml", {"training.steps": 12})),
        simulate(load_scenario(scenarios / "oom" / "gpt3-175b-no-remat-v5p-128.toml", {"training.steps": 3, "sim.trace": "summary"})),
    ]
    full = runs[0]
    # as an import arrives: events only, aggregates derived in SQL at write time
    runs.append(RunResult(full.scenario, Trace(full.trace.events, full.trace.steps, full.trace.chips, dict(full.trace.extra)), full.facts))
    trace, facts = read_trace(ROOT / "tests" / "fixtures" / "torch_cpu_mlp.trace.json.gz")
    runs.append(RunResult(None, trace, facts))
    return runs


def test_batch_summaries_equal_one_run_at_a_time_and_sql_over_the_stored_tables(tmp_path, small_scenario_path):
    """write_runs summarises a whole batch in one query per table; every stored row and summary must be
    what write_run stores for the run alone, and what build_summary's per-run SQL derives from the stored tables."""
    from profiler import build_summary
    from profiler.store import Database, write_runs

    results = _diverse_runs(small_scenario_path)
    one, batch = Database(tmp_path / "one.duckdb"), Database(tmp_path / "batch.duckdb")
    ids_one = [write_run(one, r) for r in results]
    ids_batch = write_runs(batch, results)
    for a, b in zip(ids_one, ids_batch, strict=True):
        assert _stored_rows(one, a) == _stored_rows(batch, b)
    with batch.read() as con:
        summaries = [queries.run_summary(con, run_id) for run_id in ids_batch]
        for run_id, stored in zip(ids_batch, summaries):
            assert json.loads(json.dumps(build_summary(con, run_id))) == stored
    # the cases are what they claim to be (so a vacuous set cannot pass)
    assert [s["events"] > 0 for s in summaries] == [True, False, True, False, True, False, True, True]
    assert summaries[5]["oom"] is True and not any(s["oom"] for s in summaries[:5])
    assert summaries[2]["recompiles"] > 0 and summaries[2]["goodput"] < 1.0
    assert summaries[3]["stragglers"] and summaries[4]["input_wait_frac"] > 0.05
    assert {**summaries[6], "run_id": 0} == {**summaries[0], "run_id": 0}  # aggregates from SQL = the engine's
    assert summaries[7]["chip"] == "cpu" and summaries[7]["recompiles"] is None
    assert len({s["step_time_s"] for s in summaries}) == len(summaries) - 1  # runs 0 and 6 are one run
