"""Opening the DuckDB file: short-lived connections, lock polling and the ``.wait`` marker.

DuckDB lets one process hold a file for writing (and while it does, no other process
can even read it), so a dashboard that kept a connection open would lock out the CLI.
Connections are therefore opened for one read or one write and closed again. Opening
polls every few milliseconds on a lock conflict and gives up with
:class:`DatabaseBusyError` after ``LOCK_RETRY_S``.

A process that finds the file locked touches a marker file beside it
(:attr:`Database.wait_marker`) on every poll; a writer that holds the file across
several transactions (:mod:`profiler.chunked_write`) checks
:meth:`Database.reader_waiting` between them and lets go.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from engine.data_files import DB_DIR
from engine.errors import ProfilerError

from .schema import SCHEMA_SQL

__all__ = [
    "DEFAULT_DB_PATH",
    "LOCK_RETRY_S",
    "POLL_MAX_S",
    "Database",
    "DatabaseBusyError",
    "resolve_db_path",
    "transaction",
]

DEFAULT_DB_PATH = DB_DIR / "podscope.duckdb"  # data/ in a checkout, a user data folder when installed
#: how long an open waits for another process's lock before DatabaseBusyError
LOCK_RETRY_S = 10.0
#: lock polling interval bounds; short, so a reader slips in between a large write's chunks
POLL_MIN_S, POLL_MAX_S = 0.005, 0.05
#: a reader's "waiting" marker counts while it is younger than this (readers touch it on every poll)
_WAIT_MARKER_FRESH_S = 4 * POLL_MAX_S


def resolve_db_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``--db`` beats ``$PODSCOPE_DB`` beats ``data/podscope.duckdb``."""
    if path:
        return Path(path)
    env = os.environ.get("PODSCOPE_DB")
    return Path(env) if env else DEFAULT_DB_PATH


class DatabaseBusyError(ProfilerError):
    """Another process held the database file for longer than ``LOCK_RETRY_S``."""


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
        delay = POLL_MIN_S
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
                delay = min(delay * 2, POLL_MAX_S)

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


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction on ``con``: committed when the block ends, rolled back on any exception."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
