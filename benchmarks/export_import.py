"""Benchmark export and import on a large run (a script, not a test): python -m benchmarks.export_import.

Simulates ResNet-50 on a 4,096-chip v4 slice (16x16x16, 100 steps), then times the default
(windowed) Perfetto export, a gzipped one, the Parquet export of the whole run, and the
import of the Perfetto export back into the database. Numbers go in docs/performance.md.
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path


from profiler import api


def timed(label: str, fn):  # noqa: ANN001, ANN201
    t = time.perf_counter()
    out = fn()
    print(f"{label}: {time.perf_counter() - t:.2f} s")
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        db = api.Database(d / "bench.duckdb")
        s = timed("simulate+store 4096 chips x 100 steps", lambda: api.run_file(
            api.BUNDLED_SCENARIOS_DIR / "resnet50-v4-128.toml", db,
            overrides={"pod.topology": "16x16x16", "parallelism.data": 4096, "training.global_batch": 65536}))  # fmt: skip
        print(f"  events stored: {s['events']:,}")
        r = timed("export perfetto (default window)", lambda: api.export_run(db, s["run_id"], "perfetto", d / "t.json"))
        print(f"  {r.message()}\n  size {(d / 't.json').stat().st_size / 2**20:.1f} MiB")
        r = timed("export perfetto .gz (default window)", lambda: api.export_run(db, s["run_id"], "perfetto", d / "t.json.gz"))
        print(f"  size {(d / 't.json.gz').stat().st_size / 2**20:.1f} MiB")
        r = timed("export parquet (whole run)", lambda: api.export_run(db, s["run_id"], "parquet", d / "pq"))
        print(f"  {r.events:,} events, {sum(p.stat().st_size for p in (d / 'pq').iterdir()) / 2**20:.1f} MiB")
        run_id = timed("import the perfetto export", lambda: api.import_trace(db, d / "t.json.gz"))
        back = api.summary(db, run_id)
        print(f"  imported {back['events']:,} events; step time {back['step_time_s']:.6f} s vs {s['step_time_s']:.6f} s simulated")
        print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
