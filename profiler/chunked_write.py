"""Writing a large run in several short transactions, so readers are never locked out for long.

A run of more than ``EVENT_CHUNK_ROWS`` events is written as follows:

1. Its id is reserved in ``pending_runs`` (one transaction).
2. Its events are appended in chunks of ``EVENT_CHUNK_ROWS``, each its own short
   transaction. Between chunks the writer releases the file when a reader is waiting
   for it (a reader that finds the file locked touches a marker file beside it, see
   :meth:`~profiler.connection.Database.reader_waiting`), and in any case after
   ``WRITER_MAX_HOLD_S``; with nobody waiting it keeps its connection, so the run costs
   one open and one checkpoint rather than one per chunk.
3. The small tables and, last, its ``runs`` row are inserted in one transaction, which
   also removes the pending entry.

Every query starts from ``runs``, so the run's rows are invisible until that last
commit. If the writer dies first, its pending entry stays behind and the next writer
removes the orphaned rows (:func:`collect_abandoned`: writer process gone, or entry
older than ``ABANDONED_AFTER_S``). A reader's worst wait is therefore one chunk's
insert, not a whole run's (or ``WRITER_MAX_HOLD_S`` if it cannot write the marker, e.g.
on a read-only folder).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone

import duckdb
import pyarrow as pa

from engine.errors import ProfilerError

from .connection import POLL_MAX_S, Database, transaction
from .run_rows import delete_rows, insert_events, new_run_id, publish
from .staging import StagedRun

__all__ = [
    "ABANDONED_AFTER_S",
    "EVENT_CHUNK_ROWS",
    "WRITER_MAX_HOLD_S",
    "WRITER_YIELD_S",
    "HeldWriter",
    "collect_abandoned",
    "event_chunks",
    "is_large",
    "write_chunked",
]

#: events per write transaction of a large run: ~1 s of insert on the 2-core dev machine, which is
#: a waiting reader's worst delay. With nobody waiting a chunk boundary costs a COMMIT only (the
#: connection is kept, see HeldWriter); each commit still costs a little, so the size trades that
#: delay against write rate: on a 32.7M-event run 500k rows wrote at ~61% of a bare DuckDB insert,
#: 2M at 73-90%, 4M at 80-84%, one transaction 99% (README, Performance).
EVENT_CHUNK_ROWS = 4_000_000
#: pause after releasing the file, longer than a reader's poll interval so a waiting reader gets it
WRITER_YIELD_S = 2 * POLL_MAX_S
#: a chunked write keeps the file between chunks unless a reader is waiting, but never longer than
#: this: the fallback for readers that cannot signal (well inside connection.LOCK_RETRY_S)
WRITER_MAX_HOLD_S = 3.0
#: a pending run from another host (whose process cannot be checked) is abandoned after this long
ABANDONED_AFTER_S = 6 * 3600.0


def is_large(event_rows: int) -> bool:
    """Does a run (or a batch of runs) of this many events need the chunked protocol?"""
    return event_rows > EVENT_CHUNK_ROWS


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def collect_abandoned(con: duckdb.DuckDBPyConnection) -> list[int]:
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
        with transaction(con):
            for run_id in dead:
                delete_rows(con, run_id)
    return dead


class HeldWriter:
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

    def __enter__(self) -> "HeldWriter":
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


def event_chunks(events: pa.Table) -> Iterator[pa.Table]:
    """A stored events table in the chunks a large run is written in (``EVENT_CHUNK_ROWS`` rows each)."""
    for offset in range(0, events.num_rows, EVENT_CHUNK_ROWS):
        yield events.slice(offset, EVENT_CHUNK_ROWS)


def write_chunked(db: Database, chunks: Iterable[pa.Table], finish: Callable[[], StagedRun]) -> int:
    """A large run: reserve the id, append event chunks in their own transactions, publish last; returns its run_id.

    ``chunks`` are the run's events, at most ``EVENT_CHUNK_ROWS`` rows each (:func:`event_chunks`);
    they may still be being simulated while earlier ones are inserted. ``finish`` gives the staged
    run once every chunk is in; an exception from either leaves no row of the run behind.
    """
    run_id = None
    try:
        # one connection for the reservation, the chunks and the publishing, unless a reader waits
        with HeldWriter(db) as held:
            with held.connection() as con:
                collect_abandoned(con)
                with transaction(con):
                    run_id = new_run_id(con)
                    con.execute(
                        "INSERT INTO pending_runs VALUES ($id, $pid, $host, $now)",
                        {"id": run_id, "pid": os.getpid(), "host": socket.gethostname(), "now": datetime.now(timezone.utc)},
                    )
            for chunk in chunks:
                with held.connection() as con, transaction(con):
                    insert_events(con, chunk, run_id)
            staged = finish()
            with held.connection() as con, transaction(con):
                publish(con, staged, run_id)
                con.execute("DELETE FROM pending_runs WHERE run_id = $id", {"id": run_id})
    except BaseException:
        if run_id is not None:
            try:  # best effort; if this fails too, the next writer collects the rows
                with db.write() as con, transaction(con):
                    delete_rows(con, run_id)
            except ProfilerError:
                pass
        raise
    return run_id
