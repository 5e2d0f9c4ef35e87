"""DuckDB storage: schema, connections, and writing a run in one transaction.

One file holds many runs. Bulk tables arrive as Arrow and are inserted with
``INSERT ... SELECT`` from a registered Arrow view (never row by row). Small
per-run summary tables are built in SQL inside the same transaction, so a run is
in the database whole, with its summaries, or not at all.

Connections are short-lived: DuckDB lets one process hold a file for writing
(and while it does, no other process can even read it), so a dashboard that
kept a connection open would lock out the CLI. Opening polls every few
milliseconds on a lock conflict and gives up with :class:`DatabaseBusyError`
after ``LOCK_RETRY_S``.

Writing a run so that readers are never locked out for long, and a crash never
leaves a visible partial run:

1. Everything but the events table is *staged* first, without the file: the
   per-run summary tables (the engine's exact aggregates, or for imports derived
   from the Arrow events in a private in-memory DuckDB) and the summary JSON
   (computed for a whole batch of runs at once), so no lock is held while summarising.
2. A run of at most ``EVENT_CHUNK_ROWS`` events is then written in one
   transaction. A larger run reserves its id in ``pending_runs``, appends its
   events in chunks of ``EVENT_CHUNK_ROWS``, each its own short transaction, and
   finally inserts the small tables and, last, its ``runs`` row in one transaction.
   Between chunks the writer releases the file when a reader is waiting for it (a
   reader that finds the file locked touches a marker file beside it, see
   :meth:`Database.reader_waiting`), and in any case after ``WRITER_MAX_HOLD_S``; with
   nobody waiting it keeps its connection, so the run costs one open and one
   checkpoint rather than one per chunk.
3. Every query starts from ``runs``, so a run's rows are invisible until that
   last commit. If the writer dies first, its pending entry stays behind and the
   next writer removes the orphaned rows (writer process gone, or entry older
   than ``ABANDONED_AFTER_S``).

A reader's worst wait is therefore one chunk's insert, not a whole run's (or
``WRITER_MAX_HOLD_S`` if it cannot write the marker, e.g. on a read-only folder).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from engine.data_files import DB_DIR
from engine.errors import ProfilerError, RunNotFoundError
from engine.trace import CHIPS_SCHEMA, STEPS_SCHEMA, RunFacts, RunResult

__all__ = [
    "DEFAULT_DB_PATH",
    "Database",
    "DatabaseBusyError",
    "resolve_db_path",
    "write_run",
    "write_runs",
    "delete_run",
    "resolve_run",
]

DEFAULT_DB_PATH = DB_DIR / "podscope.duckdb"  # data/ in a checkout, a user data folder when installed
#: how long an open waits for another process's lock before DatabaseBusyError
LOCK_RETRY_S = 10.0
#: lock polling interval bounds; short, so a reader slips in between a large write's chunks
_POLL_MIN_S, _POLL_MAX_S = 0.005, 0.05
#: events per write transaction of a large run: ~1 s of insert on the 2-core dev machine, which is
#: a waiting reader's worst delay. With nobody waiting a chunk boundary costs a COMMIT only (the
#: connection is kept, see _HeldWriter); each commit still costs a little, so the size trades that
#: delay against write rate: on a 32.7M-event run 500k rows wrote at ~61% of a bare DuckDB insert,
#: 2M at 73-90%, 4M at 80-84%, one transaction 99% (docs/performance.md).
EVENT_CHUNK_ROWS = 4_000_000
#: pause after releasing the file, longer than a reader's poll interval so a waiting reader gets it
WRITER_YIELD_S = 2 * _POLL_MAX_S
#: a chunked write keeps the file between chunks unless a reader is waiting, but never longer than
#: this: the fallback for readers that cannot signal (well inside LOCK_RETRY_S)
WRITER_MAX_HOLD_S = 3.0
#: a reader's "waiting" marker counts while it is younger than this (readers touch it on every poll)
_WAIT_MARKER_FRESH_S = 4 * _POLL_MAX_S
#: write_runs writes a batch of small runs after staging them for this long (or WRITE_BATCH_RUNS
#: runs): new runs appear within seconds, and a reader waits at most one batch's insert (one
#: statement per table, ~0.1 s), not the staging, which holds no lock
WRITE_BATCH_S = 2.0
WRITE_BATCH_RUNS = 64
#: a pending run from another host (whose process cannot be checked) is abandoned after this long
ABANDONED_AFTER_S = 6 * 3600.0
_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
_TABLE_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

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
-- Large runs being written in several transactions; see the module docstring.
CREATE TABLE IF NOT EXISTS pending_runs (run_id INTEGER PRIMARY KEY, pid INTEGER, host VARCHAR, started_at TIMESTAMP WITH TIME ZONE);
"""

