"""Benchmark: how long does the dashboard wait for the database while big runs are written?

Runs a reader process (the Overview page's queries, polled like a dashboard) against a
writer process storing RUNS runs of 4,096 chips x 200 steps (~4.1 M events each), once
with the chunked writer (the default) and once with every run in a single transaction
(the previous behaviour), and prints the reader's wait distribution and the write time.

    python -m benchmarks.concurrency [RUNS]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(runs: int, chunk_rows: int | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.duckdb")
        extra = ["--chunk-rows", str(chunk_rows)] if chunk_rows else []
        reader = subprocess.Popen([sys.executable, "-m", "tests.workers", "read", db, "600"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        writer = subprocess.run(
            [sys.executable, "-m", "tests.workers", "write", db, "16x16x16", "200", str(runs), *extra],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )  # fmt: skip
        write_s = time.monotonic() - t0
        (Path(tmp) / "stop").touch()
        stats = json.loads(reader.communicate()[0])
        stats["write_s_incl_simulate"] = round(write_s, 2)
        stats["runs_written"] = sum(line.startswith("wrote") for line in writer.stdout.splitlines())
        stats["errors"] = len(stats["errors"])
        del stats["seen"]
        return stats


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for label, chunk in (("chunked (default)", None), ("one transaction per run", 10**12)):
        stats = measure(runs, chunk)
        print(f"{label:26s}", json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in stats.items()}))


if __name__ == "__main__":
    main()
