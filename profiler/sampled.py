"""Sampled runs: which chips a ``[sim] trace = "sampled"`` run holds events of, and why, in words.

A sampled run stores every chip's per-step and per-chip totals, but events only for the
chips in its ``extra_sampled_chips`` table (engine/sampling.py). The pages and exports that
draw events ask :func:`sampled_chips` which chips those are; :func:`describe_sample` says
it the same way wherever it is shown (the Timeline, the Perfetto metadata, the CLI).
"""

from __future__ import annotations

import duckdb
import pandas as pd

from engine.sampling import SAMPLE_REASONS

from .format import chip_ranges
from .queries import has_table

__all__ = ["REASON_WORDS", "sampled_chips", "reason_counts", "describe_sample"]

#: each reason as the pages say it, in SAMPLE_REASONS order
REASON_WORDS = {
    "straggler": "stragglers",
    "degraded_link": "next to a degraded or failed link",
    "slowest": "slowest (least time waiting for the others)",
    "slice_host": "a host (or chip) per slice",
    "random": "random (seeded)",
}
assert tuple(REASON_WORDS) == SAMPLE_REASONS
#: chip ids listed per reason at most; longer groups are counted and their first ids shown
_LISTED_IDS = 12

_SAMPLED_CHIPS_SQL = "SELECT chip, reason FROM extra_sampled_chips WHERE run_id = $id ORDER BY chip"


def sampled_chips(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame | None:
    """The chips a sampled run holds events of (chip, reason; ascending chip), or None if it is not sampled."""
    if not has_table(con, "extra_sampled_chips"):
        return None
    df = con.execute(_SAMPLED_CHIPS_SQL, {"id": run_id}).df()
    return None if df.empty else df


def reason_counts(sample: pd.DataFrame) -> dict[str, int]:
    """Sampled chips per reason, in SAMPLE_REASONS order, reasons with no chip left out."""
    counts = sample["reason"].value_counts().to_dict()
    return {r: int(counts[r]) for r in SAMPLE_REASONS if r in counts}


def describe_sample(sample: pd.DataFrame, total_chips: int) -> str:
    """One sentence: how many chips of the pod the sample holds and why each group was chosen.

    >>> print(describe_sample(pd.DataFrame({"chip": [0, 5, 6], "reason": ["slice_host", "straggler", "random"]}), 16))
    events of 3 of 16 chips: stragglers 1 (chip 5); a host (or chip) per slice 1 (chip 0); random (seeded) 1 (chip 6)
    """
    parts = []
    for reason, n in reason_counts(sample).items():
        ids = sample.loc[sample["reason"] == reason, "chip"].tolist()
        shown = chip_ranges(ids) if n <= _LISTED_IDS else chip_ranges(ids[:_LISTED_IDS // 2]) + ", ..."
        parts.append(f"{REASON_WORDS[reason]} {n:,} (chip{'s' if n > 1 else ''} {shown})")
    return f"events of {len(sample):,} of {total_chips:,} chips: " + "; ".join(parts)
