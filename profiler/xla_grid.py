"""Podscope's HBM model and FLOP count against the TPU compiler over a committed grid of built-in scenarios.

``data/reference/xla_grid.json`` (written by ``scripts/fixtures/make_xla_grid.py``) holds, per
configuration, a scenario dict and what libtpu's compiler said of its JAX program
(:mod:`profiler.xla_reference`): memory analysis per device, FLOPs per device with every loop trip,
and its out-of-memory verdict; for programs under :data:`LARGE_PROGRAM_BYTES` per chip also the memory analysis of
the same program compiled with memory-space assignment off (``xla_hbm_only``: no buffer placed in on-chip memory).
:func:`xla_block` simulates every scenario with the engine (the analytic step a summary-mode run reports) and
compares per chip: the HBM peak against XLA's peak (times the devices per chip it compiled for: two TensorCores
on tpu7x), the fits verdict, and the FLOPs. Validation only: nothing here sets the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine import scenario_from_dict
from engine.scenario.calibration import Calibration
from engine.data_files import DATA_DIR
from engine.errors import ReferenceFileError

from . import ranges
from .ranges import family_of
from .xla_check import compare, podscope_numbers, xla_peak_bytes

__all__ = ["DEFAULT_XLA_GRID_PATH", "FALSE_FIT_MARGIN", "LARGE_PROGRAM_BYTES", "block_of", "family_of", "grid_frame", "hbm_range_check",
           "hbm_range_table", "load_grid", "grid_rows", "xla_block", "xla_table"]  # fmt: skip

DEFAULT_XLA_GRID_PATH = DATA_DIR / "reference" / "xla_grid.json"

#: Podscope's HBM terms set against XLA's: the model states it holds as arguments (weights, optimizer
#: state), and what XLA allocates as temporaries (gradients, saved activations, temporaries)
_ARGUMENT_TERMS = ("params", "optimizer")
#: configurations whose XLA peak (or, refused, the HBM XLA asked for) over the HBM a program may use lies
#: in this range are reported apart as near the limit, on either side of it
NEAR_LIMIT_RATIO = (0.8, 1.25)
#: programs whose XLA peak reaches this per chip are reported apart; below it, buffers XLA keeps in on-chip memory
#: weigh on the peak, and the grid also records each such program compiled with memory-space assignment off
#: (``xla_hbm_only``: every buffer in HBM, ``scripts/fixtures/make_xla_grid.py --hbm-only``)
LARGE_PROGRAM_BYTES = ranges.ON_CHIP_PLACEMENT_BYTES
#: a false fit counts apart when XLA asks for more than this share of the usable HBM beyond it: a plan sized
#: by Podscope within a few percent of the limit is one any margin of the user's absorbs
FALSE_FIT_MARGIN = 0.05
_TEMP_TERMS = ("grads", "activations", "temporary")


def load_grid(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The grid's configurations (``id``, ``scenario``, ``xla``); an empty list when the file does not exist.

    Raises
    ------
    ReferenceFileError
        The file is not a grid file.
    """
    p = Path(path) if path is not None else DEFAULT_XLA_GRID_PATH
    if not p.exists():
        return []
    try:
        doc = json.loads(p.read_text())
        configs = doc["configurations"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ReferenceFileError(str(p), [("", f"not a TPU compiler grid file ({e})")]) from None
    return list(configs)


def grid_rows(configs: list[dict[str, Any]], calibration: Calibration | None = None) -> list[dict[str, Any]]:
    """One comparison per configuration: id, chip, family, ``hbm_regime`` (:func:`profiler.ranges.hbm_regime`), remat,
    :func:`profiler.xla_check.compare`'s keys, and
    the argument-like and temporary-like parts of Podscope's breakdown against XLA's (percent); ``xla_hbm_bytes``:
    XLA's peak per chip, or for a program it refused the HBM its message asks for (None when it says no size)."""
    rows = []
    for rec in configs:
        scenario = scenario_from_dict(rec["scenario"], source=f"xla grid {rec['id']}")
        cmp = compare(podscope_numbers(scenario, calibration), rec["xla"])
        x, b = cmp["xla"], cmp["podscope"]["breakdown_bytes"]
        terms = {}
        if x["peak_hbm_bytes"] is not None:
            args = sum(b[t] for t in _ARGUMENT_TERMS)
            temp = sum(b[t] for t in _TEMP_TERMS)
            terms = {
                "arguments_diff_pct": 100.0 * (args / x["argument_bytes"] - 1.0) if x["argument_bytes"] else None,
                "temp_diff_pct": 100.0 * (temp / x["temp_bytes"] - 1.0) if x["temp_bytes"] else None,
                "temp_gap_bytes": temp - x["temp_bytes"],
            }
        oom = rec["xla"]["oom"]
        if x["peak_hbm_bytes"] is not None:
            limit_ratio = x["peak_hbm_bytes"] / cmp["podscope"]["usable_hbm_bytes"]
        elif oom and oom.get("required_bytes") and oom.get("available_bytes"):
            limit_ratio = oom["required_bytes"] / oom["available_bytes"]
        else:
            limit_ratio = None
        if x["peak_hbm_bytes"] is not None:
            xla_bytes = x["peak_hbm_bytes"]
        elif oom and oom.get("required_bytes"):
            xla_bytes = oom["required_bytes"] * rec["xla"]["devices_per_chip"]
        else:
            xla_bytes = None
        only = (rec.get("xla_hbm_only") or {}).get("memory")
        only_peak = xla_peak_bytes(only) * rec["xla"]["devices_per_chip"] if only else None
        accumulated = scenario.training.microbatches > 1 and scenario.parallelism.pipeline == 1
        regime = ranges.hbm_regime(scenario, cmp["podscope"]["peak_hbm_bytes"], cmp["podscope"]["usable_hbm_bytes"])
        rows.append({"id": rec["id"], "chip": scenario.pod.chip, "family": family_of(scenario), "hbm_regime": regime,
                     "remat": scenario.training.remat,
                     "accumulation": accumulated, **cmp, **terms, "hbm_limit_ratio": limit_ratio, "xla_hbm_bytes": xla_bytes,
                     "xla_hbm_only_peak_bytes": only_peak,
                     "hbm_only_diff_pct": None if only_peak is None else 100.0 * (cmp["podscope"]["peak_hbm_bytes"] / only_peak - 1.0)})  # fmt: skip
    return rows


def _hbm_range_inputs(rows: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, tuple[str, ...]], dict[str, str]]:
    """Per program with a size from XLA: ``XLA's bytes / Podscope's peak``, its HBM range group keys, its chip."""
    sized = [r for r in rows if r["xla_hbm_bytes"] and r["podscope"]["peak_hbm_bytes"]]
    ratios = {r["id"]: r["xla_hbm_bytes"] / r["podscope"]["peak_hbm_bytes"] for r in sized}
    keys = {r["id"]: ranges.hbm_keys(r["family"], r["podscope"]["peak_hbm_bytes"], r["hbm_regime"]) for r in sized}
    return ratios, keys, {r["id"]: r["chip"] for r in sized}


