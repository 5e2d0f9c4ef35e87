"""Podscope benchmark suite: ``python -m benchmarks.bench [--quick] [--json]``.

Measures, in one process (growth cases each in a fresh subprocess so their peak
memory is their own), the numbers docs/performance.md reports:

1. simulation: a 4,096-chip, 1,000-step run with full per-chip events: wall time
   and events/s, with and without storing;
2. storage: Podscope's write of that run against a bare DuckDB insert of the same
   Arrow events table, in the same process (the practical limit), as a ratio;
3. queries: p50/p95 of every dashboard page's queries on that run, and figure sizes;
4. sweeps: runs/s for a 100-point sweep of 256-chip scenarios, in process and through
   profiler/sweep.py on a process pool and a 2-worker Dask LocalCluster;
5. growth: time and peak memory over chips x steps, to check cost grows linearly;
6. sampled: the largest published job (199 v5e 16x16 slices, 50,944 chips) with
   ``sim.trace = "sampled"``, its cost per chip-step against the 4,096-chip full run's.

Benchmarks are scripts, not tests: timings on a shared machine are noisy, so the
suite reports ratios measured side by side rather than asserting absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

import duckdb

from engine import scenario_from_dict, simulate
from engine.planning.planner import scenario_to_toml
from profiler import chunked_write
from profiler.store import Database, write_run, write_runs
from profiler.streamed_write import simulate_and_write

#: the [input] section of data/scenarios/resnet50-v4-gcs-input-bound.toml, read so the bench
#: follows that scenario's keys (one read stream per host: the chips really wait for input)
_INPUT_TOML = ROOT / "data/scenarios/resnet50-v4-gcs-input-bound.toml"


def all_causes_scenario(topology: str, steps: int, *, slices: int = 1, trace: str = "full", seed: int = 0) -> dict:
    """ResNet-50 data-parallel on TPU v4 with every idle cause on: input, compile, stragglers, failures."""
    import tomllib

    n = slices
    for a in topology.split("x"):
        n *= int(a)
    return {
        "name": f"bench-{topology}x{slices}-{steps}-{trace}",
        "pod": {"chip": "tpu-v4", "topology": topology, "slices": slices},
        "model": {"kind": "resnet50"},
        "training": {"global_batch": 64 * n, "steps": steps, "precision": "bf16", "optimizer": "momentum"},
        "input": tomllib.loads(_INPUT_TOML.read_text())["input"],
        "compile": {"jit": True},
        "stragglers": {"chips": [5], "slowdown": 1.25, "random_fraction": 0.1, "random_slowdown_max": 1.05},
        "failures": {"fail_at_steps": [steps // 2], "checkpoint_every_steps": max(1, steps // 10)},
        "sim": {"seed": seed, "trace": trace},
    }


def _timed(fn, *args, **kwargs) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def _cpu_s() -> float:
    """CPU time of this process so far (all threads, user + system), seconds."""
    t = os.times()
    return t.user + t.system


def _bare_insert_s(path: Path, events) -> float:
    """The practical limit: one INSERT of the Arrow events table into a fresh file, one transaction."""
    con = duckdb.connect(str(path))
    con.execute("SET enable_progress_bar = false")  # as Podscope's connections (profiler/connection.py)
    con.execute("CREATE TABLE events (run_id INTEGER, chip INTEGER, step INTEGER, kind VARCHAR, start_ns BIGINT, dur_ns BIGINT)")
    con.register("ev", events)
    t0 = time.perf_counter()
    con.execute("BEGIN")
    con.execute("INSERT INTO events SELECT 1, chip, step, CAST(kind AS VARCHAR), start_ns, dur_ns FROM ev")
    con.execute("COMMIT")
    con.close()  # includes the checkpoint, as Podscope's write does
    return time.perf_counter() - t0


def bench_simulation_and_storage(tmp: Path, steps: int, chunk_variants: bool) -> dict[str, Any]:
    """Sections 1 and 2: simulate 4,096 chips x ``steps`` with full events, store it, compare with a bare insert.

    Simulated and stored is ``simulate_and_write`` (what ``podscope run`` does: events inserted
    while later steps are laid out); store alone is ``write_run`` of the already simulated run.
    """
    scenario = scenario_from_dict(all_causes_scenario("16x16x16", steps))
    result, sim_s = _timed(simulate, scenario)
    events = result.trace.events
    peak_sim = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    # side by side, alternating, so load changes hit both: bare, simulate + store, bare, store alone
    # (and CPU time of each, which load on a shared machine disturbs less than wall time)
    load_before = os.getloadavg()
    cpu0 = _cpu_s()
    bare1 = _bare_insert_s(tmp / "bare1.duckdb", events)
    cpu1 = _cpu_s()
    db = Database(tmp / "podscope.duckdb")
    _, sim_store_s = _timed(simulate_and_write, db, scenario)
    cpu2 = _cpu_s()
    bare2 = _bare_insert_s(tmp / "bare2.duckdb", events)
    cpu3 = _cpu_s()
    _, store_s = _timed(write_run, Database(tmp / "store-alone.duckdb"), result)
    (tmp / "store-alone.duckdb").unlink()
    bare_s = (bare1 + bare2) / 2
    out: dict[str, Any] = {
        "chips": 4096,
        "steps": steps,
        "events": events.num_rows,
        "simulate_s": sim_s,
        "events_per_s": events.num_rows / sim_s,
        "store_s": store_s,
        "simulate_and_store_s": sim_store_s,
        "simulate_and_store_vs_bare": sim_store_s / bare_s,
        "simulate_and_store_cpu_s": cpu2 - cpu1,
        "bare_insert_cpu_s": [cpu1 - cpu0, cpu3 - cpu2],
        "store_rows_per_s": events.num_rows / store_s,
        "bare_insert_s": bare_s,
        "bare_insert_runs_s": [bare1, bare2],
        "bare_rows_per_s": events.num_rows / bare_s,
        "store_vs_bare_rate": bare_s / store_s,
        "event_chunk_rows": chunked_write.EVENT_CHUNK_ROWS,
        "load_average": [load_before, os.getloadavg()],
        "peak_rss_bytes_after_simulate_and_store": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_rss_bytes_after_simulate": peak_sim,
        "db_bytes": db.path.stat().st_size,
        "db_path": str(db.path),
    }
    if chunk_variants:
        # the chunk size trades write rate against a waiting reader's worst delay (profiler/chunked_write.py)
        variants = {}
        default = chunked_write.EVENT_CHUNK_ROWS
        try:
            for rows in (500_000, 2_000_000, 4_000_000, events.num_rows):
                chunked_write.EVENT_CHUNK_ROWS = rows
                path = tmp / f"chunk-{rows}.duckdb"
                bare = _bare_insert_s(tmp / "bare-v.duckdb", events)  # each variant beside its own bare insert
                _, s = _timed(write_run, Database(path), result)
                variants[str(rows)] = {"store_s": s, "bare_s": bare, "vs_bare": bare / s, "chunks": -(-events.num_rows // rows)}
                path.unlink()
                (tmp / "bare-v.duckdb").unlink()
        finally:
            chunked_write.EVENT_CHUNK_ROWS = default
        out["chunk_rows_variants"] = variants
    for p in ("bare1.duckdb", "bare2.duckdb"):
        (tmp / p).unlink(missing_ok=True)
    return out


def bench_queries(db_path: str, repeats: int) -> dict[str, Any]:
    """Section 3: every dashboard page's queries (benchmarks/bench_dashboard.py's lists) and figure sizes."""
    from benchmarks.bench_dashboard import figure_sizes, measure_pages

    db = Database(db_path, read_only_reads=False)  # as the dashboard opens it
    with db.read() as con:
        run_id = int(con.execute("SELECT max(run_id) FROM runs").fetchone()[0])
    pages = measure_pages(db, run_id, repeats)
    return {"pages": pages, "figure_bytes": figure_sizes(db, run_id)}


def bench_sweep_summary_mode(tmp: Path, points: int) -> dict[str, Any]:
    """Section 4a: summary-mode runs simulated and stored in this process (store.write_runs), runs/s."""
    db = Database(tmp / "sweep.duckdb")

    def results():
        for i in range(points):
            yield simulate(scenario_from_dict(all_causes_scenario("8x8x4", 100, trace="summary", seed=i)))

    t0 = time.perf_counter()
    write_runs(db, results())
    dt = time.perf_counter() - t0
    return {"points": points, "chips": 256, "steps": 100, "wall_s": dt, "runs_per_s": points / dt}


def bench_sweeps(tmp: Path, points: int, trace: str, executors: tuple[str, ...]) -> list[dict[str, Any]]:
    """Section 4b: a ``points``-point sweep of 256-chip, 100-step scenarios through profiler/sweep.py.

    Times the executor start (process spawn / Dask LocalCluster) apart from the sweep itself.
    """
    from profiler.sweep import make_executor, run_sweep

    base = all_causes_scenario("8x8x4", 100, trace=trace)
    (tmp / "sweep-base.toml").write_text(scenario_to_toml(base))
    out = []
    for kind in executors:
        path = tmp / f"sweep-{kind}-{trace}.toml"
        path.write_text(
            f'name = "bench-{kind}-{trace}"\nbase = "sweep-base.toml"\n'
            f'[random]\nsamples = {points}\nseed = 0\n[random.keys]\n"sim.seed" = {{ low = 0, high = 1000000000, integer = true }}\n'
        )
        db = Database(tmp / f"sweep-{kind}-{trace}.duckdb")
        (executor, close), start_s = _timed(make_executor, kind, workers=2)
        try:
            # warm every worker (imports) so the sweep measures steady state
            _, warm_s = _timed(lambda ex=executor: list(ex.map(abs, range(4))))
            warm_s += start_s
            res, dt = _timed(run_sweep, path, db, executor)
        finally:
            close()
        out.append({
            "executor": kind, "workers": 2, "trace": trace, "points": res.points, "stored": len(res.stored),
            "failed": len(res.failed), "executor_start_s": warm_s, "sweep_s": dt, "runs_per_s": len(res.stored) / dt,
        })  # fmt: skip
    return out


_GROWTH_CHILD = r"""
import json, resource, sys, time
from engine import scenario_from_dict, simulate
from profiler.store import Database, write_run
raw = json.loads(sys.argv[1])
t0 = time.perf_counter()
r = simulate(scenario_from_dict(raw))
t1 = time.perf_counter()
write_run(Database(sys.argv[2]), r)
t2 = time.perf_counter()
# VmHWM, not ru_maxrss: ru_maxrss survives exec, so a child would report its parent's peak
hwm_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"simulate_s": t1 - t0, "store_s": t2 - t1, "events": r.trace.events.num_rows,
                  "peak_rss_bytes": hwm_kib * 1024}))
