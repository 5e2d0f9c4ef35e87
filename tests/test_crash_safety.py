"""SIGKILL a real writer process in the middle of a large write: the file opens, earlier runs
are intact, no partial run is visible, and the next writer removes the dead writer's rows.

The large run is 4,096 chips x 200 steps (~4.1 M events, written as ~9 chunk transactions);
the small one stays under one chunk and is written in a single transaction.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from engine import simulate
from profiler import queries, write_run
from profiler.connection import Database
from profiler.schema import RUN_TABLES, per_run_tables

ROOT = Path(__file__).resolve().parent.parent


def _snapshot(db: Database) -> dict[int, tuple]:
    """run_id -> (summary, per-table row counts): what 'intact' means for a stored run."""
    out = {}
    with db.read() as con:
        for run_id in queries.list_runs(con)["run_id"]:
            run_id = int(run_id)
            counts = tuple(
                con.execute(f'SELECT count(*) FROM "{t}" WHERE run_id = ?', [run_id]).fetchone()[0] for t in per_run_tables(con)
            )
            out[run_id] = (queries.run_summary(con, run_id), counts)
    return out


def _orphans(db: Database) -> dict[str, int]:
    """Rows in per-run tables whose run has no runs row (invisible, but must not linger)."""
    with db.read() as con:
        return {
            t: n
            for t in per_run_tables(con)
            if (n := con.execute(f'SELECT count(*) FROM "{t}" WHERE run_id NOT IN (SELECT run_id FROM runs)').fetchone()[0])
        }


def _kill_at(db_path: Path, topology: str, steps: int, mark: str, streamed: bool = False) -> list[str]:
    """Start a writer, wait for its milestone ``mark`` (where it stalls), SIGKILL it; return its output."""
    proc = subprocess.Popen(
        # 500k-row chunks whatever the production chunk size, so the large run has the chunks to kill in
        [sys.executable, "-m", "tests.workers", "write", str(db_path), topology, str(steps), "1", "--pause-at", mark,
         "--chunk-rows", "500000", *(["--streamed"] if streamed else [])],  # fmt: skip
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.strip() == mark:
                break
        else:
            pytest.fail(f"writer ended before {mark!r}: {lines} {proc.stderr.read()}")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return lines


@pytest.mark.slow
@pytest.mark.parametrize(
    "topology, steps, mark, streamed",
    [
        ("16x16x16", 200, "chunk 0", False),  # large run: killed while its first chunk transaction is open
        ("16x16x16", 200, "chunk 2", False),  # large run: two chunks committed (invisible), the third open
        ("16x16x16", 200, "runs-row", False),  # large run: all events committed, publishing transaction open
        ("8x8x8", 100, "chunk 0", False),  # small run: its single transaction open
        # simulated while stored (podscope run): the engine is laying out later steps while a chunk is open
        ("16x16x16", 200, "chunk 2", True),
        ("16x16x16", 200, "runs-row", True),
        ("8x8x8", 100, "chunk 0", True),
    ],
)
def test_sigkill_mid_write_leaves_earlier_runs_intact_and_no_partial_run(tmp_path, small_scenario, topology, steps, mark, streamed):
    db = Database(tmp_path / "runs.duckdb")
    write_run(db, simulate(small_scenario), name="before-1")
    write_run(db, simulate(small_scenario), name="before-2 'quoted'; --")
    before = _snapshot(db)

    lines = _kill_at(db.path, topology, steps, mark, streamed)
    assert mark in lines

    # The file opens (DuckDB replays or discards its WAL), read-only and read-write.
    assert _snapshot(db) == before
    assert _snapshot(Database(db.path, read_only_reads=False)) == before
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM runs WHERE name LIKE 'big-%'").fetchone()[0] == 0

    # The next writer removes the dead writer's committed chunks; nothing else changes.
    after_id = write_run(db, simulate(small_scenario), name="after")
    assert _orphans(db) == {}
    with db.read() as con:
        assert con.execute("SELECT count(*) FROM pending_runs").fetchone()[0] == 0
    after = _snapshot(db)
    assert {k: v for k, v in after.items() if k != after_id} == before
    assert after[after_id][0]["events"] == after[after_id][1][RUN_TABLES.index("events")]


@pytest.mark.slow
def test_sigkill_after_commit_before_checkpoint_replays_the_wal(tmp_path, small_scenario):
    """The writer dies with its run committed only to DuckDB's write-ahead log: reopening replays it, whole."""
    db = Database(tmp_path / "runs.duckdb")
    write_run(db, simulate(small_scenario), name="before")
    before = _snapshot(db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.workers", "write", str(db.path), "8x8x8", "100", "1", "--unclosed"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for line in proc.stdout:
            if line.strip() == "committed-unclosed":
                break
        else:
            pytest.fail("writer ended before committing")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert Path(f"{db.path}.wal").exists()  # the commit is in the WAL, not yet checkpointed
    after = _snapshot(db)
    new = set(after) - set(before)
    assert len(new) == 1 and {k: after[k] for k in before} == before
    summary, counts = after[new.pop()]
    assert summary["name"] == "big-0" and summary["events"] == counts[RUN_TABLES.index("events")] > 0
