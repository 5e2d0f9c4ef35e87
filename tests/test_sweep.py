"""Sweeps: point expansion worked by hand, bad files, a process pool and a Dask LocalCluster, resume, failures."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.errors import ScenarioError
from profiler import queries
from profiler.store import Database
from profiler.sweep import expand_points, load_sweep, run_sweep

ROOT = Path(__file__).resolve().parent.parent


def test_expand_grid_zip_random(tmp_path, small_scenario_path):
    path = tmp_path / "s.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            name = "x"
            base = "{small_scenario_path.name}"
            [grid]
            "training.precision" = ["bf16", "fp32"]
            "training.optimizer" = ["sgd", "adam", "momentum"]
            [zip]
            "pod.topology" = ["2x2x2", "2x2x1"]
            "training.global_batch" = [256, 128]
            [random]
            samples = 4
            seed = 3
            [random.keys]
            "sim.jitter_frac" = {{ low = 0.0, high = 0.1 }}
            """
        )
    )
    spec, base = load_sweep(path)
    points = expand_points(spec, base)
    assert len(points) == 2 * 3 * 2 + 4
    assert points[0].overrides == {"training.precision": "bf16", "training.optimizer": "sgd", "pod.topology": "2x2x2",
                                   "training.global_batch": 256}  # fmt: skip
    jitters = [p.scenario["sim"]["jitter_frac"] for p in points[-4:]]
    assert all(0 <= j <= 0.1 for j in jitters) and len(set(jitters)) == 4
    assert [p.point for p in expand_points(spec, base)] == [p.point for p in points]  # stable ids: resumable


def test_bad_sweep_files_name_the_key(tmp_path, small_scenario_path):
    cases = {
        'name = "x"\nbase = "B"\n[grid]\n"training.bogus" = [1]\n': "training.bogus",
        'name = "x"\nbase = "B"\nextra = 1\n': "extra",
        'name = "x"\nbase = "B"\n[zip]\na = [1, 2]\nb = [1]\n': "same length",
        'name = "x"\nbase = "missing.toml"\n': "base",
    }
    for text, key in cases.items():
        path = tmp_path / "bad.toml"
        path.write_text(text.replace('"B"', f'"{small_scenario_path.name}"'))
        with pytest.raises(ScenarioError) as err:
            spec, base = load_sweep(path)
            expand_points(spec, base, source=str(path))
        assert key in str(err.value) and "bad.toml" in str(err.value)


def _check_tiny(db: Database, result) -> None:
    assert result.points == 3 and len(result.stored) == 2 and len(result.failed) == 1
    assert "global_batch" in result.failed[0][1]
    with db.read() as con:
        rows = con.execute("SELECT json_extract_string(summary, '$.sweep.point'), steps FROM runs ORDER BY run_id").fetchall()
        scaling = queries.sweep_runs(con, "tiny")
        assert queries.list_sweeps(con)["sweep"].tolist() == ["tiny"]
        failures = con.execute("SELECT sweep, error FROM sweep_failures").fetchall()
    assert {r[1] for r in rows} == {5} and len(rows) == 2
    assert len(scaling) == 2 and (scaling["samples_per_s"] > 0).all() and scaling["point"].notna().all()
    assert failures[0][0] == "tiny" and "not divisible" in failures[0][1]


def test_process_pool_sweep_is_resumable(tmp_path, sweep_file):
    db = Database(tmp_path / "sweep.duckdb")
    path = sweep_file()
    with cf.ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
        result = run_sweep(path, db, pool)
    _check_tiny(db, result)
    assert not any((tmp_path / "sweep.sweeps" / "tiny").iterdir())  # point files removed once stored
    seen = []
    with cf.ThreadPoolExecutor(1) as pool:
        again = run_sweep(path, db, pool, progress=lambda d, n, m: seen.append((d, n)))
    assert again.stored == [] and len(again.skipped) == 2 and len(again.failed) == 1  # failures are retried
    assert seen[0] == (2, 3) and seen[-1] == (3, 3)


