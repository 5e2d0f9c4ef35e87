"""``podscope check``: read every table of a database file in full, and say which runs still read.

DuckDB checksums every block it reads, so reading each column of each table once
finds any damaged block. A table that fails is then read run by run (DuckDB skips the
row groups a run's ``run_id`` cannot be in), which tells the runs that can still be
exported from the runs that cannot. A file that checks clean loses its ``.damaged``
marker, so writes are allowed again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from engine.errors import ProfilerError

from .connection import Database, DatabaseDamagedError
from .schema import quote_ident

__all__ = ["CheckReport", "check_database"]

_TABLES_SQL = "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY table_name"
_RUN_ID_TABLES_SQL = "SELECT table_name FROM information_schema.columns WHERE column_name = 'run_id' AND table_schema = 'main'"


@dataclass
class CheckReport:
    """What a check found: rows per readable table, the error per damaged one, and the runs that read whole."""

    path: str
    tables: dict[str, int] = field(default_factory=dict)  # table -> rows, read in full
    damaged: dict[str, str] = field(default_factory=dict)  # table -> error
    runs_ok: list[int] = field(default_factory=list)
    runs_damaged: list[int] = field(default_factory=list)
    fatal: str | None = None  # the file cannot be opened at all

    @property
    def ok(self) -> bool:
        return self.fatal is None and not self.damaged

    def message(self) -> str:
        if self.fatal is not None:
            return f"{self.path}: cannot be read at all\n  {self.fatal}"
        lines = [f"{self.path}: {'every table reads in full' if self.ok else 'DAMAGED'}"]
        lines += [f"  ok       {t} ({n:,} rows)" for t, n in self.tables.items()]
        lines += [f"  DAMAGED  {t}: {e.splitlines()[0]}" for t, e in self.damaged.items()]
        if not self.ok:
            lines.append(f"  runs that read whole ({len(self.runs_ok)}): {', '.join(map(str, self.runs_ok)) or 'none'}")
            lines.append(f"  runs with damaged rows ({len(self.runs_damaged)}): {', '.join(map(str, self.runs_damaged)) or 'none'}")
            lines.append(
                f"  save the runs that read: podscope export RUN --format parquet -o DIR --db {self.path}; "
                "then move the file away (no run is written into it meanwhile)"
            )
        return "\n".join(lines)


_READ_ALL_SQL = "SELECT count(*), max(hash(COLUMNS(*))) FROM {table}"
_READ_RUN_SQL = "SELECT count(*), max(hash(COLUMNS(*))) FROM {table} WHERE run_id = $id"


def _read_all(con: duckdb.DuckDBPyConnection, table: str, run_id: int | None = None) -> int:
    """Rows of ``table`` (of one run), every column decoded (hashing each one forces the read)."""
    if run_id is None:
        return int(con.execute(_READ_ALL_SQL.format(table=quote_ident(table))).fetchone()[0])
    return int(con.execute(_READ_RUN_SQL.format(table=quote_ident(table)), {"id": run_id}).fetchone()[0])


def check_database(db: Database) -> CheckReport:
    """Read every table of ``db`` in full; where one is damaged, find the runs that still read.

    Never writes to the database file; removes its ``.damaged`` marker when every table reads.
    """
    report = CheckReport(path=str(db.path))
    if not db.path.exists():
        report.fatal = "no such file"
        return report
    try:
        with db.read() as con:
            tables = [r[0] for r in con.execute(_TABLES_SQL).fetchall()]
            run_tables = {r[0] for r in con.execute(_RUN_ID_TABLES_SQL).fetchall()}
            for table in tables:
                try:
                    report.tables[table] = _read_all(con, table)
                except duckdb.Error as e:
                    report.damaged[table] = f"{type(e).__name__}: {e}"
            if report.damaged:
                try:
                    run_ids = [int(r[0]) for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
                except duckdb.Error:
                    run_ids = []  # the runs table itself is damaged: no run can be named
                for run_id in run_ids:
                    try:
                        for table in sorted(run_tables & set(report.damaged)):
                            _read_all(con, table, run_id)
                        report.runs_ok.append(run_id)
                    except duckdb.Error:
                        report.runs_damaged.append(run_id)
    except (DatabaseDamagedError, ProfilerError) as e:
        report.fatal = str(e)
        return report
    if report.ok:
        db.clear_damage_mark()
    else:
        db._mark_damaged(next(iter(report.damaged.values())))
    return report
