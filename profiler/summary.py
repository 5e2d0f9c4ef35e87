"""The run summary: the headline numbers of one stored run, computed in SQL.

Built once at write time (inside the write transaction) from the per-run
summary tables and the engine's run facts, then stored as JSON on the ``runs``
row; ``python -m profiler run --json`` prints exactly this object. Keys are a
contract: later features may add keys, never remove or change one.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from engine.trace import EVENT_KINDS

from .advisor import advise

__all__ = ["build_summary", "SUMMARY_KEYS"]

SUMMARY_KEYS = (
    "run_id", "name", "source", "chip", "chips", "hosts", "slices", "topology", "steps", "params",
    "step_time_s", "wall_time_s", "samples_per_s", "tokens_per_s", "mfu", "hfu", "breakdown",
    "peak_hbm_bytes", "hbm_capacity_bytes", "hbm_breakdown_bytes", "oom", "events",
    "input_wait_frac", "recompiles", "compile_s", "goodput", "stragglers", "advice",
)  # fmt: skip

_STEADY_STEP_SQL = """
WITH recompiled AS (
    SELECT DISTINCT step FROM step_kind WHERE run_id = $run_id AND kind = 'recompile' AND chip_ns > 0
)
SELECT
    median(step_ns) FILTER (WHERE step NOT IN (SELECT step FROM recompiled)) AS steady_ns,
    median(step_ns) AS all_ns,
    sum(step_ns) AS wall_ns
FROM steps WHERE run_id = $run_id
"""
_BREAKDOWN_SQL = "SELECT kind, sum(ns) FROM chip_kind WHERE run_id = $run_id GROUP BY kind"
_RUN_SQL = "SELECT name, source, chip, chips, hosts, slices, topology, steps, facts FROM runs WHERE run_id = $run_id"
_EVENTS_SQL = "SELECT count(*) FROM events WHERE run_id = $run_id"


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return num / den


def build_summary(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, Any]:
    """Compute the summary object of a stored run."""
    p = {"run_id": run_id}
    name, source, chip, chips, hosts, slices, topology, steps, facts_json = con.execute(_RUN_SQL, p).fetchone()
    facts = json.loads(facts_json) if facts_json else {}
    steady_ns, all_ns, wall_ns = con.execute(_STEADY_STEP_SQL, p).fetchone()
    step_ns = steady_ns if steady_ns is not None else all_ns
    step_s = float(step_ns) / 1e9 if step_ns is not None else None
    by_kind = dict(con.execute(_BREAKDOWN_SQL, p).fetchall())
    total = sum(by_kind.values())
    kinds = list(EVENT_KINDS) + sorted(k for k in by_kind if k not in EVENT_KINDS)
    breakdown = {k: (by_kind.get(k, 0) / total if total else 0.0) for k in kinds}
    peak = facts.get("peak_flops_per_s_per_chip")
    job_peak = peak * chips if peak else None
    summary: dict[str, Any] = {
        "run_id": run_id,
        "name": name,
        "source": source,
        "chip": chip,
        "chips": chips,
        "hosts": hosts,
        "slices": slices,
        "topology": topology,
        "steps": steps,
        "params": facts.get("params"),
        "step_time_s": step_s,
        "wall_time_s": float(wall_ns) / 1e9 if wall_ns is not None else None,
        "samples_per_s": _ratio(facts.get("samples_per_step"), step_s),
        "tokens_per_s": _ratio(facts.get("tokens_per_step"), step_s),
        "mfu": _ratio(_ratio(facts.get("model_flops_per_step"), step_s), job_peak),
        "hfu": _ratio(_ratio(facts.get("hardware_flops_per_step"), step_s), job_peak),
        "breakdown": breakdown,
        "peak_hbm_bytes": facts.get("peak_hbm_bytes"),
        "hbm_capacity_bytes": facts.get("hbm_capacity_bytes"),
        "hbm_breakdown_bytes": facts.get("hbm_breakdown_bytes"),
        "oom": bool(facts.get("oom", False)),
        "events": con.execute(_EVENTS_SQL, p).fetchone()[0],
    }
    for key, value in (facts.get("extra") or {}).items():
        summary.setdefault(key, value)
    # Runs without the engine's idle-time facts (e.g. imported traces): the input-wait share of
    # all chip time stands in; what only the engine knows is null.
    summary.setdefault("input_wait_frac", breakdown.get("input_wait", 0.0))
    for key in ("recompiles", "compile_s", "goodput", "stragglers"):
        summary.setdefault(key, None)
    summary.setdefault("advice", advise(summary))  # last: rules read every other key
    return summary
