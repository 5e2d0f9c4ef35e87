"""Podscope benchmark suite: ``python benchmarks/bench.py [--quick] [--json]``.

Measures, in one process (growth cases each in a fresh subprocess so their peak
memory is their own), the numbers the README's Performance section reports:

1. simulation: a 4,096-chip, 1,000-step run with full per-chip events: wall time
   and events/s, with and without storing;
2. storage: Podscope's write of that run against a bare DuckDB insert of the same
   Arrow events table, in the same process (the practical limit), as a ratio;
3. queries: p50/p95 of every dashboard page's queries on that run, and figure sizes;
4. sweeps: runs/s for a 100-point sweep of 256-chip scenarios (summary mode);
5. growth: time and peak memory over chips x steps, to check cost grows linearly.

Benchmarks are scripts, not tests: timings on a shared machine are noisy, so the
suite reports ratios measured side by side rather than asserting absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from engine import scenario_from_dict, simulate  # noqa: E402
from profiler.store import Database, write_run, write_runs  # noqa: E402


def pod_scenario(chips_topology: str, steps: int, *, slices: int = 1, trace: str = "full", chip: str = "tpu-v4") -> dict:
    n = 1
    for a in chips_topology.split("x"):
        n *= int(a)
    return {
        "name": f"bench-{chip}-{chips_topology}x{slices}-{steps}",
        "pod": {"chip": chip, "topology": chips_topology, "slices": slices},
        "model": {"kind": "resnet50"},
        "training": {"global_batch": 16 * n * slices, "steps": steps, "optimizer": "momentum"},
        "sim": {"seed": 0, "trace": trace},
    }


def _timed(fn, *args, **kwargs) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def bench_simulation_and_storage(tmp: Path, steps: int) -> dict[str, Any]:
    scenario = scenario_from_dict(pod_scenario("16x16x16", steps))
    result, sim_s = _timed(simulate, scenario)
    events = result.trace.events
    db = Database(tmp / "podscope.duckdb")
    _, store_s = _timed(write_run, db, result)
    # The practical limit: a bare insert of the same Arrow events table into a fresh file.
    bare_path = tmp / "bare.duckdb"
    con = duckdb.connect(str(bare_path))
    con.execute("CREATE TABLE events (run_id INTEGER, chip INTEGER, step INTEGER, kind VARCHAR, start_ns BIGINT, dur_ns BIGINT)")
    con.register("ev", events)
    t0 = time.perf_counter()
    con.execute("BEGIN")
    con.execute("INSERT INTO events SELECT 1, chip, step, CAST(kind AS VARCHAR), start_ns, dur_ns FROM ev")
    con.execute("COMMIT")
    bare_s = time.perf_counter() - t0
    con.close()
    return {
        "chips": 4096,
        "steps": steps,
        "events": events.num_rows,
        "simulate_s": sim_s,
        "events_per_s": events.num_rows / sim_s,
        "store_s": store_s,
        "simulate_and_store_s": sim_s + store_s,
        "store_rows_per_s": events.num_rows / store_s,
        "bare_insert_s": bare_s,
        "bare_rows_per_s": events.num_rows / bare_s,
        "store_vs_bare_rate": bare_s / store_s,
        "db_path": str(db.path),
    }


def bench_sweep_summary_mode(tmp: Path, points: int) -> dict[str, Any]:
    """Runs per second for 256-chip, 100-step scenarios in summary mode, stored in one file."""
    db = Database(tmp / "sweep.duckdb")

    def results():
        for i in range(points):
            raw = pod_scenario("8x8x4", 100, trace="summary")
            raw["sim"]["seed"] = i
            raw["name"] = f"sweep-{i}"
            yield simulate(scenario_from_dict(raw))

    t0 = time.perf_counter()
    write_runs(db, results())
    dt = time.perf_counter() - t0
    return {"points": points, "chips": 256, "steps": 100, "wall_s": dt, "runs_per_s": points / dt}


_GROWTH_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from engine import scenario_from_dict, simulate
from profiler.store import Database, write_run
raw = json.loads(sys.argv[1])
t0 = time.perf_counter()
r = simulate(scenario_from_dict(raw))
t1 = time.perf_counter()
write_run(Database(sys.argv[2]), r)
t2 = time.perf_counter()
print(json.dumps({{"simulate_s": t1 - t0, "store_s": t2 - t1, "events": r.trace.events.num_rows,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""


def bench_growth(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    cases = [("8x8x4", 1, 100), ("8x8x16", 1, 100), ("16x16x16", 1, 100), ("16x16x16", 4, 100), ("16x16x16", 1, 1000)]
    if quick:
        cases = cases[:3]
    out = []
    for topo, slices, steps in cases:
        for trace in ("full", "summary"):
            if trace == "full" and slices * steps > 1000:
                continue  # 16,384 chips x events: use summary mode at that scale
            raw = pod_scenario(topo, steps, slices=slices, trace=trace)
            code = _GROWTH_CHILD.format(root=str(ROOT))
            p = subprocess.run(
                [sys.executable, "-c", code, json.dumps(raw), str(tmp / f"growth-{topo}-{slices}-{steps}-{trace}.duckdb")],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            row = json.loads(p.stdout)
            chips = slices
            for a in topo.split("x"):
                chips *= int(a)
            row.update({"chips": chips, "steps": steps, "trace": trace})
            row["ns_per_chip_step"] = (row["simulate_s"] + row["store_s"]) / (chips * steps) * 1e9
            out.append(row)
    return out


def bench_queries(db_path: str, repeats: int) -> dict[str, Any]:
    """p50/p95 of each dashboard page's queries (the pages' query lists live in benchmarks/dashboard_queries.py)."""
    try:
        from benchmarks.dashboard_queries import PAGE_QUERIES  # type: ignore[import-not-found]
    except ImportError:
        from profiler import queries

        PAGE_QUERIES = {
            "overview": [
                ("run_summary", lambda con, rid: queries.run_summary(con, rid)),
                ("breakdown", lambda con, rid: queries.breakdown(con, rid)),
                ("step_times", lambda con, rid: queries.step_times(con, rid)),
            ]
        }
    db = Database(db_path)
    out: dict[str, Any] = {}
    with db.read() as con:
        run_id = con.execute("SELECT max(run_id) FROM runs").fetchone()[0]
        for page, items in PAGE_QUERIES.items():
            for name, fn in items:
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    fn(con, run_id)
                    times.append(time.perf_counter() - t0)
                times.sort()
                out[f"{page}.{name}"] = {
                    "p50_ms": statistics.median(times) * 1e3,
                    "p95_ms": times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))] * 1e3,
                }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    steps = 100 if args.quick else 1000
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "duckdb": duckdb.__version__,
        }
    }
    with tempfile.TemporaryDirectory(prefix="podscope-bench-") as d:
        tmp = Path(d)
        report["simulation"] = bench_simulation_and_storage(tmp, steps)
        report["queries"] = bench_queries(report["simulation"]["db_path"], 5 if args.quick else 20)
        report["sweep_summary_mode"] = bench_sweep_summary_mode(tmp, 20 if args.quick else 100)
        report["growth"] = bench_growth(tmp, args.quick)
    report["peak_rss_bytes_main"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        sim = report["simulation"]
        print(f"simulate {sim['chips']} chips x {sim['steps']} steps: {sim['simulate_s']:.2f} s ({sim['events_per_s'] / 1e6:.1f} M events/s)")
        print(f"store: {sim['store_s']:.2f} s ({sim['store_rows_per_s'] / 1e6:.1f} M rows/s); bare insert {sim['bare_insert_s']:.2f} s; ratio {sim['store_vs_bare_rate']:.2f}")
        for k, v in report["queries"].items():
            print(f"query {k}: p50 {v['p50_ms']:.1f} ms, p95 {v['p95_ms']:.1f} ms")
        sw = report["sweep_summary_mode"]
        print(f"sweep (summary mode, 256 chips x 100 steps): {sw['runs_per_s']:.1f} runs/s")
        for g in report["growth"]:
            print(
                f"growth {g['chips']:>6} chips x {g['steps']:>4} steps [{g['trace']:>7}]: sim {g['simulate_s']:.2f} s, "
                f"store {g['store_s']:.2f} s, {g['ns_per_chip_step']:.0f} ns/chip-step, peak {g['peak_rss_bytes'] / 2**30:.2f} GiB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
