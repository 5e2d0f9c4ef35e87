"""Benchmark the dashboard's queries and figure sizes on a 4,096-chip, 1,000-step stored run.

A script, not a test: ``python -m benchmarks.bench_dashboard [--db PATH] [--repeat N]``.
Builds the run (ResNet-50 data-parallel on a v4 16x16x16 torus, 1,000 steps) into a temporary
DuckDB file unless ``--db`` names one that already holds it, then for every page runs the exact
queries the page runs (uncached, each on its own connection while the page holds the file open, as app.py does) ``--repeat``
times and reports p50/p95 in milliseconds, plus the JSON size of every figure the page draws.
Targets: p95 <= 300 ms per page, each figure <= 5 MB.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

from engine import load_scenario, simulate
from profiler import queries as q
from profiler.store import Database, write_run
from views import figures as f
from views.scaling_model import ideal_table, scaling_table

RUN_NAME = "bench-4096x1000"


def build(db: Database) -> int:
    with db.read() as con:
        row = con.execute("SELECT run_id FROM runs WHERE name = $n", {"n": RUN_NAME}).fetchone()
    if row:
        return int(row[0])
    t0 = time.perf_counter()
    scenario = load_scenario(
        ROOT / "data/scenarios/resnet50-v4-128.toml",
        {"name": RUN_NAME, "pod.topology": "16x16x16", "training.global_batch": 4096 * 64, "training.steps": 1000, "parallelism.data": None},
    )
    result = simulate(scenario)
    t1 = time.perf_counter()
    run_id = write_run(db, result)
    print(f"built run {run_id}: simulate {t1 - t0:.1f} s, store {time.perf_counter() - t1:.1f} s, {result.trace.events.num_rows:,} events")
    return run_id


def page_queries(con, run_id: int) -> dict[str, list]:
    """(name, callable) per page, mirroring what each page asks on its first render."""
    rng = q.step_range(con, run_id)
    worst16 = tuple(int(c) for c in q.worst_chips(con, run_id, 16)["chip"])
    host_chips = tuple(int(c) for h in q.hosts(con, run_id)["chips"][:2] for c in h)
    return {
        "overview": [
            ("list_runs", lambda c: q.list_runs(c)),
            ("run_summary", lambda c: q.run_summary(c, run_id)),
            ("breakdown", lambda c: q.breakdown(c, run_id)),
            ("step_times", lambda c: q.step_times(c, run_id)),
            ("run_scenario", lambda c: q.run_scenario(c, run_id)),
            ("run_tables", lambda c: q.run_tables(c, run_id)),
            ("step_range", lambda c: q.step_range(c, run_id)),
        ],
        "idle": [
            ("kind_by_step", lambda c: q.kind_by_step(c, run_id)),
            ("kind_by_host", lambda c: q.kind_by_host(c, run_id)),
            ("worst_chips", lambda c: q.worst_chips(c, run_id, 10)),
        ],
        "pod": [("chip_metrics", lambda c: q.chip_metrics(c, run_id)), ("link_load", lambda c: q.link_load(c, run_id))],
        "timeline (16 worst chips, 5 steps)": [
            ("step_range", lambda c: q.step_range(c, run_id)),
            ("chip_metrics", lambda c: q.chip_metrics(c, run_id)),
            ("worst_chips", lambda c: q.worst_chips(c, run_id, 16)),
            ("timeline", lambda c: q.timeline(c, run_id, worst16, rng[0], rng[0] + 4, 800)),
        ],
        "timeline (2 hosts, all 1000 steps)": [("timeline", lambda c: q.timeline(c, run_id, host_chips, rng[0], rng[1], 800))],
        "timeline (256 chips, 100 steps)": [
            ("timeline", lambda c: q.timeline(c, run_id, tuple(range(0, 4096, 16)), rng[0] + 100, rng[0] + 199, 1600))
        ],
        "memory": [("memory_timeline", lambda c: q.memory_timeline(c, run_id)), ("chip_memory", lambda c: q.chip_memory(c, run_id))],
        "scaling": [("scaling_runs", lambda c: q.scaling_runs(c))],
        "recompilation": [
            ("compiles_by_step", lambda c: q.compiles_by_step(c, run_id)),
            ("compiles_by_cause", lambda c: q.compiles_by_cause(c, run_id)),
        ],
        "compare": [("step_kind_s", lambda c: q.step_kind_s(c, run_id)), ("list_runs", lambda c: q.list_runs(c))],
    }


def figures_for(con, run_id: int) -> dict[str, object]:
    rng = q.step_range(con, run_id)
    chips = q.chip_metrics(con, run_id)
    worst = [int(c) for c in q.worst_chips(con, run_id, 256)["chip"]]
    cells, steps = q.timeline(con, run_id, tuple(worst), rng[0], rng[0] + 9, 1600)
    plane = chips[chips["z"] == 0]
    table = scaling_table(q.scaling_runs(con), "strong")
    kinds = q.step_kind_s(con, run_id)
    return {
        "overview step time": f.step_time_line(q.step_times(con, run_id)),
        "idle by step": f.kind_area(q.kind_by_step(con, run_id)),
        "idle by host (1,024 hosts)": f.host_bars(q.kind_by_host(con, run_id)),
        "pod plane 16x16": f.pod_plane(plane, "idle_frac", "Idle %"),
        "pod 3D (4,096 chips)": f.pod_3d(chips, "idle_frac", "Idle %"),
        "timeline 256 chips x 1600 buckets": f.timeline_gantt(cells, steps, worst),
        "scaling": f.scaling_figure(table.assign(series=table["series"]), "step_time_s", ideal_table(table, "strong")),
        "compare waterfall": f.delta_waterfall(kinds["s_per_step"].sum(), kinds.assign(delta_s=0.0)[["kind", "delta_s"]], kinds["s_per_step"].sum()),
    }


def measure_pages(db: Database, run_id: int, repeat: int) -> list[dict]:
    """p50/p95 (ms) of each page's first render: its queries, each on its own connection."""
    with db.read() as con:
        pages = page_queries(con, run_id)
    rows = []
    for page, items in pages.items():
        totals = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            with db.read():  # as app.py's page_connection(): one open file for the whole render
                for _name, fn in items:
                    with db.read() as con:
                        fn(con)
            totals.append((time.perf_counter() - t0) * 1e3)
        rows.append({
            "page": page, "queries": len(items), "min_ms": min(totals),
            "p50_ms": float(np.percentile(totals, 50)), "p95_ms": float(np.percentile(totals, 95)),
        })  # fmt: skip
    return rows


def figure_sizes(db: Database, run_id: int) -> dict[str, float]:
    """JSON size in bytes of every figure the pages draw for this run."""
    with db.read() as con:
        figs = figures_for(con, run_id)
    return {k: float(f.figure_bytes(v)) for k, v in figs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="DuckDB file to use (kept); default: a temporary file")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    tmp = None
    if args.db:
        path = Path(args.db)
    else:
        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / "bench.duckdb"
    db = Database(path, read_only_reads=False)  # as the dashboard opens it
    run_id = build(db)
    t0 = time.perf_counter()
    for _ in range(10):
        with db.read():
            pass
    print(f"opening the file: {(time.perf_counter() - t0) * 100:.1f} ms per connection")
    rows = measure_pages(db, run_id, args.repeat)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    sizes = pd.DataFrame([{"figure": k, "json_MB": v / 1e6} for k, v in figure_sizes(db, run_id).items()])
    print(sizes.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
