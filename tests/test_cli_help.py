"""``--help`` and ``-h`` print usage and exit 0, for the top level and every sub-command (a real subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def _subcommands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


def test_every_subcommand_is_listed():
    assert {"run", "runs", "validate", "sweep", "export", "import", "calibrate", "delete", "collective"} <= set(_subcommands())


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_top_level_help(flag):
    p = subprocess.run([sys.executable, "-m", "profiler", flag], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "usage: python -m profiler" in p.stdout
    for name in _subcommands():
        assert name in p.stdout


@pytest.mark.parametrize("command", _subcommands())
def test_subcommand_help(command):
    p = subprocess.run([sys.executable, "-m", "profiler", command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert f"usage: python -m profiler {command}" in p.stdout