"""


def bench_growth(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    """Section 5: each case in a fresh subprocess (its own peak memory); ns per chip-step."""
    # (topology, slices, steps): 256, 1,024, 4,096, 16,384 chips at 100 steps, then 4,096 and 16,384 at 1,000
    cases = [("8x8x4", 1, 100), ("8x8x16", 1, 100), ("16x16x16", 1, 100), ("16x16x16", 4, 100), ("8x8x4", 1, 1000),
             ("16x16x16", 1, 1000), ("16x16x16", 4, 1000)]  # fmt: skip
    if quick:
        cases = cases[:3]
    out = []
    for topo, slices, steps in cases:
        for trace in ("full", "summary"):
            chips = slices
            for a in topo.split("x"):
                chips *= int(a)
            if trace == "full" and chips * steps > 4096 * 1000:
                continue  # 16,384 chips x 1,000 steps of events (~115 M rows): summary mode at that scale
            raw = all_causes_scenario(topo, steps, slices=slices, trace=trace)
            out.append(_growth_row(raw, tmp / f"growth-{topo}-{slices}-{steps}-{trace}.duckdb", chips, steps, trace))
    return out


def _growth_row(raw: dict, db_path: Path, chips: int, steps: int, trace: str) -> dict[str, Any]:
    """Simulate and store ``raw`` in a fresh process (its own peak memory): times, events, peak, ns per chip-step."""
    p = subprocess.run(
        [sys.executable, "-c", _GROWTH_CHILD, json.dumps(raw), str(db_path)], cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    db_path.unlink(missing_ok=True)
    row = json.loads(p.stdout)
    row.update({"chips": chips, "steps": steps, "trace": trace})
    row["ns_per_chip_step"] = (row["simulate_s"] + row["store_s"]) / (chips * steps) * 1e9
    row["simulate_ns_per_chip_step"] = row["simulate_s"] / (chips * steps) * 1e9
    return row


#: the bundled 199-slice job (50,944 TPU v5e chips), sampled
SAMPLED_SCENARIO = ROOT / "data/scenarios/llm-32b-v5e-199-slices-sampled.toml"


def bench_sampled(tmp: Path, steps: int, growth: list[dict[str, Any]]) -> dict[str, Any]:
    """Section 6: the 199-slice v5e job sampled, against the 4,096-chip full run, each in a fresh process.

    Two sampled runs of ``steps`` steps: the bundled scenario as it is, and with stragglers, jit
    compiles and a failure on (as the 4,096-chip run has). Each one's cost per chip-step
    (simulate + store over every chip's steps) is divided by the full run's at the same step
    count: from this bench run's growth table when it holds that case, else measured here.
    """
    import tomllib

    full = next((g for g in growth if g["chips"] == 4096 and g["steps"] == steps and g["trace"] == "full"), None)
    if full is None:
        full = _growth_row(all_causes_scenario("16x16x16", steps), tmp / "full-4096.duckdb", 4096, steps, "full")
    raw = tomllib.loads(SAMPLED_SCENARIO.read_text())
    raw["training"]["steps"] = steps
    causes = {
        "stragglers": {"random_fraction": 0.001, "random_slowdown_max": 1.05, "chips": [5], "slowdown": 1.25},
        "compile": {"jit": True},
        "failures": {"fail_at_steps": [steps // 2], "checkpoint_every_steps": max(1, steps // 10)},
    }
    chips = raw["pod"]["slices"] * 256
    out: dict[str, Any] = {"full_4096": full}
    for label, case in (("sampled", raw), ("sampled_all_causes", {**raw, **causes})):
        row = _growth_row(case, tmp / f"{label}.duckdb", chips, steps, "sampled")
        row["sample_chips"] = raw["sim"]["sample_chips"]
        row["cost_vs_full_per_chip_step"] = row["ns_per_chip_step"] / full["ns_per_chip_step"]
        out[label] = row
    return out


def _sampled_lines(report: dict[str, Any]) -> str:
    """Section 6 as text."""
    sm = report["sampled"]
    names = {"sampled": "sampled, bundled scenario", "sampled_all_causes": "sampled, + stragglers, compiles, a failure",
             "full_4096": "full trace, all idle causes"}  # fmt: skip
    lines = []
    for key, label in names.items():
        g = sm[key]
        ratio = f"; {g['cost_vs_full_per_chip_step']:.2f}x the full run's" if "cost_vs_full_per_chip_step" in g else ""
        lines.append(
            f"6. {label:<43} {g['chips']:>6} chips x {g['steps']:>4} steps: sim {g['simulate_s']:6.2f} s, store {g['store_s']:5.2f} s, "
            f"{g['events']:,} events, {g['ns_per_chip_step']:5.0f} ns/chip-step{ratio}, peak {g['peak_rss_bytes'] / 2**30:.2f} GiB"
        )
    return "\n".join(lines)


def _print_storage(sim: dict[str, Any]) -> None:
    la = sim["load_average"]
    print(f"1. simulate {sim['chips']} chips x {sim['steps']} steps, all idle causes: {sim['simulate_s']:.2f} s, "
          f"{sim['events']:,} events ({sim['events_per_s'] / 1e6:.2f} M events/s); simulated + stored {sim['simulate_and_store_s']:.2f} s, "
          f"{sim['simulate_and_store_vs_bare']:.2f}x the bare insert; peak RSS {sim['peak_rss_bytes_after_simulate_and_store'] / 2**30:.2f} GiB "
          f"(load {la[0][0]:.1f} -> {la[1][0]:.1f}); CPU {sim['simulate_and_store_cpu_s']:.2f} s against "
          f"{', '.join(f'{c:.2f}' for c in sim['bare_insert_cpu_s'])} s for the bare inserts")  # fmt: skip
    print(f"2. store alone {sim['store_s']:.2f} s ({sim['store_rows_per_s'] / 1e6:.2f} M rows/s, chunks of {sim['event_chunk_rows']:,}); "
          f"bare insert {sim['bare_insert_s']:.2f} s ({', '.join(f'{b:.2f}' for b in sim['bare_insert_runs_s'])}); "
          f"store/bare rate {sim['store_vs_bare_rate']:.0%}")  # fmt: skip


def storage_only(repeats: int, steps: int, as_json: bool) -> int:
    """Sections 1-2 alone, ``repeats`` times in this process: each run's numbers, then min and median of the ratio."""
    import statistics

    runs = []
    with tempfile.TemporaryDirectory(prefix="podscope-bench-") as d:
        for _ in range(repeats):
            runs.append(bench_simulation_and_storage(Path(d), steps, chunk_variants=False))
            (Path(d) / "podscope.duckdb").unlink()
    ratios = [r["simulate_and_store_vs_bare"] for r in runs]
    if as_json:
        print(json.dumps({"runs": runs, "ratio_min": min(ratios), "ratio_median": statistics.median(ratios)}, indent=1))
        return 0
    for r in runs:
        _print_storage(r)
    print(f"simulated + stored / bare insert: min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x over {repeats} runs")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run (~1 minute)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--sampled-only", action="store_true", help="section 6 alone: the 199-slice sampled runs and the 4,096-chip full run")
    ap.add_argument("--storage", type=int, metavar="N", help="only sections 1-2, N times (min and median of the ratio)")
    args = ap.parse_args()
    if args.storage:
        return storage_only(args.storage, 100 if args.quick else 1000, args.json)
    steps = 100 if args.quick else 1000
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "duckdb": duckdb.__version__,
        },
        "load_average_start": os.getloadavg(),
    }

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.sampled_only:
        with tempfile.TemporaryDirectory(prefix="podscope-bench-") as d:
            say("6. sampled 199-slice runs ...")
            report["sampled"] = bench_sampled(Path(d), steps, [])
        report["load_average_end"] = os.getloadavg()
        la0, la1 = report["load_average_start"], report["load_average_end"]
        text = f"machine: {os.cpu_count()} cores, load average {la0[0]:.1f} at start, {la1[0]:.1f} at end\n" + _sampled_lines(report)
        print(json.dumps(report, indent=1) if args.json else text)
        return 0
    with tempfile.TemporaryDirectory(prefix="podscope-bench-") as d:
        tmp = Path(d)
        say("1-2. simulation and storage ...")
        report["simulation"] = bench_simulation_and_storage(tmp, steps, chunk_variants=not args.quick)
        say("3. dashboard queries ...")
        report["queries"] = bench_queries(report["simulation"]["db_path"], 5 if args.quick else 20)
        (tmp / "podscope.duckdb").unlink()
        say("4. sweeps ...")
        points = 20 if args.quick else 100
        report["sweep_in_process"] = bench_sweep_summary_mode(tmp, points)
        report["sweeps"] = bench_sweeps(tmp, points, "summary", ("local", "dask"))
        if not args.quick:
            report["sweeps"] += bench_sweeps(tmp, points, "full", ("local",))
        say("5. growth ...")
        report["growth"] = bench_growth(tmp, args.quick)
        say("6. sampled 199-slice runs ...")
        report["sampled"] = bench_sampled(tmp, steps, report["growth"])
    report["load_average_end"] = os.getloadavg()
    report["peak_rss_bytes_main"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    la0, la1 = report["load_average_start"], report["load_average_end"]
    print(f"machine: {os.cpu_count()} cores, load average {la0[0]:.1f} at start, {la1[0]:.1f} at end; duckdb {duckdb.__version__}")
    sim = report["simulation"]
    _print_storage(sim)
    for rows, v in sim.get("chunk_rows_variants", {}).items():
        print(f"   chunk {int(rows):>10,} rows: {v['chunks']:>3} chunks, store {v['store_s']:.2f} s, bare {v['bare_s']:.2f} s, {v['vs_bare']:.0%} of bare")
    for row in report["queries"]["pages"]:
        print(f"3. page {row['page']:<36} {row['queries']:>2} queries: p50 {row['p50_ms']:6.1f} ms, p95 {row['p95_ms']:6.1f} ms")
    for name, size in report["queries"]["figure_bytes"].items():
        print(f"3. figure {name:<36} {size / 1e6:.2f} MB")
    sw = report["sweep_in_process"]
    print(f"4. summary mode in process (simulate + store.write_runs), 256 chips x 100 steps: {sw['runs_per_s']:.1f} runs/s")
    for sw in report["sweeps"]:
        print(f"4. sweep {sw['points']} points [{sw['trace']}] on {sw['executor']} ({sw['workers']} workers): "
              f"{sw['runs_per_s']:.1f} runs/s ({sw['sweep_s']:.1f} s, executor start {sw['executor_start_s']:.1f} s, {sw['failed']} failed)")  # fmt: skip
    for g in report["growth"]:
        print(
            f"5. {g['chips']:>6} chips x {g['steps']:>4} steps [{g['trace']:>7}]: sim {g['simulate_s']:6.2f} s, "
            f"store {g['store_s']:5.2f} s, {g['ns_per_chip_step']:5.0f} ns/chip-step, peak {g['peak_rss_bytes'] / 2**30:.2f} GiB"
        )
    print(_sampled_lines(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
