"""Run names full of SQL metacharacters go through the CLI and every query verbatim; deleting a
run (API and ``python -m profiler delete``) removes exactly its rows; no SQL is built from values.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from engine import RunNotFoundError, simulate
from engine.trace import Trace
from profiler import delete_run, queries, resolve_run, write_run
from profiler.cli import EXIT_ERROR, EXIT_OK
from profiler.store import _run_tables

ROOT = Path(__file__).resolve().parent.parent
NASTY = [
    "x'; DROP TABLE runs; --",
    'quote " and \' both',
    "SELECT * FROM runs WHERE 1=1",
    "run); DELETE FROM events; (",
    "$run_id ? %s {name}",
    "名前 with unicode ☃",
]
KERAS = str(ROOT / "data" / "scenarios" / "keras-mlp-v5e-8.toml")


def cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PODSCOPE_DB": str(db)}
    return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _per_run_query_functions():
    """Every public query taking (con) or (con, run_id, <defaults>): new queries are covered automatically."""
    out = []
    for name in queries.__all__:
        fn = getattr(queries, name)
        if not callable(fn):
            continue
        params = list(inspect.signature(fn).parameters.values())
        required = [p for p in params if p.default is inspect.Parameter.empty]
        if len(required) == 1 or (len(required) == 2 and required[1].name == "run_id"):
            out.append((fn, len(required) == 2))
    return out


def test_every_query_function_handles_nasty_names(db, small_scenario):
    ids = {name: write_run(db, simulate(small_scenario), name=name) for name in NASTY}
    fns = _per_run_query_functions()
    assert {f.__name__ for f, _ in fns} >= {"list_runs", "run_summary", "breakdown", "step_times", "run_scenario"}
    with db.read() as con:
        listed = queries.list_runs(con)
        assert sorted(listed["name"]) == sorted(NASTY)
        for name, run_id in ids.items():
            assert resolve_run(con, name) == run_id
            assert queries.run_summary(con, run_id)["name"] == name
            for fn, per_run in fns:
                fn(con, run_id) if per_run else fn(con)
        assert {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()} >= {"runs", "events"}


def test_cli_stores_lists_and_deletes_nasty_names(tmp_path):
    db = tmp_path / "db.duckdb"
    name = NASTY[0]
    p = cli("run", KERAS, "--set", "training.steps=3", "--name", name, "--json", db=db)
    assert p.returncode == EXIT_OK, p.stderr
    assert json.loads(p.stdout)["name"] == name
    keep = cli("run", KERAS, "--set", "training.steps=3", "--name", "keep", "--json", db=db)
    assert keep.returncode == EXIT_OK
    rows = json.loads(cli("runs", "--json", db=db).stdout)
    assert sorted(r["name"] for r in rows) == sorted([name, "keep"])
    gone = cli("delete", name, db=db)
    assert gone.returncode == EXIT_OK, gone.stderr
    assert [r["name"] for r in json.loads(cli("runs", "--json", db=db).stdout)] == ["keep"]


def test_cli_delete_missing_run_is_exit_1_with_a_clear_message(tmp_path):
    db = tmp_path / "db.duckdb"
    p = cli("delete", "no-such-run", db=db)
    assert p.returncode == EXIT_ERROR
    assert "no run with id or name 'no-such-run'" in p.stderr
    assert not db.exists()  # deleting from nothing creates nothing
    cli("run", KERAS, "--set", "training.steps=2", db=db)
    p = cli("delete", "4242", db=db)
    assert p.returncode == EXIT_ERROR and "'4242'" in p.stderr and "Traceback" not in p.stderr


def test_delete_by_id_removes_every_row_of_that_run_only(db, small_scenario):
    good = simulate(small_scenario)
    extra = {"link_load": pa.table({"src_chip": pa.array([0, 1], pa.int32()), "bytes_per_step": [1.0, 2.0]})}
    with_extra = type(good)(good.scenario, Trace(good.trace.events, good.trace.steps, good.trace.chips, extra), good.facts)
    keep = write_run(db, with_extra, name="keep")
    gone = write_run(db, with_extra, name="gone")
    assert delete_run(db, str(gone)) == gone
    with db.read() as con:
        tables = _run_tables(con)
        assert "extra_link_load" in tables
        for table in tables:
            assert con.execute(f'SELECT count(*) FROM "{table}" WHERE run_id = ?', [gone]).fetchone()[0] == 0
            assert con.execute(f'SELECT count(*) FROM "{table}" WHERE run_id = ?', [keep]).fetchone()[0] > 0
        assert con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [gone]).fetchone()[0] == 0
    with pytest.raises(RunNotFoundError):
        delete_run(db, gone)


_VALUE_IN_SQL = re.compile(r"""\.(?:execute|sql|query)\(\s*f(["'])(.*?)\1""")


@pytest.mark.parametrize("path", sorted((ROOT / "profiler").glob("*.py")), ids=lambda p: p.name)
def test_sql_f_strings_only_interpolate_checked_identifiers(path):
    """An f-string handed to DuckDB may only interpolate names passed through store._ident (or module constants)."""
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        match = _VALUE_IN_SQL.search(line)
        if not match:
            continue
        fields = re.findall(r"\{([^{}]+)\}", match.group(2))
        allowed = {"table", "view", "cols", "_ident(t)", "_ident(table)", "_ident(table_name)", "_ident(view)"}
        assert set(fields) <= allowed, f"{path.name}:{lineno} formats {fields} into SQL: bind values instead"
