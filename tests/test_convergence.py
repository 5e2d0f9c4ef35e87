"""The critical-batch model, its fit to MLPerf reference points, and the time-to-train sum."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.convergence import (
    ConvergenceSection,
    CriticalBatch,
    conformal_q,
    convergence_problems,
    fit_critical_batch,
    leave_one_out,
    load_tasks,
    plan_convergence,
    time_to_train,
)
from engine.idle.failures import FailureSection
from scripts.fit_convergence import fits


class TestCriticalBatch:
    def test_known_answer(self):
        # E_min 1,000, B_crit 100: at B = 100, E = 1,000 x 2 = 2,000 samples, S = 10 x 2 = 20 steps
        m = CriticalBatch(1000.0, 100.0)
        assert m.s_min_steps == 10.0
        assert m.samples_to_target(100) == 2000.0
        assert m.steps_to_target(100) == 20.0
        # B = 400: E = 1,000 x 5 = 5,000; S = 10 x 1.25 = 12.5
        assert m.samples_to_target(400) == 5000.0
        assert m.steps_to_target(400) == 12.5

    @given(st.floats(1.0, 1e9), st.floats(1.0, 1e6), st.floats(1.0, 1e6))
    def test_steps_times_batch_is_samples(self, e_min, b_crit, batch):
        m = CriticalBatch(e_min, b_crit)
        assert m.steps_to_target(batch) * batch == pytest.approx(m.samples_to_target(batch), rel=1e-9)

    @given(st.floats(1.0, 1e6), st.floats(1.0, 1e6), st.floats(1.0, 1e6))
    def test_bigger_batch_fewer_steps_more_samples(self, b_crit, b1, b2):
        m = CriticalBatch(1e6, b_crit)
        lo, hi = sorted((b1, b2))
        assert m.steps_to_target(hi) <= m.steps_to_target(lo) * (1 + 1e-12)
        assert m.samples_to_target(hi) >= m.samples_to_target(lo) * (1 - 1e-12)

    def test_fit_recovers_exact_points(self):
        m = CriticalBatch(5e6, 3000.0)
        batches = [256, 1024, 4096, 16384]
        fit = fit_critical_batch(batches, [m.samples_to_target(b) for b in batches])
        assert fit.e_min_samples == pytest.approx(5e6, rel=1e-9)
        assert fit.b_crit_samples == pytest.approx(3000.0, rel=1e-9)
        assert all(abs(x) < 1e-9 for x in leave_one_out(batches, [m.samples_to_target(b) for b in batches]))

    def test_fit_rejects_samples_that_fall_with_batch(self):
        with pytest.raises(ValueError, match="grow with the batch"):
            fit_critical_batch([100, 200, 400], [3e6, 2e6, 1e6])

    def test_conformal_rank(self):
        # n = 4: rank ceil(5 x 0.8) = 4, the largest |ln(1 + e)|
        assert conformal_q([0.01, -0.02, 0.05, 0.03]) == pytest.approx(math.log(1.05))
        # n = 10: rank ceil(11 x 0.8) = 9, the second largest
        errs = [i / 100 for i in range(1, 11)]
        assert conformal_q(errs) == pytest.approx(math.log(1.09))


class TestBundledTasks:
    def test_recorded_fit_is_what_the_script_fits(self):
        refit = fits()
        for key, task in load_tasks().items():
            assert task.model.e_min_samples == pytest.approx(refit[key]["e_min_samples"], rel=1e-5), key
            assert task.model.b_crit_samples == pytest.approx(refit[key]["b_crit_samples"], rel=1e-5), key
            assert task.loo_q == pytest.approx(refit[key]["loo_q"], abs=1e-4), key

    def test_tasks_name_their_source(self):
        for task in load_tasks().values():
            assert "mlcommons/logging @ " in task.source and task.source.endswith(".json")
            assert len(task.points) >= 3

    @pytest.mark.parametrize("batch", [4096, 8192, 13056, 32768, 49152, 58880, 65536])
    def test_resnet_steps_within_10pct_of_the_rcp(self, batch):
        task = load_tasks()["mlperf-resnet50"]
        epochs = dict(task.points)[batch]
        rcp_steps = epochs * 1281167 / batch
        assert task.model.steps_to_target(batch) == pytest.approx(rcp_steps, rel=0.10)

    def test_leave_one_out_stays_within_15pct(self):
        for key, r in fits().items():
            assert max(abs(x) for x in r["loo"]) < 0.15, key


class TestTimeToTrain:
    def test_budget_known_answer(self):
        # 1e6 samples at batch 1,000: 1,000 steps of 0.5 s = 500 s; 4 evals of 10 s; 30 s compile
        sec = ConvergenceSection(samples=1e6, eval_every_samples=250_000, eval_s=10.0)
        plan = plan_convergence(sec, global_batch=1000, tokens_per_sample=None, chips=8, hosts=2, compile_s=30.0)
        assert plan.steps_to_target == 1000 and plan.evals == 4 and plan.steps_range is None
        t = time_to_train(plan, 0.5)
        assert t.train_s == 500.0 and t.eval_s == 40.0 and t.checkpoint_and_failures_s == 0.0
        assert t.total_s == 570.0
        assert t.chip_hours == pytest.approx(570.0 * 8 / 3600)
        assert t.cost_usd is None

    def test_eval_samples_priced_as_forward_passes(self):
        # eval of 3,000 samples at batch 1,000 and 0.6 s per step: 3 steps' worth x 1/3 = 0.6 s
        sec = ConvergenceSection(samples=2000, eval_every_samples=1000, eval_samples=3000)
        plan = plan_convergence(sec, global_batch=1000, tokens_per_sample=None, chips=1, hosts=1)
        assert time_to_train(plan, 0.6).eval_s == pytest.approx(2 * 0.6)

    def test_tokens_budget(self):
        sec = ConvergenceSection(tokens=2048 * 100 * 7 + 1)
        plan = plan_convergence(sec, global_batch=100, tokens_per_sample=2048, chips=1, hosts=1)
        assert plan.steps_to_target == 8  # 7 full steps and a partial one

    def test_failures_cost_time(self):
        sec = ConvergenceSection(samples=1e6)
        fl = FailureSection(chip_mtbf_hours=1000.0, checkpoint_every_steps=100, checkpoint_bytes=1e9)
        kw = dict(global_batch=1000, tokens_per_sample=None, chips=64, hosts=16)
        clean = time_to_train(plan_convergence(sec, **kw), 1.0)
        faulty = time_to_train(plan_convergence(sec, failures=fl, **kw), 1.0)
        assert faulty.total_s > clean.total_s
        assert faulty.checkpoint_and_failures_s == pytest.approx(faulty.total_s - faulty.train_s)

    def test_price(self):
        from engine.convergence import CostSection

        plan = plan_convergence(ConvergenceSection(samples=3600), global_batch=1, tokens_per_sample=None, chips=2, hosts=1,
                                cost=CostSection(usd_per_chip_hour=1.5))  # fmt: skip
        t = time_to_train(plan, 1.0)  # 3,600 s on 2 chips = 2 chip-hours
        assert t.chip_hours == pytest.approx(2.0) and t.cost_usd == pytest.approx(3.0)

    def test_task_range_contains_the_point(self):
        plan = plan_convergence(ConvergenceSection(task="mlperf-resnet50"), global_batch=4096, tokens_per_sample=None,
                                chips=16, hosts=4)  # fmt: skip
        lo, hi = plan.steps_range
        assert lo < plan.steps_to_target < hi


class TestFirstEvaluation:
    """A job that stops at its target stops at an evaluation: none comes before ``eval_first_samples``."""

    def test_the_first_evaluation_is_the_earliest_stop(self):
        # a fit of 2e6 samples at batch 1,000 (b_crit far above it): the first evaluation at 3e6 binds
        sec = ConvergenceSection(e_min_samples=2e6, b_crit_samples=1e12, eval_every_samples=500_000,
                                 eval_first_samples=3e6, eval_s=10.0)  # fmt: skip
        plan = plan_convergence(sec, global_batch=1000, tokens_per_sample=None, chips=1, hosts=1)
        assert plan.samples_to_target == 3e6 and plan.steps_to_target == 3000 and plan.evals == 1
        assert time_to_train(plan, 1.0).eval_s == 10.0

    def test_past_the_first_evaluation_the_fit_decides(self):
        # 4.2e6 samples: evaluations at 3e6, 3.5e6 and 4e6 before the target
        sec = ConvergenceSection(e_min_samples=4.2e6, b_crit_samples=1e12, eval_every_samples=500_000, eval_first_samples=3e6)
        plan = plan_convergence(sec, global_batch=1000, tokens_per_sample=None, chips=1, hosts=1)
        assert plan.samples_to_target == pytest.approx(4.2e6) and plan.evals == 3

    def test_the_range_does_not_reach_below_the_first_evaluation(self):
        sec = ConvergenceSection(task="mlperf-resnet50", eval_every_samples=4 * 1281167, eval_first_samples=60 * 1281167)
        plan = plan_convergence(sec, global_batch=4096, tokens_per_sample=None, chips=16, hosts=4)
        assert plan.steps_range[0] == plan.steps_to_target == math.ceil(60 * 1281167 / 4096)

    @pytest.mark.parametrize(
        ("section", "says"),
        [
            (dict(task="mlperf-resnet50", eval_first_samples=1e6), "needs how often the later ones run"),
            (dict(samples=1e6, eval_every_samples=1e5, eval_first_samples=5e5), "a fixed budget stops at its budget"),
        ],
    )
    def test_bad_first_evaluations_name_the_key(self, section, says):
        problems = convergence_problems(ConvergenceSection(**section), "resnet50", None)
        assert [k for k, _ in problems] == ["convergence.eval_first_samples"] and says in problems[0][1]