#: Fallback for traces that arrive without aggregates (imports): derived from events in SQL.
_STEP_KIND_FROM_EVENTS_SQL = """
SELECT step, kind, CAST(sum(ns) AS BIGINT) AS chip_ns, CAST(max(ns) AS BIGINT) AS max_chip_ns
FROM (SELECT step, chip, kind, sum(dur_ns) AS ns FROM events WHERE run_id = $run_id GROUP BY step, chip, kind)
GROUP BY step, kind
"""
_CHIP_KIND_FROM_EVENTS_SQL = (
    "SELECT chip, kind, CAST(sum(dur_ns) AS BIGINT) AS ns FROM events WHERE run_id = $run_id GROUP BY chip, kind"
)
_SUMMARY_SQL = (
    f"INSERT INTO step_kind SELECT $run_id, * FROM ({_STEP_KIND_FROM_EVENTS_SQL})",
    f"INSERT INTO chip_kind SELECT $run_id, * FROM ({_CHIP_KIND_FROM_EVENTS_SQL})",
)

#: tables holding per-run rows, deleted together with the run
RUN_TABLES = ("events", "steps", "chips", "step_kind", "chip_kind")


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``--db`` beats ``$PODSCOPE_DB`` beats ``DEFAULT_DB_PATH`` (see ``engine.data_files``)."""
    if path:
        return Path(path)
    env = os.environ.get("PODSCOPE_DB")
    return Path(env) if env else DEFAULT_DB_PATH


class DatabaseBusyError(ProfilerError):
    """Another process held the database file for longer than ``LOCK_RETRY_S``."""


def _ident(name: str) -> str:
    """A table name checked to be a plain identifier, double-quoted for SQL."""
    if not _TABLE_IDENT.match(name):
        raise ProfilerError(f"table name {name!r} is not a plain identifier")
    return f'"{name}"'


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

    @property
    def wait_marker(self) -> Path:
        """File a process touches while it waits for the database: tells a chunked writer to let go."""
        return self.path.with_name(self.path.name + ".wait")

    def reader_waiting(self) -> bool:
        """Has another process been polling for this file in the last few poll intervals?"""
        try:
            age_s = time.time() - self.wait_marker.stat().st_mtime
        except OSError:
            return False
        return age_s < _WAIT_MARKER_FRESH_S

    def _announce_waiting(self) -> None:
        try:
            self.wait_marker.touch()
        except OSError:
            pass  # e.g. a read-only folder: the writer still lets go after WRITER_MAX_HOLD_S

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + LOCK_RETRY_S
        delay = _POLL_MIN_S
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only)
                con.execute("SET enable_progress_bar = false")
                return con
            except duckdb.Error as e:
                if not _is_lock_error(e):
                    raise ProfilerError(f"cannot open database {self.path}: {e}") from e
                self._announce_waiting()
                if time.monotonic() >= deadline:
                    raise DatabaseBusyError(
                        f"database busy: {self.path} has been held by another process for over {LOCK_RETRY_S:.0f} s "
                        "(a run being written?); try again in a moment"
                    ) from e
                time.sleep(delay)
                delay = min(delay * 2, _POLL_MAX_S)

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
        cols = ", ".join(columns)  # column expressions are constants of this module
        con.execute(f"INSERT INTO {_ident(table_name)} SELECT $run_id, {cols} FROM {_ident(view)}", {"run_id": run_id})
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
        table, view = _ident(table), _ident(view)
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} AS SELECT CAST(0 AS INTEGER) AS run_id, * FROM {view} LIMIT 0")
        con.execute(f"INSERT INTO {table} BY NAME SELECT $run_id AS run_id, * FROM {view}", {"run_id": run_id})
    finally:
        con.unregister(view)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


_EVENT_COLUMNS = ["chip", "step", "CAST(kind AS VARCHAR)", "start_ns", "dur_ns"]
_STAGED_EVENTS_VIEW = """
CREATE TEMP VIEW events AS
SELECT CAST(0 AS INTEGER) AS run_id, chip, step, CAST(kind AS VARCHAR) AS kind, start_ns, dur_ns FROM _podscope_staged_events
"""
_KIND_TEXT = pa.string()
#: the small per-run tables in their stored column types (as DuckDB returns them: kind as text); a
#: staged run's tables are cast to these, so the tables of a batch's runs concatenate
_SMALL_SCHEMAS = {
    "chips": CHIPS_SCHEMA,
    "steps": STEPS_SCHEMA,
    "step_kind": pa.schema([("step", pa.int32()), ("kind", _KIND_TEXT), ("chip_ns", pa.int64()), ("max_chip_ns", pa.int64())]),
    "chip_kind": pa.schema([("chip", pa.int32()), ("kind", _KIND_TEXT), ("ns", pa.int64())]),
}
#: the columns of the small tables the summary reads, per batch view (see summary.BATCH_VIEWS)
_SUMMARY_INPUTS = {"steps": ["step", "step_ns"], "step_kind": ["step", "kind", "chip_ns"], "chip_kind": ["kind", "ns"]}


@dataclass(frozen=True)
class _StagedRun:
    """A run ready to publish: its runs-row values, small tables and summary, all computed without the file."""

    runs_row: dict[str, Any]
    small: dict[str, pa.Table]  # table -> rows without run_id, in _SMALL_SCHEMAS (chips, steps, step_kind, chip_kind)
    events: int  # event rows
    summary: dict[str, Any] | None = None  # None until _summarise


_stage_db: tuple[int, duckdb.DuckDBPyConnection] | None = None  # (pid, connection): not reused across fork
_stage_db_lock = threading.Lock()


@contextmanager
def _stage_cursor() -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor on this process's private in-memory DuckDB, for the SQL of staging.

    One connection per process: opening one costs ~30 ms, more than staging a summary-mode
    run; a cursor costs microseconds and keeps its registered views and temp objects to itself,
    so threads may stage at once.
    """
    global _stage_db
    with _stage_db_lock:
        if _stage_db is None or _stage_db[0] != os.getpid():
            _stage_db = (os.getpid(), duckdb.connect(":memory:"))
        cur = _stage_db[1].cursor()
    try:
        yield cur
    finally:
        cur.close()


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value DuckDB would return for it."""
    return value.item() if hasattr(value, "item") else value


def _facts_json(facts: RunFacts) -> str:
    """``json.dumps(asdict(facts))`` without asdict's deep copy (~2 ms a run, a tenth of a summary-mode run)."""
    try:
        return json.dumps({f.name: getattr(facts, f.name) for f in fields(facts)}, default=_json_default)
    except TypeError:  # a dataclass nested in the facts: asdict converts it
        return json.dumps(asdict(facts), default=_json_default)


