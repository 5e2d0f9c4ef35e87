"""What overflowed when a step does not fit in HBM, and what would make it fit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..units import GIB_BYTES
from .hbm import MemoryPlan

#: MaxText's named saves (engine/model/compute.py SAVED_OPS_BY_REMAT), from the one that keeps the most per layer
NAMED_SAVES_BY_SIZE = ("save_dot_except_mlpwi", "save_dot_except_mlp", "save_qkv_proj")

__all__ = ["oom_detail"]


def _gib(x: float) -> str:
    return f"{x / GIB_BYTES:.1f} GiB"


def oom_detail(
    plan: MemoryPlan,
    replan: Callable[..., MemoryPlan],
    per_chip_batch: int,
    data: int,
    fsdp: int,
    remat: str,
    chip: int = 0,
) -> dict[str, Any]:
    """What overflowed and what would make it fit, for an out-of-memory plan.

    ``replan(**changes)`` recomputes the plan with some of :func:`hbm_plan`'s
    arguments changed; each suggestion states the peak it would give. Every chip
    holds the same shards under SPMD, so the representative ``chip`` stands for all.

    Returns
    -------
    dict with ``chip``, ``term`` (largest category at the peak), ``over_bytes``,
    ``peak_bytes``, ``usable_bytes``, ``phase`` and ``suggestions`` (strings).
    """

    def verdict(p: MemoryPlan) -> str:
        return f"peak {_gib(p.peak_bytes)}, " + ("fits" if not p.oom else f"still {_gib(p.over_bytes)} over")

    suggestions: list[str] = []
    if remat in NAMED_SAVES_BY_SIZE:
        # a dense transformer: the named saves that keep less (save_dot_except_mlpwi keeps what save_dot_except_mlp
        # does: a suggestion with the same peak is left out), then full
        for policy in NAMED_SAVES_BY_SIZE[NAMED_SAVES_BY_SIZE.index(remat) + 1 :] + ("full",):
            lighter = replan(remat=policy)
            if lighter.peak_bytes < plan.peak_bytes:
                suggestions.append(f"training.remat = '{policy}': {verdict(lighter)}")
    else:
        for policy in ("selective", "minimal", "full"):
            if policy != remat and remat != "full" and not (remat == "minimal" and policy == "selective"):
                suggestions.append(f"training.remat = '{policy}': {verdict(replan(remat=policy))}")
    if data % 2 == 0:
        more = replan(fsdp=fsdp * 2)
        suggestions.append(f"parallelism.fsdp = {fsdp * 2} (shard model states over 2x more chips): {verdict(more)}")
    if per_chip_batch > 1:
        suggestions.append(
            f"halve the per-chip batch to {per_chip_batch // 2} (smaller global batch or 2x the chips): "
            f"{verdict(replan(per_chip_batch=per_chip_batch // 2))}"
        )
    for k in (2, 4, 8, 16, 32, 64, 128):
        # k x the chips at the same global batch: model states shard k x further, the per-chip batch shrinks
        bigger = replan(fsdp=fsdp * k, per_chip_batch=max(1, per_chip_batch // k))
        if not bigger.oom:
            suggestions.append(f"a {k}x bigger slice with fsdp = {fsdp * k} at the same global batch: {verdict(bigger)}")
            break
    else:
        suggestions.append("even a 128x bigger slice does not fit: remat, or shrink the model, batch or sequence length")
    return {
        "chip": chip,
        "term": plan.largest_term,
        "over_bytes": plan.over_bytes,
        "peak_bytes": plan.peak_bytes,
        "usable_bytes": plan.usable_bytes,
        "phase": plan.peak_phase,
        "suggestions": suggestions,
    }
