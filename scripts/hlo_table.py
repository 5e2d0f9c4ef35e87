"""Reproduce docs/hlo.md's tables: each HLO fixture against XLA's own cost_analysis, and the
HLO-vs-built-in transformer cross-check, as Markdown rows::

    python -m scripts.hlo_table

The fixtures are real ``compiled.as_text()`` output (scripts/fixtures/make_jax_hlo.py); XLA's
numbers were saved beside each when it was compiled. ``tests/test_hlo_docs.py`` regenerates
the tables and fails if docs/hlo.md drifted from them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine import load_scenario, scenario_from_dict, simulate
from engine.hlo import load_hlo

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "tests" / "fixtures" / "hlo"
EXAMPLE = ROOT / "data" / "scenarios" / "jax-transformer-hlo-v5p-8.toml"


def fixture_rows() -> list[str]:
    rows = [
        "| fixture | devices | Podscope FLOPs/device | XLA cost_analysis | difference | with while trip counts | collectives |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for hlo in sorted(FIXTURES.glob("*.hlo.txt.gz")):
        name = hlo.name.removesuffix(".hlo.txt.gz")
        xla = json.loads((FIXTURES / f"{name}.cpu.json").read_text())["xla_cost_analysis"]["flops"]
        once = load_hlo(hlo, count_trip_counts=False)  # XLA's convention: every loop body once
        full = load_hlo(hlo)
        colls = ", ".join(f"{op} x{int(t['count'])}" for op, t in full.collective_totals().items()) or "none"
        rows.append(
            f"| {name} | {once.devices} | {once.flops_per_device:,.0f} | {xla:,.0f} | {100 * (once.flops_per_device / xla - 1):+.3f}% "
            f"| {full.flops_per_device:,.0f} | {colls} |"
        )
    return rows


def cross_check_rows() -> list[str]:
    meta = json.loads((FIXTURES / "transformer_dp8.cpu.json").read_text())["describes"]
    dims = {k: meta[k] for k in ("layers", "d_model", "heads", "d_ff", "vocab", "seq_len")}
    builtin_raw = {
        "name": "builtin", "pod": {"chip": "tpu-v5p", "topology": "2x2x2"}, "model": {"kind": "transformer", **dims, "attention": "standard"},  # the fixture's attention is plain einsums
        # the CPU-compiled fixture all-reduces its gradients in f32: the weights' dtype
        "training": {"global_batch": 16, "steps": 20, "precision": "bf16", "optimizer": "sgd", "gradient_reduce_dtype": "weights"},
        "parallelism": {"data": 8}, "sim": {"jitter_frac": 0.0},
    }  # fmt: skip
    runs = {
        "built-in transformer": simulate(scenario_from_dict(builtin_raw)),
        "HLO module": simulate(load_scenario(EXAMPLE, overrides={"training.steps": 20, "sim.jitter_frac": 0.0})),
    }
    rows = [
        "| model | FLOPs per step (job) | step time | compute | collective |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, run in runs.items():
        step = float(np.median(run.trace.steps.column("step_ns").to_numpy())) / 1e6
        by_kind = {}
        for kind, dur in zip(run.trace.events.column("kind").to_pylist(), run.trace.events.column("dur_ns").to_numpy()):
            by_kind[kind] = by_kind.get(kind, 0) + int(dur)
        total = sum(by_kind.values())
        rows.append(
            f"| {label} | {run.facts.hardware_flops_per_step:,.0f} | {step:.3f} ms | {100 * by_kind.get('compute', 0) / total:.1f}% "
            f"| {100 * by_kind.get('collective', 0) / total:.1f}% |"
        )
    return rows


def main() -> int:
    print("\n".join(fixture_rows()))
    print()
    print("\n".join(cross_check_rows()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
