"""Static checks every change must pass: ruff with the rules selected in pyproject.toml (pyflakes, bugbear)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is pinned in requirements-dev.txt; install the dev requirements"
    out = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
