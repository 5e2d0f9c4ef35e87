"""The dashboard's query layer on runs the real engine and importer wrote, and the scaling arithmetic by hand."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest

from profiler import queries
from tests.real_runs import LABELS
from views.scaling_model import ideal_table, scaling_table


@pytest.fixture
def stored(real_db):
    """The full-trace run of the shared real database, and what the engine returned for it."""
    return real_db.db, real_db.run_ids["full"], real_db.results["full"]


def test_kind_fractions_per_chip_sum_to_one(stored):
    db, run_id, _ = stored
    with db.read() as con:
        df = queries.chip_metrics(con, run_id)
    parts = df[[c for c in df.columns if c.endswith("_frac") and c != "idle_frac"]].sum(axis=1)
    assert np.allclose(parts, 1.0)
    assert np.allclose(df["idle_frac"], 1 - df["compute_frac"] - df["collective_frac"])


def test_step_kind_seconds_sum_to_mean_step_time(stored):
    db, run_id, result = stored
    steps = result.trace.steps.num_rows
    assert steps >= 4 and steps % 2 == 0
    with db.read() as con:
        kinds = queries.step_kind_s(con, run_id)
        by_step = queries.kind_by_step(con, run_id, max_points=steps // 2)
    mean_step_s = result.trace.steps.column("step_ns").to_numpy().mean() / 1e9
    assert kinds["s_per_step"].sum() == pytest.approx(mean_step_s, rel=1e-9)
    # the steps in half as many buckets of 2: bucket means still sum to the mean step time.
    assert by_step["step"].nunique() == steps // 2
    assert by_step.groupby("step")["chip_s_per_step"].sum().mean() == pytest.approx(mean_step_s, rel=1e-9)


def test_timeline_with_fine_buckets_matches_raw_events(stored):
    """With buckets far shorter than events, the dominant kind at each bucket is the event covering it."""
    db, run_id, result = stored
    with db.read() as con:
        cells, steps = queries.timeline(con, run_id, (0, 3), 0, 0, buckets=1000)
    events = result.trace.events.to_pandas()
    raw = events[(events.step == 0) & events.chip.isin([0, 3])]
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
    db, run_id, result = stored
    with db.read() as con:
        cells, _ = queries.timeline(con, run_id, tuple(range(result.facts.chips)), 0, result.facts.steps - 1, buckets=10**6)
    assert len(cells) <= queries.TIMELINE_MAX_CELLS


def test_extra_tables_absent_on_an_import_and_present_on_simulated_runs(real_db):
    """An imported trace stores none of the engine's extra tables; simulated runs' queries return what the engine built."""
    imported = real_db.run_ids["imported"]
    full, recompiles = real_db.run_ids["full"], real_db.run_ids["recompiles"]
    engine_full, engine_recompiles = real_db.results["full"].trace.extra, real_db.results["recompiles"].trace.extra
    assert "compiles" not in engine_full and "compiles" in engine_recompiles
    with real_db.db.read() as con:
        assert queries.link_load(con, imported) is None
        assert queries.memory_timeline(con, imported) is None
        assert queries.chip_memory(con, imported) is None
        assert "hbm_peak_bytes" not in queries.chip_metrics(con, imported).columns
        assert queries.compiles_by_step(con, imported).empty  # the table exists (other runs wrote it), no rows
        assert queries.compiles_by_step(con, full).empty
        links = queries.link_load(con, full)
        chips = con.execute("SELECT chip, x, y, z FROM chips WHERE run_id = $id ORDER BY chip", {"id": full}).df()
        by_step = queries.compiles_by_step(con, recompiles)
        by_cause = queries.compiles_by_cause(con, recompiles)
        metrics = queries.chip_metrics(con, full)
        timeline = queries.memory_timeline(con, full)

    # link load: the engine's rows, each end joined to its chip's coordinates
    want_links = engine_full["link_load"].to_pandas().sort_values(["src_chip", "dst_chip"], kind="stable").reset_index(drop=True)
    assert len(links) == len(want_links) > 0
    for col in ("src_chip", "dst_chip", "axis", "busy_ns_per_step"):
        assert links[col].tolist() == want_links[col].tolist(), col
    for col in ("bytes_per_step", "utilization"):
        assert links[col].tolist() == pytest.approx(want_links[col].tolist()), col
    xyz = chips.set_index("chip")
    for end in ("src", "dst"):
        at = xyz.loc[links[f"{end}_chip"]]
        assert (links[[f"{end}_x", f"{end}_y", f"{end}_z"]].to_numpy() == at[["x", "y", "z"]].to_numpy()).all()

    # compiles: grouped by step and by cause from the engine's own compile log
    log = engine_recompiles["compiles"].to_pandas()
    want_step = log.groupby("step").agg(compiles=("cause", "size"), compile_ns=("compile_ns", "sum")).reset_index()
    assert by_step[["step", "compiles"]].values.tolist() == want_step[["step", "compiles"]].values.tolist()
    assert by_step["compile_s"].tolist() == pytest.approx((want_step["compile_ns"] / 1e9).tolist())
    want_cause = log.groupby("cause")["compile_ns"].sum() / 1e9
    assert by_cause.set_index("cause")["compile_s"].to_dict() == pytest.approx(want_cause.to_dict())
    assert by_cause["compile_s"].is_monotonic_decreasing

    # per-chip peaks and the in-step memory timeline: the engine's tables
    assert metrics["hbm_peak_bytes"].tolist() == engine_full["chip_memory"].column("peak_bytes").to_pylist()
    want_tl = engine_full["memory_timeline"].to_pandas().groupby(["point", "category"], as_index=False)["bytes"].sum()
    assert timeline[["point", "category"]].values.tolist() == want_tl[["point", "category"]].values.tolist()
    assert timeline["bytes"].tolist() == pytest.approx(want_tl["bytes"].tolist())


@pytest.mark.parametrize("label", LABELS)
def test_every_run_query_answers_on_every_real_run(real_db, label):
    """Every public query taking (con, run_id): on each real run shape (an import, summary mode, OOM, ...)
    it answers without error, and what it returns is of this run only."""
    run_id = real_db.run_ids[label]
    fns = [
        getattr(queries, name) for name in queries.__all__
        if callable(getattr(queries, name))
        and [p.name for p in inspect.signature(getattr(queries, name)).parameters.values() if p.default is inspect.Parameter.empty][1:] == ["run_id"]
    ]  # fmt: skip
    assert {f.__name__ for f in fns} >= {"run_summary", "breakdown", "chip_metrics", "link_load", "memory_timeline", "compiles_by_step"}
    with real_db.db.read() as con:
        for fn in fns:
            out = fn(con, run_id)
            if isinstance(out, pd.DataFrame) and "run_id" in out.columns:
                assert set(out["run_id"]) <= {run_id}, fn.__name__
        assert queries.run_summary(con, run_id)["run_id"] == run_id


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
