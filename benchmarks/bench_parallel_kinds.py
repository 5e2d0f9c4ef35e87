"""Benchmark: one 4,096-chip x 1,000-step full-trace run each of a dense, a MoE and a pipelined LLM.

Prints wall and CPU seconds of ``simulate`` and the event rows of each, so the MoE and pipeline
runs can be compared with the dense one side by side (CPU time is the steadier figure on a
shared machine). Run from the repository root: ``python -m benchmarks.bench_parallel_kinds``.
Not a test.
"""

from __future__ import annotations

import time

from engine import scenario_from_dict, simulate

_MODEL = {"kind": "transformer", "layers": 16, "d_model": 2048, "heads": 16, "d_ff": 8192, "vocab": 32000, "seq_len": 2048}
CASES = {
    "dense": ({}, {"fsdp": 64}, {}),
    "moe": ({"experts": 16, "experts_per_token": 2, "d_ff_expert": 4096}, {"fsdp": 16, "expert": 16}, {}),
    "pipeline": ({}, {"fsdp": 64, "pipeline": 4}, {"microbatches": 8}),
}


def run(kind: str) -> dict:
    model, par, training = CASES[kind]
    s = scenario_from_dict({
        "name": kind, "pod": {"chip": "tpu-v4", "topology": "16x16x16"}, "model": {**_MODEL, **model},
        "training": {"global_batch": 8192, "steps": 1000, **training}, "parallelism": par,
    })  # fmt: skip
    wall, cpu = time.perf_counter(), time.process_time()
    r = simulate(s)
    return {"kind": kind, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "events": r.trace.events.num_rows}


if __name__ == "__main__":
    for kind in CASES:
        print(run(kind))
