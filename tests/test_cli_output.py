"""The CLI as a person reads it: a mistyped --db folder, the runs table, the validate report's order,
advice in words, and progress kept off stdout. Real subprocesses on real databases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from profiler.cli import EXIT_BAD_INPUT, EXIT_OK

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "data" / "scenarios"
KERAS = str(SCENARIOS / "keras-mlp-v5e-8.toml")


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PODSCOPE_DB"}
    return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_db_in_a_missing_folder_is_an_error_naming_the_path(tmp_path):
    db = tmp_path / "typo" / "runs.duckdb"
    for args in (["run", KERAS], ["runs"], ["sweep", str(ROOT / "data/sweeps/strong-scaling-v4.toml")]):
        p = cli(*args, "--db", str(db))
        assert p.returncode == EXIT_BAD_INPUT, (args, p.stderr)
        assert str(db) in p.stderr and "--create" in p.stderr
        assert p.stdout == ""
    assert not (tmp_path / "typo").exists()


def test_create_makes_the_folder_and_says_so(tmp_path):
    db = tmp_path / "new" / "runs.duckdb"
    p = cli("run", KERAS, "--json", "--db", str(db), "--create")
    assert p.returncode == EXIT_OK, p.stderr
    assert "new database" in p.stderr and str(db) in p.stderr
    assert json.loads(p.stdout)["name"] == "keras-mlp-v5e-8"
    assert db.exists()


def test_runs_prints_formatted_numbers(tmp_path):
    db = tmp_path / "runs.duckdb"
    assert cli("run", KERAS, "--db", str(db)).returncode == EXIT_OK
    p = cli("runs", "--db", str(db))
    assert p.returncode == EXIT_OK, p.stderr
    header, *rows = [line for line in p.stdout.splitlines() if line.strip() and not set(line.strip()) <= {"─", " "}]
    assert "Step time" in header and "MFU" in header
    (row,) = rows
    assert "8 x v5e" in row and " ms" in row and "%" in row
    listed = json.loads(cli("runs", "--json", "--db", str(db)).stdout)[0]
    raw = f"{listed['step_time_s']}"  # the unformatted float the table used to print
    assert raw not in p.stdout


def test_validate_puts_the_summary_last_and_skipped_behind_verbose():
    p = cli("validate")
    assert p.returncode == EXIT_OK, p.stderr
    lines = [line for line in p.stdout.splitlines() if line.strip()]
    skipped_at = next(i for i, line in enumerate(lines) if line.startswith("not expressible"))
    summary_at = next(i for i, line in enumerate(lines) if line.startswith("in-sample") and "median |err|" in line)
    assert skipped_at < summary_at and lines[-1].startswith("(held out:")  # the summary, then its note, end it
    assert sum(line.startswith("  ") and "]:" in line for line in lines) == 0  # no skipped entries listed
    assert any("--verbose" in line for line in lines)
    xla_at = next(i for i, line in enumerate(lines) if line.startswith("TPU compiler HBM"))
    assert "with all in HBM" in lines[xla_at + 1] and "memory-space assignment off" in lines[xla_at + 1]
    verbose = cli("validate", "--verbose")
    listed = [line for line in verbose.stdout.splitlines() if line.startswith("  ") and "]:" in line]
    n = int(next(line for line in lines if line.startswith("not expressible")).split(":")[1].split()[0])
    assert len(listed) == n > 0
    assert verbose.stdout.rstrip().splitlines()[-1] == p.stdout.rstrip().splitlines()[-1]  # the summary still ends it


def test_human_advice_names_stragglers_in_words(tmp_path):
    p = cli("run", str(SCENARIOS / "resnet50-v3-32-straggler.toml"), "--db", str(tmp_path / "s.duckdb"))
    assert p.returncode == EXIT_OK, p.stderr
    advice = p.stdout.split("advice:", 1)[1]
    assert "Straggler chips:" in advice and "They are chips" in advice
    assert "summary 'stragglers'" not in advice and "stragglers_count" not in advice


def test_sweep_progress_stays_off_stdout(tmp_path, write_toml):
    sweep = write_toml(
        f'name = "tiny"\nbase = "{SCENARIOS / "keras-mlp-v5e-8.toml"}"\n[set]\n"training.steps" = 3\n'
        '[grid]\n"training.global_batch" = [64, 128]\n',
        "tiny.toml",
    )
    p = cli("sweep", str(sweep), "--db", str(tmp_path / "sw.duckdb"), "--workers", "1")
    assert p.returncode == EXIT_OK, p.stderr
    assert p.stdout == ""
    assert "sweep tiny: 2 points" in p.stderr
