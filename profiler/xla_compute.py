"""Podscope's compute time of a transformer layer against the TPU compiler's own estimate, per TPU generation.

``data/reference/xla_compute.json`` (written by ``scripts/fixtures/make_xla_compute.py``) holds dense decoder layers
of MaxText's widths, compiled by libtpu for each generation at two depths. The difference between the depths is one
layer's forward and backward, free of the embedding, the loss and the optimizer's fixed part: its FLOPs per device
(every loop trip) and the compiler's ``estimated_cycles`` per device, which the catalog clock turns into seconds
(:func:`profiler.xla_check.estimated_cycles_by_kind`: the ops on the core; collectives and copies between memory spaces
are the interconnect's and the DMA engines'). :func:`layer_rows` sets the engine's compute of the same layer (the
difference of its compute at the two depths, :func:`profiler.xla_check.podscope_numbers`' ``compute_s``) beside it.
With the Pallas flash kernel, a custom call that carries no cycle estimate, both sides leave the kernel out: the
engine's attention core is taken off its compute.

The compiler's estimate is its cost model, not a measurement (docs/validation.md sets it beside the published jobs'
layers). It is the check available on shapes and generations no published step time covers (v5e, v6e, TPU7x).
Validation only: nothing here sets the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from engine import scenario_from_dict
from engine.data_files import DATA_DIR
from engine.errors import ReferenceFileError
from engine.pod.catalog import load_catalog
from engine.scenario.calibration import Calibration

from .xla_check import podscope_numbers

__all__ = ["DEFAULT_XLA_COMPUTE_PATH", "block_of", "compute_block", "compute_table", "layer_rows", "load_layers"]

DEFAULT_XLA_COMPUTE_PATH = DATA_DIR / "reference" / "xla_compute.json"


def load_layers(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The file's compiled configurations (``id``, ``scenario``, ``xla``); an empty list when it does not exist.

    Raises
    ------
    ReferenceFileError
        The file is not a compiler compute file.
    """
    p = Path(path) if path is not None else DEFAULT_XLA_COMPUTE_PATH
    if not p.exists():
        return []
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ReferenceFileError(str(p), [("", f"not a TPU compiler compute file: {e}")]) from None
    if not isinstance(doc, dict) or doc.get("format") != "podscope-xla-compute":
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise ReferenceFileError(str(p), [("format", f"{found!r}: not a TPU compiler compute file (expected "
                                                     "'podscope-xla-compute', written by scripts/fixtures/make_xla_compute.py)")])
    if not isinstance(doc.get("configurations"), list):
        raise ReferenceFileError(str(p), [("configurations", "missing or not a list")])
    return list(doc["configurations"])


def layer_rows(records: list[dict[str, Any]], calibration: Calibration | None = None) -> list[dict[str, Any]]:
    """One row per layer shape compiled at two depths (shapes refused at either are left out).

    Returns
    -------
    list of dict
        ``chip``, ``layer`` (the id without chip and depth), ``remat``, ``attention``, ``flops_per_layer`` and ``xla_s_per_layer``
        (per device; outside the flash kernel where the layer runs it), ``xla_efficiency`` (the compiler's layer FLOPs per
        second over the device's peak bf16 FLOP/s),
        ``podscope_s_per_layer`` (per chip: a chip's devices run side by side) and ``diff_pct`` (Podscope against
        the compiler), ``libtpu_version``.
    """
    catalog = load_catalog()
    by_layer: dict[str, dict[int, dict[str, Any]]] = {}
    for rec in records:
        if rec["xla"]["oom"] is not None or not rec["xla"]["estimated_cycles_per_device"]:
            continue
        base, depth = rec["id"].rsplit("-L", 1)
        by_layer.setdefault(base, {})[int(depth)] = rec
    rows = []
    for base, depths in sorted(by_layer.items()):
        if len(depths) < 2:
            continue
        (d0, a), (d1, b) = sorted(depths.items())[:2]
        chip = catalog[a["scenario"]["pod"]["chip"]]
        per_device_peak = chip.peak_flops_per_s("bf16") / a["xla"]["devices_per_chip"]
        flops = (b["xla"]["flops_per_device"] - a["xla"]["flops_per_device"]) / (d1 - d0)
        xla_s = (b["xla"]["estimated_cycles_per_device"] - a["xla"]["estimated_cycles_per_device"]) / (d1 - d0) / chip.clock_hz
        # the compute outside the Pallas kernels, whose cycles the module does not carry
        pod = [podscope_numbers(scenario_from_dict(r["scenario"], source=r["id"]), calibration)["compute_s"] for r in (a, b)]
        pod_s = (pod[1] - pod[0]) / (d1 - d0)
        rows.append({"chip": chip.key, "layer": base.removeprefix(f"{chip.key}-"), "remat": a["scenario"]["training"]["remat"],
                     "attention": a["scenario"]["model"].get("attention", "standard"),
                     "flops_per_layer": flops, "xla_s_per_layer": xla_s, "xla_efficiency": flops / xla_s / per_device_peak,
                     "podscope_s_per_layer": pod_s, "diff_pct": 100.0 * (pod_s / xla_s - 1.0),
                     "libtpu_version": a["xla"]["libtpu_version"]})  # fmt: skip
    return rows


