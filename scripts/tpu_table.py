"""docs/hlo.md's TPU tables, measured on the committed libtpu bundles (tests/fixtures/tpu/)::

    python -m scripts.tpu_table [--write]

For each bundle: Podscope's FLOPs against XLA's own ``cost_analysis`` (which takes every
loop body once) and with every trip counted, the parameters in their TPU tiles against
XLA's argument bytes, and the collectives; per op, Podscope's roofline time against the
compiler's ``estimated_cycles`` at the catalog clock; and per generation, the compiler's
estimate for one 8192^3 bf16 matmul at that clock against the chip's peak and against
libtpu's ``optimal_seconds``.
"""

from __future__ import annotations

import numpy as np

from engine.hlo import load_hlo
from engine.hlo.module_file import cached_program
from engine.hlo.step import hlo_step_cost
from engine.pod.catalog import load_catalog
from engine.pod.topology import build_pod
from engine.scenario import InterconnectSection
from engine.scenario.calibration import load_calibration
from scripts.docs_blocks import DOCS, block_main

PAGE = DOCS / "hlo.md"
BLOCK = "tpu-tables"
FIXTURES = DOCS.parent / "tests" / "fixtures" / "tpu"


def _programs():
    for side in sorted(FIXTURES.glob("*.xla.json")):
        prog = cached_program(side)
        if prog.cost is not None:
            yield side.name.removesuffix(".xla.json"), prog


def _weighted_median(x: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(x)
    cum = np.cumsum(w[order]) / w.sum()
    return float(x[order][np.searchsorted(cum, 0.5)])


def flops_rows() -> list[str]:
    rows = ["| bundle | target | XLA FLOPs (bodies once) | Podscope, bodies once | every trip | tiled parameters = XLA argument bytes | collectives (async) |",
            "|---|---|---:|---:|---:|---|---|"]  # fmt: skip
    for name, prog in _programs():
        b, cost = prog.bundle, prog.cost
        once = load_hlo(b.module_path, count_trip_counts=False).flops_per_device
        xla = b.cost["flops"]
        colls = ", ".join(
            f"{op} x{int(t['count'])} ({sum(c.executions for c in cost.collectives if c.op == op and c.asynchronous)})"
            for op, t in cost.collective_totals().items()
        ) or "none"  # fmt: skip
        same = "yes" if cost.padded_parameter_bytes_per_device == b.memory.argument_bytes else "no"
        rows.append(f"| {name} | {b.topology} | {xla:,.0f} | {once:,.0f} ({100 * (once / xla - 1):+.4f}%) "
                    f"| {cost.flops_per_device:,.0f} | {same} ({b.memory.argument_bytes / 2**20:,.1f} MiB) | {colls} |")  # fmt: skip
    return rows


def per_op_rows() -> list[str]:
    cal, catalog = load_calibration(), load_catalog()
    rows = ["| bundle | ops with an estimate | median | p10 | p90 | time-weighted median | whole step, Podscope / XLA |",
            "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, prog in _programs():
        b = prog.bundle
        pod = build_pod(catalog[b.chip], b.slice_shape, b.slices)
        step = hlo_step_cost(prog.cost, pod, cal, InterconnectSection(), "xla", b.devices_per_chip)
        ops = step.ops.to_pandas()
        ops = ops[ops.xla_ns.notna() & (ops.xla_ns > 0) & (ops.podscope_ns > 0)]
        ratio = (ops.podscope_ns / ops.xla_ns).to_numpy(dtype=float)
        weight = (ops.xla_ns * ops.executions).to_numpy(dtype=float)
        rows.append(f"| {name} | {len(ops)} | {np.median(ratio):.2f} | {np.quantile(ratio, 0.1):.2f} | {np.quantile(ratio, 0.9):.2f} "
                    f"| {_weighted_median(ratio, weight):.2f} | {step.podscope_compute_s / step.xla_compute_s:.2f} |")  # fmt: skip
    return rows


def clock_rows() -> list[str]:
    catalog = load_catalog()
    rows = ["| chip | clock (data/chips.toml) | XLA estimate | at peak | compiler's MXU efficiency | libtpu optimal_seconds |",
            "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, prog in _programs():
        if not name.startswith("matmul_"):
            continue
        b = prog.bundle
        chip = catalog[b.chip]
        cycles = sum(o.estimated_cycles * o.executions for o in prog.cost.ops if o.estimated_cycles is not None)
        est_s = cycles / chip.clock_hz
        peak_s = prog.cost.flops_per_device / (chip.peak_bf16_flops_per_s / b.devices_per_chip)
        opt = f"{b.optimal_s * 1e3:.3f} ms" if b.optimal_s else "n/a"
        rows.append(f"| {chip.key} | {chip.clock_hz / 1e9:.2f} GHz | {est_s * 1e3:.3f} ms | {peak_s * 1e3:.3f} ms "
                    f"| {peak_s / est_s:.1%} | {opt} |")  # fmt: skip
    return rows


def render() -> str:
    return "\n".join(flops_rows() + [""] + per_op_rows() + [""] + clock_rows()) + "\n"


if __name__ == "__main__":
    block_main(PAGE, BLOCK, render, __doc__)