def hbm_range_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The HBM range table runs read (``[fit.hbm_ranges]``, :func:`profiler.ranges.peak_hbm_range`) from :func:`grid_rows`:
    :func:`profiler.ranges.range_table` over every program's ``XLA / Podscope`` peak ratio."""
    ratios, keys, _ = _hbm_range_inputs(rows)
    return ranges.range_table(ratios, keys)


def hbm_range_check(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The HBM ranges checked with each chip generation held out: every program's range is built from the other
    generations' programs only (:func:`profiler.ranges.held_out_ranges`, the chip as the fold).

    Returns
    -------
    dict
        :func:`profiler.ranges.coverage_summary`'s keys (``n``, ``inside``: programs whose XLA size lies in their
        range, ``coverage``, ``median_width_pct``, ``nominal_coverage``) and, per verdict the held-out range gives
        (:data:`profiler.ranges.HBM_VERDICTS`), how many programs XLA compiled and refused: ``verdicts`` ->
        {verdict: {"compiled", "refused"}}; ``by_generation``: the coverage summary of each chip's programs;
        ``false_fits`` (``fits``, XLA refuses), ``false_fits_beyond_margin`` (those XLA refuses by more than
        :data:`FALSE_FIT_MARGIN` of the usable HBM) and ``false_ooms`` (``out of memory``, XLA compiles).
    """
    ratios, keys, fold_of = _hbm_range_inputs(rows)
    held = ranges.held_out_ranges(ratios, keys, fold_of)
    verdicts = {v: {"compiled": 0, "refused": 0} for v in ranges.HBM_VERDICTS}
    fits, _, oom = ranges.HBM_VERDICTS
    beyond = 0
    for r in rows:
        h = held.get(r["id"])
        if h is None:
            continue
        peak = r["podscope"]["peak_hbm_bytes"]
        verdict = ranges.hbm_verdict((peak * h["low_factor"], peak * h["high_factor"]), r["podscope"]["usable_hbm_bytes"])
        verdicts[verdict]["refused" if r["xla"]["oom"] else "compiled"] += 1
        beyond += verdict == fits and r["xla"]["oom"] and _refused_beyond_margin(r)
    by_generation = {chip: ranges.coverage_summary({i: h for i, h in held.items() if fold_of[i] == chip})
                     for chip in sorted(set(fold_of.values()))}  # fmt: skip
    return {**ranges.coverage_summary(held), "verdicts": verdicts, "by_generation": by_generation,
            "false_fits": verdicts[fits]["refused"], "false_fits_beyond_margin": beyond,
            "false_ooms": verdicts[oom]["compiled"]}  # fmt: skip


def _refused_beyond_margin(row: dict[str, Any]) -> bool:
    """XLA refused the program asking more than :data:`FALSE_FIT_MARGIN` beyond the usable HBM."""
    return row["hbm_limit_ratio"] is not None and row["hbm_limit_ratio"] > 1.0 + FALSE_FIT_MARGIN


def _group(group: list[dict[str, Any]]) -> dict[str, Any]:
    """``n``, ``compiled``, the HBM median and p90 absolute errors, ``verdict_agreement`` and ``false_fits`` of some rows."""
    hbm = [r["hbm_diff_pct"] for r in group if r["hbm_diff_pct"] is not None]
    return {
        "n": len(group),
        "compiled": len(hbm),
        "hbm_median_abs_pct": _median(hbm),
        "hbm_p90_abs_pct": _p90(hbm),
        "verdict_agreement": sum(r["verdicts_agree"] for r in group) / len(group),
        "false_fits": sum(1 for r in group if not r["podscope"]["oom"] and r["xla"]["oom"]),
    }


def grid_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """:func:`grid_rows` of the configurations XLA compiled, for the dashboard: ``id``, ``chip``, ``family``, ``remat``,
    ``podscope_gib`` and ``xla_gib`` (peak per chip), ``hbm_diff_pct``."""
    rows = [r for r in rows if r["hbm_diff_pct"] is not None]
    return pd.DataFrame(
        {
            "id": [r["id"] for r in rows],
            "chip": [r["chip"] for r in rows],
            "family": [r["family"] for r in rows],
            "remat": [r["remat"] for r in rows],
            "podscope_gib": [r["podscope"]["peak_hbm_bytes"] / 2**30 for r in rows],
            "xla_gib": [r["xla"]["peak_hbm_bytes"] / 2**30 for r in rows],
            "hbm_diff_pct": [r["hbm_diff_pct"] for r in rows],
        },
        columns=["id", "chip", "family", "remat", "podscope_gib", "xla_gib", "hbm_diff_pct"],
    )


def _median(values: list[float]) -> float | None:
    return float(np.median(np.abs(values))) if values else None


def _p90(values: list[float]) -> float | None:
    return float(np.percentile(np.abs(values), 90)) if values else None


def _signed_median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def xla_block(path: str | Path | None = None, calibration: Calibration | None = None) -> dict[str, Any]:
    """The ``xla`` block of ``validate --json``: :func:`block_of` the grid's :func:`grid_rows`."""
    return block_of(grid_rows(load_grid(path), calibration))


