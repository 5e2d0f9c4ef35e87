"""Compilation: a cache walked by a known signature sequence, shape fixes, cost model, no-jit."""

from __future__ import annotations

import numpy as np
import pytest

from engine import ScenarioError, load_scenario, simulate
from engine.idle.compilation import (
    CompileCostParams,
    CompileSection,
    compile_time_s,
    eager_fwd_bwd_s,
    load_compile_cost,
    plan_compiles,
    step_signatures,
)
from tests.conftest import SCENARIOS

PARAMS = CompileCostParams(per_op_s=2.0, per_chip_s=0.5, op_dispatch_s=1e-4, unfused_memory_factor=3.0)


def test_compile_cost_known_answer():
    assert compile_time_s(PARAMS, program_ops=10, chips=8) == pytest.approx(2.0 * 10 + 0.5 * 8)


def test_calibrated_cost_file_loads_with_positive_parameters():
    p = load_compile_cost()
    assert p.per_op_s > 0 and p.per_chip_s > 0 and p.unfused_memory_factor >= 1


def test_cache_compiles_each_new_signature_once():
    batch = np.array([8, 8, 4, 8, 4, 2])
    plan = plan_compiles(
        CompileSection(),
        batch=batch,
        seq=np.zeros(6, dtype=np.int64),
        fwd_bwd_for=lambda b, s: b * 1e-3,
        program_ops=10,
        chips=8,
        params=PARAMS,
    )
    one = 24.0
    np.testing.assert_allclose(plan.compile_s, [one, 0, one, 0, 0, one])
    assert plan.compiles.column("step").to_pylist() == [0, 2, 5]
    assert plan.compiles.column("signature").to_pylist() == ["batch=8", "batch=4", "batch=2"]
    assert plan.compiles.column("cause").to_pylist() == ["first", "new_shape", "new_shape"]
    assert plan.compiles.column("compile_ns").to_pylist() == [24_000_000_000] * 3
    np.testing.assert_allclose(plan.fwd_bwd_s, batch * 1e-3)  # each step runs at its own shape


def test_without_jit_nothing_compiles():
    plan = plan_compiles(CompileSection(jit=False), batch=np.array([8, 4]), seq=np.zeros(2, dtype=np.int64),
                         fwd_bwd_for=lambda b, s: 1.0, program_ops=10, chips=8, params=PARAMS)  # fmt: skip
    assert plan.compiles.num_rows == 0 and plan.compile_s.sum() == 0


def _sig(section, steps=20, dataset=1000, seq_len=None):
    return step_signatures(section, steps=steps, per_chip_batch=16, batch_shards=8, global_batch=128, seq_len=seq_len,
                           dataset_samples=dataset, rng=np.random.default_rng(0))  # fmt: skip


class TestShapes:
    def test_partial_last_batch_of_each_epoch(self):
        # 1000 = 7 x 128 + 104: steps 7 and 15 carry 104 samples = 13 per chip
        batch, _ = _sig(CompileSection())
        assert np.flatnonzero(batch != 16).tolist() == [7, 15]
        assert set(batch[[7, 15]]) == {13}

    @pytest.mark.parametrize("fix", [{"drop_remainder": True}, {"fixed_input_signature": True}])
    def test_fixes_remove_the_partial_shape(self, fix):
        batch, _ = _sig(CompileSection(**fix))
        assert (batch == 16).all()

    def test_even_dataset_has_no_partial_batch(self):
        batch, _ = _sig(CompileSection(), dataset=1024)
        assert (batch == 16).all()

    def test_buckets_pad_up_to_the_nearest_edge(self):
        sec = CompileSection(shapes="variable_seq_len", seq_len_min=128)
        _, raw = _sig(sec, steps=500, seq_len=2048)
        _, bucketed = _sig(sec.model_copy(update={"buckets": 4}), steps=500, seq_len=2048)
        assert set(bucketed) == {608, 1088, 1568, 2048}
        assert (bucketed >= raw).all()  # same draws, padded up
        assert len(set(raw)) > 100

    def test_pad_to_max_is_one_shape(self):
        _, seq = _sig(CompileSection(shapes="variable_seq_len", seq_len_min=128, pad_to_max=True), seq_len=2048)
        assert set(seq) == {2048}

    def test_variable_seq_needs_a_sequence_model(self):
        with pytest.raises(ScenarioError) as e:
            _sig(CompileSection(shapes="variable_seq_len"), seq_len=None)
        assert e.value.problems[0][0] == "compile.shapes"


