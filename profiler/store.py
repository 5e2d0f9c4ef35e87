"""Writing runs to the database, one transaction per run, and finding or deleting them.

One file holds many runs. A run becomes visible to queries in one commit, whole, with
its summaries, or never. Everything but the events is staged first without the file
(:mod:`profiler.staging`), so the writer holds the file only for the inserts:

* a run of at most ``chunked_write.EVENT_CHUNK_ROWS`` events is written in one
  transaction (:func:`write_run`);
* many small runs (a sweep) are written several per transaction, one INSERT per table
  for the whole batch (:func:`write_runs`);
* a larger run goes through the chunked protocol of :mod:`profiler.chunked_write`.

The connection, its locking and the busy error live in :mod:`profiler.connection` and
are re-exported here, with :func:`resolve_db_path`, for the code that opens a store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

import duckdb
import numpy as np
import pyarrow as pa

from engine.errors import InputError, RunNotFoundError
from engine.scenario import Scenario
from engine.scenario.names import name_problem, printable
from engine.trace import RunResult

from .chunked_write import collect_abandoned, event_chunks, is_large, write_chunked
from .connection import DEFAULT_DB_PATH, Database, DatabaseBusyError, resolve_db_path, transaction
from .run_rows import EVENTS_SELECT, delete_rows, insert_events, new_run_id, publish
from .schema import CREATE_TABLE_SQL, quote_ident
from .staging import StagedRun, stage, summarise

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

#: write_runs writes a batch of small runs after staging them for this long (or WRITE_BATCH_RUNS
#: runs): new runs appear within seconds, and a reader waits at most one batch's insert (one
#: statement per table, ~0.1 s), not the staging, which holds no lock
WRITE_BATCH_S = 2.0
WRITE_BATCH_RUNS = 64

_RUNS_COLUMNS = "run_id, name, created_at, source, chip, chips, hosts, slices, topology, steps, scenario, facts, summary"
_RUNS_VIEW = "_podscope_in_runs"
_INSERT_RUNS_BATCH_SQL = f"INSERT INTO runs ({_RUNS_COLUMNS}) SELECT {_RUNS_COLUMNS} FROM {quote_ident(_RUNS_VIEW)}"
_BATCH_EVENTS_VIEW = "_podscope_in_events"
_INSERT_EVENTS_BATCH_SQL = f"INSERT INTO events SELECT run_id, {EVENTS_SELECT} FROM {quote_ident(_BATCH_EVENTS_VIEW)}"


def check_run_name(name: str) -> None:
    """Refuse a given run name that breaks :func:`engine.scenario.names.name_problem` (before any work is done).

    Raises
    ------
    InputError
    """
    if (problem := name_problem(name)) is not None:
        raise InputError(f"run name '{printable(name[:80])}{'...' if len(name) > 80 else ''}': {problem}")


def run_name_of(scenario: Scenario | None, name: str | None) -> str:
    """The name a run is stored under: ``name`` if given (checked by the one rule), else its scenario's.

    Raises
    ------
    InputError
        ``name`` breaks the rule of :func:`engine.scenario.names.name_problem`.
    """
    if name is None:
        return scenario.name if scenario is not None else "run"
    check_run_name(name)
    return name


def _run_name(result: RunResult, name: str | None) -> str:
    return run_name_of(result.scenario, name)


def write_run(db: Database, result: RunResult, *, name: str | None = None, source: str = "simulated") -> int:
    """Store a simulated (or imported) run; returns its run_id.

    The run becomes visible to queries in one commit, whole, or never (see
    :mod:`profiler.chunked_write` for how large runs are written in chunks without a
    visible partial state).

    Raises
    ------
    ProfilerError
        On any storage failure; no partial run is visible afterwards.
    """
    staged = summarise([stage(result, _run_name(result, name), source)])[0]
    if is_large(result.trace.events.num_rows):
        return write_chunked(db, event_chunks(result.trace.events), lambda: staged)
    with db.write() as con:
        collect_abandoned(con)
        return _write_whole(con, staged, result)[0]


def write_runs(
    db: Database, results: Iterable[RunResult], *, source: str = "simulated", already_stored: set[int] | None = None
) -> list[int]:
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

    A sweep point (``facts.extra["sweep"]``) that the file already holds, stored by another
    sweep, is not stored again: its existing run id is returned, and added to
    ``already_stored`` when given.
    """
    ids: list[int] = []
    batch: list[tuple[StagedRun, RunResult]] = []
    batch_since = time.monotonic()

    def flush() -> None:
        if batch:
            pending = list(batch)
            batch.clear()  # before writing: a failed batch must not be written again by the handler below
            for run_id, fresh in _write_batch(db, pending):
                ids.append(run_id)
                if not fresh and already_stored is not None:
                    already_stored.add(run_id)

    try:
        for result in results:
            if is_large(result.trace.events.num_rows):
                flush()
                staged = summarise([stage(result, _run_name(result, None), source)])[0]
                ids.append(write_chunked(db, event_chunks(result.trace.events), lambda staged=staged: staged))
                continue
            if not batch:
                batch_since = time.monotonic()
            batch.append((stage(result, _run_name(result, None), source), result))
            rows = sum(r.trace.events.num_rows for _, r in batch)
            if len(batch) >= WRITE_BATCH_RUNS or is_large(rows) or time.monotonic() - batch_since > WRITE_BATCH_S:
                flush()
        flush()
    except BaseException:
        flush()  # the runs staged before a failure are still stored
        raise
    return ids


