"""The database schema: the tables a Podscope file holds, and the one way a name enters SQL.

Table and column names cannot be bound as parameters, so every identifier formatted into
SQL goes through :func:`quote_ident`, which accepts only plain lower-case identifiers and
double-quotes them; every value is bound (``$name``). ``tests/test_sql_safety.py`` checks
both over the whole package.
"""

from __future__ import annotations

import re

import duckdb

from engine.errors import ProfilerError

__all__ = [
    "RUN_TABLES",
    "SCHEMA_SQL",
    "extra_table_name",
    "per_run_tables",
    "quote_ident",
]

_PLAIN_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: names of the engine's extra tables (stored as ``extra_<name>``)
_EXTRA_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


def quote_ident(name: str) -> str:
    """``name`` checked to be a plain identifier, double-quoted for SQL.

    >>> quote_ident("extra_link_load")
    '"extra_link_load"'

    Raises
    ------
    ProfilerError
        ``name`` is not lower-case letters, digits and underscores (at most 63, not starting with a digit).
    """
    if not _PLAIN_IDENT.match(name):
        raise ProfilerError(f"table name {name!r} is not a plain identifier")
    return f'"{name}"'


def extra_table_name(name: str) -> str:
    """The stored table of the engine's extra table ``name``: ``extra_<name>``.

    Raises
    ------
    ProfilerError
        ``name`` is not a plain identifier (lower-case letters, digits, underscores; at most 41).
    """
    if not _EXTRA_NAME.match(name):
        raise ProfilerError(f"extra trace table name {name!r} is not a plain identifier")
    return f"extra_{name}"


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
-- Large runs being written in several transactions; see profiler.chunked_write.
CREATE TABLE IF NOT EXISTS pending_runs (run_id INTEGER PRIMARY KEY, pid INTEGER, host VARCHAR, started_at TIMESTAMP WITH TIME ZONE);
"""

#: tables holding per-run rows in every database, deleted together with the run
RUN_TABLES = ("events", "steps", "chips", "step_kind", "chip_kind")


def per_run_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every table holding per-run rows: :data:`RUN_TABLES` plus the ``extra_*`` tables present."""
    extra = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE $pattern ESCAPE '\\' ORDER BY table_name",
        {"pattern": "extra\\_%"},
    ).fetchall()
    return [*RUN_TABLES, *(r[0] for r in extra)]