@pytest.fixture(scope="module")
def runs():
    over = {"training.steps": 120}
    return {
        name: simulate(load_scenario(SCENARIOS / f"llm-350m-v5p-{name}.toml", overrides=over))
        for name in ("variable-seq", "bucketed")
    }


class TestRecompilingScenarios:
    def test_bucketing_cuts_recompiles_to_the_bucket_count(self, runs):
        var, buck = runs["variable-seq"].facts.extra, runs["bucketed"].facts.extra
        assert var["recompiles"] > 50
        assert buck["recompiles"] <= 3
        one = runs["bucketed"].trace.extra["compiles"].column("compile_ns").to_numpy()[0] / 1e9
        # every compile costs the same program compile: totals are counts x one compile
        assert var["compile_s"] == pytest.approx((var["recompiles"] + 1) * one)
        assert buck["compile_s"] == pytest.approx((buck["recompiles"] + 1) * one)

    def test_padding_costs_compute(self, runs):
        def compute_s(r):
            e = r.trace.events.to_pandas()
            return e[(e.kind == "compute") & (e.chip == 0)].dur_ns.sum()

        assert compute_s(runs["bucketed"]) > compute_s(runs["variable-seq"])

    def test_recompile_events_sit_on_every_chip_of_compiling_steps(self, runs):
        r = runs["bucketed"]
        e = r.trace.events.to_pandas()
        rec = e[e.kind == "recompile"]
        steps = sorted(r.trace.extra["compiles"].column("step").to_pylist())
        assert sorted(rec.step.unique()) == steps
        assert (rec.groupby("step").chip.nunique() == r.facts.chips).all()


def test_eager_known_answer():
    # 1 s matmul, 2 s memory-bound x 3 unfused, 100 ops x 0.1 ms dispatch
    assert eager_fwd_bwd_s(1.0, 2.0, 100, PARAMS) == pytest.approx(1.0 + 6.0 + 0.01)


def test_no_jit_slows_the_step_and_skips_compiles():
    path = SCENARIOS / "resnet50-v3-32.toml"
    jit = simulate(load_scenario(path, overrides={"compile.jit": True, "training.steps": 10, "sim.jitter_frac": 0.0}))
    eager = simulate(load_scenario(path, overrides={"compile.jit": False, "training.steps": 10, "sim.jitter_frac": 0.0}))
    last = lambda r: r.trace.steps.column("step_ns").to_numpy()[-1]  # noqa: E731
    assert last(eager) > last(jit)
    assert eager.facts.extra["compile_s"] == 0 and eager.trace.extra["compiles"].num_rows == 0
    assert jit.trace.extra["compiles"].num_rows == 1


def test_a_reshaped_step_costs_one_microbatch_with_the_models_attention_kernel():
    """A step of another sequence length is priced as the pass ``comp`` is: one microbatch, flash attention."""
    from engine.scenario.calibration import load_calibration
    from engine.idle.plan import _fwd_bwd_for
    from engine.model.models import model_cost
    from engine.model.step import SimContext
    from engine.pod.topology import build_pod
    from engine import scenario_from_dict
    from engine.model.analytic import step_costs

    def ratio(microbatches: int) -> float:
        raw = {"name": "c", "pod": {"chip": "tpu-v5p", "topology": "2x2x1"},
               "model": {"kind": "transformer", "layers": 2, "d_model": 1024, "heads": 8, "d_ff": 4096, "vocab": 1000, "seq_len": 2048},
               "training": {"global_batch": 32, "steps": 2, "microbatches": microbatches},
               "compile": {"shapes": "variable_seq_len", "seq_len_min": 1024}}  # fmt: skip
        s = scenario_from_dict(raw)
        cal = load_calibration()
        ctx = SimContext(s, cal, build_pod(s.chip_spec(), s.slice_shape, 1), model_cost(s.model))
        comp = step_costs(s, cal, pod=ctx.pod, cost=ctx.cost).comp
        return _fwd_bwd_for(ctx, comp, True)(s.per_chip_batch, 2047) / comp.fwd_bwd_s

    # one token shorter runs at the same speed (the flash kernel, as at full length), whatever the microbatches
    assert ratio(1) == pytest.approx(1.0, rel=0.01)
    assert ratio(4) == pytest.approx(1.0, rel=0.01)
