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

A lock is told from a damaged file by asking the operating system whether another
process holds a lock on the file (DuckDB takes an ``fcntl`` lock), never by the
wording of DuckDB's message. Damage shows as DuckDB's checksum error (the base
``duckdb.Error``), an internal or serialization error, or a short read
(``duckdb.IOException`` on a query): such a file raises :class:`DatabaseDamagedError`,
and a read that meets damage leaves a ``.damaged`` marker beside the file so that no
process writes into it until ``podscope check`` finds every table readable again.
"""

from __future__ import annotations

import json
import os
import struct
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
    "DatabaseDamagedError",
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


class DatabaseDamagedError(ProfilerError):
    """The database file is damaged, or is not a DuckDB database at all; nothing is written to it."""


#: the first bytes of a DuckDB file: an 8-byte checksum, then this magic (DuckDB's main header)
DUCKDB_MAGIC, DUCKDB_MAGIC_OFFSET = b"DUCK", 8
#: main header plus two database headers, 4 KiB each, precede the first block
DUCKDB_HEADER_BYTES = 3 * 4096

#: DuckDB errors that mean the bytes on disk are not what DuckDB wrote: its block checksum
#: mismatch is raised as the base class itself, metadata that decodes to nonsense as a
#: serialization error
_DAMAGE_TYPES = (duckdb.SerializationException,)


def _is_damage(e: BaseException, *, reading: bool) -> bool:
    """Does this DuckDB error say the file's bytes are damaged? (By type; a short read counts while reading.)"""
    if type(e) is duckdb.Error or isinstance(e, _DAMAGE_TYPES):
        return True
    return reading and isinstance(e, duckdb.IOException)


def _flock_struct(lock_type: int) -> bytes:
    import fcntl

    # struct flock on Linux: l_type, l_whence (short); l_start, l_len (off_t); l_pid (pid_t), padded to 32 bytes
    return struct.pack("hhqqi4x", lock_type, os.SEEK_SET, 0, 0, 0) if hasattr(fcntl, "F_GETLK") else b""


def lock_holder(path: Path, *, for_write: bool) -> int | None:
    """The id of another process holding a lock on ``path`` that conflicts with opening it, or None.

    Asked of the kernel (``fcntl(F_GETLK)``), on Linux; elsewhere None is never claimed
    (returns -1: "cannot tell", treated as locked so the open is retried).
    """
    import fcntl
    import sys

    if not sys.platform.startswith("linux"):
        return -1
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        query = _flock_struct(fcntl.F_WRLCK if for_write else fcntl.F_RDLCK)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return -1
    finally:
        os.close(fd)
    lock_type, _, _, _, pid = struct.unpack("hhqqi4x", answer)
    return None if lock_type == fcntl.F_UNLCK else pid


def _not_a_database(path: Path) -> str | None:
    """Why ``path`` cannot be a DuckDB file (too short, no magic), from its first bytes; None if it may be one."""
    try:
        with open(path, "rb") as f:
            head = f.read(DUCKDB_HEADER_BYTES)
    except OSError as e:
        return f"cannot read it: {e.strerror or e}"
    if len(head) < DUCKDB_HEADER_BYTES:
        return f"it is {len(head):,} bytes long, shorter than a DuckDB file's {DUCKDB_HEADER_BYTES:,}-byte header"
    if head[DUCKDB_MAGIC_OFFSET : DUCKDB_MAGIC_OFFSET + len(DUCKDB_MAGIC)] != DUCKDB_MAGIC:
        return "it does not start with a DuckDB header (another kind of file, or overwritten)"
    return None