def _stage(result: RunResult, run_name: str, source: str) -> _StagedRun:
    """Everything of a run but its summary and events rows, without the file (see :func:`_summarise`).

    The small tables are the engine's exact aggregates (the only per-step data in summary
    mode), or for traces without them (imports) derived from the events in SQL.

    Raises
    ------
    ProfilerError
        A table the store cannot hold (a missing column, an extra table's name not a plain identifier).
    """
    scenario, facts, trace = result.scenario, result.facts, result.trace
    for name_ in trace.extra:
        if not _IDENT.match(name_):
            raise ProfilerError(f"extra trace table name {name_!r} is not a plain identifier")
    row = {
        "name": run_name,
        "created_at": datetime.now(timezone.utc),
        "source": source,
        "chip": facts.chip,
        "chips": _plain(facts.chips),
        "hosts": _plain(facts.hosts),
        "slices": _plain(facts.slices),
        "topology": facts.topology,
        "steps": _plain(facts.steps),
        "scenario": json.dumps(scenario.to_dict() if scenario is not None else None),
        "facts": _facts_json(facts),
    }
    try:
        if trace.step_kind is not None and trace.chip_kind is not None:
            aggregates = {"step_kind": trace.step_kind, "chip_kind": trace.chip_kind}
        else:
            aggregates = _aggregates_from_events(trace.events)
        tables = {"chips": trace.chips, "steps": trace.steps, **aggregates}
        small = {t: tables[t].select(list(schema.names)).cast(schema) for t, schema in _SMALL_SCHEMAS.items()}
    except (duckdb.Error, pa.ArrowException, KeyError) as e:  # KeyError: a missing column
        raise ProfilerError(f"cannot prepare run {run_name!r} for storage: {e}") from e
    return _StagedRun(runs_row=row, small=small, events=trace.events.num_rows)


