"""Benchmark: one collective on a 4,096-chip 3D torus, and per-link traffic for all its links.

A script, not a test (timings depend on the machine). Run from the repository root:

    python -m benchmarks.bench_collectives

Prints the median wall time of: planning + timing one all-reduce (closed form);
building and loading all 24,576 directed links; the same with one failed link
(networkx detour); and a full ``simulate()`` of a 4,096-chip run with link load.
"""

from __future__ import annotations

import statistics
import time

from engine import build_pod, load_calibration, load_catalog
from engine.comm import Fabric, collective_on_pod, collective_time, ring_schedule
from engine.scenario import LinkRef


def bench(label: str, fn, repeat: int) -> float:
    fn()  # warm caches and imports
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"{label:70s} {med * 1e3:10.3f} ms (median of {repeat})")
    return med


def main() -> None:
    cat, cal = load_catalog(), load_calibration()
    pod = build_pod(cat["tpu-v4"], (16, 16, 16))
    shape, wrap = pod.slice.shape, pod.slice.wrap
    link = pod.chip.ici_link_bytes_per_s * cal.ici_efficiency
    v = 4e9  # a 1B-parameter model's fp32 gradients

    def one_collective():
        return collective_time(ring_schedule("all-reduce", v, shape, wrap), link, cal.ici_hop_latency_s)

    res = one_collective()
    print(f"all-reduce of {v:.0e} B on v4 16x16x16: {res.time_s * 1e3:.3f} ms, busbw {res.busbw_bytes_per_s / 1e9:.1f} GB/s")
    bench("one all-reduce, 4,096-chip 3D torus (closed form)", one_collective, 200)
    for op in ("reduce-scatter", "all-gather", "all-to-all"):
        bench(f"one {op}, 4,096-chip 3D torus", lambda op=op: collective_time(ring_schedule(op, v, shape, wrap), link, 1e-6), 200)

    plan = ring_schedule("all-reduce", v, shape, wrap)

    def all_links():
        f = Fabric(pod.slice, link)
        return f.link_load_table(plan, 1.0, 1.0, 0, f.stage_loads(plan))

    table = all_links()
    print(f"link-load table: {table.num_rows} directed links")
    bench("per-link traffic, all links of a 4,096-chip torus (healthy)", all_links, 20)

    failed = [LinkRef(a=[0, 0, 0], b=[1, 0, 0])]
    bench("one all-reduce with a failed link (networkx detour + link loads)",
          lambda: collective_on_pod("all-reduce", v, pod, cal, failed=failed), 5)  # fmt: skip
    ok = collective_on_pod("all-reduce", v, pod, cal)[0].time_s
    bad = collective_on_pod("all-reduce", v, pod, cal, failed=failed)[0].time_s
    print(f"failed link slows the all-reduce {bad / ok:.2f}x ({ok * 1e3:.3f} -> {bad * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
