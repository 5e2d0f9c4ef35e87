"""Questions about an HLO run's module: each op's time by Podscope and by the compiler, and its collectives.

An HLO run of a module compiled for a TPU stores ``extra_hlo_ops`` (every top-level op with
Podscope's roofline time and XLA:TPU's estimate, ``xla_ns``) and ``extra_hlo_collectives``
(what each collective costs and how much of it the schedule leaves exposed). The dashboard asks
these functions for aggregates and for a capped set of ops, never for every row of a large module:
a scatter gets the heaviest ops and an even sample of the rest, at most ``MAX_POINTS``.

The time a run *charges* an op is XLA's estimate when the run's ``compute_source`` is ``"xla"``
and the op has one, else Podscope's (as :func:`engine.hlo.step.hlo_step_cost` prices it).
"""

from __future__ import annotations

from typing import Any

import duckdb
import pandas as pd

from .queries import MAX_POINTS, _extra_rows

__all__ = ["has_hlo_ops", "hlo_op_totals", "hlo_op_points", "hlo_top_ops", "hlo_collectives", "hlo_op_pairs", "HLO_TOP_OPS"]

#: ops listed in a table of the heaviest ops
HLO_TOP_OPS = 10


def has_hlo_ops(con: duckdb.DuckDBPyConnection, run_id: int) -> bool:
    """True when the run stored per-op times (an HLO model run)."""
    return _extra_rows(con, "extra_hlo_ops", run_id)


#: the time the run charges one execution of the op, nanoseconds ($xla: the run's compute_source is "xla")
_CHARGED = "CASE WHEN $xla AND xla_ns IS NOT NULL THEN xla_ns ELSE podscope_ns END"

# Ratios are over ops both estimates give a time (a log scale has no room for zero). A weighted
# quantile is the first ratio whose cumulative weight (the op's XLA time per step) reaches q of the total.
_OP_TOTALS_SQL = f"""
WITH ops AS (
    SELECT podscope_ns, xla_ns, executions, {_CHARGED} AS charged_ns,
           CASE WHEN xla_ns > 0 AND podscope_ns > 0 THEN podscope_ns / xla_ns END AS ratio,
           CASE WHEN xla_ns > 0 AND podscope_ns > 0 THEN xla_ns * executions END AS weight
    FROM extra_hlo_ops WHERE run_id = $id
), ranked AS (
    SELECT ratio, sum(weight) OVER (ORDER BY ratio ROWS UNBOUNDED PRECEDING) / sum(weight) OVER () AS cum
    FROM ops WHERE ratio IS NOT NULL
)
SELECT
    (SELECT count(*) FROM ops) AS ops,
    (SELECT count(*) FROM ops WHERE xla_ns IS NOT NULL) AS ops_with_xla,
    (SELECT count(*) FROM ops WHERE ratio IS NOT NULL) AS ops_compared,
    (SELECT sum(podscope_ns * executions) FROM ops) / 1e9 AS podscope_s,
    (SELECT sum(xla_ns * executions) FROM ops) / 1e9 AS xla_s,
    (SELECT sum(podscope_ns * executions) FROM ops WHERE xla_ns IS NOT NULL) / 1e9 AS podscope_with_xla_s,
    (SELECT sum(charged_ns * executions) FROM ops) / 1e9 AS charged_s,
    (SELECT quantile_cont(ratio, 0.5) FROM ops) AS ratio_median,
    (SELECT quantile_cont(ratio, 0.9) FROM ops) AS ratio_p90,
    (SELECT min(ratio) FROM ranked WHERE cum >= 0.5) AS ratio_median_weighted,
    (SELECT min(ratio) FROM ranked WHERE cum >= 0.9) AS ratio_p90_weighted
"""


def hlo_op_totals(con: duckdb.DuckDBPyConnection, run_id: int, xla_charged: bool = True) -> dict[str, Any] | None:
    """The module's compute by each estimate, and how far the two part op by op (None without per-op rows).

    Parameters
    ----------
    run_id
        An HLO run.
    xla_charged
        The run's ``compute_source`` is ``"xla"`` (it charges XLA's estimate where there is one).

    Returns
    -------
    dict
        ``ops`` (top-level ops), ``ops_with_xla`` (those with a compiler estimate), ``ops_compared``
        (both estimates above zero); per step, in seconds: ``podscope_s`` (every op's roofline),
        ``xla_s`` (the ops with an estimate), ``podscope_with_xla_s`` (the roofline of those same
        ops) and ``charged_s`` (what the run charges); the ratio podscope / xla per op:
        ``ratio_median``, ``ratio_p90`` (each op counts once) and ``ratio_median_weighted``,
        ``ratio_p90_weighted`` (each op weighted by its XLA time per step, executions included).
    """
    if not has_hlo_ops(con, run_id):
        return None
    cur = con.execute(_OP_TOTALS_SQL, {"id": run_id, "xla": bool(xla_charged)})
    return dict(zip((d[0] for d in cur.description), cur.fetchone()))


# The heaviest $top ops (by the larger of the two estimates per step), then every $stride-th of the
# rest, so a module of any size sends at most about $cap points.
_OP_POINTS_SQL = """
WITH ops AS (
    SELECT name, opcode, executions, bound, flops, bytes, podscope_ns, xla_ns,
           greatest(podscope_ns, xla_ns) * executions AS weight_ns
    FROM extra_hlo_ops WHERE run_id = $id AND xla_ns > 0 AND podscope_ns > 0
), ranked AS (
    SELECT *, row_number() OVER (ORDER BY weight_ns DESC, name) AS rank, count(*) OVER () AS n FROM ops
)
SELECT name, opcode, executions, bound, flops, bytes, podscope_ns, xla_ns, podscope_ns / xla_ns AS ratio,
       rank <= $top AS heaviest
FROM ranked
WHERE rank <= $top OR (rank - $top) % greatest(1, CAST(ceil((n - $top) / greatest($cap - $top, 1)) AS BIGINT)) = 0
ORDER BY rank
"""