_STORED_POINT_SQL = (
    "SELECT min(run_id) FROM runs WHERE json_extract_string(summary, '$.sweep.name') = $sweep "
    "AND json_extract_string(summary, '$.sweep.point') = $point"
)


def _stored_point(con: duckdb.DuckDBPyConnection, staged: StagedRun) -> int | None:
    """The run already holding this sweep point (same sweep, same scenario hash), if any.

    Asked inside the transaction that would store the point: DuckDB lets one process at a
    time write the file, so two sweeps storing the same point cannot both find it missing.
    """
    sweep = staged.summary.get("sweep")
    if not isinstance(sweep, dict) or "point" not in sweep:
        return None
    row = con.execute(_STORED_POINT_SQL, {"sweep": sweep.get("name"), "point": sweep["point"]}).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _write_whole(con: duckdb.DuckDBPyConnection, staged: StagedRun, result: RunResult) -> tuple[int, bool]:
    """A run of at most EVENT_CHUNK_ROWS events: one transaction; (run_id, stored now).

    A sweep point the file already holds is not stored again (its run id, False).
    """
    with transaction(con):
        if (existing := _stored_point(con, staged)) is not None:
            return existing, False
        run_id = new_run_id(con)
        insert_events(con, result.trace.events, run_id)
        publish(con, staged, run_id)
    return run_id, True


def _write_batch(db: Database, batch: list[tuple[StagedRun, RunResult]]) -> list[tuple[int, bool]]:
    """Small staged runs in one transaction, one INSERT per table; run by run if that fails.

    Their summaries are computed together first (:func:`~profiler.staging.summarise`), without the file.
    """
    summarised = summarise([staged for staged, _ in batch])
    batch = [(staged, result) for staged, (_, result) in zip(summarised, batch)]
    with db.write() as con:
        collect_abandoned(con)
        try:
            with transaction(con):
                return _insert_batch(con, batch)
        except (duckdb.Error, pa.ArrowException):
            pass  # e.g. a constraint a run's rows break: fall back below, run by run
        return [_write_whole(con, staged, result) for staged, result in batch]


def _with_run_id(table: pa.Table, run_id: int) -> pa.Table:
    return table.add_column(0, "run_id", pa.array(np.full(table.num_rows, run_id, dtype=np.int32)))


def _insert_batch(con: duckdb.DuckDBPyConnection, batch: list[tuple[StagedRun, RunResult]]) -> list[tuple[int, bool]]:
    """The rows of a batch of staged runs: one INSERT per table for all of them, the runs rows last.

    Sweep points already stored (by another sweep into the same file) are not stored again:
    their existing run id is returned in their place.
    """
    existing = [_stored_point(con, staged) for staged, _ in batch]
    fresh = [item for item, old in zip(batch, existing) if old is None]
    fresh_ids = iter(_insert_fresh(con, fresh) if fresh else [])
    return [(old, False) if old is not None else (next(fresh_ids), True) for old in existing]


def _insert_fresh(con: duckdb.DuckDBPyConnection, batch: list[tuple[StagedRun, RunResult]]) -> list[int]:
    n = len(batch)
    ids = [int(r[0]) for r in con.execute("SELECT nextval('run_id_seq') FROM range($n)", {"n": n}).fetchall()]
    grouped: dict[tuple[str, bool], list[pa.Table]] = {}  # (table, is_extra) -> per-run tables with run_id
    for run_id, (staged, result) in zip(ids, batch):
        for table, data in [("events", result.trace.events), *staged.small.items()]:
            grouped.setdefault((table, False), []).append(_with_run_id(data, run_id))
        for table, data in staged.extra.items():
            grouped.setdefault((table, True), []).append(_with_run_id(data, run_id))
    for (table, is_extra), parts in grouped.items():
        data = pa.concat_tables(parts)
        if data.num_rows == 0 and not is_extra:
            continue
        if table == "events":
            con.register(_BATCH_EVENTS_VIEW, data)
            try:
                con.execute(_INSERT_EVENTS_BATCH_SQL)
            finally:
                con.unregister(_BATCH_EVENTS_VIEW)
            continue
        view = f"_podscope_in_{table}"
        con.register(view, data)
        try:
            if is_extra:
                con.execute(CREATE_TABLE_SQL[table])  # from its declaration, when a run first writes one
            con.execute(
                f"INSERT INTO {quote_ident(table)} BY NAME SELECT {', '.join(quote_ident(c) for c in data.column_names)} "
                f"FROM {quote_ident(view)}"
            )
        finally:
            con.unregister(view)
    runs = pa.Table.from_pylist([
        {**staged.runs_row, "run_id": run_id, "summary": json.dumps({**staged.summary, "run_id": run_id})}
        for run_id, (staged, _) in zip(ids, batch)
    ])  # fmt: skip
    con.register(_RUNS_VIEW, runs)
    try:
        con.execute(_INSERT_RUNS_BATCH_SQL)
    finally:
        con.unregister(_RUNS_VIEW)
    return ids


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
        with transaction(con):
            delete_rows(con, run_id)
    return run_id
