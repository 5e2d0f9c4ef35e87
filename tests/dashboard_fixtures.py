"""Runs for dashboard tests that carry every extra table and summary key the engine helpers add.

The engine on main does not yet write link load, compile logs, memory timelines or advice; these
are filled by hand per the contracts in the helper brief, so the pages are tested against them now.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from engine import simulate


def extras_result(scenario):
    """Simulate ``scenario`` (a 2x2x2 torus) and attach hand-made extra tables and summary keys."""
    result = simulate(scenario)
    chips = result.trace.chips.to_pandas()
    # Directed +x and +y neighbour links inside the 2x2x2 torus.
    coord = {(r.x, r.y, r.z): r.chip for r in chips.itertuples()}
    src, dst, axis = [], [], []
    for (x, y, z), c in coord.items():
        for ax, nb in (("x", ((x + 1) % 2, y, z)), ("y", (x, (y + 1) % 2, z))):
            src.append(c)
            dst.append(coord[nb])
            axis.append(ax)
    n = len(src)
    extra = {
        "link_load": pa.table({
            "src_chip": pa.array(src, pa.int32()), "dst_chip": pa.array(dst, pa.int32()), "axis": axis,
            "bytes_per_step": np.linspace(1e6, 2e6, n), "busy_ns_per_step": pa.array(np.arange(n) * 1000, pa.int64()),
            "utilization": np.linspace(0.1, 0.9, n), "bandwidth_frac": np.ones(n),
        }),
        "compiles": pa.table({
            "step": pa.array([0, 0, 5], pa.int32()), "signature": ["f32[32]", "f32[32,8]", "f32[16]"],
            "cause": ["first call", "first call", "batch shape changed"], "compile_ns": pa.array([3 * 10**9, 10**9, 2 * 10**9], pa.int64()),
        }),
        "memory_timeline": pa.table({
            "point": pa.array([0, 0, 1, 1, 2, 2], pa.int32()), "phase": ["fwd", "fwd", "bwd", "bwd", "update", "update"],
            "category": ["params", "activations"] * 3, "bytes": [1e9, 2e9, 1e9, 4e9, 1e9, 0.5e9],
        }),
        "chip_memory": pa.table({"chip": pa.array(range(8), pa.int32()), "peak_bytes": np.linspace(5e9, 6e9, 8)}),
    }  # fmt: skip
    facts = dataclasses.replace(result.facts, extra={
        "advice": [
            {"rule": "input_bound", "severity": "warning", "message": "Input pipeline stalls 12% of steps.", "evidence": {"input_wait_frac": 0.12}},
            {"rule": "recompiles", "severity": "critical", "message": "Shapes change every step.", "evidence": {"recompiles": 3}},
        ],
        "recompiles": 3, "compile_s": 6.0, "oom_detail": None, "stragglers": [3],
    })  # fmt: skip
    trace = dataclasses.replace(result.trace, extra=extra)
    return dataclasses.replace(result, trace=trace, facts=facts)