def damaged_message(path: Path, detail: str) -> str:
    """What to tell a user about a damaged database file, and what to do."""
    return (
        f"the database file is damaged: {path}: {detail}. Nothing is written to it. "
        f"The runs that still read can be exported: `podscope check --db {path}` lists them and "
        f"`podscope export RUN --format parquet -o DIR --db {path}` saves one; then move the file away "
        "(a new file is created on the next run) or pass another --db."
    )


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

    @property
    def damage_marker(self) -> Path:
        """File left beside a database that failed a read as damaged: no process writes into it then."""
        return self.path.with_name(self.path.name + ".damaged")

    def _mark_damaged(self, detail: str) -> None:
        try:
            ino = self.path.stat().st_ino
            self.damage_marker.write_text(json.dumps({"inode": ino, "error": detail}) + "\n")
        except OSError:
            pass  # a read-only folder: this process still refuses below; others find the damage themselves

    def known_damage(self) -> str | None:
        """The error a read of this very file (same inode) met, if one did; None otherwise."""
        try:
            mark = json.loads(self.damage_marker.read_text())
            if mark.get("inode") == self.path.stat().st_ino:
                return str(mark.get("error", "damaged"))
        except (OSError, ValueError, AttributeError):
            pass
        return None

    def clear_damage_mark(self) -> None:
        self.damage_marker.unlink(missing_ok=True)

    def _damaged(self, e: BaseException, *, mark: bool = True) -> DatabaseDamagedError:
        detail = f"{type(e).__name__}: {e}" if isinstance(e, duckdb.Error) else str(e)
        if mark:
            self._mark_damaged(detail)
        return DatabaseDamagedError(damaged_message(self.path, detail))

    def _open(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + LOCK_RETRY_S
        delay = POLL_MIN_S
        while True:
            try:
                con = duckdb.connect(str(self.path), read_only=read_only)
                con.execute("SET enable_progress_bar = false")
                return con
            except duckdb.Error as e:
                if _is_damage(e, reading=False):
                    raise self._damaged(e) from e
                why = _not_a_database(self.path) if self.path.exists() else None
                if why is not None:
                    raise DatabaseDamagedError(
                        f"{self.path} is not a DuckDB database: {why}. Nothing is written to it; "
                        "move it away (a new file is created on the next run) or pass another --db."
                    ) from e
                if not isinstance(e, duckdb.IOException):
                    raise ProfilerError(f"cannot open database {self.path}: {e}") from e
                if lock_holder(self.path, for_write=not read_only) is None:
                    # no process holds the file: not a lock. Once more, in case the holder let go just now.
                    try:
                        con = duckdb.connect(str(self.path), read_only=read_only)
                        con.execute("SET enable_progress_bar = false")
                        return con
                    except duckdb.Error as again:
                        if lock_holder(self.path, for_write=not read_only) is None:
                            raise self._damaged(again) from again
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
        """A connection for queries. An absent file, or one created but never given tables, reads as an empty database.

        Raises
        ------
        DatabaseDamagedError
            The file is damaged (and is marked so: no process writes into it), or is not a DuckDB file.
        DatabaseBusyError, ProfilerError
        """
        if not self.path.exists():
            con = _empty_database()
        else:
            con = self._open(read_only=self.read_only_reads)
            try:
                has_schema = con.execute(_HAS_RUNS_SQL).fetchone()[0] > 0
            except duckdb.Error as e:
                con.close()
                raise (self._damaged(e) if _is_damage(e, reading=True) else ProfilerError(f"query failed on {self.path}: {e}")) from e
            if not has_schema:  # a first writer was killed between creating the file and its schema
                con.close()
                con = _empty_database()
        try:
            yield con
        except duckdb.Error as e:
            if _is_damage(e, reading=True):
                raise self._damaged(e) from e
            raise ProfilerError(f"query failed on {self.path}: {e}") from e
        finally:
            con.close()

    @contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection with the schema in place (created in one transaction, if missing).

        Raises
        ------
        DatabaseDamagedError
            A read of this file met damage before (its ``.damaged`` marker), or this write does.
        DatabaseBusyError, ProfilerError
        """
        if self.path.exists() and (known := self.known_damage()) is not None:
            raise DatabaseDamagedError(damaged_message(self.path, known))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ProfilerError(f"cannot create folder for database {self.path}: {e}") from e
        con = self._open(read_only=False)
        try:
            with transaction(con):  # all of the schema or none of it, whenever the writer dies
                con.execute(SCHEMA_SQL)
            yield con
        except duckdb.Error as e:
            if _is_damage(e, reading=False):
                raise self._damaged(e) from e
            raise ProfilerError(f"write failed on {self.path}: {e}") from e
        finally:
            con.close()

    def has_runs(self) -> bool:
        with self.read() as con:
            return con.execute("SELECT count(*) FROM runs").fetchone()[0] > 0


_HAS_RUNS_SQL = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'runs' AND table_schema = 'main'"


def _empty_database() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.execute(SCHEMA_SQL)
    return con


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
