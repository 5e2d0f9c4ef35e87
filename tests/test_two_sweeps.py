"""Two real sweep processes into one database and one point folder; a SIGKILLed sweep's workers exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
POINTS = [256, 512, 1024, 2048, 4096]


def _sweep_file(tmp_path: Path, steps: str = "3") -> Path:
    path = tmp_path / "two.toml"
    path.write_text(
        f'name = "two"\nbase = "{ROOT}/data/scenarios/resnet50-v3-32.toml"\n[set]\n"training.steps" = {steps}\n'
        f'[grid]\n"training.global_batch" = {POINTS}\n'
    )
    return path


def _sweep(path: Path, db: Path, workers: int = 1) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "profiler", "sweep", str(path), "--db", str(db), "--workers", str(workers), "--quiet"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_two_sweeps_into_one_file_store_each_point_once(tmp_path):
    path, db = _sweep_file(tmp_path), tmp_path / "runs.duckdb"
    procs = [_sweep(path, db), _sweep(path, db)]  # same database, so the same point folder
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "Directory not empty" not in err and "0 failed" in err, err
    con = duckdb.connect(str(db), read_only=True)
    try:
        points = con.execute(
            "SELECT json_extract_string(summary, '$.sweep.point'), count(*) FROM runs GROUP BY 1"
        ).fetchall()
        failures = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'sweep_failures'").fetchone()[0]
    finally:
        con.close()
    assert len(points) == len(POINTS) and all(n == 1 for _, n in points), points
    assert failures == 0
    stored_now = sum(int(err.split(" stored now")[0].rsplit(" ", 1)[1]) for _, err in outs)
    assert stored_now == len(POINTS), [e for _, e in outs]  # each point counted as stored by exactly one sweep


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(x) for x in out]


def test_workers_exit_within_seconds_of_their_sweep_being_killed(tmp_path):
    # 30 points of 4,000 steps: ~10 s of work, so the sweep is still running when it is killed
    steps = "[4000, 4001, 4002, 4003, 4004, 4005]"
    path, db = _sweep_file(tmp_path, steps=steps), tmp_path / "k.duckdb"
    path.write_text(path.read_text().replace(f'[set]\n"training.steps" = {steps}\n', "")
                    .replace("[grid]\n", f'[grid]\n"training.steps" = {steps}\n'))  # fmt: skip
    sweep = _sweep(path, db, workers=2)
    try:
        deadline, kids = time.monotonic() + 120, []
        while len(kids) < 2 and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            kids = _children(sweep.pid)
        time.sleep(1)  # the workers have started points
        kids = sorted(set(kids) | set(_children(sweep.pid)))
        if sweep.poll() is not None:
            _, err = sweep.communicate()
            raise AssertionError(f"the sweep ended (exit {sweep.returncode}) before it could be killed: give it more work\n{err[-2000:]}")
        assert len(kids) >= 2, kids
    finally:
        if sweep.poll() is None:
            os.kill(sweep.pid, signal.SIGKILL)
            sweep.communicate()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10 and any(Path(f"/proc/{k}").exists() for k in kids):
        time.sleep(0.1)
    alive = [k for k in kids if Path(f"/proc/{k}").exists()]
    for k in alive:
        os.kill(k, signal.SIGKILL)
    assert not alive, f"{len(alive)} of {len(kids)} children still alive {time.monotonic() - t0:.1f} s after SIGKILL of the sweep"
    # and a resumed sweep on the file the killed one left completes
    resumed = _sweep(path, db, workers=1)
    _, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err
