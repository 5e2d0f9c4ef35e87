"""Real writer and reader processes for the crash and concurrency tests (and benchmarks/concurrency.py).

``python -m tests.workers write DB CHIPS_TOPOLOGY STEPS RUNS [--pause-at MARK] [--chunk-rows N]``
    Simulates one ResNet-50 run on a v4 slice of the given topology and stores it RUNS
    times. Prints one line per milestone (``chunk N``, ``runs-row``, ``wrote ID``) and
    flushes, so a parent can SIGKILL it at a known point. ``--pause-at MARK`` sleeps
    ten seconds right after printing that milestone, inside the open transaction.
    ``--chunk-rows N`` overrides ``chunked_write.EVENT_CHUNK_ROWS`` (a huge N writes each
    run in one transaction). ``--unclosed`` commits without
    closing the connection (so without DuckDB's checkpoint) and announces ``committed-unclosed``.
    ``--streamed`` simulates while storing (``simulate_and_write``, as ``podscope run`` does),
    so a chunk is written while later steps are still being laid out.

``python -m tests.workers trickle DB``
    A CLI-like writer: stores one small run after another until a ``stop`` file appears
    next to DB, printing ``wrote ID UNIX_TIME`` after each commit (``busy UNIX_TIME`` if the
    store gave up on the lock), so a parent can see when the file was writable.

``python -m tests.workers read DB SECONDS``
    Polls the queries the dashboard's Overview page runs, as the dashboard does
    (short-lived connections in read-write mode), for SECONDS or until a ``stop``
    file appears next to DB; prints one JSON line: reads, errors, worst wait, run ids seen.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from engine import PodscopeError, load_scenario, simulate
from profiler import chunked_write, queries, run_rows, schema, store
from profiler.connection import Database, DatabaseBusyError
from profiler.store import write_run
from profiler.streamed_write import simulate_and_write

ROOT = Path(__file__).resolve().parent.parent

SCENARIO = ROOT / "data" / "scenarios" / "resnet50-v4-128.toml"


def _say(line: str) -> None:
    print(line, flush=True)


def big_scenario(topology: str, steps: int):
    chips = 1
    for n in topology.split("x"):
        chips *= int(n)
    return load_scenario(
        SCENARIO,
        {"pod.topology": topology, "training.steps": steps, "training.global_batch": 32 * chips, "parallelism.data": chips},
    )


def _instrument(pause_at: str | None) -> None:
    """Announce milestones of store.write_run (and optionally stall at one) for the parent.

    Events are inserted by store (a run in one transaction) and chunked_write (a large run's
    chunks); the runs row, last, by run_rows.publish.
    """
    real_insert, real_row = run_rows.insert_events, run_rows.insert_runs_row
    chunk = {"n": 0}

    def milestone(mark: str) -> None:
        _say(mark)
        if mark == pause_at:
            time.sleep(10.0)

    def insert_events(con, events, run_id):
        milestone(f"chunk {chunk['n']}")
        chunk["n"] += 1
        return real_insert(con, events, run_id)

    def insert_runs_row(con, run_id, row, summary):
        milestone("runs-row")
        return real_row(con, run_id, row, summary)

    store.insert_events = chunked_write.insert_events = insert_events
    run_rows.insert_runs_row = insert_runs_row


class _UnclosedDatabase(Database):
    """Commits but never closes (so never checkpoints): the WAL holds the run when the process dies."""

    @contextmanager
    def write(self):
        con = self._open(read_only=False)
        con.execute(schema.SCHEMA_SQL)
        yield con  # the caller commits; the connection stays open, so DuckDB does not checkpoint
        _say("committed-unclosed")
        time.sleep(10.0)


def write(
    db_path: str, topology: str, steps: int, runs: int, pause_at: str | None, unclosed: bool = False, streamed: bool = False
) -> None:
    if streamed:
        _instrument(pause_at)
        db = Database(db_path)
        for i in range(runs):
            run_id, _ = simulate_and_write(db, big_scenario(topology, steps), name=f"big-{i}")
            _say(f"wrote {run_id}")
        return
    result = simulate(big_scenario(topology, steps))
    _say(f"simulated {result.trace.events.num_rows}")
    _instrument(pause_at)
    db = _UnclosedDatabase(db_path) if unclosed else Database(db_path)
    for i in range(runs):
        run_id = write_run(db, result, name=f"big-{i}")
        _say(f"wrote {run_id}")


def trickle(db_path: str) -> None:
    result = simulate(big_scenario("2x2x1", 3))
    db = Database(db_path)
    stop = Path(db_path).with_name("stop")
    _say("ready")
    while not stop.exists():
        try:
            run_id = write_run(db, result, name="trickle")
            _say(f"wrote {run_id} {time.time()}")
        except DatabaseBusyError:
            _say(f"busy {time.time()}")
        time.sleep(0.02)


def read(db_path: str, seconds: float) -> None:
    db = Database(db_path, read_only_reads=False)  # the dashboard's mode: it writes what-if runs too
    stop = Path(db_path).with_name("stop")
    waits: list[float] = []
    errors: list[str] = []
    seen: set[int] = set()
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stop.exists():
        t0 = time.monotonic()
        try:
            with db.read() as con:
                runs = queries.list_runs(con)
                if not runs.empty:
                    newest = int(runs["run_id"].iloc[0])
                    queries.run_summary(con, newest)
                    queries.breakdown(con, newest)
                    queries.step_times(con, newest)
                seen.update(int(i) for i in runs["run_id"])
        except PodscopeError as e:
            errors.append(str(e))
        waits.append(time.monotonic() - t0)
        time.sleep(0.02)  # a dashboard's reruns, not a busy loop
    waits.sort()
    print(
        json.dumps(
            {
                "reads": len(waits),
                "errors": errors,
                "max_wait_s": waits[-1] if waits else None,
                "p50_wait_s": waits[len(waits) // 2] if waits else None,
                "p99_wait_s": waits[int(len(waits) * 0.99)] if waits else None,
                "seen": sorted(seen),
            }
        ),
        flush=True,
    )


def main(argv: list[str]) -> None:
    if argv[0] == "write":
        pause_at = argv[argv.index("--pause-at") + 1] if "--pause-at" in argv else None
        if "--chunk-rows" in argv:
            chunked_write.EVENT_CHUNK_ROWS = int(argv[argv.index("--chunk-rows") + 1])
        write(argv[1], argv[2], int(argv[3]), int(argv[4]), pause_at, unclosed="--unclosed" in argv, streamed="--streamed" in argv)
    elif argv[0] == "trickle":
        trickle(argv[1])
    elif argv[0] == "read":
        read(argv[1], float(argv[2]))
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
