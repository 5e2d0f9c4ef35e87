"""Sweeps whose points the TPU compiler checks (``sweep --xla``): XLA's HBM in every stored point, the compile options
in the point's id, and a sweep never resumed the other way."""

from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine import scenario_from_dict
from engine.errors import InputError
from profiler.store import Database
from profiler.sweep import expand_points, load_sweep, run_sweep

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def sweep_path(sweep_file) -> Path:
    """The small MLP on v4 2x2x2 at two batches, and a third whose batch does not divide (it fails at run time)."""
    return sweep_file()


def _summaries(db: Database) -> list[tuple]:
    with db.read() as con:
        return con.execute(
            "SELECT json_extract_string(summary, '$.hbm_source'), CAST(summary->>'peak_hbm_bytes' AS DOUBLE), "
            "CAST(summary->>'hbm_podscope_peak_bytes' AS DOUBLE), scenario->'training'->>'global_batch' FROM runs ORDER BY run_id"
        ).fetchall()


def test_every_point_takes_the_compilers_hbm_and_resumes_only_as_it_ran(tmp_path, sweep_path, live):
    from profiler import xla_check

    db = Database(tmp_path / "sweep.duckdb")
    with cf.ThreadPoolExecutor(1) as pool:
        result = run_sweep(sweep_path, db, pool, xla_flags={})
    assert len(result.stored) == 2 and len(result.failed) == 1 and "not divisible" in result.failed[0][1]
    rows = _summaries(db)
    assert [r[0] for r in rows] == ["xla", "xla"]
    # the stored peak is what compiling that point gives, not Podscope's own count (kept beside it)
    spec, base = load_sweep(sweep_path)
    point = next(p for p in expand_points(spec, base, xla_flags={}) if p.overrides == {"training.global_batch": 128})
    compiled = xla_check.xla_memory(xla_check.compile_numbers(scenario_from_dict(point.scenario), live_range=False))
    first = next(r for r in rows if r[3] == "128")
    assert first[1] == pytest.approx(compiled.peak_bytes_per_chip) and first[2] != pytest.approx(first[1])
    # resumed the same way: nothing recompiled; another way: refused before anything is written
    with cf.ThreadPoolExecutor(1) as pool:
        again = run_sweep(sweep_path, db, pool, xla_flags={})
        assert again.stored == [] and len(again.skipped) == 2
        for flags in (None, {"xla_tpu_enable_async_collective_fusion": "true"}):
            with pytest.raises(InputError, match="stored in .* with --xla"):
                run_sweep(sweep_path, db, pool, xla_flags=flags)
    assert len(_summaries(db)) == 2


def test_compile_options_are_part_of_a_points_id(sweep_path):
    spec, base = load_sweep(sweep_path)
    ids = [{p.point for p in expand_points(spec, base, xla_flags=flags)} for flags in (None, {}, {"xla_tpu_x": "1"})]
    assert ids[0].isdisjoint(ids[1]) and ids[1].isdisjoint(ids[2]) and ids[0].isdisjoint(ids[2])


def test_a_point_without_a_jax_program_is_refused_before_any_point_runs(tmp_path, small_scenario_path, live):
    path = tmp_path / "tensor.toml"
    path.write_text(textwrap.dedent(f"""
        name = "tensor"
        base = "{small_scenario_path.name}"
        [grid]
        "parallelism.tensor" = [1, 2]
        """))  # fmt: skip
    db = Database(tmp_path / "sweep.duckdb")
    with cf.ThreadPoolExecutor(1) as pool, pytest.raises(InputError, match="tensor 2.*--xla: parallelism.tensor = 2"):
        run_sweep(path, db, pool, xla_flags={})
    assert not db.path.exists() or _summaries(db) == []


def test_the_cli_refuses_options_without_a_compile_and_a_sweep_stored_without_it(tmp_path, sweep_path, live):
    env = {**os.environ, "PODSCOPE_DB": str(tmp_path / "cli.duckdb")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "profiler", "sweep", str(sweep_path), "--workers", "1", "--quiet", *args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip

    p = cli("--xla-flag", "xla_tpu_enable_async_collective_fusion=true")
    assert p.returncode == 2 and "add --xla" in p.stderr and not (tmp_path / "cli.duckdb").exists()
    assert cli().returncode == 1  # stored without the compiler (the batch of 100 fails)
    p = cli("--xla")
    assert p.returncode == 2 and "stored in" in p.stderr and "without --xla" in p.stderr