def _aggregates_from_events(events: pa.Table) -> dict[str, pa.Table]:
    """step_kind and chip_kind of one run derived from its events (_SUMMARY_SQL's queries)."""
    with _stage_cursor() as cur:
        cur.register("_podscope_staged_events", events)
        cur.execute(_STAGED_EVENTS_VIEW)
        p = {"run_id": 0}
        return {
            "step_kind": cur.sql(_STEP_KIND_FROM_EVENTS_SQL, params=p).to_arrow_table(),
            "chip_kind": cur.sql(_CHIP_KIND_FROM_EVENTS_SQL, params=p).to_arrow_table(),
        }


def _with_index(table: pa.Table, i: int) -> pa.Table:
    return table.add_column(0, "i", pa.array(np.full(table.num_rows, i, dtype=np.int32)))


def _summarise(staged: list[_StagedRun]) -> list[_StagedRun]:
    """The summaries of staged runs, all at once: each summary table concatenated over the
    runs (with the run's index) and aggregated in one query per batch (summary.batch_aggregates).

    A statement costs about as much as summarising one run's tables, so one set of queries
    per run cost more than simulating a summary-mode run; per batch it is a few ms in all.
    """
    from .summary import BATCH_VIEWS, batch_aggregates, summary_from  # summary queries live with the query layer

    try:
        with _stage_cursor() as cur:
            for key, view in BATCH_VIEWS.items():
                cols = _SUMMARY_INPUTS[key]
                cur.register(view, pa.concat_tables([_with_index(s.small[key].select(cols), i) for i, s in enumerate(staged)]))
            aggregates = batch_aggregates(cur, [s.events for s in staged])
    except (duckdb.Error, pa.ArrowException) as e:
        raise ProfilerError(f"cannot summarise runs for storage: {e}") from e
    return [replace(s, summary=summary_from(0, s.runs_row, agg)) for s, agg in zip(staged, aggregates)]


_RUNS_COLUMNS = "run_id, name, created_at, source, chip, chips, hosts, slices, topology, steps, scenario, facts, summary"
_INSERT_RUNS_BATCH_SQL = f"INSERT INTO runs ({_RUNS_COLUMNS}) SELECT {_RUNS_COLUMNS} FROM _podscope_in_runs"
_INSERT_RUN_SQL = """
INSERT INTO runs (run_id, name, created_at, source, chip, chips, hosts, slices, topology, steps, scenario, facts, summary)
VALUES ($run_id, $name, $created_at, $source, $chip, $chips, $hosts, $slices, $topology, $steps, $scenario, $facts, $summary)
"""


