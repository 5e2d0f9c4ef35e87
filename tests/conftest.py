"""Shared fixtures: real DuckDB files in tmp_path and small scenarios written as TOML."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from engine import load_scenario, scenario_from_dict, simulate
from engine.scenario.calibration import Calibration
from profiler.store import Database
from tests import real_runs

ROOT = Path(__file__).resolve().parent.parent

SCENARIOS = ROOT / "data" / "scenarios"

#: memory one test worker may need at once: the largest in-process TPU compile of the suite (ResNet-50 for 4 v4 chips)
#: peaks at 1.7 GB resident, and a browser test runs Streamlit beside Chromium
WORKER_BYTES = 4 * 2**30


def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto`` (pyproject.toml): one worker per CPU this process may run on, as many as the available memory
    holds at :data:`WORKER_BYTES` each, at least one."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):  # not Linux: the CPUs decide
        return cpus
    return max(1, min(cpus, available // WORKER_BYTES))


#: A v4 4x4x4 slice (wraparound on every axis) training a two-layer MLP with no jitter: the
#: interconnect and link-fault tests append [parallelism] / [interconnect] tables to it.
#: Tests that scale it rely on the literal "global_batch = 1024".
TORUS_MLP_TOML = """
name = "torus-mlp"
[pod]
chip = "tpu-v4"
topology = "4x4x4"
[model]
kind = "mlp"
layer_sizes = [2048, 8192, 2048]
[training]
global_batch = 1024
steps = 3
[sim]
jitter_frac = 0.0
"""


def simulate_toml(text: str, calibration: Calibration | None = None):
    """Validate scenario TOML text and simulate it (no file, no database)."""
    return simulate(scenario_from_dict(tomllib.loads(text)), calibration=calibration)

@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's AppTest installs the page script as ``__main__`` and leaves it there; a later
    test's spawn-started process pool would then re-run that script in its workers. Every test
    gets the real ``__main__`` back."""
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main

SMALL_TOML = """
name = "small"
[pod]
chip = "tpu-v4"
topology = "2x2x2"
[model]
kind = "mlp"
layer_sizes = [1024, 4096, 1024]
[training]
global_batch = 256
steps = 20
[sim]
seed = 7
"""


@pytest.fixture
def write_toml(tmp_path: Path):
    """Write a TOML text (dedented) to a file in tmp_path and return its path."""

    def _write(text: str, name: str = "scenario.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return _write


@pytest.fixture
def small_scenario_path(write_toml) -> Path:
    return write_toml(SMALL_TOML, "small.toml")


@pytest.fixture
def small_scenario(small_scenario_path):
    return load_scenario(small_scenario_path)


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(tmp_path / "runs.duckdb")


@pytest.fixture
def ideal_calibration() -> Calibration:
    """No inefficiency, no overhead, no noise: results can be worked by hand."""
    return Calibration(
        mxu_efficiency=1.0,
        hbm_efficiency=1.0,
        op_overhead_s=0.0,
        step_overhead_s=0.0,
        jitter_frac=0.0,
        ici_efficiency=1.0,
        ici_hop_latency_s=0.0,
        dcn_efficiency=1.0,
        dcn_latency_s=0.0,
    )


@pytest.fixture(scope="session")
def real_db(tmp_path_factory) -> real_runs.RealDb:
    """Runs written by the real engine and importer (tests/real_runs.py), built once per pytest run.

    Tests read it; a test that writes takes ``writable_db``. Teardown checks nobody wrote."""
    real = real_runs.build(tmp_path_factory.mktemp("real_runs") / "runs.duckdb")
    yield real
    assert real_runs.run_count(real.path) == len(real.run_ids), "a test wrote to the shared database: use writable_db"


@pytest.fixture
def page_db(real_db, monkeypatch) -> real_runs.RealDb:
    """The shared real database, as the dashboard's database (``PODSCOPE_DB``)."""
    monkeypatch.setenv("PODSCOPE_DB", str(real_db.path))
    return real_db


@pytest.fixture
def writable_db(real_db, tmp_path, monkeypatch) -> real_runs.RealDb:
    """A copy of the real database of this test's own, as the dashboard's database."""
    copy = real_db.copy(tmp_path / "runs.duckdb")
    monkeypatch.setenv("PODSCOPE_DB", str(copy.path))
    return copy


@pytest.fixture(scope="module")
def live():
    """JAX with libtpu, for the tests that compile on this CPU: skipped where it is not installed, a
    failure under ``CI=true`` (.ci/run installs requirements-tpu.txt)."""
    from profiler.tpu_capture import tpu_compiler_missing

    missing = tpu_compiler_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {', '.join(missing)} is not installed: pip install -r requirements-tpu.txt", pytrace=False)
        pytest.skip(f"{', '.join(missing)} not installed (pip install -r requirements-tpu.txt)")
    import jax

    return jax


@pytest.fixture
def tpu_sidecar(tmp_path):
    """A copy of the bundled v5e data-parallel bundle in ``tmp_path``: ``write(change)`` applies ``change`` to its sidecar's
    JSON object (a fresh copy each time) and returns the sidecar's path."""
    tpu = Path(__file__).parent / "fixtures" / "tpu"
    for suffix in (".hlo.txt.gz", ".xla.json"):
        shutil.copy(tpu / f"transformer_dp_v5e4{suffix}", tmp_path / f"b{suffix}")
    side = tmp_path / "b.xla.json"
    raw = json.loads(side.read_text())
    raw["module"] = "b.hlo.txt.gz"

    def write(change) -> Path:
        data = json.loads(json.dumps(raw))
        change(data)
        side.write_text(json.dumps(data))
        return side

    return write


@pytest.fixture
def sweep_file(tmp_path, small_scenario_path):
    """Small MLP sweep: 2 batch sizes x 1 precision, plus one point whose batch does not divide (fails)."""

    def _write(extra: str = "") -> Path:
        path = tmp_path / "sweep.toml"
        path.write_text(
            textwrap.dedent(
                f"""
                name = "tiny"
                base = "{small_scenario_path.name}"
                [set]
                "training.steps" = 5
                [grid]
                "training.global_batch" = [128, 256, 100]
                """
            )
            + textwrap.dedent(extra)
        )
        return path

    return _write
