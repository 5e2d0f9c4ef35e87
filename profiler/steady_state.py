"""Steady state and warm-up: which steps compiled, and a step's time by cause over the others.

A run's headline step time is the median over steps without a compile (see
:mod:`profiler.summary`). Pages that split or plot step time use the same steady steps, so the
Compare waterfall starts from the number on the tile above it, and the Idle and Timeline pages
open on what the job does once it is running, with the warm-up shown apart.
"""

from __future__ import annotations

import duckdb
import pandas as pd

__all__ = ["warmup_steps", "steady_step_kind_s", "first_steady_step"]

_RECOMPILED_STEPS_SQL = """
SELECT DISTINCT step FROM step_kind WHERE run_id = $id AND kind = 'recompile' AND chip_ns > 0 ORDER BY step
"""

_STEADY_STEP_KIND_SQL = """
WITH recompiled AS (SELECT DISTINCT step FROM step_kind WHERE run_id = $id AND kind = 'recompile' AND chip_ns > 0),
all_steps AS (SELECT DISTINCT step FROM step_kind WHERE run_id = $id),
steady AS (
    SELECT step FROM all_steps WHERE step NOT IN (SELECT step FROM recompiled)
    UNION ALL
    -- every step compiled: there is no steady state, so all steps stand for it
    SELECT step FROM all_steps WHERE NOT EXISTS (SELECT 1 FROM all_steps WHERE step NOT IN (SELECT step FROM recompiled))
)
SELECT k.kind, sum(k.chip_ns) / 1e9 / r.chips / (SELECT count(*) FROM steady) AS s_per_step
FROM step_kind k JOIN runs r ON r.run_id = k.run_id
WHERE k.run_id = $id AND k.step IN (SELECT step FROM steady)
GROUP BY k.kind, r.chips ORDER BY k.kind
"""


def warmup_steps(con: duckdb.DuckDBPyConnection, run_id: int) -> list[int]:
    """Steps in which any chip compiled (the warm-up, and any later recompile), ascending."""
    return [int(r[0]) for r in con.execute(_RECOMPILED_STEPS_SQL, {"id": run_id}).fetchall()]


def first_steady_step(con: duckdb.DuckDBPyConnection, run_id: int) -> int | None:
    """The first step after the opening run of compiling steps (None for a run without steps)."""
    row = con.execute("SELECT min(step), max(step) FROM steps WHERE run_id = $id", {"id": run_id}).fetchone()
    if row is None or row[0] is None:
        return None
    first, last = int(row[0]), int(row[1])
    compiled = set(warmup_steps(con, run_id))
    step = first
    while step in compiled and step < last:
        step += 1
    return step


def steady_step_kind_s(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame:
    """Mean seconds of a chip's steady-state step by kind: kind, s_per_step.

    Steady state is every step without a compile (all steps when every step compiled), as in the
    summary's ``step_time_s``. The kinds sum to the mean steady step; the summary reports the
    median, which a caller can scale these to.
    """
    return con.execute(_STEADY_STEP_KIND_SQL, {"id": run_id}).df()