def _insert_runs_row(con: duckdb.DuckDBPyConnection, run_id: int, row: dict[str, Any], summary: dict[str, Any] | None) -> None:
    con.execute(_INSERT_RUN_SQL, {**row, "run_id": run_id, "summary": json.dumps(summary) if summary is not None else None})


def _publish(con: duckdb.DuckDBPyConnection, staged: _StagedRun, result: RunResult, run_id: int) -> None:
    """Insert a staged run's small tables and extras, then its runs row (last: the run becomes visible)."""
    for table, data in staged.small.items():
        _insert_arrow(con, table, data, run_id, list(data.column_names))
    for name_, table in result.trace.extra.items():
        _insert_extra(con, name_, table, run_id)
    _insert_runs_row(con, run_id, staged.runs_row, {**staged.summary, "run_id": run_id})


def _run_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every table holding per-run rows: the fixed ones plus the ``extra_*`` tables present."""
    extra = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE $pattern ESCAPE '\\' ORDER BY table_name",
        {"pattern": "extra\\_%"},
    ).fetchall()
    return [*RUN_TABLES, *(r[0] for r in extra)]


def _delete_rows(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Delete a run's rows from every per-run table, its pending entry and its runs row (caller's transaction)."""
    for table in _run_tables(con):
        con.execute(f"DELETE FROM {_ident(table)} WHERE run_id = $id", {"id": run_id})
    con.execute("DELETE FROM pending_runs WHERE run_id = $id", {"id": run_id})
    con.execute("DELETE FROM runs WHERE run_id = $id", {"id": run_id})


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _collect_abandoned(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Remove the rows of large runs whose writer died before publishing them; returns their ids."""
    rows = con.execute("SELECT run_id, pid, host, started_at FROM pending_runs").fetchall()
    host = socket.gethostname()
    now = datetime.now(timezone.utc)
    dead = [
        run_id
        for run_id, pid, pid_host, started_at in rows
        if (pid_host == host and not _pid_alive(pid)) or (now - started_at).total_seconds() > ABANDONED_AFTER_S
    ]
    if dead:
        con.execute("BEGIN TRANSACTION")
        try:
            for run_id in dead:
                _delete_rows(con, run_id)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return dead


@contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def write_run(db: Database, result: RunResult, *, name: str | None = None, source: str = "simulated") -> int:
    """Store a simulated (or imported) run; returns its run_id.

    The run becomes visible to queries in one commit, whole, or never (see the
    module docstring for how large runs are written in chunks without a
    visible partial state).

    Raises
    ------
    ProfilerError
        On any storage failure; no partial run is visible afterwards.
    """
    staged = _summarise([_stage(result, _run_name(result, name), source)])[0]
    if result.trace.events.num_rows <= EVENT_CHUNK_ROWS:
        with db.write() as con:
            _collect_abandoned(con)
            return _write_whole(con, staged, result)
    return _write_chunked(db, staged, result)


def write_runs(db: Database, results: Iterable[RunResult], *, source: str = "simulated") -> list[int]:
    """Store many runs, several small runs per transaction; returns their run_ids in order.

    Opening and checkpointing a DuckDB file costs tens of milliseconds, and every
    statement a few, more than storing a summary-mode run; a sweep's single writer uses
    this to keep up. Small runs are staged without the file, then written in batches:
    one transaction per batch, one INSERT per table for the whole batch (the Arrow
    tables of its runs concatenated, each with its run_id). A batch is closed after
    ``WRITE_BATCH_S`` of staging or ``WRITE_BATCH_RUNS`` runs, so readers wait at most
    one batch's insert. Large runs are written alone, in chunks (:func:`write_run`).

    Each run is in the database whole or not at all. A failure leaves every run before
    the failing one stored and nothing of the failing one (a batch that fails to insert
    is retried run by run, so only the bad run is missing).
    """
    ids: list[int] = []
    batch: list[tuple[_StagedRun, RunResult]] = []
    batch_since = time.monotonic()

    def flush() -> None:
        if batch:
            pending = list(batch)
            batch.clear()  # before writing: a failed batch must not be written again by the handler below
            ids.extend(_write_batch(db, pending))

    try:
        for result in results:
            if result.trace.events.num_rows > EVENT_CHUNK_ROWS:
                flush()
                staged = _summarise([_stage(result, _run_name(result, None), source)])[0]
                ids.append(_write_chunked(db, staged, result))
                continue
            if not batch:
                batch_since = time.monotonic()
            batch.append((_stage(result, _run_name(result, None), source), result))
            rows = sum(r.trace.events.num_rows for _, r in batch)
            if len(batch) >= WRITE_BATCH_RUNS or rows > EVENT_CHUNK_ROWS or time.monotonic() - batch_since > WRITE_BATCH_S:
                flush()
        flush()
    except BaseException:
        flush()  # the runs staged before a failure are still stored
        raise
    return ids


def _write_batch(db: Database, batch: list[tuple[_StagedRun, RunResult]]) -> list[int]:
    """Small staged runs in one transaction, one INSERT per table; run by run if that fails.

    Their summaries are computed together first (:func:`_summarise`), without the file.
    """
    summarised = _summarise([staged for staged, _ in batch])
    batch = [(staged, result) for staged, (_, result) in zip(summarised, batch)]
    with db.write() as con:
        _collect_abandoned(con)
        try:
            with _transaction(con):
                return _insert_batch(con, batch)
        except (duckdb.Error, pa.ArrowException):
            pass  # e.g. extra tables whose schemas differ between runs: fall back below
        return [_write_whole(con, staged, result) for staged, result in batch]


def _with_run_id(table: pa.Table, run_id: int) -> pa.Table:
    return table.add_column(0, "run_id", pa.array(np.full(table.num_rows, run_id, dtype=np.int32)))


def _insert_batch(con: duckdb.DuckDBPyConnection, batch: list[tuple[_StagedRun, RunResult]]) -> list[int]:
    n = len(batch)
    ids = [int(r[0]) for r in con.execute("SELECT nextval('run_id_seq') FROM range($n)", {"n": n}).fetchall()]
    grouped: dict[tuple[str, bool], list[pa.Table]] = {}  # (table, is_extra) -> per-run tables with run_id
    for run_id, (staged, result) in zip(ids, batch):
        for table, data in [("events", result.trace.events), *staged.small.items()]:
            grouped.setdefault((table, False), []).append(_with_run_id(data, run_id))
        for name_, data in result.trace.extra.items():
            if not _IDENT.match(name_):
                raise ProfilerError(f"extra trace table name {name_!r} is not a plain identifier")
            grouped.setdefault((f"extra_{name_}", True), []).append(_with_run_id(data, run_id))
    for (table, is_extra), parts in grouped.items():
        data = pa.concat_tables(parts)
        if data.num_rows == 0 and not is_extra:
            continue
        name = f"_podscope_in_{table}"
        con.register(name, data)
        try:
            columns = _EVENT_COLUMNS if table == "events" else [
                "CAST(kind AS VARCHAR)" if c == "kind" else _ident(c) for c in data.column_names[1:]
            ]  # fmt: skip
            cols = ", ".join(columns)  # constants of this module and checked column names
            table, view = _ident(table), _ident(name)
            if is_extra:
                con.execute(f"CREATE TABLE IF NOT EXISTS {table} AS SELECT * FROM {view} LIMIT 0")
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {view}")
            else:
                con.execute(f"INSERT INTO {table} SELECT run_id, {cols} FROM {view}")
        finally:
            con.unregister(name)
    runs = pa.Table.from_pylist([
        {**staged.runs_row, "run_id": run_id, "summary": json.dumps({**staged.summary, "run_id": run_id})}
        for run_id, (staged, _) in zip(ids, batch)
    ])  # fmt: skip
    con.register("_podscope_in_runs", runs)
    try:
        con.execute(_INSERT_RUNS_BATCH_SQL)
    finally:
        con.unregister("_podscope_in_runs")
    return ids


def _run_name(result: RunResult, name: str | None) -> str:
    return name or (result.scenario.name if result.scenario is not None else "run")


def _write_whole(con: duckdb.DuckDBPyConnection, staged: _StagedRun, result: RunResult) -> int:
    """A run of at most EVENT_CHUNK_ROWS events: one transaction."""
    with _transaction(con):
        run_id = int(con.execute("SELECT nextval('run_id_seq')").fetchall()[0][0])
        _insert_arrow(con, "events", result.trace.events, run_id, _EVENT_COLUMNS)
        _publish(con, staged, result, run_id)
    return run_id


class _HeldWriter:
    """A write connection kept across a chunked write's transactions, let go when a reader waits.

    Each :meth:`connection` call is a point where the file may change hands: if another
    process is polling for it (:meth:`Database.reader_waiting`) or the file has been held
    for ``WRITER_MAX_HOLD_S``, the connection is closed (DuckDB checkpoints), the writer
    pauses ``WRITER_YIELD_S`` so the reader gets in, and reopens.
    """

    def __init__(self, db: Database):
        self._db = db
        self._stack: ExitStack | None = None
        self._con: duckdb.DuckDBPyConnection | None = None
        self._held_since_s = 0.0

    def __enter__(self) -> "_HeldWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        if self._stack is not None:
            stack, self._stack, self._con = self._stack, None, None
            stack.close()

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._con is not None and (
            self._db.reader_waiting() or time.monotonic() - self._held_since_s > WRITER_MAX_HOLD_S
        ):
            self._release()
            time.sleep(WRITER_YIELD_S)
        if self._con is None:
            stack = ExitStack()
            self._con = stack.enter_context(self._db.write())
            self._stack, self._held_since_s = stack, time.monotonic()
        try:
            yield self._con
        except duckdb.Error as e:
            raise ProfilerError(f"write failed on {self._db.path}: {e}") from e


def _write_chunked(db: Database, staged: _StagedRun, result: RunResult) -> int:
    """A large run: reserve the id, append events in chunk transactions, publish last."""
    events = result.trace.events
    with db.write() as con:
        _collect_abandoned(con)
        with _transaction(con):
            run_id = int(con.execute("SELECT nextval('run_id_seq')").fetchall()[0][0])
            con.execute(
                "INSERT INTO pending_runs VALUES ($id, $pid, $host, $now)",
                {"id": run_id, "pid": os.getpid(), "host": socket.gethostname(), "now": datetime.now(timezone.utc)},
            )
    try:
        with _HeldWriter(db) as held:
            for offset in range(0, events.num_rows, EVENT_CHUNK_ROWS):
                with held.connection() as con, _transaction(con):
                    _insert_arrow(con, "events", events.slice(offset, EVENT_CHUNK_ROWS), run_id, _EVENT_COLUMNS)
            with held.connection() as con, _transaction(con):
                _publish(con, staged, result, run_id)
                con.execute("DELETE FROM pending_runs WHERE run_id = $id", {"id": run_id})
    except BaseException:
        try:  # best effort; if this fails too, the next writer collects the rows
            with db.write() as con, _transaction(con):
                _delete_rows(con, run_id)
        except ProfilerError:
            pass
        raise
    return run_id


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
    if not db.path.exists():  # do not create a database just to find it empty
        raise RunNotFoundError(f"no run with id or name {str(ref).strip()!r}: {db.path} does not exist")
    with db.write() as con:
        run_id = resolve_run(con, ref)
        with _transaction(con):
            _delete_rows(con, run_id)
    return run_id
