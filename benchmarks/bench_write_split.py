"""Where a full-trace run's simulate + store time goes: ``python -m benchmarks.bench_write_split [STEPS]``.

Simulates and stores the benchmark pod run (4,096 chips, every idle cause, full events;
``benchmarks/bench.py``) through ``simulate_and_write``, as ``podscope run`` does, with a
``perf_counter`` around each stage (the real functions, wrapped in this process):

* before layout: everything ``simulate`` does before the first block (costs, idle plan);
* layout: walking the segments of each block of steps and its exact totals by kind;
* event columns: the block's events as numpy columns, then as an Arrow record batch;
* opening the file; the DuckDB ``INSERT`` of each chunk; the rest of the chunk transactions
  (BEGIN, COMMIT); closing the file, at the end and whenever the writer lets a reader in
  (``WRITER_MAX_HOLD_S``; DuckDB checkpoints on close), with the pause after it;
* staging and summary (without the file); publishing (small tables and the ``runs`` row).

The events table has no index or key (queries filter it by run, chip and step, and DuckDB's
zonemaps on the insertion order serve them), so no index is maintained.

The engine's stages run on the simulation thread while the writer inserts, so the stages sum
to more than the wall time; the wall time and the process's CPU time are printed beside them.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import engine.model.step as step
from benchmarks.bench import all_causes_scenario
from engine import scenario_from_dict
from profiler import chunked_write, streamed_write
from profiler.connection import Database

_SIMULATE = sys.modules["engine.simulate"]  # the module (engine.simulate is also the function)


def main(steps: int) -> int:
    spent: dict[str, float] = defaultdict(float)
    first_block = {"at": None}

    def timed(module, name: str, label: str):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - t0

        setattr(module, name, wrapper)

    real_lay_out = step._lay_out_block

    def lay_out(*args, **kwargs):
        if first_block["at"] is None:
            first_block["at"] = time.perf_counter()
        return real_lay_out(*args, **kwargs)

    step._lay_out_block = lay_out
    timed(step, "_lay_out_block", "layout")
    timed(step, "_add_kind_totals", "layout")
    timed(step, "_block_events", "event columns (numpy + Arrow)")
    timed(step, "events_batch", "  of which Arrow record batch")
    timed(chunked_write, "insert_events", "DuckDB insert")
    timed(streamed_write, "stage", "staging and summary")
    timed(streamed_write, "summarise", "staging and summary")
    timed(chunked_write, "publish", "publishing")
    timed(chunked_write.HeldWriter, "_release", "closing and handing the file over")
    timed(Database, "_open", "opening the file")
    real_transaction = chunked_write.transaction

    @contextmanager
    def transaction(con):
        t0 = time.perf_counter()
        try:
            with real_transaction(con):
                yield
        finally:
            spent["transactions"] += time.perf_counter() - t0

    chunked_write.transaction = transaction

    scenario = scenario_from_dict(all_causes_scenario("16x16x16", steps))
    with tempfile.TemporaryDirectory(prefix="podscope-split-") as d:
        load = os.getloadavg()
        c0, t0 = os.times(), time.perf_counter()
        _, result = streamed_write.simulate_and_write(Database(Path(d) / "split.duckdb"), scenario)
        wall = time.perf_counter() - t0
        c1 = os.times()
    spent["before layout"] = first_block["at"] - t0
    spent["BEGIN / COMMIT"] = spent["transactions"] - spent["DuckDB insert"] - spent["publishing"]
    cpu = c1.user - c0.user + c1.system - c0.system
    print(f"4,096 chips x {steps} steps, {result.facts.steps} steps stored; load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    for label in ("before layout", "layout", "event columns (numpy + Arrow)", "  of which Arrow record batch", "opening the file",
                  "DuckDB insert", "BEGIN / COMMIT", "closing and handing the file over", "staging and summary", "publishing"):  # fmt: skip
        print(f"{label:<40} {spent[label]:6.2f} s")
    print(f"{'wall time (simulate + store)':<40} {wall:6.2f} s")
    print(f"{'CPU time of the process':<40} {cpu:6.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
