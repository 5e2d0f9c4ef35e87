"""docs/model.md's table of the TPU compiler's cycles in fusions with and without a dot, beside the passes Podscope runs
after an op's matmul (data/reference/xla_fusions.json, ``scripts/fixtures/make_xla_fusions.py``).

    python -m scripts.fusion_table [--write]
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import scenario_from_dict
from engine.model.analytic import step_costs
from engine.model.models import model_cost
from engine.pod.catalog import load_catalog
from engine.scenario.calibration import Calibration, load_calibration
from scripts.docs_blocks import DOCS, block_main

FUSIONS_PATH = Path(__file__).resolve().parent.parent / "data" / "reference" / "xla_fusions.json"


def load_fusions(path: Path = FUSIONS_PATH) -> list[dict[str, Any]]:
    """The fixture's records, in the generator's order."""
    return json.loads(path.read_text())["configurations"]


def podscope_compute_s(scenario: dict[str, Any], cal: Calibration, reduction_passes: bool = True) -> float:
    """Podscope's compute of ``scenario``'s step per chip, its forward, backward and optimizer update (what the
    compiler's cycles cover), seconds; ``reduction_passes=False``: every elementwise pass inside its matmul's roofline,
    none run after it."""
    s = scenario_from_dict(scenario)
    cost = model_cost(s.model)
    if not reduction_passes:
        cost = dataclasses.replace(cost, ops=dataclasses.replace(cost.ops, reduction_pass=None))
    return step_costs(s, cal, cost=cost, tables=False).core_compute_s()


def _across(pair: tuple[dict[str, Any], ...], value: Callable[[dict[str, Any]], float]) -> float:
    """``value`` of a layer (``pair``: its deeper compile, then its shallower: their difference) or of a step (one record)."""
    return sum(k * value(r) for k, r in zip((1.0, -1.0), pair))


def rows(cal: Calibration | None = None) -> list[dict[str, Any]]:
    """One row per transformer layer (the difference of its 2- and 3-layer compiles) and per whole ResNet-50 step:
    ``chip``, ``what``, ``model`` (the scenario's model table), ``per_chip_batch``, the compiler's ``dot_s`` and
    ``other_s`` per device at the catalog clock, ``other_share``, ``beyond_hbm_s`` (of ``other_s``, the cycles past what
    the ops' bytes take at the catalog's HBM bandwidth), and Podscope's ``podscope_s`` and ``inside_s`` (every
    pass inside the matmul's roofline) per chip, ``passes_s`` (the passes it runs after the matmul: their difference)
    and both against the compiler's total (``diff_pct``, ``inside_diff_pct``)."""
    cal = cal or load_calibration()
    catalog = load_catalog()
    records = {r["id"]: r for r in load_fusions()}
    out = []
    for rid, rec in records.items():
        if rid.endswith("-L3"):
            continue
        if rid.endswith("-L2"):
            deeper = records[rid[:-1] + "3"]
            pair, what = (deeper, rec), "one layer"
        else:
            pair, what = (rec,), "whole step"
        sc = rec["scenario"]
        chip = catalog[sc["pod"]["chip"]]
        dot = _across(pair, lambda r: r["xla"]["cycles_per_device"]["dot"]) / chip.clock_hz
        other = _across(pair, lambda r: r["xla"]["cycles_per_device"]["other"]) / chip.clock_hz
        beyond = _across(pair, lambda r: r["xla"]["other_cycles_beyond_hbm_per_device"]) / chip.clock_hz
        pod = _across(pair, lambda r: podscope_compute_s(r["scenario"], cal))
        inside = _across(pair, lambda r: podscope_compute_s(r["scenario"], cal, reduction_passes=False))
        xla = dot + other
        out.append({"chip": sc["pod"]["chip"], "what": what, "model": sc["model"], "per_chip_batch": scenario_from_dict(sc).per_chip_batch,
                    "dot_s": dot, "other_s": other, "other_share": other / xla, "beyond_hbm_s": beyond, "podscope_s": pod, "inside_s": inside, "passes_s": pod - inside,
                    "diff_pct": 100.0 * (pod / xla - 1.0), "inside_diff_pct": 100.0 * (inside / xla - 1.0)})  # fmt: skip
    return out


def render() -> str:
    lines = ["| chip | program | compiler: fusions with a dot | without | share without | of those, past their bytes' time at "
             "the HBM bandwidth | Podscope: passes after the matmul | Podscope against the compiler "
             "| with every pass inside the matmul's roofline |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows():
        m = r["model"]
        program = (f"ResNet-50, {r['per_chip_batch']} images per chip" if m["kind"] == "resnet50"
                   else f"a `d_model` {m['d_model']} layer")  # fmt: skip
        lines.append(f"| {r['chip']} | {program} | {1e3 * r['dot_s']:.1f} ms | {1e3 * r['other_s']:.1f} ms | "
                     f"{100 * r['other_share']:.0f}% | {1e3 * r['beyond_hbm_s']:.1f} ms | {1e3 * r['passes_s']:.2f} ms | {r['diff_pct']:+.1f}% | "
                     f"{r['inside_diff_pct']:+.1f}% |")  # fmt: skip
    versions = sorted({(r["xla"]["jax_version"], r["xla"]["libtpu_version"]) for r in load_fusions()})
    lines += ["", "Compiled with " + "; ".join(f"jax {j}, libtpu {t}" for j, t in versions) + "; Podscope at the calibration "
              "in data/calibration.toml."]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    block_main(DOCS / "model.md", "xla-fusions", render, __doc__)
