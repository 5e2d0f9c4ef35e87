"""Time and cost to train on the dashboard: the Scaling page's curves against global batch and chips
(B_crit marked, the curve bending past it) on the bundled batch-scaling sweep as the real engine
simulated it, and the Compare page's waterfall of the change in time to train."""

from __future__ import annotations

import base64
import concurrent.futures as cf
import json
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from profiler import queries
from profiler.store import Database
from profiler.sweep import run_sweep
from views.compare_model import time_to_train_parts
from tests.real_runs import open_page

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "data" / "sweeps" / "batch-scaling-v4.toml"


def _values(values) -> np.ndarray:
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])).astype(float)
    return np.asarray(values, dtype=float)


@pytest.fixture(scope="module")
def sweep_db(tmp_path_factory) -> Path:
    """The bundled batch-scaling sweep, simulated and stored by the real engine and store."""
    path = tmp_path_factory.mktemp("ttt") / "sweep.duckdb"
    with cf.ThreadPoolExecutor(max_workers=1) as pool:
        result = run_sweep(SWEEP, Database(path), pool)
    assert not result.failed, result.failed
    return path


def _page(page: str, monkeypatch, path: Path, run_id: int | None = None, other: int | None = None) -> AppTest:
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return open_page(page, run_id, other)


def _chart(at: AppTest, title: str) -> dict:
    return next(s for s in (json.loads(c.proto.spec) for c in at.get("plotly_chart")) if s["layout"]["title"]["text"] == title)


def _runs(path: Path) -> pd.DataFrame:
    with Database(path).read() as con:
        return queries.scaling_runs(con).sort_values("global_batch").reset_index(drop=True)


def test_time_to_train_against_batch_bends_past_b_crit(sweep_db, monkeypatch):
    runs = _runs(sweep_db)
    b_crit = tomllib.loads((ROOT / "data" / "convergence.toml").read_text())["tasks"]["mlperf-resnet50"]["b_crit_samples"]
    at = _page("views/scaling.py", monkeypatch, sweep_db)
    assert "Time and cost to train" in [s.value for s in at.subheader]
    time_fig = _chart(at, "Time to train")
    (curve,) = [t for t in time_fig["data"] if t.get("mode") == "lines+markers"]
    x, y = _values(curve["x"]), _values(curve["y"])
    assert list(x) == list(runs["global_batch"]) and len(x) >= 3
    suffix = time_fig["layout"]["yaxis"]["ticksuffix"]
    div = {" s": 1, " min": 60, " h": 3600}[suffix]
    assert y * div == pytest.approx(runs["time_to_train_s"].to_numpy(), rel=1e-9)
    (line,) = time_fig["layout"]["shapes"]
    assert line["x0"] == pytest.approx(round(b_crit)) and line["type"] == "line"
    (label,) = time_fig["layout"]["annotations"]
    assert label["text"].startswith("B_crit") and 10 ** label["x"] == pytest.approx(round(b_crit)), "labelled where the line is"
    # the bend: each doubling of the batch cuts the time to train less past B_crit than below it
    cut = y[:-1] / y[1:]
    below, past = cut[x[1:] <= b_crit], cut[x[:-1] >= b_crit]
    assert below.size and past.size and past.max() < below.min()
    hours = _chart(at, "Chip-hours to train")  # the sweep is not priced
    (curve,) = [t for t in hours["data"] if t.get("mode") == "lines+markers"]
    assert _values(curve["y"]) == pytest.approx(runs["chip_hours"].to_numpy(), rel=1e-9)
    assert any("Chip-hours stand in for cost" in c.value for c in at.caption)


def test_time_to_train_against_chips_marks_where_the_batch_reaches_b_crit(sweep_db, monkeypatch):
    runs = _runs(sweep_db)
    at = _page("views/scaling.py", monkeypatch, sweep_db)
    at.radio(key="sc_ttt_x").set_value("chips").run()
    assert not at.exception
    fig = _chart(at, "Time to train")
    (curve,) = [t for t in fig["data"] if t.get("mode") == "lines+markers"]
    assert list(_values(curve["x"])) == list(runs["chips"])
    (line,) = fig["layout"]["shapes"]
    per_chip = float(runs["per_chip_batch"].iloc[0])
    assert line["x0"] == pytest.approx(round(float(runs["b_crit_samples"].iloc[0])) / per_chip)


def test_compare_splits_the_change_in_time_to_train(sweep_db, monkeypatch):
    runs = _runs(sweep_db)
    a_id, b_id = int(runs["run_id"].iloc[0]), int(runs["run_id"].iloc[-1])  # the smallest batch against the largest
    with Database(sweep_db).read() as con:
        a, b = queries.run_summary(con, a_id), queries.run_summary(con, b_id)
    at = _page("views/compare.py", monkeypatch, sweep_db, a_id, b_id)
    fig = _chart(at, "How each cause moved the time to train")
    (wf,) = fig["data"]
    assert wf["x"][0] == "base" and wf["x"][-1] == "other run" and "steps to target" in wf["x"]
    div = {" s": 1, " min": 60, " h": 3600}[fig["layout"]["yaxis"]["ticksuffix"]]
    y = _values(wf["y"]) * div
    assert y[0] == pytest.approx(a["time_to_train_s"]) and y[-1] == pytest.approx(b["time_to_train_s"])
    assert y[0] + y[1:-1].sum() == pytest.approx(b["time_to_train_s"], rel=1e-9), "the parts add up to the change"
    steps = y[wf["x"].index("steps to target")]
    mean_step = (a["step_time_s"] + b["step_time_s"]) / 2
    assert steps == pytest.approx((b["steps_to_target"] - a["steps_to_target"]) * mean_step)
    assert steps < 0, "the larger batch needs fewer steps"
    assert any("Time to train" in m.value and f"{a['steps_to_target']:,}" in m.value for m in at.markdown)


def test_time_to_train_parts_by_hand():
    """N 100 -> 50 steps, step 1 s -> 2 s, 10 s -> 5 s of evaluation: the step time adds 75 s, the steps save 75 s."""
    a = {"time_to_train_s": 110.0, "steps_to_target": 100, "step_time_s": 1.0}
    b = {"time_to_train_s": 105.0, "steps_to_target": 50, "step_time_s": 2.0}
    deltas = pd.DataFrame({"kind": ["compute", "collective"], "delta_s": [0.75, 0.25]})
    parts = time_to_train_parts(a, b, deltas).set_index("label")["delta_s"]
    assert parts.to_dict() == pytest.approx({"Compute": 56.25, "Collective (exposed)": 18.75, "steps to target": -75.0,
                                             "eval, compile, checkpoints": -5.0})  # fmt: skip
    assert time_to_train_parts({**a, "time_to_train_s": None}, b, deltas) is None
