"""Generalisation checks: grouped cross-validation folds and the calibrated step-time ranges.

Known answers are worked by hand from the inputs (fold membership, percentiles of a few
numbers) or from the engine's own output; no published outcome is written here.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from engine.scenario.calibration import Calibration
from profiler import calibrate, crossval, ranges, reference, validation
from profiler.reference import Case
from profiler.summary import RunAggregates, summary_from

ROOT = Path(__file__).resolve().parent.parent


def _case(id_: str, chip: str = "tpu-v4", fam: str = "F", batch: int = 1024, chips_topo: str = "4x4x4",
          model: str = "resnet50", how: str = "work_per_step", slices: int = 1, published: float = 100.0,
          par: dict | None = None) -> Case:  # fmt: skip
    raw = {
        "name": id_, "pod": {"chip": chip, "topology": chips_topo, "slices": slices}, "model": {"kind": model},
        "training": {"global_batch": batch, "steps": 4}, "parallelism": par or {"fsdp": 1, "tensor": 1},
    }  # fmt: skip
    return Case(id=id_, kind="end_to_end", family=fam, chip=chip, model=model, metric="m", unit="u",
                published=published, how=how, scenarios=(raw,))  # fmt: skip


class TestGrouping:
    def test_identical_configurations_form_one_block(self):
        """Same chip, chip count, model and batch (one system in two MLPerf versions) -> one block; any difference -> not."""
        a = _case("v0.7")
        b = _case("v1.0")  # the same system again: only the id/name differ
        c = _case("bigger-batch", batch=2048)
        d = _case("other-shape-same-count", chips_topo="2x4x8")  # 64 chips too: still the same configuration
        e = _case("other-chip", chip="tpu-v5p")
        blocks = [[x.id for x in blk] for blk in crossval.identical_blocks([a, c, b, d, e])]
        assert blocks == [["v0.7", "v1.0", "other-shape-same-count"], ["bigger-batch"], ["other-chip"]]

    def test_a_configuration_shared_by_two_families_merges_their_folds(self):
        a = _case("a", fam="A")
        b = _case("b", fam="B")  # identical configuration to a, another family
        c = _case("c", fam="C", batch=4096)
        folds = crossval.grouped_folds([a, b, c], crossval.family)
        assert {k: [x.id for x in v] for k, v in folds.items()} == {"A+B": ["a", "b"], "C": ["c"]}

    def test_identical_configurations_never_straddle_the_bundled_folds(self):
        cases, _ = validation.expressible(*reference.map_entries(reference.load_reference()))
        e2e = [c for c in cases if c.fit]
        pairs = [blk for blk in crossval.identical_blocks(e2e) if len(blk) > 1]
        # the MLPerf ResNet-50 systems submitted to two MLPerf versions (same chip, chips and global batch)
        assert sorted(sorted(c.id for c in blk) for blk in pairs) == [
            ["mlperf_v0.6_tpu-v3-32_resnet", "mlperf_v0.7_tpu-v3-32-TF2.0_resnet"],
            ["mlperf_v0.7_tpu-v4-128-TF_resnet", "mlperf_v1.0_tpu-v4-128-TF_resnet"],
        ]
        for key in (crossval.generation, crossval.family):
            fold_of = {c.id: label for label, group in crossval.grouped_folds(e2e, key).items() for c in group}
            for blk in crossval.identical_blocks(e2e):
                assert len({fold_of[c.id] for c in blk}) == 1


@dataclass(frozen=True)
class _Seen:
    calibration: frozenset


class TestLeaveOneGenerationOut:
    def test_folds_are_the_chip_generations(self):
        cases = [_case("v3a", chip="tpu-v3", chips_topo="4x4"), _case("v4a"), _case("v4b", batch=8),
                 _case("v5a", chip="tpu-v5p")]  # fmt: skip
        folds = crossval.grouped_folds(cases, crossval.generation)
        assert {k: [c.id for c in v] for k, v in folds.items()} == {"tpu-v3": ["v3a"], "tpu-v4": ["v4a", "v4b"], "tpu-v5p": ["v5a"]}

    def test_each_case_is_predicted_by_a_fit_without_its_generation(self):
        cases = [_case("v3a", chip="tpu-v3", chips_topo="4x4"), _case("v4a"), _case("v4b", batch=8),
                 _case("v5a", chip="tpu-v5p")]  # fmt: skip
        fits = []

        def fitter(train):
            fits.append(sorted(c.id for c in train))
            return _Seen(frozenset(c.id for c in train))

        # The prediction is 10% high when the fit saw the case, exact when it did not.
        seen_pred = lambda c, seen: c.published * (1.1 if c.id in seen else 1.0)  # noqa: E731
        folds = crossval.grouped_folds(cases, crossval.generation)
        out = crossval.held_out_errors(folds, cases, fitter, seen_pred)
        assert out == {"v3a": 0.0, "v4a": 0.0, "v4b": 0.0, "v5a": 0.0}
        assert fits == [["v4a", "v4b", "v5a"], ["v3a", "v5a"], ["v3a", "v4a", "v4b"]]

    def test_a_single_generation_cannot_be_held_out(self):
        cases = [_case("a"), _case("b", batch=8)]
        out = crossval.held_out_errors(crossval.grouped_folds(cases, crossval.generation), cases, lambda t: 1 / 0, None)
        assert out == {}  # nothing left to fit on: no held-out prediction, and no fit attempted


class TestRanges:
    def test_step_time_ratio_from_errors(self):
        thr, step = _case("t"), _case("s", how="step_time")
        assert ranges.step_time_ratio(thr, 25.0) == pytest.approx(1.25)  # 25% too much throughput: step 1.25x too short
        assert ranges.step_time_ratio(step, 25.0) == pytest.approx(0.8)  # step 25% too long: real / predicted = 0.8
        assert ranges.step_time_ratio(replace(thr, how="weak_scaling"), 5.0) is None

    def test_range_factors_by_hand(self):
        # |ln r| = 0.1 .. 0.9 (n = 9): split-conformal rank ceil(10 x 0.8) = 8 -> 0.8
        ratios = [math.exp(x * (-1) ** i) for i, x in enumerate((0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9))]
        low, high = ranges.range_factors(ratios)
        assert (low, high) == (pytest.approx(math.exp(-0.8)), pytest.approx(math.exp(0.8)))
        assert low < 1.0 < high  # always contains the point prediction
        # n = 3: rank ceil(4 x 0.8) = 4 > 3 -> the largest
        assert ranges.range_factors([math.exp(0.1), math.exp(-0.3), math.exp(0.2)])[1] == pytest.approx(math.exp(0.3))
        # n = 11: rank ceil(12 x 0.8) = ceil(9.6) = 10 (not 9, the plain 80th percentile's neighbour)
        eleven = [math.exp(0.01 * (i + 1)) for i in range(11)]
        assert ranges.range_factors(eleven)[1] == pytest.approx(math.exp(0.10))

    def test_conformal_rank_covers_its_level_on_exchangeable_errors(self):
        # the guarantee the rule rests on: a new draw lands inside the range built from n draws >= 80% of the time
        rng = np.random.default_rng(7)
        n, trials = 9, 4000
        draws = np.exp(rng.standard_t(3, size=(trials, n + 1)) * 0.1)
        inside = [ranges.range_factors(d[:n])[0] <= d[n] <= ranges.range_factors(d[:n])[1] for d in draws]
        assert 0.78 <= np.mean(inside) <= 0.86  # exact level (n+1)^-1 ceil((n+1) 0.8) = 0.8, Monte-Carlo noise ~0.6%

    def test_table_uses_the_most_specific_group_with_enough_cases(self):
        assert ranges.MIN_CASES == 8
        keys, ratios = {}, {}
        for i in range(8):  # 8 single-slice transformer FSDP cases: that group gets its own row
            keys[f"t{i}"] = ranges.comparable_keys("transformer", "fsdp", 1)
            ratios[f"t{i}"] = math.exp(0.01 * (i + 1))
        for i in range(3):  # 3 ResNet cases: too few, they only count in "all"
            keys[f"r{i}"] = ranges.comparable_keys("resnet50", "data", 1)
            ratios[f"r{i}"] = math.exp(-0.5)
        table = ranges.range_table(ratios, keys)
        assert set(table) == {"transformer/fsdp/single-slice", "transformer", "all"}
        q = 0.08  # split-conformal rank ceil(9 x 0.8) = 8 of the 8 values 0.01 .. 0.08
        assert table["transformer/fsdp/single-slice"]["high_factor"] == pytest.approx(math.exp(q))
        assert table["all"]["n"] == 11
        group, row = ranges.lookup(table, ranges.comparable_keys("resnet50", "data", 1))
        assert group == "all" and row["n"] == 11
        group, _ = ranges.lookup(table, ranges.comparable_keys("transformer", "fsdp", 4))
        assert group == "transformer"  # a multi-slice run: no multi-slice cases, the model kind's row

    def test_parallelism_kind(self):
        assert ranges.parallelism_kind({"data": 16, "fsdp": 1, "tensor": 1}) == "data"
        assert ranges.parallelism_kind({"fsdp": 16, "tensor": 4}) == "fsdp+tensor"
        assert ranges.parallelism_kind({"fsdp": 1, "strategy": "parameter_server"}) == "parameter-server/data"

    def test_held_out_range_excludes_the_cases_own_generation(self):
        keys = {i: ("all",) for i in ("a1", "a2", "b1", "b2", "b3")}
        fold = {"a1": "A", "a2": "A", "b1": "B", "b2": "B", "b3": "B"}
        ratios = {"a1": math.exp(0.5), "a2": math.exp(-0.5), "b1": math.exp(0.1), "b2": math.exp(-0.1), "b3": 1.0}
        out = ranges.held_out_ranges(ratios, keys, fold)
        # a's range comes from b's errors only: |ln r| = 0.1, 0.1, 0 -> P80 = 0.1; a (|0.5|) falls outside
        assert out["a1"]["high_factor"] == pytest.approx(math.exp(0.1)) and not out["a1"]["inside"]
        # b's range from a's: P80 of 0.5, 0.5 = 0.5; every b is inside
        assert out["b1"]["high_factor"] == pytest.approx(math.exp(0.5)) and out["b1"]["inside"]
        s = ranges.coverage_summary(out)
        assert (s["n"], s["inside"], s["coverage"]) == (5, 3, pytest.approx(0.6))
        widths = sorted(100 * (r["high_factor"] - r["low_factor"]) for r in out.values())
        assert s["median_width_pct"] == pytest.approx(widths[2])

    def test_metric_range_of_a_throughput_inverts_the_step_factors(self):
        thr, step = _case("t"), _case("s", how="step_time")
        assert ranges.metric_range(thr, 100.0, 0.8, 1.25) == [pytest.approx(80.0), pytest.approx(125.0)]
        assert ranges.metric_range(step, 2.0, 0.5, 1.5) == [pytest.approx(1.0), pytest.approx(3.0)]

    def test_summary_range_from_a_written_table(self, tmp_path):
        report = _report(step_time_ranges={"all": {"n": 3, "low_factor": 0.9, "high_factor": 1.1},
                                           "mlp": {"n": 9, "low_factor": 0.8, "high_factor": 1.25}})  # fmt: skip
        path = tmp_path / "cal.toml"
        calibrate.write_calibration_toml(path, Calibration(), report)
        table = ranges.load_range_table(path)
        scenario = {"model": {"kind": "mlp"}, "pod": {"slices": 1}, "parallelism": {"data": 8}}
        rng, basis = ranges.step_time_range_s(2.0, scenario, table)
        assert rng == [pytest.approx(1.6), pytest.approx(2.5)] and basis["group"] == "mlp" and basis["cases"] == 9
        assert ranges.step_time_range_s(2.0, {**scenario, "model": {"kind": "resnet50"}}, table)[0] == [
            pytest.approx(1.8), pytest.approx(2.2)]  # fmt: skip
        assert ranges.step_time_range_s(2.0, None, table) == (None, None)  # imported run: no prediction

    def test_imported_runs_have_no_range(self):
        run = {"name": "x", "source": "imported", "chip": None, "chips": 1, "hosts": 1, "slices": 1, "topology": None,
               "steps": 1, "scenario": "null", "facts": "{}"}  # fmt: skip
        s = summary_from(1, run, RunAggregates(steady_ns=1e6, all_ns=1e6, wall_ns=10**6))
        assert s["step_time_s"] == pytest.approx(1e-3) and s["step_time_range_s"] is None


def _report(**extra):
    base = {
        "date": "2026-01-01", "reference": "ref.json", "reference_sha256": "0" * 64, "evaluations": 3, "loss": 0.1,
        "cases": ["a"], "fitted": {"mxu_efficiency": 0.8}, "prior": {"mxu_efficiency": 0.8},
        "in_sample": validation.summarize([1.0], ["a"]), "residuals_pct": {"a": 1.0},
    }  # fmt: skip
    return {**base, **extra}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_run_json_carries_a_range_that_contains_the_prediction(tmp_path):
    p = _cli("run", "data/scenarios/resnet50-v3-32.toml", "--json", "--db", str(tmp_path / "r.duckdb"))
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    low, high = s["step_time_range_s"]
    assert low < s["step_time_s"] < high
    row = ranges.load_range_table()[s["step_time_range_basis"]["group"]]
    assert low == pytest.approx(s["step_time_s"] * row["low_factor"])
    assert s["step_time_range_basis"]["cases"] >= 1 and s["step_time_range_basis"]["nominal_coverage"] == 0.8


MLPERF = [
    {"id": f"rn_{chip}_{chips}", "kind": "end_to_end",
     "inputs": {"benchmark": "ResNet-50", "system": "s", "chip": f"TPU {chip}", "chips": chips, "global_batch": 64 * chips},
     "expected": {"steady_images_per_s_per_chip": per_s}}
    for chip, chips, per_s in (("v3", 16, 2000.0), ("v3", 64, 1900.0), ("v4", 16, 3000.0))
]  # fmt: skip


def test_calibrate_records_held_out_errors_that_validate_reports_without_refitting(tmp_path):
    """A tiny reference (two v3 systems, one v4): the fit and its generation-held-out refits, end to end."""
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps(MLPERF))
    out = tmp_path / "cal.toml"
    one = {"mxu_efficiency": calibrate.Bound(0.3, 1.0)}  # one parameter keeps the test quick
    report = calibrate.calibrate(ref, out, params=one)
    assert report["generation_folds"] == {"tpu-v3": ["rn_v3_16", "rn_v3_64"], "tpu-v4": ["rn_v4_16"]}
    assert set(report["leave_one_generation_out_pct"]) == {"rn_v3_16", "rn_v3_64", "rn_v4_16"}
    assert report["leave_one_family_out_pct"] == {}  # one family: nothing left to fit on when it is held out
    v = validation.run_validation(ref, out)
    by_id = {c.id: c for c in v.cases}
    for i, e in report["leave_one_generation_out_pct"].items():
        assert by_id[i].leave_one_generation_out_error_pct == pytest.approx(e, abs=1e-5)
        assert by_id[i].held_out_in_range is not None
    s = v.summary["leave_one_generation_out"]
    assert {"n", "median_abs_pct", "p90_abs_pct", "worst_abs_pct", "worst_id"} <= set(s) and s["n"] == 3
    assert v.summary["leave_one_family_out"]["n"] == 0
    check = report["step_time_range_check"]
    assert v.summary["step_time_range"]["inside"] == check["inside"]
    assert v.summary["step_time_range"]["median_width_pct"] == pytest.approx(check["median_width_pct"], rel=1e-4)
