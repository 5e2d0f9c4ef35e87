"""The dashboard reading while another process writes: real processes, one DuckDB file.

A reader process polls the Overview page's queries the way the dashboard does while
a writer process stores several large runs (each written in chunk transactions).
Neither may fail with a lock error, and the reader must see every new run. How long
the reader waited is measured by benchmarks/concurrency.py, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine import simulate
from profiler import write_run
from profiler.store import Database, DatabaseBusyError

ROOT = Path(__file__).resolve().parent.parent


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.workers", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_reader_and_writer_processes_never_fail_and_reader_sees_new_runs(tmp_path, small_scenario):
    db_path = tmp_path / "runs.duckdb"
    first = write_run(Database(db_path), simulate(small_scenario), name="existing")
    reader = _start("read", str(db_path), "120")
    writer = _start("write", str(db_path), "8x8x16", "200", "2")  # 1,024 chips: ~1 M events, 3 chunks per run
    w_out, w_err = writer.communicate(timeout=240)
    # One last poll after the writer finished is the 'refresh': stop the reader after it.
    reader_poll_after_write = _start("read", str(db_path), "0.5")
    final = json.loads(reader_poll_after_write.communicate(timeout=60)[0])
    (tmp_path / "stop").touch()
    r_out, r_err = reader.communicate(timeout=60)

    assert writer.returncode == 0, w_err
    written = [int(line.split()[1]) for line in w_out.splitlines() if line.startswith("wrote")]
    assert len(written) == 2
    stats = json.loads(r_out)
    assert reader.returncode == 0, r_err
    assert stats["errors"] == []
    assert stats["reads"] > 10
    assert final["errors"] == [] and set(final["seen"]) == {first, *written}
    # Every run the busy reader saw was whole: ids it saw are a subset of the published ones.
    assert set(stats["seen"]) <= {first, *written}


def test_busy_database_gives_a_clear_error_after_the_retry_bound(tmp_path, monkeypatch, small_scenario):
    """While another process holds the file, an open waits LOCK_RETRY_S and then names the problem."""
    import profiler.connection as connection

    db = Database(tmp_path / "runs.duckdb")
    write_run(db, simulate(small_scenario))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(60)", str(db.path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(connection, "LOCK_RETRY_S", 0.3)
        with pytest.raises(DatabaseBusyError, match="database busy"):
            with db.read():
                pass
    finally:
        holder.kill()
        holder.wait()
    with db.read() as con:  # released: readable again
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
