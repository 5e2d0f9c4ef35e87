"""A scripted what-if study with Podscope's Python API: load, override, simulate, store, query.

    python -m examples.scripted_run [--db PATH]

Runs ResNet-50 on a v4-128 slice at three global batch sizes, stores each run, then asks
the query layer for the headline numbers and the chip-time breakdown of the best one.
"""

from __future__ import annotations

import argparse


from profiler import api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="DuckDB file (default: $PODSCOPE_DB or data/podscope.duckdb)")
    args = parser.parse_args()
    db = api.Database(args.db)
    scenario = api.BUNDLED_SCENARIOS_DIR / "resnet50-v4-128.toml"
    summaries = []
    for batch in (2048, 4096, 8192):
        s = api.run_file(scenario, db, name=f"resnet50-v4-128 batch {batch}",
                         overrides={"training.global_batch": batch, "training.steps": 20})  # fmt: skip
        summaries.append(s)
        print(f"batch {batch:5d}: step {s['step_time_s'] * 1e3:7.2f} ms, {s['samples_per_s']:10,.0f} samples/s, MFU {s['mfu']:.1%}")
    best = max(summaries, key=lambda s: s["samples_per_s"])
    breakdown = api.breakdown(db, best["run_id"])
    print(f"best: {best['name']} (run {best['run_id']})")
    print(breakdown.to_string(index=False))


if __name__ == "__main__":
    main()
