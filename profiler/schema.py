"""The database schema, built from the one table contract, and the one way a name enters SQL.

Every per-run table is declared once, in :data:`engine.trace.TABLES`; the store creates
each from its declaration with a leading ``run_id`` (:data:`CREATE_TABLE_SQL`), the core
tables with the database and an ``extra_*`` table when a run first writes one (so a
database holds only the extra tables its runs have). The profiler's own tables
(:data:`PROFILER_TABLES`: runs, runs being written, sweep failures) are declared here with
the same :class:`~engine.trace.TableSpec`. Arrow types become DuckDB types in one place,
:func:`duckdb_type`.

Table and column names cannot be bound as parameters, so every identifier formatted into
SQL goes through :func:`quote_ident`, which accepts only plain lower-case identifiers and
double-quotes them; every value is bound (``$name``). ``tests/test_sql_safety.py`` checks
both over the whole package.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

import duckdb
import pyarrow as pa

from engine import trace as contract
from engine.errors import ProfilerError
from engine.trace import TABLES, Column, TableSpec

__all__ = [
    "CREATE_TABLE_SQL",
    "PROFILER_TABLES",
    "RUN_TABLES",
    "SCHEMA_SQL",
    "declared_extra",
    "duckdb_type",
    "extra_table_name",
    "per_run_tables",
    "quote_ident",
]

_PLAIN_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: keys of the engine's extra tables (stored as ``extra_<key>``)
_EXTRA_KEY = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


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


def duckdb_type(arrow_type: pa.DataType) -> str:
    """The DuckDB column type that stores values of ``arrow_type`` (dictionary-encoded text as VARCHAR).

    Raises
    ------
    ProfilerError
        A type no declared table uses.
    """
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if isinstance(arrow_type, pa.JsonType):
        return "JSON"
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMP WITH TIME ZONE" if arrow_type.tz else "TIMESTAMP"
    for is_type, sql_type in _DUCKDB_TYPES:
        if is_type(arrow_type):
            return sql_type
    raise ProfilerError(f"no DuckDB column type for Arrow type {arrow_type}")


_DUCKDB_TYPES = (
    (pa.types.is_boolean, "BOOLEAN"),
    (pa.types.is_int8, "TINYINT"),
    (pa.types.is_int16, "SMALLINT"),
    (pa.types.is_int32, "INTEGER"),
    (pa.types.is_int64, "BIGINT"),
    (pa.types.is_float32, "FLOAT"),
    (pa.types.is_float64, "DOUBLE"),
    (pa.types.is_string, "VARCHAR"),
    (pa.types.is_large_string, "VARCHAR"),
)


def _own(name: str, doc: str, *columns: tuple[str, pa.DataType, str]) -> TableSpec:
    return TableSpec(name, tuple(Column(n, t, d) for n, t, d in columns), doc)


_UTC = pa.timestamp("us", tz="UTC")
#: the profiler's own tables (not per-run trace tables); created with the database except sweep_failures
PROFILER_TABLES: Mapping[str, TableSpec] = MappingProxyType({t.name: t for t in (
    _own(
        "runs",
        "One stored run; every query starts here, so a run is visible once this row is committed.",
        ("run_id", pa.int32(), "run id, from run_id_seq"),
        ("name", pa.string(), "run name (the scenario's, or given)"),
        ("created_at", _UTC, "when the run was staged for storage, UTC"),
        ("source", pa.string(), "simulated | imported"),
        ("chip", pa.string(), "chip generation, or the imported device kind"),
        ("chips", pa.int32(), "chips in the pod, count"),
        ("hosts", pa.int32(), "hosts, count"),
        ("slices", pa.int32(), "slices, count"),
        ("topology", pa.string(), "slice topology as written (4x4x4), or a description for imports"),
        ("steps", pa.int32(), "training steps, count"),
        ("scenario", pa.json_(), "the scenario as loaded (null for imports)"),
        ("facts", pa.json_(), "engine.trace.RunFacts of the run"),
        ("summary", pa.json_(), "the headline summary (profiler.summary.SUMMARY_KEYS)"),
    ),
    _own(
        "pending_runs",
        "A large run being written in several transactions (profiler.chunked_write); removed when it is published.",
        ("run_id", pa.int32(), "the reserved run id"),
        ("pid", pa.int32(), "writer process id"),
        ("host", pa.string(), "writer host name"),
        ("started_at", _UTC, "when the write began, UTC"),
    ),
    _own(
        "sweep_failures",
        "A sweep point whose simulation failed (created when a sweep first records one).",
        ("sweep", pa.string(), "sweep name"),
        ("point", pa.string(), "point id within the sweep"),
        ("overrides", pa.json_(), "the point's scenario overrides"),
        ("error", pa.string(), "the error, as reported"),
        ("created_at", _UTC, "when the failure was recorded, UTC"),
    ),
)})  # fmt: skip
#: column constraints of the profiler's own tables (the per-run tables' only constraint is run_id NOT NULL)
_CONSTRAINTS = {
    ("runs", "run_id"): "PRIMARY KEY",
    **{("runs", c): "NOT NULL" for c in ("name", "created_at", "source", "chips", "steps")},
    ("pending_runs", "run_id"): "PRIMARY KEY",
    ("sweep_failures", "sweep"): "NOT NULL",
    ("sweep_failures", "point"): "NOT NULL",
}

#: tables holding per-run rows in every database, deleted together with the run
RUN_TABLES = ("events", "steps", "chips", "step_kind", "chip_kind")
assert set(RUN_TABLES) <= set(TABLES) and not set(TABLES) & set(PROFILER_TABLES)

#: ``CREATE TABLE IF NOT EXISTS`` of every declared table, per-run ones with a leading ``run_id``
CREATE_TABLE_SQL: Mapping[str, str] = MappingProxyType({
    **{
        name: f"CREATE TABLE IF NOT EXISTS {quote_ident(name)} (run_id INTEGER NOT NULL, "
        + ", ".join(f"{quote_ident(c.name)} {duckdb_type(c.type)}" for c in spec.columns) + ")"
        for name, spec in TABLES.items()
    },
    **{
        name: f"CREATE TABLE IF NOT EXISTS {quote_ident(name)} ("
        + ", ".join(f"{quote_ident(c.name)} {duckdb_type(c.type)} {_CONSTRAINTS.get((name, c.name), '')}".rstrip() for c in spec.columns)
        + ")"
        for name, spec in PROFILER_TABLES.items()
    },
})  # fmt: skip

#: what every database holds from its first write: the run id sequence, runs, pending_runs, the core tables
SCHEMA_SQL = ";\n".join(
    ["CREATE SEQUENCE IF NOT EXISTS run_id_seq START 1", CREATE_TABLE_SQL["runs"], *(CREATE_TABLE_SQL[t] for t in RUN_TABLES),
     CREATE_TABLE_SQL["pending_runs"]]
) + ";\n"  # fmt: skip


def extra_table_name(key: str) -> str:
    """The stored table of the engine's extra table ``key``: ``extra_<key>``.

    Raises
    ------
    ProfilerError
        ``key`` is not a plain identifier (lower-case letters, digits, underscores; at most 41).
    """
    if not _EXTRA_KEY.match(key):
        raise ProfilerError(f"extra trace table name {key!r} is not a plain identifier")
    return contract.extra_table_name(key)


def declared_extra(key: str, data: pa.Table) -> pa.Table:
    """The extra table ``key`` in its declared columns and types (``engine.trace.TABLES``).

    Raises
    ------
    ProfilerError
        ``key`` is not a plain identifier or not declared, or ``data`` lacks a declared column,
        has one more, or holds values its declared type cannot.
    """
    name = extra_table_name(key)
    spec = TABLES.get(name)
    if spec is None:
        declared = sorted(t.removeprefix(contract.EXTRA_PREFIX) for t in TABLES if t.startswith(contract.EXTRA_PREFIX))
        raise ProfilerError(f"extra trace table {key!r} is not declared in engine.trace.TABLES; declared: {', '.join(declared)}")
    if set(data.column_names) != set(spec.column_names):
        raise ProfilerError(
            f"extra trace table {key!r} has columns {sorted(data.column_names)}; declared: {list(spec.column_names)}"
        )
    try:
        return data.select(list(spec.column_names)).cast(spec.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise ProfilerError(f"extra trace table {key!r} does not fit its declared types: {e}") from e


def per_run_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every table holding per-run rows: :data:`RUN_TABLES` plus the ``extra_*`` tables present."""
    extra = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE $pattern ESCAPE '\\' ORDER BY table_name",
        {"pattern": "extra\\_%"},
    ).fetchall()
    return [*RUN_TABLES, *(r[0] for r in extra)]
