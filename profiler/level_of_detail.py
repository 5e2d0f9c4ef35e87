"""Level of detail for the Timeline: events split over equal time buckets, one kind per cell.

As XProf and Perfetto do it: a window is cut into equal time buckets; every event is split
over the buckets it overlaps, and each (chip, bucket) cell shows the kind that covered most
of it, with that kind's share of the cell. Exact when buckets are shorter than events;
otherwise short events lose to long ones, which is what a pixel can show anyway.

DuckDB selects the window's events (the scan, with row-group pruning by chip and step); the
split and the per-cell sums are done here with numpy, into one dense (cell, kind) array. The
same level of detail in SQL (an UNNEST over bucket ranges and two hash aggregations) took
~3x as long for 256 chips x 100 steps, and the cells are at most ``TIMELINE_MAX_CELLS``, so
the dense array is small (chips x buckets x kinds float64: ~6 MB at the cap). Events arrive
in record batches, so memory stays bounded however many steps the window holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["CellGrid"]


class CellGrid:
    """Chip time by kind in every (chip, time bucket) cell of a window.

    Parameters
    ----------
    chips
        The chip ids of the window's rows (any order; events of other chips are ignored).
    buckets
        Number of time buckets; bucket ``b`` covers ``[b * width_ns, (b + 1) * width_ns)``
        from the window start.
    width_ns
        Bucket width in ns (at least 1).
    kinds
        Names of kind codes ``1 .. len(kinds)``; code 0 is a kind not in the list, named ``"other"``.
    """

    def __init__(self, chips: Sequence[int], buckets: int, width_ns: int, kinds: Sequence[str]):
        self.chips = np.unique(np.asarray(chips, dtype=np.int64))
        self.buckets = int(buckets)
        self.width_ns = max(1, int(width_ns))
        self.kinds = np.array(["other", *kinds], dtype=object)
        # float64 sums are exact for integer ns below 2**53 (~104 days per cell)
        self._ns = np.zeros(len(self.chips) * self.buckets * len(self.kinds), dtype=np.float64)

    def add(self, chip: np.ndarray, kind_code: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray) -> None:
        """Add events: chip ids, kind codes, and start/end in ns relative to the window start.

        Events (or the parts of them) outside the grid's chips and buckets are ignored.
        """
        width, n_kinds = self.width_ns, len(self.kinds)
        chip = np.asarray(chip, dtype=np.int64)
        start_ns = np.asarray(start_ns, dtype=np.int64)
        end_ns = np.asarray(end_ns, dtype=np.int64)
        row = np.minimum(np.searchsorted(self.chips, chip), len(self.chips) - 1)
        # an event's first and last cell, clipped to the grid so an event reaching far outside the
        # window is split over the window's buckets only (never into millions of pieces)
        first_raw = start_ns // width
        last_raw = (end_ns - 1) // width
        known = (self.chips[row] == chip) & (end_ns > start_ns) & (last_raw >= 0) & (first_raw < self.buckets)
        first = np.clip(first_raw, 0, self.buckets - 1)
        last = np.clip(last_raw, 0, self.buckets - 1)
        code = np.asarray(kind_code, dtype=np.int64)
        code = np.where((code >= 0) & (code < n_kinds), code, 0)  # an unknown code counts as "other"
        # the flat index of (row, first bucket, kind) in the dense array
        base = (row * self.buckets + first) * n_kinds + code
        # most events fall in one bucket: all their time inside the grid goes to that cell
        one = known & (first == last)
        inside_ns = np.minimum(end_ns, (first + 1) * width) - np.maximum(start_ns, first * width)
        self._ns += np.bincount(base[one], weights=inside_ns[one], minlength=len(self._ns))
        many = np.flatnonzero(known & (first != last))
        if many.size:  # the rest are split over the buckets they overlap
            pieces = (last - first + 1)[many]
            event = np.repeat(many, pieces)
            nth = np.arange(len(event)) - np.repeat(np.cumsum(pieces) - pieces, pieces)  # piece within its event
            bucket = first[event] + nth
            overlap_ns = np.minimum(end_ns[event], (bucket + 1) * width) - np.maximum(start_ns[event], bucket * width)
            flat = base[event] + nth * n_kinds
            self._ns += np.bincount(flat, weights=overlap_ns, minlength=len(self._ns))

    def cells(self) -> pd.DataFrame:
        """Cells with any time, ordered by chip and bucket: chip, bucket, kind (the cell's dominant kind;
        ties go to the earlier kind), share (its fraction of the cell's time)."""
        ns = self._ns.reshape(-1, len(self.kinds))
        total = ns.sum(axis=1)
        cell = np.flatnonzero(total > 0)
        ns, total = ns[cell], total[cell]
        dominant = ns.argmax(axis=1)
        return pd.DataFrame(
            {
                "chip": self.chips[cell // self.buckets].astype(np.int32),
                "bucket": (cell % self.buckets).astype(np.int64),
                "kind": pd.Series(pa.array(list(self.kinds)).take(pa.array(dominant)), dtype=str),
                "share": ns[np.arange(len(cell)), dominant] / total,
            }
        )