def compute_block(path: str | Path | None = None, calibration: Calibration | None = None) -> dict[str, Any] | None:
    """The ``xla_compute`` block of ``validate --json`` (:func:`block_of` the file's :func:`layer_rows`); None without
    the file."""
    return block_of(layer_rows(load_layers(path), calibration))


def block_of(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``xla_compute`` block of ``validate --json`` from :func:`layer_rows`; None without rows.

    Returns
    -------
    dict
        ``n`` (layer shapes), ``median_abs_pct`` and ``p90_abs_pct`` (Podscope's compute per layer against the
        compiler's estimate), ``median_pct`` (signed: below zero Podscope is faster), ``libtpu_version``, and
        ``generations``: per chip ``n``, ``median_pct``, ``min_pct``, ``max_pct`` and ``xla_efficiency_median`` (the
        fraction of peak the compiler expects of its layers).
    """
    if not rows:
        return None
    diffs = np.array([r["diff_pct"] for r in rows])
    gens = {}
    for chip in sorted({r["chip"] for r in rows}):
        d = np.array([r["diff_pct"] for r in rows if r["chip"] == chip])
        gens[chip] = {"n": len(d), "median_pct": float(np.median(d)), "min_pct": float(d.min()), "max_pct": float(d.max()),
                      "xla_efficiency_median": float(np.median([r["xla_efficiency"] for r in rows if r["chip"] == chip]))}  # fmt: skip
    return {
        "n": len(rows),
        "median_abs_pct": float(np.median(np.abs(diffs))),
        "p90_abs_pct": float(np.percentile(np.abs(diffs), 90)),
        "median_pct": float(np.median(diffs)),
        "libtpu_version": rows[0]["libtpu_version"],
        "generations": gens,
    }


def compute_table(block: dict[str, Any] | None) -> str:
    """docs/validation.md's table of the ``xla_compute`` block."""
    if not block:
        return "No TPU compiler compute file recorded (`data/reference/xla_compute.json`).\n"
    lines = [
        "| chip | layer shapes | compiler's layer, fraction of peak (median) | Podscope against the compiler, median | min | max |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for chip, g in block["generations"].items():
        lines.append(f"| {chip} | {g['n']} | {g['xla_efficiency_median']:.2f} | {g['median_pct']:+.1f}% | {g['min_pct']:+.1f}% "
                     f"| {g['max_pct']:+.1f}% |")  # fmt: skip
    lines.append(f"| all (libtpu {block['libtpu_version']}) | {block['n']} | | {block['median_pct']:+.1f}% | | |")
    lines += ["", f"Median absolute difference {block['median_abs_pct']:.1f}%, 90th percentile {block['p90_abs_pct']:.1f}%."]
    return "\n".join(lines) + "\n"
