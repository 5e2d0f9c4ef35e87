"""``plan --xla``: the planner's best candidates compiled for their targets by the TPU compiler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiler import api, cli, plan as plans, tpu_capture
from profiler.store import Database

ROOT = Path(__file__).resolve().parents[1]

#: a small transformer on one v5e 2x2 slice: every candidate compiles in seconds
SMALL_BASE = """name = "small"
[pod]
chip = "tpu-v5e"
topology = "2x2"
[model]
kind = "transformer"
layers = 2
d_model = 256
heads = 4
d_ff = 1024
vocab = 4096
seq_len = 256
attention = "standard"
[training]
global_batch = 16
steps = 2
remat = "full"
[parallelism]
fsdp = 4
"""

#: an MLP on one v5e 2x2 slice: a program this small compiles in about a second, so four candidates cost little
MLP_BASE = """name = "mlp"
[pod]
chip = "tpu-v5e"
topology = "2x2"
[model]
kind = "mlp"
layer_sizes = [1024, 2048, 2048, 1000]
[training]
global_batch = 1024
steps = 2
remat = "full"
[parallelism]
data = 4
"""

#: a 2,048-wide transformer with the flash kernel under full remat on v6e at 69 sequences per chip: Podscope puts it at
#: 95% of the usable HBM, XLA refuses it (it holds more of a recomputed layer's backward than Podscope counts:
#: docs/validation.md), so the planner's best is one XLA cannot fit
V6E_WIDE_BASE = """name = "wide"
[pod]
chip = "tpu-v6e"
topology = "2x2"
[model]
kind = "transformer"
layers = 24
d_model = 2048
heads = 16
d_ff = 8192
vocab = 32000
seq_len = 2048
attention = "flash"
[training]
global_batch = 276
steps = 2
remat = "full"
[parallelism]
data = 1
fsdp = 4
"""


def _plan(tmp_path: Path, base: str, search: str) -> Path:
    (tmp_path / "base.toml").write_text(base)
    path = tmp_path / "plan.toml"
    path.write_text(f'base = "base.toml"\n[search]\n{search}')
    return path


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})  # fmt: skip


def test_the_best_candidates_carry_xlas_peak_beside_podscopes_and_the_db_runs_take_it(live, tmp_path):
    path = _plan(tmp_path, MLP_BASE, 'objective = "samples_per_s_per_chip"\nmesh = "fixed"\n"training.remat" = ["none", "full"]\n'
                 '"training.global_batch" = [1024, 4096]\n')
    db = tmp_path / "plan.duckdb"
    out = _cli("plan", str(path), "--json", "--top", "4", "--xla", "--db", str(db), "--quiet")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert len(data["best"]) == 4 and "record" not in data["best"][0]["xla"]
    for b in data["best"]:
        x = b["xla"]
        assert x["refusal"] is None and not x["oom"] and x["verdicts_agree"] and x["peak_hbm_bytes"] > 0 and x["compile_s"] > 0
        assert x["hbm_diff_pct"] == pytest.approx(100 * (x["podscope_peak_hbm_bytes"] / x["peak_hbm_bytes"] - 1))
        assert x["podscope_peak_hbm_bytes"] == pytest.approx(b["peak_hbm_bytes"], rel=1e-9)  # one device per v5e chip
        # the step's compute: XLA's cycle estimates at the catalog clock beside Podscope's forward and backward
        assert x["compute_s"] > 0 and 0 < x["podscope_compute_s"] < b["step_time_s"]
        assert x["compute_diff_pct"] == pytest.approx(100 * (x["podscope_compute_s"] / x["compute_s"] - 1))
    s = data["xla"]
    assert (s["checked"], s["fit"], s["out_of_memory"], s["not_compiled"]) == (4, 4, 0, 0)
    assert s["best_rank_xla_fits"] == 1 and s["libtpu_version"] and s["jax_version"]
    assert len(data["stored_run_ids"]) == 4
    for b in data["best"]:  # the stored run takes XLA's peak, as run --xla does
        summary = api.summary(Database(db), b["scenario"]["name"])
        assert summary["hbm_source"] == "xla" and summary["peak_hbm_bytes"] == pytest.approx(b["xla"]["peak_hbm_bytes"])


def test_a_candidate_without_a_jax_program_says_why_and_keeps_podscopes_peak(live, tmp_path):
    """The MLP's program maps data and fsdp only: candidates over a tensor axis are not compiled, the plan says why,
    and their stored runs keep Podscope's own HBM."""
    base = MLP_BASE.replace("data = 4", "data = 2\ntensor = 2")
    path = _plan(tmp_path, base, 'objective = "samples_per_s_per_chip"\nmesh = "fixed"\n"training.remat" = ["none", "full"]\n')
    db = tmp_path / "plan.duckdb"
    out = _cli("plan", str(path), "--json", "--top", "2", "--xla", "--db", str(db), "--quiet")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert len(data["best"]) == 2
    for b in data["best"]:
        assert b["mesh"]["tensor"] == 2 and "tensor" in b["xla"]["refusal"] and "valid: tensor = 1" in b["xla"]["refusal"]
        assert api.summary(Database(db), b["scenario"]["name"]).get("hbm_source") != "xla"
    s = data["xla"]
    assert (s["checked"], s["fit"], s["out_of_memory"], s["not_compiled"]) == (2, 0, 0, 2)
    assert s["best_rank_xla_fits"] is None


