"""DuckDB storage: schema, connections, and writing a run in one transaction.

One file holds many runs. Bulk tables arrive as Arrow and are inserted with
``INSERT ... SELECT`` from a registered Arrow view (never row by row). Small
per-run summary tables are built in SQL inside the same transaction, so a run is
in the database whole, with its summaries, or not at all.

Connections are short-lived: DuckDB lets one process hold a file for writing,
so a dashboard that kept a connection open would lock out the CLI. Opening
retries briefly on a lock conflict before giving up with a ProfilerError.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from engine.catalog import DATA_DIR
from engine.errors import ProfilerError, RunNotFoundError
from engine.trace import RunResult

__all__ = [
    "DEFAULT_DB_PATH",
    "Database",
    "resolve_db_path",
    "write_run",
    "write_runs",
    "delete_run",
    "resolve_run",
]

DEFAULT_DB_PATH = DATA_DIR / "podscope.duckdb"
LOCK_RETRY_S = 10.0
_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,40}$")

SCHEMA_SQL = """
CREATE SEQUENCE IF NOT EXISTS run_id_seq START 1;
CREATE TABLE IF NOT EXISTS runs (
    run_id      INTEGER PRIMARY KEY,
    name        VARCHAR NOT NULL,
    created_at  TIMESTAMP WITH TIME ZONE NOT NULL,
    source      VARCHAR NOT NULL,
    chip        VARCHAR,
    chips       INTEGER NOT NULL,
    hosts       INTEGER,
    slices      INTEGER,
    topology    VARCHAR,
    steps       INTEGER NOT NULL,
    scenario    JSON,
    facts       JSON,
    summary     JSON
);
CREATE TABLE IF NOT EXISTS chips  (run_id INTEGER NOT NULL, chip INTEGER, host INTEGER, slice INTEGER, x INTEGER, y INTEGER, z INTEGER);
CREATE TABLE IF NOT EXISTS steps  (run_id INTEGER NOT NULL, step INTEGER, start_ns BIGINT, step_ns BIGINT);
CREATE TABLE IF NOT EXISTS events (run_id INTEGER NOT NULL, chip INTEGER, step INTEGER, kind VARCHAR, start_ns BIGINT, dur_ns BIGINT);
-- Summaries built at write time, so dashboards never scan events for headline numbers.
CREATE TABLE IF NOT EXISTS step_kind (run_id INTEGER NOT NULL, step INTEGER, kind VARCHAR, chip_ns BIGINT, max_chip_ns BIGINT);
CREATE TABLE IF NOT EXISTS chip_kind (run_id INTEGER NOT NULL, chip INTEGER, kind VARCHAR, ns BIGINT);
"""

#: Fallback for traces that arrive without aggregates (imports): derived from events in SQL.
_SUMMARY_SQL = (
    """
    INSERT INTO step_kind
    SELECT $run_id, step, kind, sum(ns), max(ns)
    FROM (SELECT step, chip, kind, sum(dur_ns) AS ns FROM events WHERE run_id = $run_id GROUP BY step, chip, kind)
    GROUP BY step, kind
    """,
    """
    INSERT INTO chip_kind
    SELECT $run_id, chip, kind, sum(dur_ns) FROM events WHERE run_id = $run_id GROUP BY chip, kind
    """,
)

#: tables holding per-run rows, deleted together with the run
RUN_TABLES = ("events", "steps", "chips", "step_kind", "chip_kind")


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``--db`` beats ``$PODSCOPE_DB`` beats ``data/podscope.duckdb``."""
    if path:
        return Path(path)
    env = os.environ.get("PODSCOPE_DB")
    return Path(env) if env else DEFAULT_DB_PATH


def _is_lock_error(e: Exception) -> bool:
    text = str(e).lower()
    return "lock" in text or "conflicting" in text


class Database:
    """A DuckDB file, opened briefly for each read or write.

    Parameters
    ----------
    path
        The database file; created with its schema on first write.
    read_only_reads
        Open read connections read-only, so several reader processes can share the
        file. A process that also writes (the dashboard) must pass False: DuckDB
        refuses two connections with different settings to one file in a process.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only_reads: bool = True):
        self.path = resolve_db_path(path)
        self.read_only_reads = read_only_reads

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + LOCK_RETRY_S
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only)
                con.execute("SET enable_progress_bar = false")
                return con
            except duckdb.Error as e:
                if _is_lock_error(e) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                raise ProfilerError(f"cannot open database {self.path}: {e}") from e

    @contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for queries. An absent file reads as an empty database."""
        if not self.path.exists():
            con = duckdb.connect(":memory:")
            con.execute(SCHEMA_SQL)
        else:
            con = self._open(read_only=self.read_only_reads)
        try:
            yield con
        except duckdb.Error as e:
            raise ProfilerError(f"query failed on {self.path}: {e}") from e
        finally:
            con.close()

    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection with the schema in place."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ProfilerError(f"cannot create folder for database {self.path}: {e}") from e
        con = self._open(read_only=False)
        try:
            con.execute(SCHEMA_SQL)
            yield con
        except duckdb.Error as e:
            raise ProfilerError(f"write failed on {self.path}: {e}") from e
        finally:
            con.close()

    def has_runs(self) -> bool:
        with self.read() as con:
            return con.execute("SELECT count(*) FROM runs").fetchone()[0] > 0


