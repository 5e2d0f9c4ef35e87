"""docs/model.md's table of how XLA schedules the collectives of FSDP and tensor-parallel steps, with libtpu's default
options and with MaxText's (data/reference/xla_schedule.json, ``scripts/fixtures/make_xla_schedule.py``).

    python -m scripts.schedule_table [--write]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.docs_blocks import DOCS, block_main

SCHEDULE_PATH = Path(__file__).resolve().parent.parent / "data" / "reference" / "xla_schedule.json"
_OPTIONS = {"defaults": "libtpu's defaults", "maxtext": "MaxText's"}


def load_schedule(path: Path = SCHEDULE_PATH) -> list[dict[str, Any]]:
    """The fixture's records, in the generator's order."""
    return json.loads(path.read_text())["configurations"]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {n:,}" for op, n in counts.items()) or "none"


def _mesh(parallelism: dict[str, int]) -> str:
    return " x ".join(f"{axis} {n}" for axis, n in parallelism.items() if axis != "data" and n > 1)


def render() -> str:
    records = load_schedule()
    rows = ["| step | chip, slice | mesh | options | windowed-einsum loops (all-gather / reduce-scatter) | blocking the core, per step | beside compute, per step |",
            "|---|---|---|---|---:|---|---|"]  # fmt: skip
    for r in records:
        s, x = r["scenario"], r["xla"]
        loops = x["windowed_einsum_loops"] or {"all_gather": 0, "reduce_scatter": 0}
        rows.append(f"| {r['id'].rsplit('-', 1)[0]} | {s['pod']['chip']} `{s['pod']['topology']}` | {_mesh(s['parallelism'])} | "
                    f"{_OPTIONS[r['options']]} | {loops['all_gather']} / {loops['reduce_scatter']} | {_counts(x['synchronous'])} | "
                    f"{_counts(x['asynchronous'])} |")  # fmt: skip
    versions = sorted({(r["xla"]["jax_version"], r["xla"]["libtpu_version"]) for r in records})
    rows += ["", "Compiled with " + "; ".join(f"jax {j}, libtpu {t}" for j, t in versions) + "."]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    block_main(DOCS / "model.md", "xla-schedule", render, __doc__)
