"""Stragglers and failures: factors, a failure at a known step, goodput, and whole-run amounts."""

from __future__ import annotations

import numpy as np
import pytest

from engine import ScenarioError, load_scenario, simulate
from engine.idle.failures import FailureSection, checkpoint_steps, plan_failures
from engine.idle.stragglers import StragglerSection, straggler_factors
from tests.conftest import SCENARIOS


class TestStragglerFactors:
    def test_listed_chips_and_hosts(self):
        sec = StragglerSection(chips=[1], hosts=[1], slowdown=1.5)
        f = straggler_factors(sec, np.array([0, 0, 1, 1]), np.random.default_rng(0))
        np.testing.assert_allclose(f, [1.0, 1.5, 1.5, 1.5])

    def test_random_fraction_stays_in_range_and_is_seeded(self):
        sec = StragglerSection(random_fraction=0.5, random_slowdown_max=1.2)
        f1 = straggler_factors(sec, np.zeros(1000, dtype=int), np.random.default_rng(3))
        f2 = straggler_factors(sec, np.zeros(1000, dtype=int), np.random.default_rng(3))
        np.testing.assert_array_equal(f1, f2)
        assert 400 < (f1 > 1).sum() < 600 and f1.max() <= 1.2 and f1.min() == 1.0

    def test_unknown_chip_names_the_key(self):
        with pytest.raises(ScenarioError) as e:
            straggler_factors(StragglerSection(chips=[9]), np.zeros(4, dtype=int), np.random.default_rng(0))
        assert e.value.problems[0][0] == "stragglers.chips"


class TestFailureAtKnownStep:
    # 10 steps of 1 s, checkpoint after steps 3 and 7 (every 4), failure in step 6,
    # 8 GB checkpoint over 2 hosts at 1 GB/s write, 2 GB/s read, 100 s restart, 5 s compile.
    SEC = FailureSection(fail_at_steps=[6], checkpoint_every_steps=4, checkpoint_bytes=8e9, restart_s=100,
                         storage_write_bytes_per_s_per_host=1e9, storage_read_bytes_per_s_per_host=2e9)  # fmt: skip

    def _plan(self, section):
        return plan_failures(section, step_s=np.ones(10), chips=8, hosts=2, default_checkpoint_bytes=0,
                             program_compile_s=5.0, rng=np.random.default_rng(0))  # fmt: skip

    def test_checkpoints(self):
        assert np.flatnonzero(checkpoint_steps(self.SEC, 10)).tolist() == [3, 7]
        np.testing.assert_allclose(self._plan(self.SEC).checkpoint_s, [0, 0, 0, 4, 0, 0, 0, 4, 0, 0])  # 8e9 / (2 x 1e9)

    def test_failure_costs_restart_restore_recompile_and_lost_steps(self):
        p = self._plan(self.SEC)
        assert p.failed_steps.tolist() == [6]
        assert p.restart_s[6] == pytest.approx(100 + 8e9 / (2 * 2e9))  # re-provision + restore
        assert p.recompile_s[6] == 5.0
        assert p.lost_s[6] == pytest.approx(3.0)  # steps 4, 5, 6 redone
        assert p.lost_steps == 3
        assert p.restart_s.sum() == p.restart_s[6]

    def test_failure_before_the_first_checkpoint_restarts_from_scratch(self):
        p = self._plan(self.SEC.model_copy(update={"fail_at_steps": [2]}))
        assert p.lost_s[2] == pytest.approx(3.0)  # steps 0, 1, 2
        assert p.restart_s[2] == pytest.approx(100)  # nothing to restore

    def test_mtbf_rate_direction(self):
        def failures(hours):
            sec = FailureSection(chip_mtbf_hours=hours)
            return len(plan_failures(sec, step_s=np.full(2000, 60.0), chips=1000, hosts=250, default_checkpoint_bytes=0,
                                     program_compile_s=0, rng=np.random.default_rng(1)).failed_steps)  # fmt: skip

        # 1000 chips x 60 s steps: expected failures per step = 1000 x 60 / (h x 3600)
        few, many = failures(10_000), failures(1_000)
        assert many > 3 * few > 0
        assert many == pytest.approx(2000 * (1 - np.exp(-1000 * 60 / (1_000 * 3600))), rel=0.25)


def _ideal(path, **over):
    base = {"sim.jitter_frac": 0.0}
    return simulate(load_scenario(path, overrides={**base, **over}))


