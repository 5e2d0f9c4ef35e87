"""The query layer: every question the dashboard, CLI and export ask of the database.

Each function takes an open DuckDB connection (from :class:`~profiler.store.Database`)
and returns a pandas DataFrame or a plain dict. All values are bound parameters;
aggregation and level-of-detail bucketing happen in SQL, so no caller receives
more rows than it can draw.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from engine.errors import RunNotFoundError
from engine.trace import EVENT_KINDS

from .level_of_detail import CellGrid
from .schema import quote_ident

__all__ = ["list_runs", "featured_run", "run_summary", "run_scenario", "breakdown", "step_times", "list_sweeps", "sweep_runs", "MAX_POINTS"]

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


_FEATURED_SQL = """
SELECT run_id, chips, coalesce(CAST(summary->>'oom' AS BOOLEAN), false) AS oom,
       CAST(json_extract(summary, '$.advice') AS VARCHAR) AS advice,
       coalesce(json_array_length(json_extract(summary, '$.stragglers')), 0) AS stragglers,
       json_extract_string(summary, '$.sweep.name') AS sweep
FROM runs
"""
_SEVERITY_WEIGHT = {"critical": 3, "warning": 2, "info": 1}


def featured_run(con: duckdb.DuckDBPyConnection) -> int | None:
    """The run with the most to say, to open the dashboard on (None when there are no runs).

    Scores each run by its advisor findings (critical 3, warning 2, info 1) plus one for named
    stragglers; out-of-memory runs and sweep points come last. Ties go to the larger slice,
    then the newer run.
    """
    df = con.execute(_FEATURED_SQL).df()
    if df.empty:
        return None

    def score(row: Any) -> int:
        advice = json.loads(row.advice) if isinstance(row.advice, str) else []
        return sum(_SEVERITY_WEIGHT.get(a.get("severity"), 0) for a in advice if isinstance(a, dict)) + (1 if row.stragglers else 0)

    df["score"] = [score(r) for r in df.itertuples()]
    df["plain"] = ~df["oom"] & df["sweep"].isna()
    best = df.sort_values(["plain", "score", "chips", "run_id"], ascending=False).iloc[0]
    return int(best["run_id"])


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


# --------------------------------------------------------------------------------------------
# Dashboard pages (idle time, pod, timeline, memory, scaling, recompilation, compare, export).
# Tables written by later engine mechanisms (extra_*) may be absent: every reader checks with
# :func:`has_table` first and returns None, so a page can say "this run has no ..." instead of
# failing, and starts working as soon as the table appears.
# --------------------------------------------------------------------------------------------

__all__ += [
    "has_table",
    "kind_by_step",
    "kind_by_host",
    "chip_metrics",
    "chip_extras",
    "CHIP_METRICS_BY_EXTRAS",
    "ALL_SLICES",
    "worst_chips",
    "hosts",
    "link_load",
    "timeline",
    "step_range",
    "memory_timeline",
    "chip_memory",
    "compiles_by_step",
    "compiles_by_cause",
    "scaling_runs",
    "step_kind_s",
    "events_window",
    "run_tables",
    "TIMELINE_MAX_CHIPS",
    "TIMELINE_MAX_CELLS",
]

#: kinds the timeline names; any other kind (an imported trace's) is drawn as "other"
_TIMELINE_KINDS = EVENT_KINDS

#: most chips one timeline draws (rows of the Gantt)
TIMELINE_MAX_CHIPS = 256
#: most (chip, bucket) cells one timeline returns: keeps the figure under ~3 MB of JSON
TIMELINE_MAX_CELLS = 100_000

_HAS_TABLE_SQL = "SELECT count(*) FROM information_schema.tables WHERE table_name = $name"


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """True if the database holds table ``name`` (extra tables appear only once a run wrote one)."""
    return con.execute(_HAS_TABLE_SQL, {"name": name}).fetchone()[0] > 0


def _extra_rows(con: duckdb.DuckDBPyConnection, table: str, run_id: int) -> bool:
    sql = f"SELECT count(*) FROM {quote_ident(table)} WHERE run_id = $id"  # table names cannot be bound
    return has_table(con, table) and con.execute(sql, {"id": run_id}).fetchone()[0] > 0


_KIND_BY_STEP_SQL = """
WITH n AS (SELECT count(*) AS steps, any_value(chips) AS chips FROM steps, (SELECT chips FROM runs WHERE run_id = $id) WHERE run_id = $id),
b AS (SELECT greatest(1, CAST(ceil(steps / $max_points) AS BIGINT)) AS width, chips FROM n)
SELECT min(step) AS step, kind,
       sum(chip_ns) / 1e9 / b.chips / count(DISTINCT step) AS chip_s_per_step
