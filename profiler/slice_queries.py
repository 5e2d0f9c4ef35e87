"""Per-slice aggregates of a multi-slice run, and one slice's chips and links, asked in SQL.

A job of 199 slices of 256 chips stores 50,944 chips and ~210,000 directed links. A page
draws the slices first (199 rows from :func:`slice_metrics`), then the 256 chips and the ICI
links of the one slice it opens (:func:`slice_links`, :func:`profiler.queries.chip_metrics`
with a slice): it never receives every chip or every link.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from .queries import ALL_SLICES, CHIP_EXTRAS, CHIP_METRICS_BY_EXTRAS, KIND_BY_GROUP_SQL, chip_extras, has_table

__all__ = ["SLICE_METRICS", "slice_metrics", "slice_links", "busiest_links", "kind_by_slice"]

#: per-chip metrics aggregated per slice (columns of profiler.queries.chip_metrics); absent ones are skipped
SLICE_METRICS = (
    "idle_frac", "input_wait_frac", "sync_wait_frac", "bubble_frac", "compute_frac", "collective_frac",
    "hbm_peak_bytes", "expert_load_ratio",
)  # fmt: skip

_DCN_BY_SLICE_SQL = """
SELECT c.slice, sum(l.bytes_per_step) AS dcn_bytes_per_step, max(l.busy_ns_per_step) AS dcn_busy_ns_per_step,
       max(l.utilization) AS dcn_utilization_max, count(*) AS dcn_links
FROM extra_link_load l JOIN chips c ON c.run_id = l.run_id AND c.chip = l.src_chip
WHERE l.run_id = $id AND l.axis = 'dcn' GROUP BY c.slice
"""


#: the metrics of SLICE_METRICS each combination of extra per-chip tables has (names from SLICE_METRICS only)
_METRICS_BY_EXTRAS = {
    stored: [m for m in SLICE_METRICS if m not in {e[3] for e, on in zip(CHIP_EXTRAS, stored) if not on}]
    for stored in CHIP_METRICS_BY_EXTRAS
}
#: the per-slice SQL for each combination of extra per-chip tables
_SLICE_METRICS_BY_EXTRAS = {
    stored: "SELECT slice, count(*) AS chips, count(DISTINCT host) AS hosts, min(chip) AS first_chip"
    + "".join(f", avg({m}) AS {m}_mean, max({m}) AS {m}_max, min({m}) AS {m}_min" for m in _METRICS_BY_EXTRAS[stored])
    + " FROM (" + CHIP_METRICS_BY_EXTRAS[stored] + ") GROUP BY slice ORDER BY slice"
    for stored in CHIP_METRICS_BY_EXTRAS
}  # fmt: skip


def slice_metrics(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame:
    """One row per slice: its chips and hosts, each metric's mean, highest and lowest chip, and its DCN traffic.

    Columns: slice, chips, hosts, first_chip, then ``<metric>_mean``, ``<metric>_max`` and
    ``<metric>_min`` for every metric of :data:`SLICE_METRICS` the run stored, and, when the run
    stored link load with DCN rows: dcn_bytes_per_step (bytes the slice's host NICs send per step),
    dcn_busy_ns_per_step (the busiest NIC's busy time per step) and dcn_utilization_max (that over the
    median step). Ordered by slice.
    """
    sql = _SLICE_METRICS_BY_EXTRAS[chip_extras(con, run_id)]
    df = con.execute(sql, {"id": run_id, "slice0": ALL_SLICES[0], "slice1": ALL_SLICES[1]}).df()
    if has_table(con, "extra_link_load"):
        dcn = con.execute(_DCN_BY_SLICE_SQL, {"id": run_id}).df()
        if not dcn.empty:
            df = df.merge(dcn, on="slice", how="left")
    return df


_SLICE_LINKS_SQL = """
SELECT l.src_chip, l.dst_chip, l.axis, l.bytes_per_step, l.busy_ns_per_step, l.utilization,
       s.x AS src_x, s.y AS src_y, s.z AS src_z, d.x AS dst_x, d.y AS dst_y, d.z AS dst_z
FROM extra_link_load l
JOIN chips s ON s.run_id = l.run_id AND s.chip = l.src_chip
LEFT JOIN chips d ON d.run_id = l.run_id AND d.chip = l.dst_chip
WHERE l.run_id = $id AND s.slice = $slice AND l.axis <> 'dcn' ORDER BY l.src_chip, l.dst_chip
"""


def slice_links(con: duckdb.DuckDBPyConnection, run_id: int, slice_: int) -> pd.DataFrame | None:
    """The ICI links leaving chips of one slice, with both ends' coordinates (columns of
    :func:`profiler.queries.link_load`); None if the run stored no link load."""
    if not has_table(con, "extra_link_load"):
        return None
    if con.execute("SELECT count(*) FROM extra_link_load WHERE run_id = $id", {"id": run_id}).fetchone()[0] == 0:
        return None
    return con.execute(_SLICE_LINKS_SQL, {"id": run_id, "slice": int(slice_)}).df()


_BUSIEST_LINKS_SQL = """
SELECT l.src_chip, l.dst_chip, l.axis, s.slice AS src_slice, l.bytes_per_step, l.busy_ns_per_step, l.utilization
FROM extra_link_load l LEFT JOIN chips s ON s.run_id = l.run_id AND s.chip = l.src_chip
WHERE l.run_id = $id AND ($slice < 0 OR s.slice = $slice)
ORDER BY l.utilization DESC, l.src_chip, l.dst_chip LIMIT $n
"""


def busiest_links(con: duckdb.DuckDBPyConnection, run_id: int, n: int = 20, slice_: int = -1) -> pd.DataFrame | None:
    """The ``n`` busiest links (of one slice's chips when ``slice_`` >= 0), DCN NICs included; None without link load.

    Columns: src_chip, dst_chip, axis, src_slice, bytes_per_step, busy_ns_per_step, utilization.
    """
    if not has_table(con, "extra_link_load"):
        return None
    df = con.execute(_BUSIEST_LINKS_SQL, {"id": run_id, "n": int(n), "slice": int(slice_)}).df()
    return None if df.empty and slice_ < 0 else df


_KIND_BY_SLICE_SQL = KIND_BY_GROUP_SQL.format(group="slice", where="")


def kind_by_slice(con: duckdb.DuckDBPyConnection, run_id: int) -> pd.DataFrame:
    """Chip time by slice and kind: slice, kind, chip_s, frac (per slice, fractions sum to 1)."""
    return con.execute(_KIND_BY_SLICE_SQL, {"id": run_id}).df()
