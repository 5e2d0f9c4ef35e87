"""Benchmark the dashboard's queries and figure sizes on a 4,096-chip full-trace run and a 50,944-chip summary run.

A script, not a test: ``python -m benchmarks.bench_dashboard [--db PATH] [--repeat N] [--runs full,pod]``.
Builds the runs into a temporary DuckDB file unless ``--db`` names one that already holds them:

- ``full``: ResNet-50 data-parallel on a v4 16x16x16 torus (4,096 chips), 1,000 steps, every event;
- ``pod``: a 1.3B LLM on 199 slices of TPU v5e 16x16 over DCN (50,944 chips, the size of the
  largest published TPU training job), ``[sim] trace = "summary"``.

Then for every page runs the exact queries the page runs on its first render (uncached, each on its
own connection while the page holds the file open, as app.py does) ``--repeat`` times and reports
p50/p95 in milliseconds, plus the JSON size of every figure the page draws.
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
from profiler import distributions as d
from profiler import queries as q
from profiler import slice_queries as sq
from profiler import steady_state as ss
from profiler.store import Database, write_run
from views import figures as f
from views.scaling_model import ideal_table, scaling_table

#: run name -> (bundled scenario, overrides)
RUNS = {
    "full": ("bench-4096x1000", "resnet50-v4-128.toml",
             {"pod.topology": "16x16x16", "training.global_batch": 4096 * 64, "training.steps": 1000, "parallelism.data": None}),
    "pod": ("bench-v5e-199x256-summary", "llm-1b-v5p-64.toml",
            {"pod.chip": "tpu-v5e", "pod.topology": "16x16", "pod.slices": 199, "training.global_batch": 50944 * 2,
             "parallelism.data": None, "parallelism.fsdp": 16, "sim.trace": "summary"}),
}  # fmt: skip
RUN_NAME = RUNS["full"][0]
#: hosts drawn bar by bar on the Idle page (views/idle.py)
HOST_BARS_MAX = 64


def build(db: Database, which: str = "full") -> int:
    name, file, overrides = RUNS[which]
    with db.read() as con:
        row = con.execute("SELECT run_id FROM runs WHERE name = $n", {"n": name}).fetchone()
    if row:
        return int(row[0])
    t0 = time.perf_counter()
    result = simulate(load_scenario(ROOT / "data/scenarios" / file, {"name": name, **overrides}))
    t1 = time.perf_counter()
    run_id = write_run(db, result)
    print(f"built run {run_id} ({which}): simulate {t1 - t0:.1f} s, store {time.perf_counter() - t1:.1f} s, "
          f"{result.facts.chips:,} chips, {result.trace.events.num_rows:,} events")  # fmt: skip
    return run_id


def _picker(run_id: int) -> list:
    """What every page with a run picker asks first (views/common.py run_context)."""
    return [
        ("list_runs", lambda c: q.list_runs(c)),
        ("featured_run", lambda c: q.featured_run(c)),
        ("run_summary", lambda c: q.run_summary(c, run_id)),
    ]


def page_queries(con, run_id: int) -> dict[str, list]:
    """(name, callable) per page, mirroring what each page asks on its first render."""
    summary = q.run_summary(con, run_id)
    rng = q.step_range(con, run_id)
    events = (q.run_scenario(con, run_id) or {}).get("sim", {}).get("trace", "full") != "summary"
    multi = int(summary.get("slices") or 1) > 1
    if int(summary.get("hosts") or 0) <= HOST_BARS_MAX:
        by_host = [("kind_by_host", lambda c: q.kind_by_host(c, run_id))]
    else:
        by_host = [
            ("kind_by_slice", lambda c: sq.kind_by_slice(c, run_id)) if multi else ("worst_hosts_by_kind", lambda c: d.worst_hosts_by_kind(c, run_id, 64)),
            ("chip_histogram", lambda c: d.chip_histogram(c, run_id, "idle_frac", 40)),
            ("chip_quantiles", lambda c: d.chip_quantiles(c, run_id, "idle_frac")),
        ]  # fmt: skip
    if multi:
        pod = [
            ("slice_metrics", lambda c: sq.slice_metrics(c, run_id)),
            ("chip_metrics (slice 0)", lambda c: q.chip_metrics(c, run_id, 0)),
            ("slice_links", lambda c: sq.slice_links(c, run_id, 0)),
            ("busiest_links", lambda c: sq.busiest_links(c, run_id, 20, 0)),
        ]
    else:
        pod = [
            ("chip_metrics", lambda c: q.chip_metrics(c, run_id)),
            ("slice_links", lambda c: sq.slice_links(c, run_id, 0)),
            ("busiest_links", lambda c: sq.busiest_links(c, run_id, 20, -1)),
        ]
    pages = {
        "overview": [
            *_picker(run_id),
            ("breakdown", lambda c: q.breakdown(c, run_id)),
            ("step_times", lambda c: q.step_times(c, run_id)),
            ("run_scenario", lambda c: q.run_scenario(c, run_id)),
            ("run_tables", lambda c: q.run_tables(c, run_id)),
            ("step_range", lambda c: q.step_range(c, run_id)),
        ],
        "idle": [
            *_picker(run_id),
            ("kind_by_step", lambda c: q.kind_by_step(c, run_id)),
            ("warmup_steps", lambda c: ss.warmup_steps(c, run_id)),
            *by_host,
            ("worst_hosts", lambda c: d.worst_hosts(c, run_id, 10)),
            ("worst_chips", lambda c: q.worst_chips(c, run_id, 10)),
        ],
        "pod": [*_picker(run_id), *pod],
        "memory": [
            *_picker(run_id),
            ("memory_timeline", lambda c: q.memory_timeline(c, run_id)),
            ("chip_histogram", lambda c: d.chip_histogram(c, run_id, "hbm_peak_bytes", 40)),
            ("top_chips", lambda c: d.top_chips(c, run_id, "hbm_peak_bytes", 10)),
        ],
        "scaling": [("scaling_runs", lambda c: q.scaling_runs(c))],
        "recompilation": [
            *_picker(run_id),
            ("compiles_by_step", lambda c: q.compiles_by_step(c, run_id)),
            ("compiles_by_cause", lambda c: q.compiles_by_cause(c, run_id)),
        ],
        "compare": [
            *_picker(run_id),
            ("run_scenario", lambda c: q.run_scenario(c, run_id)),
            ("steady_step_kind_s", lambda c: ss.steady_step_kind_s(c, run_id)),
            ("steady_step_kind_s (other)", lambda c: ss.steady_step_kind_s(c, run_id)),
        ],
    }
    if not events:  # the Timeline page says the run has no events, after the picker and the scenario
        pages["timeline (summary run: the notice)"] = [*_picker(run_id), ("run_scenario", lambda c: q.run_scenario(c, run_id))]
        return pages
    worst16 = tuple(int(c) for c in q.worst_chips(con, run_id, 16)["chip"])
    host_chips = tuple(int(c) for h in q.hosts(con, run_id)["chips"][:2] for c in h)
    chips = int(summary["chips"])
    pages.update({
        "timeline (16 worst chips, 5 steps)": [
            *_picker(run_id),
            ("run_scenario", lambda c: q.run_scenario(c, run_id)),
            ("step_range", lambda c: q.step_range(c, run_id)),
            ("first_steady_step", lambda c: ss.first_steady_step(c, run_id)),
            ("worst_chips", lambda c: q.worst_chips(c, run_id, 16)),
            ("timeline", lambda c: q.timeline(c, run_id, worst16, rng[0], rng[0] + 4, 800)),
        ],
        "timeline (2 hosts, all 1000 steps)": [("timeline", lambda c: q.timeline(c, run_id, host_chips, rng[0], rng[1], 800))],
        "timeline (256 chips, 100 steps)": [
            ("timeline", lambda c: q.timeline(c, run_id, tuple(range(0, chips, max(1, chips // 256))), rng[0] + 100, rng[0] + 199, 1600))
        ],
    })  # fmt: skip
    return pages


def figures_for(con, run_id: int) -> dict[str, object]:
    """Every figure the pages draw for this run, built from the pages' queries."""
    summary = q.run_summary(con, run_id)
    multi = int(summary.get("slices") or 1) > 1
    chips = q.chip_metrics(con, run_id, 0)
    plane = chips[chips["z"] == 0]
    links = sq.slice_links(con, run_id, 0)
    if links is not None:  # the links the page draws: inside the plane
        links = links[links["axis"].isin(["x", "y"]) & (links["src_z"] == 0) & (links["dst_z"] == 0)]
    table = scaling_table(q.scaling_runs(con), "strong")
    kinds = ss.steady_step_kind_s(con, run_id)
    hosts = int(summary["hosts"])
    out = {
        "overview step time": f.step_time_line(q.step_times(con, run_id)),
        "idle by step": f.kind_area(q.kind_by_step(con, run_id)),
        f"pod plane ({len(plane):,} chips)": f.pod_plane(plane, "idle_frac", "Idle %", links=links),
        "scaling": f.scaling_figure(table.assign(series=table["series"]), "step_time_s", ideal_table(table, "strong")),
        "compare waterfall": f.delta_waterfall(kinds["s_per_step"].sum(), kinds.assign(delta_s=0.0)[["kind", "delta_s"]], kinds["s_per_step"].sum()),
        "memory: peak HBM histogram": f.chip_memory_histogram(d.chip_histogram(con, run_id, "hbm_peak_bytes"), summary.get("hbm_capacity_bytes")),
    }  # fmt: skip
    if hosts <= HOST_BARS_MAX:
        out[f"idle by host ({hosts:,} hosts)"] = f.host_bars(q.kind_by_host(con, run_id))
    else:
        if multi:
            out[f"idle by slice ({summary['slices']} slices)"] = f.host_bars(sq.kind_by_slice(con, run_id), by="slice")
        else:
            out[f"idle: {HOST_BARS_MAX} most idle of {hosts:,} hosts"] = f.host_bars(d.worst_hosts_by_kind(con, run_id, HOST_BARS_MAX))
        out[f"idle histogram ({summary['chips']:,} chips)"] = f.binned_histogram(d.chip_histogram(con, run_id, "idle_frac"), "idle", 100, "%")
    if multi:
        slices = sq.slice_metrics(con, run_id)
        out[f"pod slices grid ({len(slices)} slices)"] = f.slice_grid(slices, "idle_frac_max", "Idle %", True, selected=0)
    if len(chips["z"].unique()) > 1:
        out[f"pod 3D ({len(chips):,} chips)"] = f.pod_3d(chips, "idle_frac", "Idle %")
    if summary.get("events"):
        rng = q.step_range(con, run_id)
        worst = [int(c) for c in q.worst_chips(con, run_id, 256)["chip"]]
        cells, steps = q.timeline(con, run_id, tuple(worst), rng[0], rng[0] + 9, 1600)
        out["timeline 256 chips x 1600 buckets"] = f.timeline_gantt(cells, steps, worst)
    return out


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
    ap.add_argument("--runs", default="full,pod", help="which runs to measure: full (4,096 chips), pod (50,944 chips)")
    args = ap.parse_args()
    tmp = None
    if args.db:
        path = Path(args.db)
    else:
        tmp = tempfile.TemporaryDirectory()
        path = Path(tmp.name) / "bench.duckdb"
    db = Database(path, read_only_reads=False)  # as the dashboard opens it
    run_ids = {which: build(db, which) for which in args.runs.split(",")}
    t0 = time.perf_counter()
    for _ in range(10):
        with db.read():
            pass
    print(f"opening the file: {(time.perf_counter() - t0) * 100:.1f} ms per connection")
    for which, run_id in run_ids.items():
        print(f"\n== {RUNS[which][0]} (run {run_id}) ==")
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        rows = measure_pages(db, run_id, args.repeat)
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.1f}"))
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        sizes = pd.DataFrame([{"figure": k, "json_MB": v / 1e6} for k, v in figure_sizes(db, run_id).items()])
        print(sizes.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