def block_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``xla`` block of ``validate --json`` from :func:`grid_rows`.

    Returns
    -------
    dict
        ``n`` (configurations), ``generations`` (configurations per chip), ``compiled`` (those XLA
        did not refuse), ``hbm_median_abs_pct`` and ``hbm_p90_abs_pct`` (Podscope's peak per chip
        against XLA's, over the compiled ones), ``hbm_median_pct`` (signed), ``verdict_agreement``
        (fraction of all configurations whose fits / out-of-memory verdicts agree), ``large_n``,
        ``hbm_large_median_abs_pct`` and ``hbm_large_p90_abs_pct`` (the same over programs whose XLA
        peak is at least :data:`LARGE_PROGRAM_BYTES` per chip), ``near_limit_n`` (configurations whose
        XLA peak, or the HBM XLA asked for when it refused, is within :data:`NEAR_LIMIT_RATIO` of the
        usable HBM), ``near_limit_refused``, ``near_limit_hbm_median_abs_pct`` and
        ``near_limit_verdict_agreement`` over them, ``false_fits``
        (Podscope says it fits, XLA refuses), ``false_fits_beyond_margin`` (those XLA refuses by more than
        :data:`FALSE_FIT_MARGIN` of the usable HBM), ``false_ooms`` (the reverse), ``flops_median_abs_pct``,
        ``families``: per family (:func:`family_of`: ``transformer``, ``moe``, ``pipeline``, ``mlp``, ``resnet50``) ``n``, ``compiled``, the HBM median
        and p90 absolute errors, ``verdict_agreement`` and ``false_fits``; ``accumulation``: the same over the programs
        of any family with gradient accumulation (``microbatches > 1`` without a pipeline), None without any; and ``by_remat``: per policy,
        over the transformers, ``n``, ``hbm_median_pct`` and the signed median errors of
        Podscope's argument-like terms (params + optimizer against XLA's arguments) and temporary-like
        terms (grads + activations + temporary against XLA's temporaries); ``hbm_only_n``: the programs also compiled
        with memory-space assignment off (``xla_hbm_only``, under :data:`LARGE_PROGRAM_BYTES`), and over them
        ``hbm_only_median_abs_pct`` and ``hbm_only_p90_abs_pct`` (Podscope's peak against that program's) beside
        ``hbm_only_default_median_abs_pct`` and ``hbm_only_default_p90_abs_pct`` (against XLA's default peak);
        ``hbm_range``: the 80% HBM ranges runs carry, each chip generation's programs ranged by the others'
        (:func:`hbm_range_check`).
    """
    compiled = [r for r in rows if r["hbm_diff_pct"] is not None]
    hbm = [r["hbm_diff_pct"] for r in compiled]
    large = [r["hbm_diff_pct"] for r in compiled if r["xla"]["peak_hbm_bytes"] >= LARGE_PROGRAM_BYTES]
    flops = [r["flops_diff_pct"] for r in compiled if r["flops_diff_pct"] is not None]
    lo, hi = NEAR_LIMIT_RATIO
    near = [r for r in rows if r["hbm_limit_ratio"] is not None and lo <= r["hbm_limit_ratio"] <= hi]
    near_hbm = [r["hbm_diff_pct"] for r in near if r["hbm_diff_pct"] is not None]
    generations: dict[str, int] = {}
    for r in rows:
        generations[r["chip"]] = generations.get(r["chip"], 0) + 1
    by_remat = {}
    for policy in sorted({r["remat"] for r in rows if r["family"] == "transformer"}):
        group = [r for r in compiled if r["remat"] == policy and r["family"] == "transformer"]
        by_remat[policy] = {
            "n": len(group),
            "hbm_median_pct": _signed_median([r["hbm_diff_pct"] for r in group]),
            "arguments_median_pct": _signed_median([r["arguments_diff_pct"] for r in group if r["arguments_diff_pct"] is not None]),
            "temp_median_pct": _signed_median([r["temp_diff_pct"] for r in group if r["temp_diff_pct"] is not None]),
        }
    by_family = {family: _group([r for r in rows if r["family"] == family]) for family in sorted({r["family"] for r in rows})}
    accumulated = [r for r in rows if r.get("accumulation")]
    only = [r for r in compiled if r["hbm_only_diff_pct"] is not None]
    only_diff, only_default = [r["hbm_only_diff_pct"] for r in only], [r["hbm_diff_pct"] for r in only]
    return {
        "n": len(rows),
        "generations": dict(sorted(generations.items())),
        "families": by_family,
        "accumulation": _group(accumulated) if accumulated else None,
        "compiled": len(compiled),
        "hbm_median_abs_pct": _median(hbm),
        "hbm_p90_abs_pct": _p90(hbm),
        "hbm_median_pct": _signed_median(hbm),
        "large_n": len(large),
        "hbm_large_median_abs_pct": _median(large),
        "hbm_large_p90_abs_pct": _p90(large),
        "near_limit_n": len(near),
        "near_limit_refused": sum(1 for r in near if r["xla"]["oom"]),
        "near_limit_hbm_median_abs_pct": _median(near_hbm),
        "near_limit_verdict_agreement": sum(r["verdicts_agree"] for r in near) / len(near) if near else None,
        "verdict_agreement": sum(r["verdicts_agree"] for r in rows) / len(rows) if rows else None,
        "false_fits": sum(1 for r in rows if not r["podscope"]["oom"] and r["xla"]["oom"]),
        "false_fits_beyond_margin": sum(1 for r in rows if not r["podscope"]["oom"] and r["xla"]["oom"] and _refused_beyond_margin(r)),
        "false_ooms": sum(1 for r in rows if r["podscope"]["oom"] and not r["xla"]["oom"]),
        "flops_median_abs_pct": _median(flops),
        "hbm_only_n": len(only),
        "hbm_only_median_abs_pct": _median(only_diff),
        "hbm_only_p90_abs_pct": _p90(only_diff),
        "hbm_only_default_median_abs_pct": _median(only_default),
        "hbm_only_default_p90_abs_pct": _p90(only_default),
        "by_remat": by_remat,
        "hbm_range": hbm_range_check(rows),
    }


def _hbm_range_lines(check: dict[str, Any] | None) -> list[str]:
    """docs/validation.md's rows of the held-out HBM ranges (:func:`hbm_range_check`)."""
    if not check or not check["n"]:
        return []
    v = check["verdicts"]
    fits, maybe, oom = (v[k] for k in ranges.HBM_VERDICTS)
    return [
        f"| XLA's size inside the 80% HBM range built without its chip generation | {check['inside']} of {check['n']} "
        f"({_pct(_share(check['coverage']))}; median width {_pct(check['median_width_pct'])}) |",
        f"| that range's verdict `fits`: XLA compiles / refuses | {fits['compiled']} / {fits['refused']} |",
        f"| of those refused, by more than {FALSE_FIT_MARGIN:.0%} of the usable HBM | {check['false_fits_beyond_margin']} |",
        f"| that range's verdict `may not fit`: XLA compiles / refuses | {maybe['compiled']} / {maybe['refused']} |",
        f"| that range's verdict `out of memory`: XLA compiles / refuses | {oom['compiled']} / {oom['refused']} |",
    ]


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1f}%" if signed else f"{x:.1f}%"


def _share(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


def xla_table(block: dict[str, Any]) -> str:
    """docs/validation.md's table of the ``xla`` block."""
    if not block["n"]:
        return "No TPU compiler grid recorded (`data/reference/xla_grid.json`).\n"
    gens = ", ".join(f"{chip} {n}" for chip, n in block["generations"].items())
    lines = [
        "| measure | value |",
        "| --- | ---: |",
        f"| configurations (per chip: {gens}) | {block['n']} |",
        f"| compiled (XLA did not refuse them) | {block['compiled']} |",
        f"| HBM peak per chip, median absolute error | {_pct(block['hbm_median_abs_pct'])} |",
        f"| HBM peak per chip, p90 absolute error | {_pct(block['hbm_p90_abs_pct'])} |",
        f"| HBM peak per chip, median signed error | {_pct(block['hbm_median_pct'], True)} |",
        f"| programs of 1 GiB per chip or more (XLA's peak) | {block['large_n']} |",
        f"| their HBM peak, median absolute error | {_pct(block['hbm_large_median_abs_pct'])} |",
        f"| their HBM peak, p90 absolute error | {_pct(block['hbm_large_p90_abs_pct'])} |",
        f"| near the limit (XLA's peak, or what it asked for, at {NEAR_LIMIT_RATIO[0]:.0%}-{NEAR_LIMIT_RATIO[1]:.0%} of usable HBM) "
        f"| {block['near_limit_n']} ({block['near_limit_refused']} refused) |",
        f"| near the limit: HBM peak median absolute error (compiled) | {_pct(block['near_limit_hbm_median_abs_pct'])} |",
        f"| near the limit: verdicts that agree | {_pct(_share(block['near_limit_verdict_agreement']))} |",
        f"| fits / out-of-memory verdicts that agree | {100 * block['verdict_agreement']:.1f}% |",
        f"| Podscope fits, XLA refuses (false fits) | {block['false_fits']} |",
        f"| false fits XLA refuses by more than {FALSE_FIT_MARGIN:.0%} of the usable HBM | {block['false_fits_beyond_margin']} |",
        f"| Podscope out of memory, XLA compiles | {block['false_ooms']} |",
        f"| FLOPs per chip per step, median absolute error | {_pct(block['flops_median_abs_pct'])} |",
        f"| programs under {LARGE_PROGRAM_BYTES // 2**30} GiB per chip also compiled with every buffer in HBM (memory-space assignment off) "
        f"| {block['hbm_only_n']} |",
        f"| their HBM peak against that program's, median / p90 absolute error "
        f"| {_pct(block['hbm_only_median_abs_pct'])} / {_pct(block['hbm_only_p90_abs_pct'])} |",
        f"| the same programs against XLA's default peak, median / p90 absolute error "
        f"| {_pct(block['hbm_only_default_median_abs_pct'])} / {_pct(block['hbm_only_default_p90_abs_pct'])} |",
        *_hbm_range_lines(block.get("hbm_range")),
        "",
        "| transformer remat | compiled | HBM peak, median | params + optimizer vs XLA arguments | grads + activations + temporary vs XLA temporaries |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for policy, g in block["by_remat"].items():
        lines.append(f"| `{policy}` | {g['n']} | {_pct(g['hbm_median_pct'], True)} | {_pct(g['arguments_median_pct'], True)} "
                     f"| {_pct(g['temp_median_pct'], True)} |")  # fmt: skip
    lines += ["", "| family | configurations | compiled | HBM peak, median absolute | p90 absolute | verdicts agree | false fits |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    groups = [(f"`{family}`", g) for family, g in block["families"].items()]
    if block.get("accumulation"):
        groups.append(("any, gradient accumulation", block["accumulation"]))
    for label, g in groups:
        lines.append(f"| {label} | {g['n']} | {g['compiled']} | {_pct(g['hbm_median_abs_pct'])} | {_pct(g['hbm_p90_abs_pct'])} "
                     f"| {_pct(_share(g['verdict_agreement']))} | {g['false_fits']} |")  # fmt: skip
    return "\n".join(lines) + "\n"
