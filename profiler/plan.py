"""Plans from the profiler's side: run a search, store its best candidates, tabulate it for pages.

The search is :mod:`engine.planning.search`; this module adds what needs storage, pandas or the TPU compiler:
:func:`store_best` simulates the best candidates fully and stores them as runs (so
the dashboard shows them), :func:`xla_check_best` compiles them for their targets with XLA (``plan --xla``),
and :func:`plan_frame` gives every candidate as a DataFrame row for the Plan page's figures and tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from engine import Scenario, scenario_from_dict
from engine.errors import InputError
from engine.data_files import DATA_DIR
from engine.planning.planner import Plan, load_plan, plan_from_dict
from engine.planning.search import Candidate, PlanResult, search

from . import ranges, xla_check, xla_reference
from .store import Database
from .streamed_write import simulate_and_write

__all__ = ["OBJECTIVE_LABELS", "BUNDLED_PLANS_DIR", "plan_path", "load_plan", "plan_from_dict", "run_plan", "store_best", "store_candidate",
           "xla_check_best", "xla_check_scenario", "xla_summary", "plan_frame", "PLAN_COLUMNS"]

#: what each planner objective means, for people (the plan file names them by their ids)
OBJECTIVE_LABELS = {
    "tokens_per_s": "Tokens/s, whole job",
    "tokens_per_s_per_chip": "Tokens/s per chip",
    "samples_per_s": "Samples/s, whole job",
    "samples_per_s_per_chip": "Samples/s per chip",
    "step_time_s": "Shortest step",
    "time_to_train": "Shortest time to train",
    "cost_to_train": "Fewest chip-hours to train",
}

#: columns of :func:`plan_frame`
PLAN_COLUMNS = (
    "index", "chips", "topology", "slices", "remat", "mesh", "data", "fsdp", "tensor", "feasible", "reason",
    "step_time_s", "tokens_per_s", "samples_per_s", "throughput_per_chip", "peak_hbm_bytes", "objective", "pareto", "rank",
    "time_to_train_s", "chip_hours", "cost_usd",
)  # fmt: skip


BUNDLED_PLANS_DIR = DATA_DIR / "plans"


def plan_path(text: str | Path) -> Path:
    """The plan file ``text`` names: a path, or else a bundled plan by name (``llm-7b-v5p``)."""
    path = Path(text)
    if path.exists():
        return path
    bundled = BUNDLED_PLANS_DIR / (path if path.suffix == ".toml" else path.with_name(path.name + ".toml"))
    return bundled if bundled.is_file() else path


def run_plan(path_or_plan: str | Path | Plan, progress: Callable[[int, int], None] | None = None) -> PlanResult:
    """Load a plan file (or take a loaded plan) and search it."""
    plan = path_or_plan if isinstance(path_or_plan, Plan) else load_plan(path_or_plan)
    return search(plan, progress=progress, hbm_range_factor=_hbm_range_factor)


def _hbm_range_factor(scenario: Scenario, peak_bytes: float) -> float:
    """The top of the 80% range of XLA's peak over Podscope's ``peak_bytes`` (:func:`profiler.ranges.scenario_hbm_range`);
    1 where the calibration file has no range table."""
    band, _, _ = ranges.scenario_hbm_range(scenario, peak_bytes, None)
    return band[1] / peak_bytes if band and peak_bytes else 1.0


def hbm_verdict_of(result: PlanResult, candidate: Candidate) -> tuple[list[float] | None, str | None]:
    """The 80% range of XLA's HBM peak per chip around a candidate's and the verdict it gives
    (:func:`profiler.ranges.scenario_hbm_range`); ``(None, None)`` for a candidate not costed."""
    if candidate.peak_hbm_bytes is None:
        return None, None
    scenario = scenario_from_dict(result.scenario(candidate), source=result.plan.source)
    band, _, verdict = ranges.scenario_hbm_range(scenario, candidate.peak_hbm_bytes, None)
    return band, verdict


def with_hbm_verdicts(result: PlanResult, out: dict[str, Any]) -> dict[str, Any]:
    """``out`` (``result.to_json(top)``) with ``peak_hbm_range_bytes`` and ``hbm_verdict`` on each of its best."""
    for b, candidate in zip(out["best"], result.ranked()):
        b["peak_hbm_range_bytes"], b["hbm_verdict"] = hbm_verdict_of(result, candidate)
    return out


def store_candidate(db: Database, result: PlanResult, candidate: Candidate, name: str | None = None) -> int:
    """Simulate one candidate fully (its complete scenario) and store it; returns the run id."""
    scenario = scenario_from_dict(result.scenario(candidate, name), source=result.plan.source)
    return simulate_and_write(db, scenario)[0]


def store_best(db: Database, result: PlanResult, top: int, xla: list[dict[str, Any]] | None = None) -> list[int]:
    """Simulate and store the ``top`` best candidates as full runs, best first; returns their run ids.

    ``xla`` (:func:`xla_check_best`'s rows, same order) gives each compiled candidate XLA's HBM peak and verdict,
    as ``run --xla`` does (``hbm_source = "xla"``)."""
    out = []
    for i, best in enumerate(result.to_json(top)["best"]):
        scenario = scenario_from_dict(best["scenario"], source=result.plan.source)
        compiled = xla[i].get("record") if xla else None
        memory = None if compiled is None else xla_check.xla_memory(compiled)
        out.append(simulate_and_write(db, scenario, xla_memory=memory)[0])
    return out


def xla_check_scenario(scenario: Scenario, xla_flags: dict[str, str] | None = None) -> dict[str, Any]:
    """Compile a candidate's JAX program for its chip and topology with the TPU compiler (needs ``podscope[tpu]``).

    Returns ``refusal`` (why the scenario has no JAX program, or why libtpu would not compile it; None when compiled)
    and, when compiled, XLA's ``peak_hbm_bytes`` per chip (None when it ran out of HBM), ``oom``, ``oom_message``,
    ``required_bytes`` per chip (what its out-of-memory message asks for), Podscope's ``podscope_peak_hbm_bytes`` for
    the same devices and ``hbm_diff_pct`` against XLA, ``usable_hbm_bytes``, ``verdicts_agree``, the step's compute
    outside Pallas kernels by XLA's cycle estimates (``compute_s``, its cost model; None when it ran out of HBM) and by
    Podscope (``podscope_compute_s``) with ``compute_diff_pct``, ``compile_s``, ``jax_version``, ``libtpu_version``, and
    ``record`` (:func:`profiler.xla_check.compile_numbers`'s record, not JSON).
    """
    row: dict[str, Any] = {"refusal": xla_reference.refusal(scenario)}
    if row["refusal"] is not None:
        return row
    try:
        record = xla_check.compile_numbers(scenario, live_range=False, xla_flags=xla_flags)
    except InputError as e:  # libtpu refuses the target or the program: say so for this candidate
        return {"refusal": str(e)}
    cmp = xla_check.compare(xla_check.podscope_numbers(scenario), record)
    oom = xla_check.xla_memory(record).oom
    required = None if oom is None or oom.required_bytes is None else oom.required_bytes * record["devices_per_chip"]
    return row | {
        "peak_hbm_bytes": cmp["xla"]["peak_hbm_bytes"],
        "oom": cmp["xla"]["oom"],
        "oom_message": None if oom is None else oom.message,
        "required_bytes": required,
        "podscope_peak_hbm_bytes": cmp["podscope"]["peak_hbm_bytes"],
        "usable_hbm_bytes": cmp["podscope"]["usable_hbm_bytes"],
        "hbm_diff_pct": cmp["hbm_diff_pct"],
        "verdicts_agree": cmp["verdicts_agree"],
        "compute_s": cmp["xla"]["compute_s"],
        "podscope_compute_s": cmp["podscope"]["compute_s"],
        "compute_diff_pct": cmp["compute_diff_pct"],
        "compile_s": record["compile_s"],
        "jax_version": record["jax_version"],
        "libtpu_version": record["libtpu_version"],
        "record": record,
    }


def xla_check_best(result: PlanResult, top: int, progress: Callable[[int, int], None] | None = None,
                   xla_flags: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """:func:`xla_check_scenario` of each of the ``top`` best candidates (compiled with ``xla_flags``), best first, each
    row with its ``rank``."""
    rows: list[dict[str, Any]] = []
    best = result.to_json(top)["best"]
    for i, b in enumerate(best):
        if progress is not None:
            progress(i, len(best))
        rows.append({"rank": b["rank"], **xla_check_scenario(scenario_from_dict(b["scenario"], source=result.plan.source), xla_flags)})
    if progress is not None:
        progress(len(best), len(best))
    return rows


def xla_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What :func:`xla_check_best`'s rows add up to: how many XLA compiled and fit, ran out of HBM or were not
    compiled, the best rank whose program XLA fits (None if none), and the compiler's versions."""
    compiled = [r for r in rows if r["refusal"] is None]
    fits = [r["rank"] for r in compiled if not r["oom"]]
    return {
        "checked": len(rows),
        "fit": len(fits),
        "out_of_memory": sum(1 for r in compiled if r["oom"]),
        "not_compiled": len(rows) - len(compiled),
        "best_rank_xla_fits": min(fits) if fits else None,
        "jax_version": compiled[0]["jax_version"] if compiled else None,
        "libtpu_version": compiled[0]["libtpu_version"] if compiled else None,
    }


def _value(plan: Plan, overrides: Mapping[str, Any], dotted: str) -> Any:
    if dotted in overrides:
        return overrides[dotted]
    node: Any = plan.base_raw
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def plan_frame(result: PlanResult) -> pd.DataFrame:
    """Every candidate as a row (PLAN_COLUMNS): feasible ones with their numbers, the rest with their reason."""
    pareto = {p.index for p in result.pareto()}
    rank = {p.index: i + 1 for i, p in enumerate(result.ranked())}
    key = result.throughput_key
    rows = []
    for p in result.points:
        mesh = p.mesh or {}
        throughput = getattr(p, key)
        rows.append(
            {
                "index": p.index,
                "chips": p.chips,
                "topology": _value(result.plan, p.overrides, "pod.topology"),
                "slices": _value(result.plan, p.overrides, "pod.slices") or 1,
                "remat": _value(result.plan, p.overrides, "training.remat"),
                "mesh": p.mesh_text() or "base mesh",
                "data": mesh.get("data"),
                "fsdp": mesh.get("fsdp"),
                "tensor": mesh.get("tensor"),
                "feasible": p.feasible,
                "reason": p.reason or "",
                "step_time_s": p.step_time_s,
                "tokens_per_s": p.tokens_per_s,
                "samples_per_s": p.samples_per_s,
                "throughput_per_chip": throughput / p.chips if throughput is not None and p.chips else None,
                "peak_hbm_bytes": p.peak_hbm_bytes,
                "objective": p.objective,
                "pareto": p.index in pareto,
                "rank": rank.get(p.index),
                "time_to_train_s": p.time_to_train_s,
                "chip_hours": p.chip_hours,
                "cost_usd": p.cost_usd,
            }
        )
    return pd.DataFrame(rows, columns=list(PLAN_COLUMNS))
