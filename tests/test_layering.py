"""engine and profiler must not import the UI libraries; engine must not import profiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return set(out.stdout.split())


def test_core_does_not_import_ui():
    mods = _modules_after("import engine, profiler, profiler.cli, profiler.api")
    assert not {m for m in mods if m.split(".")[0] in {"streamlit", "plotly"}}


def test_engine_does_not_import_profiler():
    mods = _modules_after("import engine, engine.simulate")
    assert not {m for m in mods if m.split(".")[0] == "profiler"}
