"""Hostile HLO modules, sidecars, and convergence and cost keys, through the CLI in a child process under
tests/hostile.py's memory cap.

Each is refused with exit 2 and a message that names the file and the limit it broke.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from tests.hostile import run_cli

TPU = Path(__file__).parent / "fixtures" / "tpu"


def _module(body: str) -> str:
    return f"HloModule m, num_partitions=1\n\nENTRY %main () -> f32[] {{\n{body}\n}}\n"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("  ROOT %p = f32[99999999999,99999999999] parameter(0)", "limit of 1 TiB"),
        ("  ROOT %p = f32[" + ",".join(["1"] * 100) + "] parameter(0)", "limit of 64"),
    ],
)
def test_absurd_shapes_exit_2_with_the_limit(tmp_path, body, says):
    f = tmp_path / "m.hlo.txt"
    f.write_text(_module(body))
    out = run_cli("hlo", str(f))
    assert out.returncode == 2, out.stderr
    assert says in out.stderr and str(f) in out.stderr


def test_a_loop_of_absurd_trips_exits_2(tmp_path):
    body = """HloModule m, num_partitions=1

%cond (c: (s32[])) -> pred[] {
  %c = (s32[]) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(2000000000)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (b: (s32[])) -> (s32[]) {
  %b = (s32[]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  ROOT %t = (s32[]) tuple(%next)
}

ENTRY %main () -> (s32[]) {
  %zero = s32[] constant(0)
  %init = (s32[]) tuple(%zero)
  ROOT %w = (s32[]) while(%init), condition=%cond, body=%body
}
"""
    f = tmp_path / "loop.hlo.txt"
    f.write_text(body)
    out = run_cli("hlo", str(f))
    assert out.returncode == 2 and "limit of 10,000,000" in out.stderr


def test_a_gzip_bomb_stops_at_the_text_limit(tmp_path):
    f = tmp_path / "bomb.hlo.txt.gz"
    with gzip.open(f, "wb", compresslevel=9) as g:
        g.write(b"HloModule m\n")
        chunk = b" " * 2**20
        for _ in range(300):  # 300 MiB of text, a few hundred KiB on disk
            g.write(chunk)
    out = run_cli("hlo", str(f))
    assert out.returncode == 2 and "256 MiB" in out.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "nested"),
        (b" " * (4 * 2**20 + 1), "MiB limit"),
        (json.dumps({"format": "podscope-xla-bundle", "format_version": 1}).encode(), "missing key"),
    ],
)
def test_hostile_sidecars_exit_2(tmp_path, content, says):
    f = tmp_path / "x.xla.json"
    f.write_bytes(content)
    out = run_cli("hlo", str(f))
    assert out.returncode == 2, out.stderr
    assert says in out.stderr and str(f) in out.stderr


def test_a_sidecar_with_absurd_numbers_exits_2_and_writes_nothing(tmp_path):
    for suffix in (".hlo.txt.gz", ".xla.json"):
        shutil.copy(TPU / f"transformer_dp_v5e4{suffix}", tmp_path / f"b{suffix}")
    side = json.loads((tmp_path / "b.xla.json").read_text())
    side.update(module="b.hlo.txt.gz", memory={**side["memory"], "temp_bytes": 1e30}, devices=10**9)
    (tmp_path / "b.xla.json").write_text(json.dumps(side))
    scenario = tmp_path / "s.toml"
    scenario.write_text('[pod]\nchip = "tpu-v5e"\ntopology = "2x2"\n[model]\nkind = "hlo"\npath = "b.xla.json"\n'
                        "[training]\nglobal_batch = 16\nsteps = 2\n")  # fmt: skip
    db = tmp_path / "runs.duckdb"
    out = run_cli("run", str(scenario), "--db", str(db))
    assert out.returncode == 2
    assert "memory.temp_bytes" in out.stderr and "devices" in out.stderr
    assert not db.exists()


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("cost.usd_per_chip_hour", "1e308", "less than or equal to 10000"),
        ("convergence.task", '"' + "x" * 5000 + '"', "at most 64"),
    ],
)
def test_absurd_convergence_and_cost_keys_exit_2_naming_the_key(tmp_path, key, value, says):
    db = tmp_path / "runs.duckdb"
    out = run_cli("run", "resnet50-v4-128", "--db", str(db), "--set", "training.steps=3", "--set", f"{key}={value}")
    assert out.returncode == 2, out.stderr
    assert key in out.stderr and says in out.stderr
    assert not db.exists()


def test_an_absurd_budget_exits_2(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text('[pod]\nchip = "tpu-v4"\ntopology = "2x2x1"\n[model]\nkind = "mlp"\nlayer_sizes = [64, 64]\n'
                        "[training]\nglobal_batch = 64\nsteps = 2\n[convergence]\nsamples = 1e300\n")  # fmt: skip
    out = run_cli("run", str(scenario), "--db", str(tmp_path / "runs.duckdb"))
    assert out.returncode == 2 and "convergence.samples" in out.stderr
