"""The advisor's findings in words for people: a title, the message with chips named, and the evidence
as formatted numbers with the base of every percentage stated.

The stored advice (``summary["advice"]``, see :mod:`profiler.advisor`) keeps its rule ids and raw
metric values, which scripts read; the dashboard and the CLI's human output show it through
:func:`describe` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from . import format as fmt

__all__ = ["Finding", "describe", "TITLES", "EVIDENCE"]

#: a short heading per advisor rule (data/advice.toml ids)
TITLES = {
    "out_of_memory": "Out of memory",
    "input_bound_high": "Highly input-bound",
    "input_bound_moderate": "Moderately input-bound",
    "recompiling": "Recompiling every few steps",
    "recompiles_some": "Recompiles",
    "compile_dominates": "Compilation dominates the run",
    "stragglers": "Straggler chips",
    "failures_goodput": "Failures cost goodput",
    "checkpoint_overhead": "Checkpoint writes are expensive",
    "communication_bound": "Communication-bound",
    "checkpoint_too_rare": "Checkpoints too rare",
    "checkpoint_too_frequent": "Checkpoints more frequent than needed",
    "expert_tiles_unfilled": "Expert matmul tiles part empty",
    "batch_past_critical": "Batch far past the critical batch",
}

#: evidence metric -> (label, formatter); a fraction's label names what it is a fraction of
EVIDENCE: dict[str, tuple[str, Any]] = {
    "input_wait_frac": ("input wait, of steady-state step time", fmt.percent),
    "step_time_s": ("step time (steady state)", fmt.duration),
    "input_batch_s": ("host time to prepare one batch", fmt.duration),
    "compile_s": ("compiling", fmt.duration),
    "compile_frac": ("compiling, of wall time", fmt.percent),
    "wall_time_s": ("wall time", fmt.duration),
    "recompiles": ("recompiles", fmt.count),
    "stragglers_count": ("straggler chips", fmt.count),
    "straggler_slowdown_max": ("slowest chip", lambda v: f"{float(v):.2f}x slower"),
    "breakdown_sync_wait": ("sync wait, of all chip time", fmt.percent),
    "breakdown_collective": ("exposed collectives, of all chip time", fmt.percent),
    "goodput": ("goodput, of wall time", fmt.percent),
    "failures": ("failures", fmt.count),
    "lost_steps": ("steps re-run", fmt.count),
    "checkpoint_s": ("checkpoint writes", fmt.duration),
    "checkpoint_frac": ("checkpoint writes, of wall time", fmt.percent),
    "peak_hbm_bytes": ("peak HBM per chip", fmt.gib),
    "hbm_capacity_bytes": ("HBM capacity", fmt.gib),
    "checkpoint_interval_ratio": ("checkpoint interval vs optimum", lambda v: f"{float(v):.2g}x"),
    "checkpoint_every_steps_optimal": ("optimal interval", lambda v: f"every {fmt.count(v)} steps"),
    "job_mtbf_hours": ("job MTBF", lambda v: fmt.duration(float(v) * 3600)),
    "goodput_expected": ("expected long-run goodput", fmt.percent),
    "moe_expert_work_over_flops": ("expert GEMM work executed, over their FLOPs", lambda v: f"{float(v):.2f}x"),
    "batch_over_b_crit": ("global batch, over the critical batch", lambda v: f"{float(v):.2f}x"),
    "half_batch_time_ratio": ("time to train at half the batch and chips", lambda v: f"{float(v):.2f}x"),
    "half_batch_chip_hours_saved": ("chip-hours saved at half the batch", fmt.percent),
    "time_to_train_s": ("time to train", fmt.duration),
    "chip_hours": ("chip-hours to train", fmt.si),
}

_FIND_BY_ID = re.compile(r"Find them by id \(summary 'stragglers'\), then", re.IGNORECASE)


@dataclass(frozen=True)
class Finding:
    severity: str
    title: str
    message: str
    evidence: list[tuple[str, str]]  # (label, formatted value)

    def evidence_text(self) -> str:
        return "; ".join(f"{label}: {value}" for label, value in self.evidence)


def _chips(ids: list[int], limit: int = 12) -> str:
    shown = ", ".join(str(int(c)) for c in ids[:limit])
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return f"chip{'s' if len(ids) > 1 else ''} {shown}{more}"


def describe(item: dict[str, Any], summary: dict[str, Any] | None = None) -> Finding:
    """One advisor finding in words: title, message (straggler chips named), formatted evidence."""
    summary = summary or {}
    rule = str(item.get("rule") or "finding")
    message = str(item.get("message") or "")
    stragglers = summary.get("stragglers") or []
    if rule == "stragglers" and stragglers:
        message = _FIND_BY_ID.sub(f"They are {_chips(stragglers)} (the Pod page shows where);", message)
    evidence = []
    for key, value in (item.get("evidence") or {}).items():
        label, formatter = EVIDENCE.get(key, (key.replace("_", " "), None))
        if formatter is not None and not fmt.is_missing(value):
            text = formatter(value)
        elif isinstance(value, float):
            text = f"{value:.3g}"
        else:
            text = str(value)
        evidence.append((label, text))
    title = TITLES.get(rule, rule.replace("_", " ").capitalize())
    if message.lower().startswith(f"{title.lower()}: "):  # the message opens with the title: say it once
        message = message[len(title) + 2 :]
        message = message[:1].upper() + message[1:]
    return Finding(str(item.get("severity") or "info"), title, message, evidence)
