"""Benchmark: a 4,096-chip FSDP x TP GPT-3 run, 100 steps; prints wall time and events per chip-step.

Run from the repository root: `python -m benchmarks.bench_parallelism`. Not a test.
"""

import time
from engine import scenario_from_dict, simulate
raw = {"name": "gpt3-4096", "pod": {"chip": "tpu-v4", "topology": "16x16x16"},
       "model": {"kind": "transformer", "layers": 96, "d_model": 12288, "heads": 96, "d_ff": 49152, "vocab": 50257, "seq_len": 2048},
       "training": {"global_batch": 4096, "steps": 100, "remat": "full"}, "parallelism": {"fsdp": 256, "tensor": 16}}
t = time.perf_counter(); r = simulate(scenario_from_dict(raw)); dt = time.perf_counter() - t
print(f"simulate 4096 chips x 100 steps: {dt:.2f} s, events {r.trace.events.num_rows:,} ({r.trace.events.num_rows/4096/100:.1f} per chip-step)")
print({k: v.num_rows for k, v in r.trace.extra.items()}, r.facts.extra["mesh"], r.facts.peak_hbm_bytes/2**30, r.facts.oom)
