"""Distributions across chips and hosts, asked in SQL: histograms, quantiles, the worst N.

A page about 50,944 chips cannot draw a bar per chip. It draws how the chips spread (a
histogram of a few dozen bins, with quantiles) and names the worst few; DuckDB bins and ranks,
so a page receives tens of rows whatever the pod size.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from .queries import KIND_BY_GROUP_SQL, has_table

__all__ = ["CHIP_QUANTITIES", "chip_histogram", "chip_quantiles", "top_chips", "worst_hosts", "worst_hosts_by_kind"]

#: per-chip quantities a distribution can be asked of: name -> (table it needs, SQL of (chip, v) for run $id)
CHIP_QUANTITIES = {
    "idle_frac": ("chip_kind", """
        SELECT chip, sum(ns) FILTER (WHERE kind NOT IN ('compute', 'collective')) / nullif(sum(ns), 0) AS v
        FROM chip_kind WHERE run_id = $id GROUP BY chip"""),
    "hbm_peak_bytes": ("extra_chip_memory", "SELECT chip, peak_bytes AS v FROM extra_chip_memory WHERE run_id = $id"),
    "expert_load_ratio": ("extra_chip_expert_load", "SELECT chip, mean_load_ratio AS v FROM extra_chip_expert_load WHERE run_id = $id"),
}  # fmt: skip


def _stored(con: duckdb.DuckDBPyConnection, quantity: str) -> bool:
    """Whether the database holds the table ``quantity`` is read from (ValueError for an unknown quantity)."""
    if quantity not in CHIP_QUANTITIES:
        raise ValueError(f"no per-chip quantity {quantity!r}; known: {', '.join(CHIP_QUANTITIES)}")
    return has_table(con, CHIP_QUANTITIES[quantity][0])


_HISTOGRAM_SQL = """
WITH v AS (SELECT v FROM ({source}) WHERE v IS NOT NULL),
r AS (SELECT min(v) AS lo, max(v) AS hi FROM v),
b AS (SELECT CASE WHEN r.hi = r.lo THEN 0 ELSE least($bins - 1, CAST(floor((v.v - r.lo) / (r.hi - r.lo) * $bins) AS BIGINT)) END AS bin,
             r.lo, r.hi
      FROM v, r)
SELECT bin, any_value(lo) + bin * (any_value(hi) - any_value(lo)) / $bins AS lo,
       any_value(lo) + (bin + 1) * (any_value(hi) - any_value(lo)) / $bins AS hi, count(*) AS chips
FROM b GROUP BY bin ORDER BY bin
"""


def chip_histogram(con: duckdb.DuckDBPyConnection, run_id: int, quantity: str, bins: int = 40) -> pd.DataFrame | None:
    """Chips per equal-width bin of a per-chip ``quantity`` (a key of :data:`CHIP_QUANTITIES`).

    Columns: bin, lo, hi (the bin's edges, in the quantity's unit), chips (count). Empty bins are
    left out; when every chip has the same value there is one bin with lo == hi. None when the run
    stored no such quantity.

    Raises
    ------
    ValueError
        For a quantity not in :data:`CHIP_QUANTITIES`.
    """
    if not _stored(con, quantity):
        return None
    df = con.execute(_HISTOGRAM[quantity], {"id": run_id, "bins": max(1, int(bins))}).df()
    return None if df.empty else df


_QUANTILES_SQL = """
SELECT count(*) AS chips, min(v) AS min, quantile_cont(v, 0.5) AS p50, quantile_cont(v, 0.9) AS p90,
       quantile_cont(v, 0.99) AS p99, max(v) AS max, avg(v) AS mean
FROM ({source}) WHERE v IS NOT NULL
"""


def chip_quantiles(con: duckdb.DuckDBPyConnection, run_id: int, quantity: str) -> dict[str, float] | None:
    """chips, min, p50, p90, p99, max and mean of a per-chip ``quantity`` (None when not stored)."""
    if not _stored(con, quantity):
        return None
    cur = con.execute(_QUANTILES[quantity], {"id": run_id})
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    return None if not row["chips"] else {k: float(v) for k, v in row.items()}


_TOP_CHIPS_SQL = """
SELECT q.chip, q.v AS value, c.host, c.slice, c.x, c.y, c.z
FROM ({source}) q LEFT JOIN chips c ON c.run_id = $id AND c.chip = q.chip
WHERE q.v IS NOT NULL ORDER BY q.v DESC, q.chip LIMIT $n
"""


def top_chips(con: duckdb.DuckDBPyConnection, run_id: int, quantity: str, n: int = 10) -> pd.DataFrame | None:
    """The ``n`` chips with the highest ``quantity``: chip, value, host, slice, x, y, z (None when not stored)."""
    if not _stored(con, quantity):
        return None
    return con.execute(_TOP_CHIPS[quantity], {"id": run_id, "n": int(n)}).df()


#: each statement above for each quantity, built once from the constants
_HISTOGRAM = {q: _HISTOGRAM_SQL.replace("{source}", sql) for q, (_, sql) in CHIP_QUANTITIES.items()}
_QUANTILES = {q: _QUANTILES_SQL.replace("{source}", sql) for q, (_, sql) in CHIP_QUANTITIES.items()}
_TOP_CHIPS = {q: _TOP_CHIPS_SQL.replace("{source}", sql) for q, (_, sql) in CHIP_QUANTITIES.items()}

_HOST_IDLE_SQL = """
SELECT c.host, any_value(c.slice) AS slice,
       sum(k.ns) FILTER (WHERE k.kind NOT IN ('compute', 'collective')) / nullif(sum(k.ns), 0) AS idle_frac
FROM chip_kind k JOIN chips c ON c.run_id = k.run_id AND c.chip = k.chip
WHERE k.run_id = $id GROUP BY c.host
"""
_WORST_HOSTS_SQL = f"SELECT * FROM ({_HOST_IDLE_SQL}) ORDER BY idle_frac DESC NULLS LAST, host LIMIT $n"
_WORST_HOSTS_BY_KIND_SQL = "WITH w AS (" + _WORST_HOSTS_SQL + ")" + KIND_BY_GROUP_SQL.format(group="host", where="AND c.host IN (SELECT host FROM w)")


def worst_hosts(con: duckdb.DuckDBPyConnection, run_id: int, n: int = 10) -> pd.DataFrame:
    """The ``n`` hosts whose chips spend the largest share of their time idle: host, slice, idle_frac."""
    return con.execute(_WORST_HOSTS_SQL, {"id": run_id, "n": int(n)}).df()


def worst_hosts_by_kind(con: duckdb.DuckDBPyConnection, run_id: int, n: int = 64) -> pd.DataFrame:
    """Chip time by kind of the ``n`` most idle hosts (columns of :func:`profiler.queries.kind_by_host`)."""
    return con.execute(_WORST_HOSTS_BY_KIND_SQL, {"id": run_id, "n": int(n)}).df()