def test_straggler_makes_the_others_wait_by_the_slowdown(ideal_calibration):
    path = SCENARIOS / "resnet50-v3-32.toml"
    over = {"sim.jitter_frac": 0.0, "training.steps": 3}
    healthy = simulate(load_scenario(path, overrides=over), ideal_calibration)
    slow_over = {**over, "stragglers.chips": [3], "stragglers.slowdown": 1.5}
    slow = simulate(load_scenario(path, overrides=slow_over), ideal_calibration)
    assert slow.facts.extra["stragglers"] == [3] and healthy.facts.extra["stragglers"] == []
    e = healthy.trace.events.to_pandas()
    compute_ns = e[(e.chip == 0) & (e.step == 1) & (e.kind == "compute")].dur_ns.sum()  # fwd/bwd + update
    s = slow.trace.events.to_pandas()
    wait_ns = s[(s.chip == 0) & (s.step == 1) & (s.kind == "sync_wait")].dur_ns.sum()
    assert wait_ns == pytest.approx(0.5 * compute_ns, abs=4)  # healthy chips wait half the straggler's work
    step_ns = lambda r: r.trace.steps.column("step_ns")[1].as_py()  # noqa: E731
    assert step_ns(slow) == pytest.approx(step_ns(healthy) + wait_ns, abs=4)


def test_failure_run_goodput_and_wall_time(ideal_calibration):
    path = SCENARIOS / "llm-1b-v5p-64.toml"
    over = {"sim.jitter_frac": 0.0, "training.steps": 20}
    clean = simulate(load_scenario(path, overrides=over), ideal_calibration)
    step_s = clean.trace.steps.column("step_ns").to_numpy()[5] / 1e9
    fail = {"failures.fail_at_steps": [12], "failures.checkpoint_every_steps": 5, "failures.restart_s": 60.0,
            "failures.checkpoint_bytes": 4e9, "failures.storage_write_bytes_per_s_per_host": 1e9,
            "failures.storage_read_bytes_per_s_per_host": 1e9}  # fmt: skip
    r = simulate(load_scenario(path, overrides={**over, **fail}), ideal_calibration)
    hosts = r.facts.hosts
    ckpt_s = 4e9 / (hosts * 1e9)
    # checkpoints after steps 4, 9, 14, 19; failure in 12 redoes 10, 11, 12
    extra_s = 4 * ckpt_s + 60.0 + ckpt_s + 3 * step_s
    wall = lambda x: x.trace.steps.column("step_ns").to_numpy().sum() / 1e9  # noqa: E731
    assert wall(r) == pytest.approx(wall(clean) + extra_s, rel=1e-6)
    assert r.facts.extra["failures"] == 1 and r.facts.extra["lost_steps"] == 3
    assert r.facts.extra["goodput"] == pytest.approx(1 - extra_s / wall(r), rel=1e-6)
    assert clean.facts.extra["goodput"] == 1.0


def test_more_frequent_checkpoints_lose_less_work():
    path = SCENARIOS / "llm-1b-v5p-64-failures.toml"
    rare = simulate(load_scenario(path, overrides={"failures.checkpoint_every_steps": 100, "training.steps": 140}))
    often = simulate(load_scenario(path, overrides={"failures.checkpoint_every_steps": 10, "training.steps": 140}))
    assert often.facts.extra["lost_steps"] < rare.facts.extra["lost_steps"]


class TestCheckpointPolicy:
    def test_young_interval_known_answer(self):
        from engine.idle.failures import young_interval_s

        # write 2 s, one failure per 10,000 s: sqrt(2 x 2 x 10,000) = 200 s
        assert young_interval_s(2.0, 1e-4) == pytest.approx(200.0)
        assert young_interval_s(2.0, 0.0) is None

    def test_expected_goodput_known_answer_and_optimum(self):
        from engine.idle.failures import expected_goodput

        # 100 s work + 10 s write; rate 1e-3/s: 0.11 failures per period, each 50 + 55 s -> wall 121.55 s
        assert expected_goodput(100.0, 10.0, 50.0, 1e-3) == pytest.approx(100.0 / 121.55)
        assert expected_goodput(100.0, 10.0, 50.0, 0.0) == pytest.approx(100.0 / 110.0)
        opt = np.sqrt(2 * 10.0 / 1e-4)
        best = expected_goodput(opt, 10.0, 50.0, 1e-4)
        assert best > expected_goodput(opt / 4, 10.0, 50.0, 1e-4) and best > expected_goodput(opt * 4, 10.0, 50.0, 1e-4)

    def test_run_reports_policy_facts_and_advice(self, db):
        from profiler import api

        s = api.run_file(SCENARIOS / "llm-1b-v5p-64-failures.toml", db, overrides={"training.steps": 140})
        assert s["checkpoint_every_steps_optimal"] > 50 and 0 < s["goodput_expected"] <= 1
        rules = {a["rule"] for a in s["advice"]}
        assert "checkpoint_too_frequent" in rules and "failures_goodput" in rules
