"""The link-fault table of docs/model.md: what a slow or failed ICI link costs each mesh axis.

Runs the bundled ``llm-32b-fsdp-tp-v5p-128`` (FSDP over x and y, tensor parallelism on z)
healthy and with one x or z link at half bandwidth or failed, and reports one transformer
layer's collectives, the collective time the step exposes and the step time, as a Markdown
table:

    python -m scripts.link_fault_table            # print the table
    python -m scripts.link_fault_table --write    # and put it into docs/model.md

The numbers come from the engine's analytic step (``engine.model.analytic``: the same costs a
simulated step is built from, without per-chip noise), so they move with the engine and the
calibration; tests/test_docs_generated.py checks the page against this script.
"""

from __future__ import annotations

from typing import Any

from engine.data_files import DATA_DIR
from engine.model.analytic import evaluate, step_costs
from engine.scenario import load_scenario
from engine.scenario.calibration import load_calibration
from scripts.docs_blocks import DOCS, block_main

PAGE = DOCS / "model.md"
BLOCK = "link-fault-table"
SCENARIO = "llm-32b-fsdp-tp-v5p-128"
HEADER = [
    "| link fault | FSDP gather / reduce-scatter | TP all-reduces | exposed collective per step | step |",
    "| --- | --- | --- | --- | --- |",
]
#: (label, [interconnect] overrides): a link of chip (0, 0, 0) along x (FSDP's) or z (tensor's)
FAULTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("none", {}),
    ("x link at 0.5 (fsdp)", {"interconnect.degraded_links": [{"a": [0, 0, 0], "b": [1, 0, 0], "bandwidth_frac": 0.5}]}),
    ("x link failed", {"interconnect.failed_links": [{"a": [0, 0, 0], "b": [1, 0, 0]}]}),
    ("z link at 0.5 (tensor)", {"interconnect.degraded_links": [{"a": [0, 0, 0], "b": [0, 0, 1], "bandwidth_frac": 0.5}]}),
    ("z link failed", {"interconnect.failed_links": [{"a": [0, 0, 0], "b": [0, 0, 1]}]}),
)


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:,.1f} ms"


def table() -> str:
    """The table as Markdown: the header and one row per link fault."""
    cal = load_calibration()
    rows = list(HEADER)
    healthy_step_s = None
    for label, overrides in FAULTS:
        scenario = load_scenario(DATA_DIR / "scenarios" / f"{SCENARIO}.toml", overrides)
        layer = step_costs(scenario, cal).comm.per_layer.to_pandas().query("layer == 'layer0' and phase != 'recompute'")
        per_op_s = layer.groupby(["op", "mesh_axis"])["time_ns"].max() / 1e9
        step = evaluate(scenario, cal)
        exposed_s = step.costs.comm_forward_s + step.costs.comm_backward_s
        healthy_step_s = healthy_step_s or step.step_time_s
        change = f" ({100 * (step.step_time_s / healthy_step_s - 1):+.1f}%)" if step.step_time_s != healthy_step_s else ""
        rows.append(
            f"| {label} | {_ms(per_op_s['all-gather', 'fsdp'])} / {_ms(per_op_s['reduce-scatter', 'fsdp'])} | "
            f"{_ms(per_op_s['all-reduce', 'tensor'])} | {_ms(exposed_s)} | {step.step_time_s:.3f} s{change} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    block_main(PAGE, BLOCK, table, __doc__)
