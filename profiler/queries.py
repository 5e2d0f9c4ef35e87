"""The query layer: every question the dashboard, CLI and export ask of the database.

Each function takes an open DuckDB connection (from :class:`~profiler.store.Database`)
and returns a pandas DataFrame or a plain dict. All values are bound parameters;
aggregation and level-of-detail bucketing happen in SQL, so no caller receives
more rows than it can draw.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb
import pandas as pd

from engine.errors import RunNotFoundError

__all__ = ["list_runs", "run_summary", "run_scenario", "breakdown", "step_times", "list_sweeps", "sweep_runs", "MAX_POINTS"]

#: upper bound on points any query returns for one trace of a figure
MAX_POINTS = 2000

_LIST_RUNS_SQL = """
SELECT run_id, name, source, created_at, chip, chips, slices, topology, steps,
       CAST(summary->>'step_time_s' AS DOUBLE)   AS step_time_s,
       CAST(summary->>'samples_per_s' AS DOUBLE) AS samples_per_s,
       CAST(summary->>'mfu' AS DOUBLE)           AS mfu,
       CAST(summary->>'oom' AS BOOLEAN)          AS oom
FROM runs ORDER BY run_id DESC
"""


def list_runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """All runs, newest first, with their headline numbers."""
    return con.execute(_LIST_RUNS_SQL).df()


def run_summary(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, Any]:
    """The stored summary object of a run (see :mod:`profiler.summary`)."""
    row = con.execute("SELECT summary FROM runs WHERE run_id = $id", {"id": run_id}).fetchone()
    if row is None:
        raise RunNotFoundError(f"no run with id {run_id}")
    return json.loads(row[0]) if row[0] else {}


def run_scenario(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, Any] | None:
    """The scenario a run was simulated from, as a dict (None for imported runs)."""
    row = con.execute("SELECT scenario FROM runs WHERE run_id = $id", {"id": run_id}).fetchone()
    if row is None:
        raise RunNotFoundError(f"no run with id {run_id}")
    return json.loads(row[0]) if row[0] else None


def breakdown(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame:
    """Chip time by kind over the whole run: kind, chip_s, frac (fractions sum to 1)."""
    return con.execute(
        """
        SELECT kind, sum(ns) / 1e9 AS chip_s, sum(ns) / sum(sum(ns)) OVER () AS frac
        FROM chip_kind WHERE run_id = $id GROUP BY kind ORDER BY chip_s DESC
        """,
        {"id": run_id},
    ).df()


def step_times(con: duckdb.DuckDBPyConnection, run_id: int, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Step time over steps, bucketed to at most ``max_points`` rows.

    Columns: step (first step of the bucket), step_s (mean), min_s, max_s.
    """
    return con.execute(
        """
        WITH n AS (SELECT count(*) AS steps FROM steps WHERE run_id = $id),
        b AS (SELECT greatest(1, CAST(ceil(steps / $max_points) AS BIGINT)) AS width FROM n)
        SELECT min(step) AS step, avg(step_ns) / 1e9 AS step_s, min(step_ns) / 1e9 AS min_s, max(step_ns) / 1e9 AS max_s
        FROM steps, b WHERE run_id = $id
        GROUP BY step // b.width ORDER BY step
        """,
        {"id": run_id, "max_points": max_points},
    ).df()


_LIST_SWEEPS_SQL = """
SELECT json_extract_string(summary, '$.sweep.name') AS sweep, count(*) AS runs, max(created_at) AS last_run
FROM runs WHERE json_extract_string(summary, '$.sweep.name') IS NOT NULL GROUP BY ALL ORDER BY last_run DESC
"""
_SWEEP_RUNS_SQL = """
SELECT run_id, name, chip, chips, slices, topology,
       json_extract_string(summary, '$.sweep.point') AS point,
       CAST(json_extract(summary, '$.sweep.overrides') AS VARCHAR) AS overrides,
       CAST(summary->>'step_time_s' AS DOUBLE)   AS step_time_s,
       CAST(summary->>'samples_per_s' AS DOUBLE) AS samples_per_s,
       CAST(summary->>'tokens_per_s' AS DOUBLE)  AS tokens_per_s,
       CAST(summary->>'mfu' AS DOUBLE)           AS mfu,
       CAST(summary->>'oom' AS BOOLEAN)          AS oom
FROM runs WHERE json_extract_string(summary, '$.sweep.name') = $sweep
ORDER BY chips, run_id
"""


def list_sweeps(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Sweeps with stored runs, newest first: sweep, runs, last_run."""
    return con.execute(_LIST_SWEEPS_SQL).df()


def sweep_runs(con: duckdb.DuckDBPyConnection, sweep: str) -> pd.DataFrame:
    """The runs of one sweep with their headline numbers, by chip count (for the Scaling page).

    ``overrides`` is the point's dotted-key overrides as a JSON text.
    """
    return con.execute(_SWEEP_RUNS_SQL, {"sweep": sweep}).df()
