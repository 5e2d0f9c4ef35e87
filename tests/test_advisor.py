"""Advisor rules, idle-time summary keys through a real DuckDB file, CLI advice, and tiling with every mechanism on."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import ScenarioError, simulate
from engine.scenario import scenario_from_dict
from profiler import api
from profiler.advisor import advice_metrics, advise, load_rules
from profiler.cli import main
from tests.conftest import SCENARIOS
from tests.test_simulate import _assert_tiles

IDLE_KEYS = {"input_wait_frac", "recompiles", "compile_s", "goodput", "stragglers", "advice"}


def _rules(advice):
    return {a["rule"]: a for a in advice}


class TestRules:
    @pytest.mark.parametrize(
        ("frac", "rule", "severity"),
        [
            (0.30, "input_bound_high", "critical"),
            (0.20, "input_bound_high", "critical"),
            (0.10, "input_bound_moderate", "warning"),
        ],
    )
    def test_input_wait_tiers_fire_once_per_group(self, frac, rule, severity):
        advice = advise({"input_wait_frac": frac, "step_time_s": 0.01})
        assert [a["rule"] for a in advice] == [rule]
        assert advice[0]["severity"] == severity
        assert advice[0]["evidence"]["input_wait_frac"] == frac
        assert f"{frac:.0%}" in advice[0]["message"]

    def test_quiet_run_gets_no_advice(self):
        assert advise({"input_wait_frac": 0.01, "recompiles": 0, "compile_s": 1.0, "wall_time_s": 100.0, "stragglers": []}) == []

    def test_missing_metric_does_not_fire(self):
        assert advise({"step_time_s": 1.0}) == []

    def test_derived_metrics(self):
        m = advice_metrics({"wall_time_s": 100.0, "compile_s": 30.0, "checkpoint_s": 5.0, "stragglers": [1, 2],
                            "breakdown": {"sync_wait": 0.2}, "oom": False, "name": "x"})  # fmt: skip
        assert m["compile_frac"] == 0.3 and m["checkpoint_frac"] == 0.05
        assert m["stragglers_count"] == 2 and m["breakdown_sync_wait"] == 0.2 and m["oom"] == 0.0
        assert "name" not in m

    def test_recompiling_is_critical_and_sorted_first(self):
        advice = advise({"recompiles": 40, "compile_s": 400.0, "wall_time_s": 500.0, "input_wait_frac": 0.1})
        assert advice[0]["rule"] == "recompiling" and advice[0]["severity"] == "critical"
        assert advice[0]["evidence"] == {"recompiles": 40, "compile_s": 400.0, "compile_frac": 0.8}
        assert "input_bound_moderate" in _rules(advice)

    def test_every_rule_in_the_file_formats_with_its_own_metrics(self):
        for rule in load_rules():
            metrics = {name: 1.0 for name, _, _ in rule.when} | {name: 1.0 for name in rule.evidence}
            metrics |= {"compile_frac": 1.0, "checkpoint_frac": 1.0, "breakdown_sync_wait": 1.0, "breakdown_collective": 1.0}
            rule.message.format(**metrics)  # raises KeyError on a metric the template needs but nobody provides

    def test_bad_rule_file_names_the_key(self, tmp_path):
        bad = tmp_path / "advice.toml"
        bad.write_text('[[rules]]\nid = "x"\ngroup = "g"\nseverity = "loud"\nwhen = [["a", ">=", 1]]\nmessage = "m"\n')
        with pytest.raises(ScenarioError) as e:
            load_rules(bad)
        assert any(key == "rules.0.severity" for key, _ in e.value.problems)


def test_keras_run_stores_idle_keys_compiles_table_and_advice(db):
    s = api.run_file(SCENARIOS / "keras-mlp-v5e-8.toml", db)
    assert IDLE_KEYS <= set(s)
    assert s["input_wait_frac"] >= 0.2 and s["stragglers"] == [] and 0 < s["goodput"] < 1
    assert "input_bound_high" in _rules(s["advice"])
    for a in s["advice"]:
        assert set(a) == {"rule", "severity", "message", "evidence"}
        assert a["severity"] in {"info", "warning", "critical"}
        assert all(isinstance(v, (int, float)) for v in a["evidence"].values())
    with db.read() as con:
        rows = con.execute(
            "SELECT step, signature, cause, compile_ns, typeof(step), typeof(compile_ns)"
            " FROM extra_compiles WHERE run_id = $id ORDER BY step",
            {"id": s["run_id"]},
        ).fetchall()
    # first compile, then the epoch's partial last batch (60,000 = 468 x 128 + 96 -> 12 per chip)
    assert [(r[0], r[1], r[2]) for r in rows] == [(0, "batch=16", "first"), (468, "batch=12", "new_shape")]
    assert rows[0][4] == "INTEGER" and rows[0][5] == "BIGINT"
    assert s["recompiles"] == 1
    assert s["compile_s"] == pytest.approx(sum(r[3] for r in rows) / 1e9)


def test_scenario_without_idle_sections_has_neutral_keys(db, small_scenario):
    s = api.run_scenario(small_scenario, db)
    assert s["input_wait_frac"] == 0 and s["recompiles"] == 0 and s["compile_s"] == 0
    assert s["goodput"] == 1.0 and s["stragglers"] == []
    assert s["breakdown"]["input_wait"] == 0 and s["breakdown"]["recompile"] == 0


def test_cli_prints_advice(tmp_path, capsys):
    assert main(["run", str(SCENARIOS / "resnet50-v3-32-straggler.toml"), "--db", str(tmp_path / "c.duckdb")]) == 0
    out = capsys.readouterr().out
    assert "advice:" in out and "[warning]" in out and "straggler" in out
    assert main(["run", str(SCENARIOS / "resnet50-v3-32-straggler.toml"), "--db", str(tmp_path / "c.duckdb"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert 5 in summary["stragglers"] and _rules(summary["advice"])["stragglers"]["evidence"]["straggler_slowdown_max"] == 1.25


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    npc=st.sampled_from([1, 4, "autotune"]),
    prefetch=st.sampled_from([0, 1, "autotune"]),
    decode_us=st.floats(0, 2000),
    slowdown=st.floats(1.0, 2.0),
    fail_at=st.lists(st.integers(0, 39), max_size=3),
    every=st.integers(0, 10),
    variable=st.booleans(),
)
def test_every_mechanism_keeps_events_tiling(steps, seed, npc, prefetch, decode_us, slowdown, fail_at, every, variable):
    s = scenario_from_dict(
        {
            "name": "prop",
            "pod": {"chip": "tpu-v4", "topology": "2x2x2"},
            "model": {"kind": "transformer", "layers": 2, "d_model": 64, "heads": 4, "d_ff": 128, "vocab": 256, "seq_len": 64},
            "training": {"global_batch": 16, "steps": steps},
            "sim": {"seed": seed},
            "input": {"num_parallel_calls": npc, "prefetch": prefetch, "decode_cpu_s_per_sample": decode_us * 1e-6,
                      "dataset_samples": 50, "jitter_frac": 0.2, "shuffle_buffer": 10},
            "compile": {"shapes": "variable_seq_len" if variable else "fixed", "seq_len_min": 8},
            "stragglers": {"chips": [1], "slowdown": slowdown, "random_fraction": 0.3},
            "failures": {"fail_at_steps": fail_at, "checkpoint_every_steps": every, "restart_s": 1.0},
        }
    )  # fmt: skip
    r = simulate(s)
    _assert_tiles(r.trace.events, r.trace.steps)
    chips = r.facts.chips
    assert r.trace.events.column("dur_ns").to_numpy().sum() == chips * r.trace.steps.column("step_ns").to_numpy().sum()
    x = r.facts.extra
    assert 0 <= x["input_wait_frac"] <= 1 and 0 <= x["goodput"] <= 1
    assert x["recompiles"] == r.trace.extra["compiles"].num_rows - 1
    assert 1 in x["stragglers"] or slowdown <= 1.01
    assert np.isfinite(r.trace.steps.column("step_ns").to_numpy()).all()


def test_experts_in_part_empty_tiles_are_flagged_and_full_ones_are_not(db):
    from tests.test_gmm_tiles import _moe

    narrow = api.run_scenario(scenario_from_dict({**_moe(1408), "name": "narrow-experts"}), db)
    assert narrow["moe_expert_work_over_flops"] > 1.25
    assert "expert_tiles_unfilled" in _rules(narrow["advice"])
    # 2048-wide experts with 16x the tokens per chip: whole tiles, few group boundaries per tile
    wide = {**_moe(2048), "name": "wide-experts"}
    wide["training"] = {**wide["training"], "global_batch": 256, "remat": "full"}
    full = api.run_scenario(scenario_from_dict(wide), db)
    assert full["moe_expert_work_over_flops"] < 1.25
    assert "expert_tiles_unfilled" not in _rules(full["advice"])
