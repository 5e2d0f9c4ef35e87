"""Run the CLI on hostile input in a child process with its address space capped.

A regression that makes an input unbounded then fails the test (MemoryError, a killed
child, a timeout) instead of exhausting the machine.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: address space of the child: Podscope's imports (numpy, pyarrow, DuckDB) reserve ~1 GiB of it
MEMORY_LIMIT_BYTES = 3 * 2**30


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def run_cli(*args: str, timeout_s: float = 120, env: dict | None = None) -> Outcome:
    """``python -m profiler ARGS`` under :data:`MEMORY_LIMIT_BYTES`; its exit code, output and wall time."""
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "profiler", *args], cwd=ROOT, capture_output=True, text=True, errors="replace",
        timeout=timeout_s, preexec_fn=_limit, env=env,
    )  # fmt: skip
    return Outcome(p.returncode, p.stdout, p.stderr, time.monotonic() - t0)
