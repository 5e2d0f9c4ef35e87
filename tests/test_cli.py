"""The command line, run as a real subprocess: JSON contract, exit codes, nothing written on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import EXIT_BAD_INPUT

ROOT = Path(__file__).resolve().parent.parent
REQUIRED_KEYS = {
    "run_id", "name", "chip", "chips", "slices", "steps", "step_time_s", "samples_per_s", "tokens_per_s",
    "mfu", "breakdown", "peak_hbm_bytes", "hbm_capacity_bytes", "oom", "events",
}  # fmt: skip


def cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PODSCOPE_DB": str(db)}
    return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", sorted((ROOT / "data" / "scenarios").glob("*.toml")), ids=lambda p: p.stem)
def test_run_json_for_each_bundled_scenario(path, tmp_path):
    p = cli("run", str(path), "--json", db=tmp_path / "db.duckdb")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)  # exactly one JSON object on stdout
    assert REQUIRED_KEYS <= set(out)
    assert out["steps"] > 0 and out["events"] > 0 and out["step_time_s"] > 0
    assert 0 < out["mfu"] < 1
    assert sum(out["breakdown"].values()) == pytest.approx(1.0)
    assert (out["tokens_per_s"] is None) == ('kind = "transformer"' not in path.read_text())


def test_bad_scenario_exits_2_names_key_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text((ROOT / "data" / "scenarios" / "resnet50-v3-32.toml").read_text().replace("steps = 100", "steps = -1"))
    db = tmp_path / "db.duckdb"
    p = cli("run", str(bad), "--json", db=db)
    assert p.returncode == EXIT_BAD_INPUT
    assert "bad.toml" in p.stderr and "training.steps" in p.stderr
    assert p.stdout == ""
    assert not db.exists()


def test_set_overrides_and_runs_listing(tmp_path):
    db = tmp_path / "db.duckdb"
    scenario = str(ROOT / "data" / "scenarios" / "resnet50-v3-32.toml")
    p = cli("run", scenario, "--json", "--set", "training.steps=5", "--name", "five", db=db)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["steps"] == 5
    listing = cli("runs", "--json", db=db)
    rows = json.loads(listing.stdout)
    assert [r["name"] for r in rows] == ["five"]
    bad = cli("run", scenario, "--set", "training.bogus=1", db=db)
    assert bad.returncode == EXIT_BAD_INPUT and "training.bogus" in bad.stderr


def test_db_flag_overrides_environment(tmp_path):
    scenario = str(ROOT / "data" / "scenarios" / "keras-mlp-v5e-8.toml")
    p = cli("run", scenario, "--db", str(tmp_path / "flag.duckdb"), db=tmp_path / "env.duckdb")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "flag.duckdb").exists() and not (tmp_path / "env.duckdb").exists()


def test_run_says_when_the_plan_counts_on_xlas_rematerialization(tmp_path):
    """An MLP without remat whose every tensor would pass 95% of v5e's usable HBM: the run fits, and says that it counts
    on XLA recomputing what it would keep, how much, and that those FLOPs are not in the step time."""
    layers = ", ".join(["1024"] * 9 + ["1000"])
    scenario = tmp_path / "mlp.toml"
    scenario.write_text(f"""name = "mlp"
[pod]
chip = "tpu-v5e"
topology = "2x2"
[model]
kind = "mlp"
layer_sizes = [{layers}]
[training]
global_batch = {4 * 889_088}
steps = 2
remat = "none"
[parallelism]
data = 4
""")
    out = cli("run", str(scenario), "--json", db=tmp_path / "db.duckdb")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert not summary["oom"] and summary["hbm_recomputed_bytes"] == pytest.approx(3 * 1024 * 2 * 889_088)
    text = cli("run", str(scenario), db=tmp_path / "db.duckdb")
    assert text.returncode == 0, text.stderr
    assert "with XLA's rematerialization recomputing 5.09 GiB it would keep (its FLOPs not in the step time)" in text.stdout
    small = scenario.read_text().replace(str(4 * 889_088), "4096")
    scenario.write_text(small)
    quiet = cli("run", str(scenario), "--json", db=tmp_path / "db.duckdb")
    assert json.loads(quiet.stdout)["hbm_recomputed_bytes"] == 0.0
