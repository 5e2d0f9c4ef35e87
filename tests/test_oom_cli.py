"""Out of memory is a stored result: exit 3, a plain statement of what overflowed, tables in DuckDB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

from profiler.cli import EXIT_OOM

ROOT = Path(__file__).resolve().parent.parent
OOM_SCENARIO = ROOT / "data" / "scenarios" / "oom" / "gpt3-175b-no-remat-v5p-128.toml"


def _cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PODSCOPE_DB": str(db)}
    return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_oom_run_is_stored_exits_3_and_says_what_overflowed(tmp_path):
    db = tmp_path / "db.duckdb"
    text = _cli("run", str(OOM_SCENARIO), db=db)
    assert text.returncode == EXIT_OOM, text.stderr
    assert "OUT OF MEMORY: chip 0" in text.stdout
    assert "the largest term is activations" in text.stdout
    assert "training.remat = 'full'" in text.stdout and "fits" in text.stdout

    js = _cli("run", str(OOM_SCENARIO), "--json", db=db)
    assert js.returncode == EXIT_OOM
    out = json.loads(js.stdout)
    assert out["oom"] is True
    d = out["oom_detail"]
    assert d["chip"] == 0 and d["term"] == "activations" and d["over_bytes"] > 0
    assert out["peak_hbm_bytes"] == sum(out["hbm_breakdown_bytes"].values())
    assert 0 < out["hfu"] and out["hfu"] >= out["mfu"]

    con = duckdb.connect(str(db), read_only=True)
    try:
        run_id = out["run_id"]
        peak = con.execute("SELECT max(peak_bytes) FROM extra_chip_memory WHERE run_id = ?", [run_id]).fetchone()[0]
        timeline_peak = con.execute(
            "SELECT max(total) FROM (SELECT point, sum(bytes) AS total FROM extra_memory_timeline WHERE run_id = ? GROUP BY point)",
            [run_id],
        ).fetchone()[0]
        layers = con.execute("SELECT count(DISTINCT layer) FROM extra_layer_collectives WHERE run_id = ?", [run_id]).fetchone()[0]
    finally:
        con.close()
    assert peak == out["peak_hbm_bytes"]
    assert abs(timeline_peak - peak) <= 1e-6 * peak
    assert layers == 96 + 2  # every layer plus embedding and unembedding