FROM step_kind, b WHERE run_id = $id
GROUP BY step // b.width, kind, b.chips ORDER BY step, kind
"""


def kind_by_step(con: duckdb.DuckDBPyConnection, run_id: int, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Mean chip time per step by kind, over steps bucketed to at most ``max_points`` buckets.

    Columns: step (first step of the bucket), kind, chip_s_per_step (seconds of a chip's step spent
    on ``kind``, averaged over chips and the steps of the bucket; kinds sum to the mean step time).
    """
    return con.execute(_KIND_BY_STEP_SQL, {"id": run_id, "max_points": max_points}).df()


#: chip time by kind per group of chips: ``{group}`` is a column of chips (host, slice), ``{where}`` an
#: extra condition on ``c`` (both constants of the callers, never values)
KIND_BY_GROUP_SQL = """
SELECT c.{group}, k.kind, sum(k.ns) / 1e9 AS chip_s,
       sum(k.ns) / sum(sum(k.ns)) OVER (PARTITION BY c.{group}) AS frac
FROM chip_kind k JOIN chips c ON c.run_id = k.run_id AND c.chip = k.chip
WHERE k.run_id = $id {where} GROUP BY c.{group}, k.kind ORDER BY c.{group}, k.kind
"""
_KIND_BY_HOST_SQL = KIND_BY_GROUP_SQL.format(group="host", where="")


