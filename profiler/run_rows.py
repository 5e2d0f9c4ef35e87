"""One run's rows in and out of the database, inside the caller's transaction.

The bulk tables arrive as Arrow and are inserted with ``INSERT ... SELECT`` from a
registered Arrow view, never row by row. :func:`publish` writes the ``runs`` row last:
every query starts from ``runs``, so a run is invisible until the transaction that
inserts that row commits.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pyarrow as pa

from .schema import CREATE_TABLE_SQL, per_run_tables, quote_ident
from .staging import StagedRun

__all__ = ["EVENTS_SELECT", "delete_rows", "insert_events", "insert_runs_row", "new_run_id", "publish"]

#: the events columns as stored, selected from an Arrow view (kind arrives dictionary-encoded)
EVENTS_SELECT = "chip, step, CAST(kind AS VARCHAR), start_ns, dur_ns"
_EVENTS_VIEW = "_podscope_in_events"
_INSERT_EVENTS_SQL = f"INSERT INTO events SELECT $run_id, {EVENTS_SELECT} FROM {quote_ident(_EVENTS_VIEW)}"
_INSERT_RUN_SQL = """
INSERT INTO runs (run_id, name, created_at, source, chip, chips, hosts, slices, topology, steps, scenario, facts, summary)
VALUES ($run_id, $name, $created_at, $source, $chip, $chips, $hosts, $slices, $topology, $steps, $scenario, $facts, $summary)
"""


def new_run_id(con: duckdb.DuckDBPyConnection) -> int:
    return int(con.execute("SELECT nextval('run_id_seq')").fetchall()[0][0])


def insert_events(con: duckdb.DuckDBPyConnection, events: pa.Table, run_id: int) -> None:
    """Append events (``chip, step, kind, start_ns, dur_ns``) as rows of run ``run_id``."""
    if events.num_rows == 0:
        return  # e.g. events of a summary-mode run: a statement costs more than the run
    con.register(_EVENTS_VIEW, events)
    try:
        con.execute(_INSERT_EVENTS_SQL, {"run_id": run_id})
    finally:
        con.unregister(_EVENTS_VIEW)


def _insert_table(con: duckdb.DuckDBPyConnection, table: str, data: pa.Table, run_id: int) -> None:
    """A staged table (declared columns, without run_id) as rows of run ``run_id``."""
    view = f"_podscope_in_{table}"
    con.register(view, data)
    try:
        con.execute(
            f"INSERT INTO {quote_ident(table)} BY NAME SELECT $run_id AS run_id, "
            f"{', '.join(quote_ident(c) for c in data.column_names)} FROM {quote_ident(view)}",
            {"run_id": run_id},
        )
    finally:
        con.unregister(view)


def insert_runs_row(con: duckdb.DuckDBPyConnection, run_id: int, row: dict[str, Any], summary: dict[str, Any] | None) -> None:
    con.execute(_INSERT_RUN_SQL, {**row, "run_id": run_id, "summary": json.dumps(summary) if summary is not None else None})


def publish(con: duckdb.DuckDBPyConnection, staged: StagedRun, run_id: int) -> None:
    """Insert a staged run's small tables and extras, then its runs row (last: the run becomes visible).

    An extra table is created from its declaration (``engine.trace.TABLES``) when a run first
    writes one, so a database holds only the extra tables its runs have.
    """
    for table, data in staged.small.items():
        if data.num_rows:
            _insert_table(con, table, data, run_id)
    for table, data in staged.extra.items():
        con.execute(CREATE_TABLE_SQL[table])
        _insert_table(con, table, data, run_id)
    insert_runs_row(con, run_id, staged.runs_row, {**staged.summary, "run_id": run_id})


def delete_rows(con: duckdb.DuckDBPyConnection, run_id: int) -> None:
    """Delete a run's rows from every per-run table, its pending entry and its runs row (caller's transaction)."""
    for table in per_run_tables(con):
        con.execute(f"DELETE FROM {quote_ident(table)} WHERE run_id = $id", {"id": run_id})
    con.execute("DELETE FROM pending_runs WHERE run_id = $id", {"id": run_id})
    con.execute("DELETE FROM runs WHERE run_id = $id", {"id": run_id})