def test_point_left_on_disk_is_loaded_without_resimulating(tmp_path, sweep_file):
    """A crash between a worker's rename and the writer's insert loses nothing."""
    from profiler.sweep import default_out_dir, simulate_point

    db = Database(tmp_path / "sweep.duckdb")
    spec, base = load_sweep(sweep_file())
    point = expand_points(spec, base)[0]
    out = default_out_dir(db, "tiny")
    out.mkdir(parents=True)
    folder, err = simulate_point(point, str(out))
    assert err is None and (Path(folder) / "events.arrow").exists()
    with cf.ThreadPoolExecutor(1) as pool:
        result = run_sweep(sweep_file(), db, pool)
    assert len(result.stored) == 2


def test_dask_local_cluster_sweep(tmp_path, sweep_file):
    import distributed  # a pinned dependency: missing is a failure, not a skip
    db = Database(tmp_path / "sweep.duckdb")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            result = run_sweep(sweep_file(), db, client.get_executor())
    _check_tiny(db, result)


def test_cli_sweep_exit_codes(tmp_path, sweep_file):
    env = {**os.environ, "PODSCOPE_DB": str(tmp_path / "cli.duckdb")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)

    p = cli("sweep", str(sweep_file()), "--workers", "1", "--quiet")
    assert p.returncode == 1 and "2 stored now" in p.stderr and "1 failed" in p.stderr  # a failed point: exit 1
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nbase = "nowhere.toml"\n')
    p = cli("sweep", str(bad))
    assert p.returncode == 2 and "base" in p.stderr


def test_bundled_strong_scaling_sweep_expands():
    spec, base = load_sweep(ROOT / "data" / "sweeps" / "strong-scaling-v4.toml")
    points = expand_points(spec, base)
    chips = [p.scenario["parallelism"]["data"] for p in points]
    assert chips == [4, 8, 16, 32, 64, 128, 256] and {p.scenario["training"]["global_batch"] for p in points} == {8192}


def test_scripted_example_runs(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "examples.scripted_run", "--db", str(tmp_path / "ex.duckdb")], cwd=ROOT,
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("samples/s") == 3 and "best: resnet50-v4-128 batch" in p.stdout and "compute" in p.stdout


def test_cli_sweep_on_an_existing_dask_scheduler(tmp_path, sweep_file):
    """The documented `--executor dask --address tcp://...` path, against a scheduler on loopback."""
    import distributed  # a pinned dependency: missing is a failure, not a skip
    env = {**os.environ, "PODSCOPE_DB": str(tmp_path / "cli.duckdb")}
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=None
    ) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        p = subprocess.run(
            [sys.executable, "-m", "profiler", "sweep", str(sweep_file()), "--executor", "dask",
             "--address", cluster.scheduler_address, "--quiet"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    assert p.returncode == 1 and "2 stored now" in p.stderr and "1 failed" in p.stderr, p.stderr


def test_summary_mode_points_keep_their_aggregates(tmp_path, sweep_file):
    """A sweep in summary mode (no event rows) still stores the engine's exact per-kind aggregates."""
    db = Database(tmp_path / "sweep.duckdb")
    path = sweep_file()
    text = path.read_text().replace('"training.steps" = 5', '"training.steps" = 5\n"sim.trace" = "summary"')
    path.write_text(text)
    with cf.ThreadPoolExecutor(1) as pool:
        result = run_sweep(path, db, pool)
    assert len(result.stored) == 2
    with db.read() as con:
        for run_id in result.stored:
            s = queries.run_summary(con, run_id)
            assert s["events"] == 0 and s["step_time_s"] > 0
            assert sum(s["breakdown"].values()) == pytest.approx(1.0) and s["breakdown"]["compute"] > 0


def test_sweep_points_are_named_for_people():
    from profiler.sweep import point_label

    assert point_label({"pod.topology": "2x4x4", "parallelism.data": 32}) == "topology 2x4x4, data 32"
    assert point_label({"training.global_batch": 1024}) == "global batch 1024"
