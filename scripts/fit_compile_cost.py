"""Refit data/compile_cost.toml [compile] from the published MLPerf init figures.

Reads ../shared/reference/published.json (or the path given), takes the v0.6 ResNet-50
rows of `compile_init_overheads`, fits init_s = a + b x chips by least squares, and
prints per_chip_s = b, per_op_s = a / (ResNet-50's distinct ops) and the residuals of
every ResNet-50 row (all MLPerf rounds) under the fitted model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

from engine.model.models import model_cost
from engine.scenario import ResNet50Model


def main(path: str = "/work/shared/reference/published.json") -> None:
    entries = {e["id"]: e for e in json.loads(Path(path).read_text())}
    rows = [r for r in entries["compile_init_overheads"]["expected"]["rows"] if r.get("benchmark") == "resnet"]
    fit = [r for r in rows if r["round"] == "v0.6"]
    chips = np.array([r["chips"] for r in fit], dtype=float)
    init_s = np.array([r["init_s_median"] for r in fit])
    (a, b), *_ = np.linalg.lstsq(np.c_[np.ones_like(chips), chips], init_s, rcond=None)
    ops = len(model_cost(ResNet50Model(kind="resnet50")).ops.names)
    print(f"per_op_s = {a / ops:.4g}   per_chip_s = {b:.4g}   (ResNet-50 distinct ops: {ops})")
    for r in rows:
        pred = a + b * r["chips"]
        err = 100 * (pred / r["init_s_median"] - 1)
        row = f"{r['round']:>5} {r['system']:<34} chips {r['chips']:>5}"
        print(f"{row}  published {r['init_s_median']:7.1f} s  model {pred:7.1f} s  error {err:+6.1f}%")


if __name__ == "__main__":
    main(*sys.argv[1:])
