"""The dashboard's query layer and scaling arithmetic, on real DuckDB files and hand-worked numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from engine import simulate
from profiler import queries, write_run
from views.scaling_model import ideal_table, scaling_table


@pytest.fixture
def stored(db, small_scenario):
    result = simulate(small_scenario)
    run_id = write_run(db, result)
    return db, run_id, result


def test_kind_fractions_per_chip_sum_to_one(stored):
    db, run_id, _ = stored
    with db.read() as con:
        df = queries.chip_metrics(con, run_id)
    parts = df[[c for c in df.columns if c.endswith("_frac") and c != "idle_frac"]].sum(axis=1)
    assert np.allclose(parts, 1.0)
    assert np.allclose(df["idle_frac"], 1 - df["compute_frac"] - df["collective_frac"])


def test_step_kind_seconds_sum_to_mean_step_time(stored):
    db, run_id, result = stored
    with db.read() as con:
        kinds = queries.step_kind_s(con, run_id)
        by_step = queries.kind_by_step(con, run_id, max_points=5)
    mean_step_s = result.trace.steps.column("step_ns").to_numpy().mean() / 1e9
    assert kinds["s_per_step"].sum() == pytest.approx(mean_step_s, rel=1e-9)
    # 20 steps in at most 5 buckets of 4: bucket means still sum to the mean step time.
    assert by_step["step"].nunique() == 5
    assert by_step.groupby("step")["chip_s_per_step"].sum().mean() == pytest.approx(mean_step_s, rel=1e-9)


def test_timeline_with_fine_buckets_matches_raw_events(stored):
    """With buckets far shorter than events, the dominant kind at each bucket is the event covering it."""
    db, run_id, result = stored
    with db.read() as con:
        cells, steps = queries.timeline(con, run_id, (0, 3), 0, 0, buckets=1000)
        raw = con.execute("SELECT chip, kind, start_ns, dur_ns FROM events WHERE run_id = $id AND step = 0 AND chip IN (0, 3)", {"id": run_id}).df()
    assert len(steps) == 1 and set(cells["chip"]) == {0, 3}
    width = int(cells["width_ns"].iloc[0])
    step_end = int((raw.start_ns + raw.dur_ns).max())
    for row in cells[cells["share"] == 1.0].itertuples():
        # the last bucket may reach past the step's end (width is rounded up): take the midpoint of its covered part
        lo = row.bucket * width
        mid = (lo + min(lo + width, step_end)) // 2
        ev = raw[(raw.chip == row.chip) & (raw.start_ns <= mid) & (raw.start_ns + raw.dur_ns > mid)]
        assert ev["kind"].iloc[0] == row.kind


def test_timeline_caps_cells(stored):
    db, run_id, _ = stored
    with db.read() as con:
        cells, _ = queries.timeline(con, run_id, tuple(range(8)), 0, 19, buckets=10**6)
    assert len(cells) <= queries.TIMELINE_MAX_CELLS


def test_extra_tables_absent_then_present(db, small_scenario):
    simulated = simulate(small_scenario)
    # a run without any extra table (as an imported trace, or a run stored before a mechanism existed)
    bare = type(simulated.trace)(simulated.trace.events, simulated.trace.steps, simulated.trace.chips, {})
    result = type(simulated)(simulated.scenario, bare, simulated.facts)
    run_a = write_run(db, result)
    with db.read() as con:
        assert queries.link_load(con, run_a) is None
        assert queries.compiles_by_step(con, run_a) is None
        assert queries.memory_timeline(con, run_a) is None
        assert "hbm_peak_bytes" not in queries.chip_metrics(con, run_a).columns
    extra = {
        "link_load": pa.table({
            "src_chip": pa.array([0], pa.int32()), "dst_chip": pa.array([1], pa.int32()), "axis": ["x"],
            "bytes_per_step": [1e6], "busy_ns_per_step": pa.array([1000], pa.int64()), "utilization": [0.5],
            "bandwidth_frac": [1.0],
        }),  # fmt: skip
        "compiles": pa.table({
            "step": pa.array([0, 0, 7], pa.int32()), "signature": ["a", "b", "c"], "cause": ["first", "first", "shape"],
            "compile_ns": pa.array([2_000_000_000, 1_000_000_000, 500_000_000], pa.int64()),
        }),  # fmt: skip
        "chip_memory": pa.table({"chip": pa.array(range(8), pa.int32()), "peak_bytes": [float(i) for i in range(8)]}),
    }
    trace = type(result.trace)(result.trace.events, result.trace.steps, result.trace.chips, extra)
    run_b = write_run(db, type(result)(result.scenario, trace, result.facts))
    with db.read() as con:
        links = queries.link_load(con, run_b)
        chips = con.execute("SELECT chip, x, y, z FROM chips WHERE run_id = $id ORDER BY chip", {"id": run_b}).df()
        by_step = queries.compiles_by_step(con, run_b)
        by_cause = queries.compiles_by_cause(con, run_b)
        metrics = queries.chip_metrics(con, run_b)
        assert queries.compiles_by_step(con, run_a).empty  # the table exists now, run A has no rows
    assert (links.loc[0, ["src_x", "dst_x"]].tolist()) == [chips.loc[0, "x"], chips.loc[1, "x"]]
    assert by_step[["step", "compiles"]].values.tolist() == [[0, 2], [7, 1]]
    assert by_step["compile_s"].tolist() == [3.0, 0.5]
    assert by_cause.set_index("cause").loc["first", "compile_s"] == 3.0
    assert metrics["hbm_peak_bytes"].tolist() == [float(i) for i in range(8)]


def _runs(rows):
    cols = ["run_id", "name", "source", "chip", "chips", "steps", "model_kind", "global_batch", "step_time_s", "samples_per_s", "tokens_per_s", "mfu", "oom"]
    df = pd.DataFrame(rows, columns=cols)
    df["per_chip_batch"] = df["global_batch"] / df["chips"]
    return df


def test_strong_scaling_efficiency_by_hand():
    # 8 chips: 100 samples/s; 16 chips: 150 samples/s -> efficiency 150 / (100 * 2) = 0.75.
    runs = _runs([
        (1, "a", "simulated", "tpu-v4", 8, 10, "mlp", 256, 2.56, 100.0, None, 0.5, False),
        (2, "b", "simulated", "tpu-v4", 16, 10, "mlp", 256, 256 / 150, 150.0, None, 0.4, False),
        (3, "c", "simulated", "tpu-v4", 32, 10, "mlp", 1024, 1.0, 1024.0, None, 0.4, True),  # OOM: left out
    ])  # fmt: skip
    table = scaling_table(runs, "strong")
    assert table["efficiency"].tolist() == pytest.approx([1.0, 0.75])
    ideal = ideal_table(table, "strong")
    assert ideal["throughput"].tolist() == pytest.approx([100.0, 200.0])
    assert ideal["step_time_s"].tolist() == pytest.approx([2.56, 1.28])


def test_weak_scaling_groups_by_per_chip_batch():
    runs = _runs([
        (1, "a", "simulated", "tpu-v4", 8, 10, "mlp", 256, 1.0, 256.0, None, 0.5, False),
        (2, "b", "simulated", "tpu-v4", 16, 10, "mlp", 512, 1.25, 409.6, None, 0.4, False),
    ])  # fmt: skip
    table = scaling_table(runs, "weak")
    assert table["series"].nunique() == 1
    assert table["efficiency"].tolist() == pytest.approx([1.0, 0.8])
    assert ideal_table(table, "weak")["step_time_s"].tolist() == pytest.approx([1.0, 1.0])