def kind_by_host(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame:
    """Chip time by host and kind: host, kind, chip_s, frac (per host, fractions sum to 1)."""
    return con.execute(_KIND_BY_HOST_SQL, {"id": run_id}).df()


#: every chip of slices $slice0..$slice1 with its shares of time by kind (callers add ORDER BY)
CHIP_METRICS_SELECT = """
WITH k AS (
    SELECT chip,
           sum(ns) AS total_ns,
           sum(ns) FILTER (WHERE kind = 'compute') AS compute_ns,
           sum(ns) FILTER (WHERE kind = 'collective') AS collective_ns,
           sum(ns) FILTER (WHERE kind = 'input_wait') AS input_wait_ns,
           sum(ns) FILTER (WHERE kind = 'sync_wait') AS sync_wait_ns,
           sum(ns) FILTER (WHERE kind = 'recompile') AS recompile_ns,
           sum(ns) FILTER (WHERE kind = 'bubble') AS bubble_ns,
           sum(ns) FILTER (WHERE kind = 'other') AS other_ns
    FROM chip_kind
    WHERE run_id = $id AND chip IN (SELECT chip FROM chips WHERE run_id = $id AND slice BETWEEN $slice0 AND $slice1)
    GROUP BY chip
)
SELECT c.chip, c.host, c.slice, c.x, c.y, c.z,
       coalesce(k.compute_ns, 0) / nullif(k.total_ns, 0) AS compute_frac,
       coalesce(k.collective_ns, 0) / nullif(k.total_ns, 0) AS collective_frac,
       coalesce(k.input_wait_ns, 0) / nullif(k.total_ns, 0) AS input_wait_frac,
       coalesce(k.sync_wait_ns, 0) / nullif(k.total_ns, 0) AS sync_wait_frac,
       coalesce(k.recompile_ns, 0) / nullif(k.total_ns, 0) AS recompile_frac,
       coalesce(k.bubble_ns, 0) / nullif(k.total_ns, 0) AS bubble_frac,
       coalesce(k.other_ns, 0) / nullif(k.total_ns, 0) AS other_frac,
       1 - (coalesce(k.compute_ns, 0) + coalesce(k.collective_ns, 0)) / nullif(k.total_ns, 0) AS idle_frac,
       k.total_ns / 1e9 AS busy_and_idle_s
FROM chips c LEFT JOIN k ON k.chip = c.chip
WHERE c.run_id = $id AND c.slice BETWEEN $slice0 AND $slice1
"""
#: per-chip columns of extra tables, joined when the run stored them: (table, join, column, its name)
CHIP_EXTRAS = (
    ("extra_chip_memory", "LEFT JOIN extra_chip_memory e0 ON e0.run_id = $id AND e0.chip = m.chip",
     "e0.peak_bytes AS hbm_peak_bytes", "hbm_peak_bytes"),
    ("extra_chip_expert_load", "LEFT JOIN extra_chip_expert_load e1 ON e1.run_id = $id AND e1.chip = m.chip",
     "e1.mean_load_ratio AS expert_load_ratio", "expert_load_ratio"),
)  # fmt: skip
#: the per-chip metrics SQL for each combination of CHIP_EXTRAS a run stored (keyed by one bool per extra)
CHIP_METRICS_BY_EXTRAS = {
    stored: "SELECT m.*" + "".join(", " + e[2] for e, on in zip(CHIP_EXTRAS, stored) if on)
    + " FROM (" + CHIP_METRICS_SELECT + ") m " + " ".join(e[1] for e, on in zip(CHIP_EXTRAS, stored) if on)
    for stored in itertools.product((False, True), repeat=len(CHIP_EXTRAS))
}
_CHIP_METRICS_ORDERED = {stored: sql + " ORDER BY m.chip" for stored, sql in CHIP_METRICS_BY_EXTRAS.items()}
#: bounds of $slice0..$slice1 that take every slice
ALL_SLICES = (0, 2**31 - 1)


def chip_extras(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[bool, ...]:
    """Which of :data:`CHIP_EXTRAS` the run stored: the key of :data:`CHIP_METRICS_BY_EXTRAS` for it.

    That SQL has the columns of :func:`chip_metrics` and the parameters $id, $slice0 and $slice1
    (an inclusive slice range, :data:`ALL_SLICES`).
    """
    return tuple(_extra_rows(con, table, run_id) for table, *_ in CHIP_EXTRAS)


def chip_metrics(con: duckdb.DuckDBPyConnection, run_id: int, slice_: int | None = None) -> pd.DataFrame:
    """One row per chip (of one slice, when ``slice_`` is given): where it sits and where its time went.

    Columns: chip, host, slice, x, y, z, compute_frac, collective_frac, input_wait_frac,
    sync_wait_frac, recompile_frac, bubble_frac, other_frac, idle_frac (everything but compute and exposed
    collectives), busy_and_idle_s (the chip's wall time) and, when the run stored them, hbm_peak_bytes
    (per-chip memory) and expert_load_ratio (a mixture-of-experts chip's expert work over an even share).
    """
    lo, hi = ALL_SLICES if slice_ is None else (int(slice_), int(slice_))
    return con.execute(_CHIP_METRICS_ORDERED[chip_extras(con, run_id)], {"id": run_id, "slice0": lo, "slice1": hi}).df()


_WORST_CHIPS_SQL = """
SELECT c.chip, c.host, c.x, c.y, c.z,
       sum(k.ns) FILTER (WHERE k.kind NOT IN ('compute', 'collective')) / sum(k.ns) AS idle_frac,
       sum(k.ns) FILTER (WHERE k.kind = 'input_wait') / sum(k.ns) AS input_wait_frac,
       sum(k.ns) FILTER (WHERE k.kind = 'sync_wait') / sum(k.ns) AS sync_wait_frac
FROM chip_kind k JOIN chips c ON c.run_id = k.run_id AND c.chip = k.chip
WHERE k.run_id = $id GROUP BY c.chip, c.host, c.x, c.y, c.z
ORDER BY idle_frac DESC NULLS LAST, c.chip LIMIT $n
"""


def worst_chips(con: duckdb.DuckDBPyConnection, run_id: int, n: int = 10) -> pd.DataFrame:
    """The ``n`` chips that spend the largest share of their time idle (not computing or communicating)."""
    return con.execute(_WORST_CHIPS_SQL, {"id": run_id, "n": n}).df().fillna({"input_wait_frac": 0.0, "sync_wait_frac": 0.0})


_HOSTS_SQL = "SELECT host, list(chip ORDER BY chip) AS chips FROM chips WHERE run_id = $id GROUP BY host ORDER BY host"


def hosts(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame:
    """Hosts of a run and their chips: host, chips (list of chip ids)."""
    return con.execute(_HOSTS_SQL, {"id": run_id}).df()


_LINK_LOAD_SQL = """
SELECT l.src_chip, l.dst_chip, l.axis, l.bytes_per_step, l.busy_ns_per_step, l.utilization,
       s.x AS src_x, s.y AS src_y, s.z AS src_z, d.x AS dst_x, d.y AS dst_y, d.z AS dst_z
FROM extra_link_load l
LEFT JOIN chips s ON s.run_id = l.run_id AND s.chip = l.src_chip
LEFT JOIN chips d ON d.run_id = l.run_id AND d.chip = l.dst_chip
WHERE l.run_id = $id ORDER BY l.src_chip, l.dst_chip
"""


def link_load(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame | None:
    """Steady-state load of each directed link, with both ends' coordinates; None if the run has none."""
    if not _extra_rows(con, "extra_link_load", run_id):
        return None
    return con.execute(_LINK_LOAD_SQL, {"id": run_id}).df()


_STEP_RANGE_SQL = "SELECT min(step), max(step), min(start_ns) FROM steps WHERE run_id = $id"


def step_range(con: duckdb.DuckDBPyConnection, run_id: int) -> tuple[int, int] | None:
    """(first, last) step of a run, or None if it stored no steps."""
    row = con.execute(_STEP_RANGE_SQL, {"id": run_id}).fetchone()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


# Level of detail (profiler/level_of_detail.py): DuckDB selects the window and its events, numpy
# splits them over the buckets. The chip set is a semi-join, not list_contains, whose per-row cost
# grows with the list; its dynamic filter skips row groups of other chips (events are chip-major
# within blocks of engine.model.step.STEP_BLOCK steps). Kinds travel as their position in $kinds
# (0: not in the list).
_TIMELINE_WINDOW_SQL = """
SELECT t0, greatest(1, CAST(ceil((t1 - t0) / $buckets) AS BIGINT)) AS width
FROM (SELECT min(start_ns) AS t0, max(start_ns + step_ns) AS t1 FROM steps WHERE run_id = $id AND step BETWEEN $step0 AND $step1)
"""
_TIMELINE_EVENTS_SQL = """
SELECT chip, CAST(coalesce(list_position($kinds, kind), 0) AS TINYINT) AS k, start_ns, dur_ns
FROM events
WHERE run_id = $id AND step BETWEEN $step0 AND $step1 AND dur_ns > 0 AND chip IN (SELECT unnest($chips))
"""
#: events per record batch of a timeline's scan: bounds memory for a window of many steps
_TIMELINE_BATCH_ROWS = 1_000_000
_TIMELINE_COLUMNS = ["chip", "bucket", "kind", "share", "t0_ns", "width_ns"]
_TIMELINE_STEPS_SQL = """
SELECT step, start_ns - min(start_ns) OVER () AS start_rel_ns FROM steps
WHERE run_id = $id AND step BETWEEN $step0 AND $step1 ORDER BY step
"""


def timeline(
    con: duckdb.DuckDBPyConnection, run_id: int, chips: tuple[int, ...], step0: int, step1: int, buckets: int = 800
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A level-of-detail Gantt of the chosen chips over steps [step0, step1].

    Parameters
    ----------
    chips
        Chip ids (at most :data:`TIMELINE_MAX_CHIPS`; more are cut off).
    step0, step1
        Inclusive step range.
    buckets
        Time buckets across the window (the horizontal resolution); lowered so that
        ``len(chips) * buckets <= TIMELINE_MAX_CELLS``.

    Returns
    -------
    (cells, steps)
        cells: chip, bucket, kind (dominant kind of the bucket), share (its fraction of the bucket),
        t0_ns (window start), width_ns (bucket width). At most ``len(chips) * buckets`` rows.
        steps: step, start_rel_ns (step start relative to the window), for step boundaries.
    """
    chip_list = [int(c) for c in chips[:TIMELINE_MAX_CHIPS]]
    buckets = max(1, min(int(buckets), TIMELINE_MAX_CELLS // max(1, len(chip_list))))
    p = {"id": run_id, "step0": step0, "step1": step1}
    steps = con.execute(_TIMELINE_STEPS_SQL, p).df()
    ((t0_ns, width_ns),) = con.execute(_TIMELINE_WINDOW_SQL, {**p, "buckets": buckets}).fetchall()
    if t0_ns is None or not chip_list:
        return pd.DataFrame({c: [] for c in _TIMELINE_COLUMNS}), steps
    # a spare bucket: width is a float ceil, which for a very long window may round so that the last
    # event ends one bucket further
    grid = CellGrid(chip_list, buckets + 1, width_ns, _TIMELINE_KINDS)
    events = con.sql(_TIMELINE_EVENTS_SQL, params={**p, "chips": chip_list, "kinds": list(_TIMELINE_KINDS)})
    for batch in events.to_arrow_reader(_TIMELINE_BATCH_ROWS):
        start_ns = batch.column("start_ns").to_numpy() - t0_ns
        grid.add(batch.column("chip").to_numpy(), batch.column("k").to_numpy(), start_ns, start_ns + batch.column("dur_ns").to_numpy())
    cells = grid.cells()
    cells["t0_ns"] = np.int64(t0_ns)
    cells["width_ns"] = np.int64(width_ns)
    return cells, steps


_MEMORY_TIMELINE_SQL = """
SELECT point, any_value(phase) AS phase, category, sum(bytes) AS bytes
FROM extra_memory_timeline WHERE run_id = $id GROUP BY point, category ORDER BY point, category
"""


def memory_timeline(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame | None:
    """HBM use of a representative chip through one step: point, phase, category, bytes (None if absent)."""
    if not _extra_rows(con, "extra_memory_timeline", run_id):
        return None
    return con.execute(_MEMORY_TIMELINE_SQL, {"id": run_id}).df()


_CHIP_MEMORY_SQL = """
SELECT m.chip, m.peak_bytes, c.host, c.x, c.y, c.z
FROM extra_chip_memory m LEFT JOIN chips c ON c.run_id = m.run_id AND c.chip = m.chip
WHERE m.run_id = $id ORDER BY m.chip
"""


def chip_memory(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame | None:
    """Peak HBM of every chip: chip, peak_bytes, host, x, y, z (None if the run stored none)."""
    if not _extra_rows(con, "extra_chip_memory", run_id):
        return None
    return con.execute(_CHIP_MEMORY_SQL, {"id": run_id}).df()


_COMPILES_BY_STEP_SQL = """
SELECT step, count(*) AS compiles, sum(compile_ns) / 1e9 AS compile_s, string_agg(DISTINCT cause, ', ') AS causes
FROM extra_compiles WHERE run_id = $id GROUP BY step ORDER BY step
"""
_COMPILES_BY_CAUSE_SQL = """
SELECT cause, count(*) AS compiles, sum(compile_ns) / 1e9 AS compile_s, count(DISTINCT signature) AS signatures,
       min(step) AS first_step, max(step) AS last_step
FROM extra_compiles WHERE run_id = $id GROUP BY cause ORDER BY compile_s DESC
"""


def compiles_by_step(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame | None:
    """Compilations per step: step, compiles, compile_s, causes (None if the run stored none)."""
    if not has_table(con, "extra_compiles"):
        return None
    return con.execute(_COMPILES_BY_STEP_SQL, {"id": run_id}).df()


def compiles_by_cause(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame | None:
    """Compilations by cause: cause, compiles, compile_s, signatures, first_step, last_step."""
    if not has_table(con, "extra_compiles"):
        return None
    return con.execute(_COMPILES_BY_CAUSE_SQL, {"id": run_id}).df()


_SCALING_RUNS_SQL = """
SELECT run_id, name, source, chip, chips, steps,
       scenario->'model'->>'kind' AS model_kind,
       CAST(scenario->'training'->>'global_batch' AS BIGINT) AS global_batch,
       CAST(summary->>'step_time_s' AS DOUBLE) AS step_time_s,
       CAST(summary->>'samples_per_s' AS DOUBLE) AS samples_per_s,
       CAST(summary->>'tokens_per_s' AS DOUBLE) AS tokens_per_s,
       CAST(summary->>'mfu' AS DOUBLE) AS mfu,
       CAST(summary->>'oom' AS BOOLEAN) AS oom,
       summary->>'hbm_source' AS hbm_source,
       CAST(summary->>'time_to_train_s' AS DOUBLE) AS time_to_train_s,
       CAST(summary->>'steps_to_target' AS BIGINT) AS steps_to_target,
       CAST(summary->>'chip_hours' AS DOUBLE) AS chip_hours,
       CAST(summary->>'cost_usd' AS DOUBLE) AS cost_usd,
       CAST(summary->>'batch_over_b_crit' AS DOUBLE) AS batch_over_b_crit,
       scenario->'convergence'->>'task' AS task,
       CAST(summary->>'params' AS DOUBLE) AS params,
       -- what makes two runs the same job: the whole model, the training recipe and every mesh axis but data
       CAST(scenario->'model' AS VARCHAR) AS model_json,
       json_object('precision', scenario->'training'->'precision', 'optimizer', scenario->'training'->'optimizer',
                   'remat', scenario->'training'->'remat', 'weight_dtype', scenario->'training'->'weight_dtype',
                   'microbatches', scenario->'training'->'microbatches')::VARCHAR AS recipe_json,
       json_object('fsdp', scenario->'parallelism'->'fsdp', 'tensor', scenario->'parallelism'->'tensor',
                   'expert', scenario->'parallelism'->'expert', 'pipeline', scenario->'parallelism'->'pipeline',
                   'context', scenario->'parallelism'->'context', 'strategy', scenario->'parallelism'->'strategy',
                   'fsdp_shard', scenario->'parallelism'->'fsdp_shard')::VARCHAR AS mesh_json
FROM runs ORDER BY run_id
"""


def scaling_runs(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every run with what a scaling plot needs: chips, model kind, global batch and headline numbers.

    Columns: run_id, name, source, chip, chips, steps, model_kind, global_batch, step_time_s,
    samples_per_s, tokens_per_s, mfu, oom, hbm_source (``xla`` when the TPU compiler gave the HBM peak and the
    out-of-memory verdict, as ``run --xla`` and ``sweep --xla`` store them); for runs with a ``[convergence]`` task:
    time_to_train_s, steps_to_target, chip_hours, cost_usd (null unless priced), batch_over_b_crit,
    task (else null); per_chip_batch (global_batch / chips) and b_crit_samples (the task's critical
    batch, global_batch / batch_over_b_crit); params; model_json, recipe_json and mesh_json (the
    model table, the training recipe, and the mesh axes other than data, as JSON text: runs that
    agree on all three are the same job at another scale).
    """
    df = con.execute(_SCALING_RUNS_SQL).df()
    df["per_chip_batch"] = df["global_batch"] / df["chips"]
    df["b_crit_samples"] = df["global_batch"] / df["batch_over_b_crit"].where(df["batch_over_b_crit"] > 0)
    return df


_SAME_MODEL_SQL = """
SELECT r.run_id FROM runs r, runs base
WHERE base.run_id = $id AND r.run_id <> $id AND r.scenario IS NOT NULL
  AND CAST(r.scenario->'model' AS VARCHAR) = CAST(base.scenario->'model' AS VARCHAR)
ORDER BY r.run_id DESC
"""


def same_model_runs(con: duckdb.DuckDBPyConnection, run_id: int) -> list[int]:
    """Other runs of the same model as ``run_id`` (its whole ``[model]`` table), newest first."""
    return [int(r[0]) for r in con.execute(_SAME_MODEL_SQL, {"id": run_id}).fetchall()]


_STEP_KIND_S_SQL = """
SELECT k.kind, sum(k.ns) / 1e9 / r.chips / r.steps AS s_per_step
FROM chip_kind k JOIN runs r ON r.run_id = k.run_id
WHERE k.run_id = $id GROUP BY k.kind, r.chips, r.steps ORDER BY k.kind
"""


def step_kind_s(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame:
    """Mean seconds of a chip's step by kind: kind, s_per_step (kinds sum to the mean step time)."""
    return con.execute(_STEP_KIND_S_SQL, {"id": run_id}).df()


_EVENTS_WINDOW_SQL = """
SELECT chip, step, kind, start_ns, dur_ns FROM events
WHERE run_id = $id AND step BETWEEN $step0 AND $step1 ORDER BY step, chip, start_ns
"""


def events_window(con: duckdb.DuckDBPyConnection, run_id: int, step0: int, step1: int) -> pa.Table:
    """The raw events of steps [step0, step1] as an Arrow table (for a trace export of a window)."""
    return con.execute(_EVENTS_WINDOW_SQL, {"id": run_id, "step0": step0, "step1": step1}).to_arrow_table()


def run_tables(con: duckdb.DuckDBPyConnection, run_id: int) -> dict[str, Any]:
    """Row counts of every per-run table holding this run (core and extra_*), for the run metadata panel."""
    names = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables ORDER BY table_name").fetchall()]
    out: dict[str, Any] = {}
    for table in names:
        if table in ("runs",) or table.startswith("_"):
            continue
        cols = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = $t", {"t": table}).fetchall()]
        if "run_id" not in cols:
            continue
        out[table] = con.execute(f"SELECT count(*) FROM {quote_ident(table)} WHERE run_id = $id", {"id": run_id}).fetchone()[0]
    return out
