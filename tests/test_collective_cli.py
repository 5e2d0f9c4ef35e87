"""``python -m profiler collective``: JSON contract, known answers, bad input exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import EXIT_BAD_INPUT, main

ROOT = Path(__file__).resolve().parent.parent


def test_subprocess_json_by_hand():
    p = subprocess.run(
        [sys.executable, "-m", "profiler", "collective", "--op", "all-reduce", "--bytes", "1.6e9", "--topology", "4x4",
         "--link-bytes-per-s", "1e11", "--hop-latency-ns", "1000", "--schedule", "sequential", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    expect = 2 * (3 / 4 * 1.6e9 / 2e11 + 2e-6 + 3 / 4 * 0.4e9 / 2e11 + 2e-6)
    assert out["time_s"] == pytest.approx(expect)
    assert out["algbw_bytes_per_s"] == pytest.approx(1.6e9 / expect)
    assert out["busbw_bytes_per_s"] == pytest.approx(1.6e9 / expect * 2 * 15 / 16)
    assert [(ph["op"], ph["axis"]) for ph in out["phases"]] == [
        ("reduce-scatter", "x"), ("reduce-scatter", "y"), ("all-gather", "y"), ("all-gather", "x")
    ]  # fmt: skip


def run_json(capsys, *args: str) -> dict:
    assert main(["collective", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_axes_unidirectional_and_no_wraparound(capsys):
    base = ["--op", "all-gather", "--bytes", "1e9", "--topology", "4x8", "--link-bytes-per-s", "1e11", "--hop-latency-ns", "0"]
    y = run_json(capsys, *base, "--axes", "y")
    assert y["axes"] == ["y"] and y["participants"] == 8
    assert y["time_s"] == pytest.approx(7 / 8 * 1e9 / 2e11)
    assert run_json(capsys, *base, "--axes", "y", "--unidirectional")["time_s"] == pytest.approx(7 / 8 * 1e9 / 1e11)
    assert run_json(capsys, *base, "--axes", "y", "--no-wraparound")["time_s"] == pytest.approx(7 / 8 * 1e9 / 1e11)


def test_chip_and_slices_use_catalog_and_dcn(capsys):
    out = run_json(capsys, "--op", "all-reduce", "--bytes", "1e9", "--chip", "tpu-v5e", "--topology", "16x16", "--slices", "2")
    assert out["dcn_time_s"] > 0 and out["participants"] == 512
    assert out["wraparound"] == {"x": True, "y": True}
    assert out["phases"][-1]["axis"] == "dcn"
    small = run_json(capsys, "--op", "all-reduce", "--bytes", "1e9", "--chip", "tpu-v5e", "--topology", "4x4")
    assert small["wraparound"] == {"x": False, "y": False}  # v5e: only 16-long axes wrap


@pytest.mark.parametrize(
    "args, key",
    [
        (["--op", "all-reduce", "--bytes", "1e9", "--topology", "4x4"], "--link-bytes-per-s"),
        (["--op", "all-reduce", "--bytes", "1e9", "--chip", "tpu-v4", "--topology", "3x3x3"], "supported shapes"),
        (["--op", "all-reduce", "--bytes", "1e9", "--chip", "tpu-v9", "--topology", "4x4x4"], "--chip"),
        (["--op", "all-reduce", "--bytes", "1e9", "--chip", "tpu-v4", "--topology", "4x4x4", "--axes", "w"], "--axes"),
        (["--op", "all-reduce", "--bytes", "-1", "--chip", "tpu-v4", "--topology", "4x4x4"], "--bytes"),
        (["--op", "all-reduce", "--bytes", "1e9", "--topology", "4", "--link-bytes-per-s", "1e11", "--hop-latency-ns", "1",
          "--slices", "2"], "--slices"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_and_prints_nothing(capsys, args, key):
    assert main(["collective", *args, "--json"]) == EXIT_BAD_INPUT
    cap = capsys.readouterr()
    assert cap.out == "" and key in cap.err