def _insert_arrow(con: duckdb.DuckDBPyConnection, table_name: str, data: pa.Table, run_id: int, columns: list[str]) -> None:
    if data.num_rows == 0:
        return  # e.g. events of a summary-mode run: a statement costs more than the run
    view = f"_podscope_in_{table_name}"
    con.register(view, data)
    try:
        cols = ", ".join(columns)
        con.execute(f"INSERT INTO {table_name} SELECT $run_id, {cols} FROM {view}", {"run_id": run_id})
    finally:
        con.unregister(view)


def _insert_extra(con: duckdb.DuckDBPyConnection, name: str, data: pa.Table, run_id: int) -> None:
    """Store an engine-defined extra table as ``extra_<name>`` (created from its Arrow schema)."""
    if not _IDENT.match(name):
        raise ProfilerError(f"extra trace table name {name!r} is not a plain identifier")
    table = f"extra_{name}"
    view = f"_podscope_in_{table}"
    con.register(view, data)
    try:
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} AS SELECT CAST(0 AS INTEGER) AS run_id, * FROM {view} LIMIT 0")
        con.execute(f"INSERT INTO {table} BY NAME SELECT $run_id AS run_id, * FROM {view}", {"run_id": run_id})
    finally:
        con.unregister(view)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_run(db: Database, result: RunResult, *, name: str | None = None, source: str = "simulated") -> int:
    """Store a simulated (or imported) run in one transaction; returns its run_id.

    Raises
    ------
    ProfilerError
        On any storage failure; the database is left without a partial run.
    """
    with db.write() as con:
        return _write_run(con, result, name=name, source=source)


def write_runs(db: Database, results: Iterable[RunResult], *, source: str = "simulated") -> list[int]:
    """Store many runs through one connection, each in its own transaction.

    Opening and checkpointing a DuckDB file costs tens of milliseconds, more than
    storing a summary-mode run; a sweep's single writer uses this to keep up.
    A failure leaves every run written before it intact and nothing of the failed one.
    """
    with db.write() as con:
        return [_write_run(con, r, name=None, source=source) for r in results]


def _write_run(con: duckdb.DuckDBPyConnection, result: RunResult, *, name: str | None, source: str) -> int:
    from .summary import build_summary  # summary queries live with the query layer

    scenario = result.scenario
    facts = result.facts
    trace = result.trace
    run_name = name or (scenario.name if scenario is not None else "run")
    con.execute("BEGIN TRANSACTION")
    try:
        run_id = con.execute("SELECT nextval('run_id_seq')").fetchone()[0]
        con.execute(
            """INSERT INTO runs (run_id, name, created_at, source, chip, chips, hosts, slices, topology, steps, scenario, facts)
               VALUES ($run_id, $name, $created_at, $source, $chip, $chips, $hosts, $slices, $topology, $steps, $scenario, $facts)""",
            {
                "run_id": run_id,
                "name": run_name,
                "created_at": datetime.now(timezone.utc),
                "source": source,
                "chip": facts.chip,
                "chips": facts.chips,
                "hosts": facts.hosts,
                "slices": facts.slices,
                "topology": facts.topology,
                "steps": facts.steps,
                "scenario": json.dumps(scenario.to_dict() if scenario is not None else None),
                "facts": json.dumps(asdict(facts), default=_json_default),
            },
        )
        _insert_arrow(con, "chips", trace.chips, run_id, ["chip", "host", "slice", "x", "y", "z"])
        _insert_arrow(con, "steps", trace.steps, run_id, ["step", "start_ns", "step_ns"])
        _insert_arrow(con, "events", trace.events, run_id, ["chip", "step", "CAST(kind AS VARCHAR)", "start_ns", "dur_ns"])
        for name_, table in trace.extra.items():
            _insert_extra(con, name_, table, run_id)
        if trace.step_kind is not None and trace.chip_kind is not None:
            # exact aggregates from the engine (also the only ones in summary mode)
            _insert_arrow(con, "step_kind", trace.step_kind, run_id, ["step", "CAST(kind AS VARCHAR)", "chip_ns", "max_chip_ns"])
            _insert_arrow(con, "chip_kind", trace.chip_kind, run_id, ["chip", "CAST(kind AS VARCHAR)", "ns"])
        else:
            for sql in _SUMMARY_SQL:
                con.execute(sql, {"run_id": run_id})
        summary = build_summary(con, run_id)
        con.execute("UPDATE runs SET summary = $s WHERE run_id = $run_id", {"s": json.dumps(summary), "run_id": run_id})
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return int(run_id)


def resolve_run(con: duckdb.DuckDBPyConnection, ref: str | int) -> int:
    """Find a run by id, or by name (the newest run of that name).

    Raises
    ------
    RunNotFoundError
    """
    text = str(ref).strip()
    if text.isdigit():
        row = con.execute("SELECT run_id FROM runs WHERE run_id = $id", {"id": int(text)}).fetchone()
    else:
        row = con.execute(
            "SELECT run_id FROM runs WHERE name = $name ORDER BY created_at DESC, run_id DESC LIMIT 1", {"name": text}
        ).fetchone()
    if row is None:
        raise RunNotFoundError(f"no run with id or name {text!r}")
    return int(row[0])


def delete_run(db: Database, ref: str | int) -> int:
    """Delete a run and all its rows in one transaction; returns the deleted run_id."""
    with db.write() as con:
        run_id = resolve_run(con, ref)
        extra = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'extra_%'").fetchall()]
        con.execute("BEGIN TRANSACTION")
        try:
            for table in (*RUN_TABLES, *extra):
                con.execute(f"DELETE FROM {table} WHERE run_id = $id", {"id": run_id})
            con.execute("DELETE FROM runs WHERE run_id = $id", {"id": run_id})
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return run_id
