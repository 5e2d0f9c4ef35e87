"""Benchmark: the planner's search speed and the whole ``plan`` command.

A script, not a test (timings depend on the machine and its load). Run from the repository root:

    python -m benchmarks.bench_plan [--write]

Measures, on the bundled 7B-on-v5p plan (``data/plans/llm-7b-v5p.toml``, 1,767 candidates):

* candidates per second: candidates over the search's own time (``elapsed_s``, wall clock),
  median and best of 5 searches in one process, beside the same over the process's CPU time
  (what the search costs when it does not share the cores), and how many reached the analytic step;
* the whole command ``python -m profiler plan ... --json`` in a fresh process (start-up,
  imports, search, JSON), median and best of 3, wall clock and the child's CPU time.

Prints the machine's load (``uptime``) beside the numbers; ``--write`` puts the table into
docs/performance.md (the ``planner-benchmark`` block, which tests do not check).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from engine.planning.search import search
from profiler.plan import load_plan
from scripts.docs_blocks import DOCS, write_block

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "data" / "plans" / "llm-7b-v5p.toml"
BLOCK = "planner-benchmark"


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except OSError:
        return "load: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the table into docs/performance.md")
    args = ap.parse_args()
    load_before = _uptime()
    plan = load_plan(PLAN)
    search(plan)  # warm imports and caches
    runs, cpu = [], []
    for _ in range(5):
        c0 = time.process_time()
        runs.append(search(plan))
        cpu.append(time.process_time() - c0)
    rate = statistics.median(r.candidates / r.elapsed_s for r in runs)
    best_rate = max(r.candidates / r.elapsed_s for r in runs)
    cpu_rate = statistics.median(r.candidates / c for r, c in zip(runs, cpu))
    search_s = statistics.median(r.elapsed_s for r in runs)
    whole, whole_cpu = [], []
    for _ in range(3):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "profiler", "plan", str(PLAN), "--json", "--quiet"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        whole.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        whole_cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        assert out.returncode == 0, out.stderr
    load_after = _uptime()
    r = runs[0]
    rows = [
        "| Case | Result | Target |",
        "|---|---|---|",
        f"| search, {r.candidates} candidates ({r.costed} costed analytically, the rest pruned) | "
        f"{search_s:.3f} s wall, **{rate:,.0f} candidates/s** (median of 5; best {best_rate:,.0f}/s; "
        f"{cpu_rate:,.0f}/s of this process's CPU time) | >= 1,000/s |",
        f"| `python -m profiler plan llm-7b-v5p.toml --json`, fresh process | **{statistics.median(whole):.2f} s** "
        f"(median of 3: {', '.join(f'{t:.2f}' for t in whole)}; best {min(whole):.2f} s; "
        f"{statistics.median(whole_cpu):.2f} s of CPU time) | < 3 s |",
    ]
    text = "\n".join(
        [
            f"Measured {date.today().isoformat()} on {platform.machine()} with {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, by `python -m benchmarks.bench_plan`.",
            f"Load before: `{load_before}`; after: `{load_after}`.",
            "",
            *rows,
        ]
    )
    print(text)
    if args.write:
        write_block(DOCS / "performance.md", BLOCK, text)


if __name__ == "__main__":
    main()