def hlo_op_points(con: duckdb.DuckDBPyConnection, run_id: int, cap: int = MAX_POINTS, top: int = 500) -> pd.DataFrame | None:
    """Ops both estimates time, for a scatter: the ``top`` heaviest and an even sample of the rest, about ``cap`` in all.

    Columns: name, opcode, executions, bound, flops, bytes, podscope_ns, xla_ns (one execution each,
    nanoseconds), ratio (podscope / xla), heaviest (among the ``top``). None without per-op rows.
    """
    if not has_hlo_ops(con, run_id):
        return None
    top = min(top, cap)
    return con.execute(_OP_POINTS_SQL, {"id": run_id, "top": top, "cap": cap}).df()


_TOP_OPS_SQL = f"""
SELECT name, opcode, executions, bound,
       podscope_ns * executions / 1e9 AS podscope_s, xla_ns * executions / 1e9 AS xla_s,
       {_CHARGED} * executions / 1e9 AS charged_s,
       CASE WHEN xla_ns > 0 THEN podscope_ns / xla_ns END AS ratio
FROM extra_hlo_ops WHERE run_id = $id
ORDER BY charged_s DESC, name LIMIT $n
"""


def hlo_top_ops(con: duckdb.DuckDBPyConnection, run_id: int, xla_charged: bool = True, n: int = HLO_TOP_OPS) -> pd.DataFrame | None:
    """The ``n`` ops the run charges the most time per step (one execution's time x executions).

    Columns: name, opcode, executions, bound, podscope_s, xla_s (per step, seconds; xla_s null
    without an estimate), charged_s (what the run charges), ratio (podscope / xla). None without per-op rows.
    """
    if not has_hlo_ops(con, run_id):
        return None
    return con.execute(_TOP_OPS_SQL, {"id": run_id, "xla": bool(xla_charged), "n": n}).df()


_COLLECTIVES_SQL = """
SELECT op, asynchronous, coalesce(nullif(algorithm, ''), '(none named)') AS algorithm,
       count(*) AS collectives, sum(executions) AS executions, sum(bytes * executions) AS bytes_per_step,
       sum(time_ns * executions) / 1e9 AS total_s,
       sum(least(exposed_ns, time_ns) * executions) / 1e9 AS exposed_s,
       sum(greatest(time_ns - exposed_ns, 0) * executions) / 1e9 AS hidden_s
FROM extra_hlo_collectives WHERE run_id = $id
GROUP BY op, asynchronous, algorithm ORDER BY total_s DESC, op, algorithm
"""


def hlo_collectives(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame | None:
    """The module's collectives grouped by op, asynchronous or not, and XLA's algorithm, per step.

    Columns: op, asynchronous, algorithm, collectives (instructions), executions, bytes_per_step,
    total_s, exposed_s (the core waits for it), hidden_s (under compute), seconds per step.
    None when the run stored no collectives table rows.
    """
    if not _extra_rows(con, "extra_hlo_collectives", run_id):
        return None
    return con.execute(_COLLECTIVES_SQL, {"id": run_id}).df()


# Ops matched by name across two runs; the charged time of each side, heaviest first, capped.
_OP_PAIRS_SQL = """
WITH a AS (
    SELECT name, opcode, bound, executions,
           CASE WHEN $xla_a AND xla_ns IS NOT NULL THEN xla_ns ELSE podscope_ns END * executions AS a_ns
    FROM extra_hlo_ops WHERE run_id = $a
), b AS (
    SELECT name, executions,
           CASE WHEN $xla_b AND xla_ns IS NOT NULL THEN xla_ns ELSE podscope_ns END * executions AS b_ns
    FROM extra_hlo_ops WHERE run_id = $b
), pairs AS (
    SELECT a.name, a.opcode, a.bound, a.executions AS a_executions, b.executions AS b_executions,
           a.a_ns / 1e9 AS a_s, b.b_ns / 1e9 AS b_s
    FROM a JOIN b USING (name)
)
SELECT *, b_s - a_s AS delta_s, count(*) OVER () AS matched FROM pairs
WHERE a_s > 0 AND b_s > 0
ORDER BY abs(b_s - a_s) DESC, greatest(a_s, b_s) DESC, name LIMIT $cap
"""


def hlo_op_pairs(con: duckdb.DuckDBPyConnection, a: int, b: int, xla_a: bool, xla_b: bool, cap: int = MAX_POINTS) -> pd.DataFrame | None:
    """Each op of two HLO runs matched by instruction name, with the time per step each run charges it.

    ``xla_a`` / ``xla_b``: that run's compute_source is ``"xla"``. Columns: name, opcode, bound,
    a_executions, b_executions, a_s, b_s (seconds per step, both above zero), delta_s (b - a),
    matched (ops the two runs share by name with a time in both, before the cap). The ``cap`` ops whose time moved
    most come first. None unless both runs stored per-op rows.
    """
    if not (has_hlo_ops(con, a) and has_hlo_ops(con, b)):
        return None
    return con.execute(_OP_PAIRS_SQL, {"a": a, "b": b, "xla_a": bool(xla_a), "xla_b": bool(xla_b), "cap": cap}).df()