def test_a_best_candidate_xla_refuses_is_called_out(live, tmp_path):
    path = _plan(tmp_path, V6E_WIDE_BASE, 'objective = "samples_per_s_per_chip"\nmesh = "fixed"\n"training.remat" = ["full"]\n')
    out = _cli("plan", str(path), "--xla", "--quiet")
    assert out.returncode == 0, out.stderr
    assert "HBM (XLA)" in out.stdout and "OOM: needs 3" in out.stdout
    assert "out of HBM for XLA where Podscope says it fits" in out.stdout and "none of them fits for XLA" in out.stdout
    assert "XLA's cycle estimates" not in out.stdout  # a program XLA refuses has no cycle estimates
    data = json.loads(_cli("plan", str(path), "--xla", "--json", "--quiet").stdout)
    (best,) = data["best"]
    assert best["peak_hbm_bytes"] < 31 * 2**30  # Podscope: fits in v6e's usable HBM
    x = best["xla"]
    assert x["oom"] and x["peak_hbm_bytes"] is None and not x["verdicts_agree"]
    assert x["required_bytes"] > best["peak_hbm_bytes"] and "RESOURCE_EXHAUSTED" in x["oom_message"]
    assert data["xla"]["best_rank_xla_fits"] is None and data["xla"]["out_of_memory"] == 1


def test_without_the_tpu_compiler_nothing_is_searched(tmp_path, monkeypatch, capsys):
    path = _plan(tmp_path, SMALL_BASE, '"training.remat" = ["full"]\n')
    real = tpu_capture.importlib.util.find_spec
    monkeypatch.setattr(tpu_capture.importlib.util, "find_spec", lambda name, *a: None if name == "libtpu" else real(name, *a))

    def searched(*_a, **_k):
        raise AssertionError("the plan was searched")

    monkeypatch.setattr(plans, "run_plan", searched)
    assert cli.main(["plan", str(path), "--xla", "--db", str(tmp_path / "plan.duckdb")]) == 2
    err = capsys.readouterr().err
    assert "libtpu not installed" in err and "requirements-tpu.txt" in err
    assert not (tmp_path / "plan.duckdb").exists()


def test_the_text_sets_each_compiled_candidates_compute_beside_xlas_estimate():
    from profiler.plan_cli import _xla_text

    fits = {"refusal": None, "oom": False, "verdicts_agree": True, "compute_s": 0.5, "podscope_compute_s": 0.4, "compute_diff_pct": -20.0}
    refused = {"refusal": "no JAX program for a context axis", "oom": False, "verdicts_agree": True, "compute_diff_pct": None}
    out = {"xla": {"jax_version": "0.10.2", "libtpu_version": "0.0.42.1", "checked": 2, "fit": 1, "out_of_memory": 0, "not_compiled": 1,
                   "best_rank_xla_fits": 1},
           "best": [{"rank": 1, "xla": fits}, {"rank": 2, "xla": refused}]}  # fmt: skip
    text = _xla_text(out)
    assert "#1 compute per step 400.0 ms, XLA's cycle estimates 500.0 ms (-20%" in text
    assert "#2 not compiled" in text and "#2 compute" not in text
