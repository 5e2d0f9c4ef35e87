"""A damaged database file is named as damaged, never taken for a lock, never written into; ``check`` reads it all.

The damaged files are real: a database the store wrote, copied and then truncated, a data
block overwritten, a metadata block overwritten; plus a zero-byte and a text file.

Where the blocks are: a DuckDB file starts with three 4 KiB headers (the main header with the
``DUCK`` magic at byte 8, then two database headers); block ``b`` starts at byte
``12288 + b * block_alloc_size``. Each database header holds, after its checksum, the
iteration (bytes 8-16), the metadata block pointer (16-24: the block id in the low 56 bits)
and, at 40-48, the block allocation size; the header with the higher iteration is the live
one. A table's data blocks are listed by ``pragma_storage_info``. Every block begins with a
checksum that DuckDB verifies on read, which is what makes the damage visible.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import time
from pathlib import Path

import duckdb
import pytest

from engine import simulate
from profiler.check import check_database
from profiler.cli import main
from profiler.connection import DUCKDB_HEADER_BYTES, Database, DatabaseDamagedError
from profiler.store import write_run

SCENARIO = str(Path(__file__).resolve().parent.parent / "data" / "scenarios" / "resnet50-v3-32.toml")


@pytest.fixture(scope="module")
def good_db(tmp_path_factory, small_scenario_module) -> Path:
    path = tmp_path_factory.mktemp("damage") / "good.duckdb"
    db = Database(path)
    for _ in range(2):
        write_run(db, simulate(small_scenario_module))
    return path


@pytest.fixture(scope="module")
def small_scenario_module():
    from engine import load_scenario

    return load_scenario(SCENARIO, {"training.steps": 20})


def _header(path: Path) -> tuple[int, int]:
    """(metadata block id, block allocation size) from the live database header."""
    with open(path, "rb") as f:
        f.seek(4096)
        headers = [f.read(4096), f.read(4096)]
    live = max(headers, key=lambda h: struct.unpack_from("<Q", h, 8)[0])
    meta_ptr, alloc = struct.unpack_from("<Q", live, 16)[0], struct.unpack_from("<Q", live, 40)[0]
    return meta_ptr & ((1 << 56) - 1), alloc


def _data_block(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return int(con.execute("SELECT max(block_id) FROM pragma_storage_info('events')").fetchone()[0])
    finally:
        con.close()


def _overwrite(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\xa5" * 4096)


def _damaged_copy(good: Path, tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.duckdb"
    if kind == "zero":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("these are my notes, not a database\n" * 1000)
    else:
        shutil.copy(good, path)
        meta, alloc = _header(good)
        if kind == "truncated":
            os.truncate(path, path.stat().st_size // 2)
        elif kind == "data":
            _overwrite(path, DUCKDB_HEADER_BYTES + _data_block(good) * alloc + 64)
        elif kind == "meta":
            _overwrite(path, DUCKDB_HEADER_BYTES + meta * alloc + 64)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["truncated", "data", "meta", "zero", "text"])
def test_damaged_file_is_named_never_written_and_never_a_lock(good_db, tmp_path, capsys, kind):
    path = _damaged_copy(good_db, tmp_path, kind)
    before = _digest(path)
    t0 = time.monotonic()
    assert main(["check", "--db", str(path)]) == 1
    out = capsys.readouterr().out
    assert str(path) in out and ("DAMAGED" in out or "cannot be read" in out)
    # the next write is refused, says what is wrong with which file, and leaves it as it was
    assert main(["run", SCENARIO, "--set", "training.steps=3", "--db", str(path)]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and ("the database file is damaged" in err or "is not a DuckDB database" in err), err
    assert "busy" not in err and "held by another process" not in err
    assert time.monotonic() - t0 < 8, "a damaged file must not wait out the lock retry bound"
    assert _digest(path) == before
    if kind in ("truncated", "meta", "zero", "text"):  # every read fails too, with the same words
        assert main(["runs", "--db", str(path)]) == 1
        assert str(path) in capsys.readouterr().err


def test_a_read_that_meets_damage_blocks_later_writes_until_check_passes(good_db, tmp_path):
    path = _damaged_copy(good_db, tmp_path, "data")
    db = Database(path)
    with db.read() as con:  # the runs table is intact: listing works
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    with pytest.raises(DatabaseDamagedError, match="damaged"):
        with db.read() as con:
            con.execute("SELECT sum(start_ns) FROM events").fetchall()
    before = _digest(path)
    with pytest.raises(DatabaseDamagedError, match="podscope check"):
        write_run(db, simulate(_scenario_3_steps()))
    assert _digest(path) == before
    report = check_database(db)
    assert not report.ok and "events" in report.damaged
    assert sorted(report.runs_ok + report.runs_damaged) == [1, 2]
    for run_id in report.runs_ok:  # what check says reads, does export
        assert main(["export", str(run_id), "--format", "parquet", "-o", str(tmp_path / f"run{run_id}"), "--db", str(path)]) == 0
    # the file moved away and a new one in its place: the marker does not apply to the new file
    path.rename(tmp_path / "damaged-aside.duckdb")
    assert write_run(Database(path), simulate(_scenario_3_steps())) == 1


def test_a_clean_check_lifts_a_stale_marker(good_db, tmp_path):
    path = tmp_path / "ok.duckdb"
    shutil.copy(good_db, path)
    db = Database(path)
    db._mark_damaged("damage seen earlier")
    with pytest.raises(DatabaseDamagedError):
        write_run(db, simulate(_scenario_3_steps()))
    assert check_database(db).ok
    assert write_run(db, simulate(_scenario_3_steps())) == 3


def test_check_command_via_python_m_profiler(good_db):
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, "-m", "profiler", "check", "--db", str(good_db)], cwd=root, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "every table reads in full" in p.stdout and "events" in p.stdout


def _scenario_3_steps():
    from engine import load_scenario

    return load_scenario(SCENARIO, {"training.steps": 3})


def test_a_file_created_by_a_writer_killed_before_its_schema_reads_as_empty_and_takes_runs(tmp_path, capsys):
    """A real process creates the DuckDB file and is SIGKILLed before any table exists."""
    import signal
    import subprocess
    import sys

    path = tmp_path / "half.duckdb"
    code = "import duckdb, os, signal, sys; duckdb.connect(sys.argv[1]); os.kill(os.getpid(), signal.SIGKILL)"
    p = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60)
    assert p.returncode == -signal.SIGKILL and path.exists()
    assert main(["runs", "--db", str(path)]) == 0
    assert "no runs in" in capsys.readouterr().out
    assert main(["run", SCENARIO, "--set", "training.steps=3", "--db", str(path)]) == 0
    assert main(["check", "--db", str(path)]) == 0
