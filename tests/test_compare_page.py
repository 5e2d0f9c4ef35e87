"""Compare / what-if on runs the real engine wrote: an unchanged number is neutral, MFU moves in
percentage points, the waterfall starts at the steady-state step time of the tile, and a what-if
run is named by what changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.proto.Metric_pb2 import Metric as MetricProto
from streamlit.testing.v1 import AppTest

from engine import load_scenario, simulate
from profiler import queries, write_run
from profiler import format as fmt
from profiler.store import Database

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
INPUT_BOUND = ROOT / "data" / "scenarios" / "resnet50-v4-gcs-input-bound.toml"


def _page(page: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / page), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _what_if(tmp_path: Path, monkeypatch, raw: dict, knobs: dict) -> tuple[Path, list[int]]:
    """Store a run of ``raw``, open Compare on it, set the form's ``knobs`` (label -> value) and simulate.
    Returns the database and its run ids, newest first (the what-if, then the base)."""
    from engine import scenario_from_dict

    path = tmp_path / f"{raw['name']}.duckdb"
    write_run(Database(path), simulate(scenario_from_dict(raw)), name=raw["name"])
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = _page("views/compare.py")
    widgets = [*at.number_input, *at.selectbox, *at.checkbox]
    for label, value in knobs.items():
        next(w for w in widgets if w.label == label).set_value(value)
    next(b for b in at.button if b.label == "Simulate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    with Database(path).read() as con:
        return path, [int(r) for r in queries.list_runs(con)["run_id"]]


def _metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label == label)


@pytest.fixture
def twin_db(tmp_path, monkeypatch, small_scenario) -> tuple[Path, int, int]:
    """The same scenario stored twice (identical numbers), the first picked as base."""
    path = tmp_path / "twins.duckdb"
    a = write_run(Database(path), simulate(small_scenario), name="twin-a")
    b = write_run(Database(path), simulate(small_scenario), name="twin-b")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    return path, a, b


def test_an_unchanged_number_is_neutral_not_red(twin_db):
    _, a, b = twin_db
    at = AppTest.from_file(str(ROOT / "views/compare.py"), default_timeout=120)
    at.query_params["run"] = str(a)
    at.query_params["vs"] = str(b)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    step = _metric(at, "Step time")
    assert step.proto.delta == "0.0%"
    assert step.proto.color == MetricProto.MetricColor.GRAY
    assert _metric(at, "MFU").proto.delta == "0.0 pp"


def test_mfu_moves_in_points_and_the_waterfall_starts_at_the_tile(tmp_path, monkeypatch, small_scenario):
    path = tmp_path / "cmp.duckdb"
    db = Database(path)
    base = write_run(db, simulate(load_scenario(INPUT_BOUND, {"training.steps": 12})), name="64 chips")
    small = {"training.steps": 12, "pod.topology": "2x4x4", "parallelism.data": 32}
    fast = write_run(db, simulate(load_scenario(INPUT_BOUND, small)), name="32 chips")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    with db.read() as con:
        sa, sb = queries.run_summary(con, base), queries.run_summary(con, fast)
    assert abs(sb["mfu"] - sa["mfu"]) > 0.001
    with db.read() as con:
        mean_s = float(queries.step_kind_s(con, base)["s_per_step"].sum())
    assert mean_s > 1.5 * sa["step_time_s"]  # the mean over all steps carries the compile
    at = AppTest.from_file(str(ROOT / "views/compare.py"), default_timeout=120)
    at.query_params["run"] = str(base)
    at.query_params["vs"] = str(fast)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metric(at, "MFU").proto.delta == fmt.points(sb["mfu"] - sa["mfu"])
    assert _metric(at, "Step time").value == fmt.duration(sa["step_time_s"]) or _metric(at, "Step time").value == fmt.duration(sb["step_time_s"])
    charts = at.get("plotly_chart")
    import json

    waterfall = next(json.loads(c.proto.spec) for c in charts if '"waterfall"' in c.proto.spec)
    y = waterfall["data"][0]["y"]
    assert y[0] == pytest.approx(sa["step_time_s"] * 1e3)  # the base tile's steady-state step, not the compile-inflated mean
    assert y[-1] == pytest.approx(sb["step_time_s"] * 1e3)
    assert sum(y[1:-1]) == pytest.approx(y[-1] - y[0])


def test_a_what_if_run_is_named_by_what_changed(tmp_path, monkeypatch, small_scenario):
    path = tmp_path / "wi.duckdb"
    write_run(Database(path), simulate(small_scenario), name="small")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = _page("views/compare.py")
    at.number_input[1].set_value(512)  # global batch 256 -> 512
    next(b for b in at.button if b.label == "Simulate").click().run()
    assert not at.exception, [e.value for e in at.exception]
    with Database(path).read() as con:
        names = list(queries.list_runs(con)["name"])
    assert names[0] == "small · batch 256 → 512"


def test_cause_differences_rank_by_seconds_and_give_each_runs_share():
    import pandas as pd

    from views.compare_model import cause_difference_lines, cause_differences

    deltas = pd.DataFrame({"kind": ["compute", "collective", "input_wait", "other"], "a": [0.8, 0.1, 0.1, 0.0], "b": [0.7, 0.6, 0.1, 0.1]})
    ranked = cause_differences(deltas)
    assert ranked["kind"].tolist() == ["collective", "compute", "other"]  # input_wait did not change: left out
    assert ranked["delta_s"].tolist() == pytest.approx([0.5, -0.1, 0.1])
    assert ranked.loc[0, "a_share"] == pytest.approx(0.1) and ranked.loc[0, "b_share"] == pytest.approx(0.6 / 1.5)
    assert cause_difference_lines(deltas, top=1) == ["Collective (exposed): 100 ms → 600 ms per step (10.0% → 40.0% of the step)"]


def test_a_simulation_beside_an_imported_trace_says_predicted_against_measured(page_db):
    at = AppTest.from_file(str(ROOT / "views/compare.py"), default_timeout=120)
    at.query_params["run"] = str(page_db.run_ids["full"])
    at.query_params["vs"] = str(page_db.run_ids["imported"])
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    text = "\n".join(m.value for m in at.markdown)
    assert "Predicted against measured: the causes that differ most" in text
    twin = AppTest.from_file(str(ROOT / "views/compare.py"), default_timeout=120)
    twin.query_params["run"] = str(page_db.run_ids["full"])
    twin.query_params["vs"] = str(page_db.run_ids["stragglers"])
    twin.run()
    assert not twin.exception
    assert "Predicted against measured" not in "\n".join(m.value for m in twin.markdown)


def test_what_if_sets_context_zero_stage_and_optimizer_state(tmp_path, monkeypatch):
    raw = {"name": "lm", "pod": {"chip": "tpu-v5p", "topology": "2x2x2"},
           "model": {"kind": "transformer", "layers": 2, "d_model": 512, "heads": 8, "d_ff": 2048, "vocab": 1000, "seq_len": 2048},
           "training": {"global_batch": 8, "steps": 3}, "parallelism": {"fsdp": 2}}  # fmt: skip
    knobs = {"Context parallel": 2, "FSDP shards": "optimizer", "Optimizer state": "bf16", "Weights": "bf16"}
    path, runs = _what_if(tmp_path, monkeypatch, raw, knobs)
    with Database(path).read() as con:
        summary = queries.run_summary(con, runs[0])
    assert summary["context_parallel"] == 2 and summary["fsdp_shard"] == "optimizer" and summary["optimizer_state"] == "bf16"
    assert summary["weight_dtype"] == "bf16"
    assert summary["ring_exposed_s"] >= 0 and summary["zero_weight_gather_s"] > 0


def test_what_if_reduces_the_gradients_in_the_weights_dtype(tmp_path, monkeypatch):
    raw = {"name": "lm", "pod": {"chip": "tpu-v5p", "topology": "2x2x2"},
           "model": {"kind": "transformer", "layers": 2, "d_model": 512, "heads": 8, "d_ff": 2048, "vocab": 1000, "seq_len": 2048},
           "training": {"global_batch": 8, "steps": 3}, "parallelism": {"data": 8}}  # fmt: skip
    path, runs = _what_if(tmp_path, monkeypatch, raw, {"Gradients reduced in": "weights"})
    with Database(path).read() as con:
        summary = queries.run_summary(con, runs[0])
    assert summary["gradient_reduce_dtype"] == "weights"
    assert summary["precision_recipe"].endswith("gradients reduced in fp32")


def test_compare_opens_beside_a_related_run_that_fits():
    """With no choice made: this run's newest what-if, else the newest run of the same model that fits
    (its chip first), else the newest run on its chip that fits in HBM, else the newest that fits,
    else the newest; never the base itself. It says whether that is the same model."""
    import pandas as pd

    from views.compare_model import default_other_run

    runs = pd.DataFrame(  # newest first, as list_runs returns them
        [(6, "big-moe", "tpu-v6e", True), (5, "llm · batch 512 → 1024", "tpu-v5p", False), (4, "resnet", "tpu-v4", False),
         (3, "llm-b", "tpu-v5p", True), (2, "llm-c", "tpu-v5p", False), (1, "llm", "tpu-v5p", False)],
        columns=["run_id", "name", "chip", "oom"],
    )  # fmt: skip
    assert default_other_run(runs, 1, "llm", "tpu-v5p") == (5, True)  # its what-if
    assert default_other_run(runs[runs.run_id != 5], 1, "llm", "tpu-v5p") == (2, False)  # same chip, fits (not 3: OOM; not 6)
    # the same model elsewhere beats an unrelated run on the same chip
    assert default_other_run(runs[runs.run_id != 5], 1, "llm", "tpu-v5p", same_model=[4]) == (4, True)
    assert default_other_run(runs, 4, "resnet", "tpu-v4") == (5, False)  # no other v4 run: the newest that fits
    only_oom = runs[runs.run_id.isin([1, 6])]
    assert default_other_run(only_oom, 1, "llm", "tpu-v5p") == (6, False)  # nothing fits: the newest other run
    assert default_other_run(runs[runs.run_id == 1], 1, "llm", "tpu-v5p") == (None, False)


def test_what_if_pools_a_resnets_batch_norm_over_chips(tmp_path, monkeypatch):
    raw = {"name": "rn", "pod": {"chip": "tpu-v4", "topology": "2x2x2"}, "model": {"kind": "resnet50"},
           "training": {"global_batch": 256, "steps": 3, "optimizer": "momentum"}}  # fmt: skip
    path, (newest, base, *_) = _what_if(tmp_path, monkeypatch, raw, {"Batch-norm group": 4})
    with Database(path).read() as con:
        rows = con.execute("SELECT count(*) FROM extra_layer_collectives WHERE run_id = ? AND layer LIKE '%.bn'", [newest]).fetchone()[0]
        slower = [queries.run_summary(con, r)["step_time_s"] for r in (newest, base)]
    assert rows == 53 * 2  # one all-reduce per batch-norm layer, forward and backward
    assert slower[0] > slower[1]


def test_what_if_changes_a_moe_models_capacity_and_dispatch(tmp_path, monkeypatch):
    """A mixture-of-experts run gets capacity-factor and dispatch knobs; dense dispatch at capacity 2 computes
    twice an even share in every expert group, so the what-if is slower and says how it dispatched."""
    raw = {"name": "moe", "pod": {"chip": "tpu-v5p", "topology": "2x2x2"},
           "model": {"kind": "transformer", "layers": 2, "d_model": 512, "heads": 8, "d_ff": 2048, "vocab": 1000, "seq_len": 512,
                     "experts": 8, "experts_per_token": 2},
           "training": {"global_batch": 16, "steps": 3}, "parallelism": {"fsdp": 1, "expert": 8}}  # fmt: skip
    path, runs = _what_if(tmp_path, monkeypatch, raw, {"Capacity factor": 2.0, "MoE dispatch": "dense"})
    with Database(path).read() as con:
        newest, base = (queries.run_summary(con, r) for r in runs[:2])
    assert newest["moe_dispatch"] == "dense" and newest["moe_capacity_factor"] == 2.0 and base["moe_dispatch"] == "grouped"
    assert newest["step_time_s"] > base["step_time_s"]


def test_what_if_turns_collective_matmul_off_for_a_tensor_parallel_run(tmp_path, monkeypatch):
    """Without collective matmul the tensor-parallel all-reduces block: the what-if is slower and says so."""
    raw = {"name": "tp", "pod": {"chip": "tpu-v5p", "topology": "2x2x2"},
           "model": {"kind": "transformer", "layers": 2, "d_model": 1024, "heads": 8, "d_ff": 4096, "vocab": 1000, "seq_len": 512},
           "training": {"global_batch": 8, "steps": 3}, "parallelism": {"tensor": 8}}  # fmt: skip
    path, runs = _what_if(tmp_path, monkeypatch, raw, {"Collective matmul": False})
    with Database(path).read() as con:
        newest, base = (queries.run_summary(con, r) for r in runs[:2])
    assert newest["collective_matmul"] is False and base["collective_matmul"] is True
    assert newest["step_time_s"] > base["step_time_s"]
