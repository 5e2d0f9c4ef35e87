"""The Timeline's level of detail (profiler/level_of_detail.py): cells worked by hand, and against a
brute-force split of every event over every bucket."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler.level_of_detail import CellGrid

KINDS = ("input_wait", "compute", "collective")  # codes 1, 2, 3; 0 is "other"


def _cells(grid: CellGrid) -> list[tuple]:
    return [(r.chip, r.bucket, r.kind, r.share) for r in grid.cells().itertuples()]


def test_known_answer_split_tie_and_ignored_events():
    # chip 5: compute [0, 15) then collective [15, 30); buckets of 10 ns
    grid = CellGrid([9, 5], buckets=3, width_ns=10, kinds=KINDS)
    grid.add(np.array([5, 5]), np.array([2, 3]), np.array([0, 15]), np.array([15, 30]))
    grid.add(np.array([7]), np.array([1]), np.array([0]), np.array([30]))  # chip not in the grid: ignored
    grid.add(np.array([9]), np.array([7]), np.array([25]), np.array([45]))  # an unknown kind code, partly past the grid
    assert _cells(grid) == [
        (5, 0, "compute", 1.0),
        (5, 1, "compute", 0.5),  # 5 ns each: the tie goes to the earlier kind
        (5, 2, "collective", 1.0),
        (9, 2, "other", 1.0),  # [25, 30) only; [30, 45) is past the last bucket
    ]


def test_events_in_several_batches_add_up():
    one = CellGrid([0], buckets=2, width_ns=4, kinds=KINDS)
    one.add(np.array([0, 0, 0]), np.array([1, 2, 1]), np.array([0, 3, 5]), np.array([3, 5, 8]))
    split = CellGrid([0], buckets=2, width_ns=4, kinds=KINDS)
    split.add(np.array([0]), np.array([1]), np.array([0]), np.array([3]))
    split.add(np.array([0, 0]), np.array([2, 1]), np.array([3, 5]), np.array([5, 8]))
    # bucket 0: input_wait 3, compute 1; bucket 1: compute 1, input_wait 3
    assert _cells(one) == _cells(split) == [(0, 0, "input_wait", 0.75), (0, 1, "input_wait", 0.75)]


_event = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 120), st.integers(1, 60))


@settings(max_examples=60, deadline=None)
@given(events=st.lists(_event, max_size=30), buckets=st.integers(1, 12), width_ns=st.integers(1, 25))
def test_matches_splitting_every_event_over_every_bucket(events, buckets, width_ns):
    chips = [0, 2, 3]
    grid = CellGrid(chips, buckets, width_ns, KINDS)
    if events:
        chip, code, start, dur = (np.array(c) for c in zip(*events))
        grid.add(chip, code, start, start + dur)
    ns: dict[tuple[int, int], np.ndarray] = {}
    for chip, code, start, dur in events:
        if chip not in chips:
            continue
        for b in range(buckets):
            overlap = min(start + dur, (b + 1) * width_ns) - max(start, b * width_ns)
            if overlap > 0:
                ns.setdefault((chip, b), np.zeros(len(KINDS) + 1))[code] += overlap
    names = ["other", *KINDS]
    expected = [(c, b, names[int(v.argmax())], v.max() / v.sum()) for (c, b), v in sorted(ns.items())]
    assert _cells(grid) == expected


def test_an_event_reaching_far_outside_the_window_is_split_over_the_window_only():
    """A day-long event seen through a 10-bucket window of 1 ns buckets: 10 pieces, not 8.6e13."""
    grid = CellGrid([0], buckets=10, width_ns=1, kinds=["compute"])
    day_ns = 86_400 * 10**9
    grid.add(np.array([0]), np.array([1]), np.array([-day_ns]), np.array([day_ns]))
    cells = grid.cells()
    assert list(cells["bucket"]) == list(range(10))
    assert (cells["kind"] == "compute").all() and (cells["share"] == 1.0).all()
    # and one that starts inside the last bucket but ends far later counts only its part inside
    grid = CellGrid([0], buckets=2, width_ns=10, kinds=["compute", "collective"])
    grid.add(np.array([0, 0]), np.array([1, 2]), np.array([10, 15]), np.array([15, day_ns]))
    ((bucket, kind, share),) = grid.cells()[["bucket", "kind", "share"]].itertuples(index=False)
    assert (bucket, kind, share) == (1, "compute", 0.5)
