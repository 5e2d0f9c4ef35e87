"""Pipeline parallelism and gradient accumulation: bubble known answers, stage sends, memory, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from engine import ScenarioError, scenario_from_dict, simulate
from engine.model.pipeline import bubble_fraction, in_flight_microbatches
from engine.trace import EVENT_KINDS


def _llm(**over) -> dict:
    training = {"global_batch": 64, "steps": 6, "microbatches": 8}
    training.update(over.pop("training", {}))
    par = {"fsdp": 4, "pipeline": 4}
    par.update(over.pop("parallelism", {}))
    return {"name": "pp", "pod": {"chip": "tpu-v5p", "topology": "2x2x4", **over.pop("pod", {})},
            "model": {"kind": "transformer", "layers": 16, "d_model": 1024, "heads": 8, "d_ff": 4096, "vocab": 32000,
                      "seq_len": 512},
            "training": training, "parallelism": par, "sim": {"jitter_frac": 0.0}, **over}  # fmt: skip


def _by_kind(r) -> dict[str, float]:
    ck = r.trace.chip_kind.to_pandas()
    return ck.groupby("kind", observed=True).ns.sum().to_dict()


class TestBubble:
    @pytest.mark.parametrize("p, m, sched, v, want", [(4, 8, "gpipe", 1, 3 / 11), (4, 8, "1f1b", 1, 3 / 11),
                                                      (4, 8, "interleaved", 2, 3 / 19), (1, 8, "1f1b", 1, 0.0)])  # fmt: skip
    def test_known_fractions(self, p, m, sched, v, want):
        assert bubble_fraction(p, m, sched, v) == pytest.approx(want)

    @pytest.mark.parametrize("sched, v", [("1f1b", 1), ("gpipe", 1), ("interleaved", 2)])
    def test_bubble_share_of_the_pipelined_time_in_the_trace(self, sched, v):
        r = simulate(scenario_from_dict(_llm(parallelism={"pipeline_schedule": sched, "virtual_stages": v})))
        k = _by_kind(r)
        assert "bubble" in EVENT_KINDS
        # per stage: bubble / (bubble + its microbatches' compute and per-layer collectives)
        assert k["bubble"] / (k["bubble"] + k["compute"] + k["collective"]) == pytest.approx(
            bubble_fraction(4, 8, sched, v), rel=0.08)  # the update and the sync sit outside the pipeline
        assert r.facts.extra["pipeline_bubble_frac"] == bubble_fraction(4, 8, sched, v)

    def test_stages_fill_as_a_staircase(self):
        r = simulate(scenario_from_dict(_llm()))
        ev = r.trace.events.to_pandas()
        first = ev[(ev.step == 2)].sort_values("start_ns").groupby("chip").first()
        # chips of stage 0 start computing at once; later stages start with a bubble
        assert set(first.kind) == {"compute", "bubble"}
        assert (first.kind == "compute").sum() == 16 // 4

    def test_interleaving_sends_more(self):
        one = simulate(scenario_from_dict(_llm()))
        two = simulate(scenario_from_dict(_llm(parallelism={"pipeline_schedule": "interleaved", "virtual_stages": 2})))
        assert two.facts.extra["pipeline_exposed_send_s"] > one.facts.extra["pipeline_exposed_send_s"]
        assert _by_kind(two)["bubble"] < _by_kind(one)["bubble"]

    def test_pipeline_across_slices_goes_over_dcn(self):
        r = simulate(scenario_from_dict(_llm(pod={"slices": 2})))
        assert r.facts.extra["pipeline_over_dcn"] is True
        ici = simulate(scenario_from_dict(_llm()))
        assert r.facts.extra["pipeline_exposed_send_s"] > ici.facts.extra["pipeline_exposed_send_s"]


class TestMemory:
    def test_in_flight_microbatches(self):
        assert in_flight_microbatches(4, 8, "gpipe") == 11  # MaxText's loop: 8 microbatches + 3 bubble iterations
        assert in_flight_microbatches(4, 8, "1f1b") == 4
        assert in_flight_microbatches(4, 8, "interleaved", 2) == pytest.approx(4 * (1 + 3 / 8))

    def test_gpipe_holds_more_activations_than_1f1b(self):
        g = simulate(scenario_from_dict(_llm(parallelism={"pipeline_schedule": "gpipe"})))
        f = simulate(scenario_from_dict(_llm()))
        ga, fa = (x.facts.extra["hbm_pipeline_activation_bytes"] for x in (g, f))
        assert ga > fa

        def at_loss(r):  # what the forward pass left saved
            t = r.trace.extra["memory_timeline"].to_pandas()
            return float(t[(t.phase == "loss") & (t.category == "activations")].bytes.iloc[0])

        layer_share = at_loss(g) / 11  # MaxText's loop: 8 microbatches + 3 bubble iterations in flight
        assert at_loss(f) == pytest.approx(4 * layer_share, rel=0.05)

    def test_maxtexts_loop_under_full_remat_keeps_each_iterations_stage_input_and_recomputes_twice(self):
        """Under full remat MaxText's loop saves one stage input per iteration (11 of them: 8 microbatches + 3 bubble
        iterations), not each layer's input for 8 microbatches; its backward reruns a stage's forward and each layer's
        again inside it: a layer runs 5 passes, not full remat's 4."""
        from engine.memory.activations import transformer_layer_activation_bytes

        full = {"pipeline_schedule": "gpipe"}
        g = simulate(scenario_from_dict(_llm(parallelism=full, training={"remat": "full"})))
        f = simulate(scenario_from_dict(_llm(training={"remat": "full"})))
        s = scenario_from_dict(_llm())
        layer_input = transformer_layer_activation_bytes(s.model, 64 // 4 // 8, "bf16", "full")  # one microbatch

        def at_loss(r):  # what the forward pass left saved
            t = r.trace.extra["memory_timeline"].to_pandas()
            return float(t[(t.phase == "loss") & (t.category == "activations")].bytes.iloc[0])

        # 1F1B: 4 microbatches of the stage's 4 layers, 16 layer inputs; both keep the final norm's input and output
        assert at_loss(f) - at_loss(g) == pytest.approx((16 - 11) * layer_input)
        ratio = g.facts.hardware_flops_per_step / f.facts.hardware_flops_per_step
        assert 1.2 < ratio < 1.25 + 11 / 8  # a fifth pass of the layers, and the bubble iterations' work


    def test_maxtexts_loop_holds_the_stages_weight_gradients_twice_in_its_backward(self):
        """Each iteration of MaxText's loop runs the stage's weights, so its backward accumulates their gradient in the
        loop's carry beside the iteration's stacked gradient (two fp32 copies in XLA's buffer assignment); a 1F1B
        schedule holds one. The embedding and unembedding, outside the loop, are held once by both."""

        def backward_grads(r):
            t = r.trace.extra["memory_timeline"].to_pandas()
            return float(t[(t.phase == "backward") & (t.category == "grads")].bytes.max())

        g = simulate(scenario_from_dict(_llm(parallelism={"pipeline_schedule": "gpipe"}, training={"remat": "full"})))
        f = simulate(scenario_from_dict(_llm(training={"remat": "full"})))
        s = scenario_from_dict(_llm())
        m = s.model
        stage_layer_params = m.layers / 4 * (4 * m.d_model**2 + 2 * m.d_model * m.d_ff)  # 4 stages of 4 layers
        extra_per_chip = stage_layer_params / 4 * 4.0  # sharded over fsdp 4, fp32
        assert backward_grads(g) - backward_grads(f) == pytest.approx(extra_per_chip, rel=0.02)

    def test_maxtexts_loop_without_remat_copies_the_iterations_residuals_in_its_backward(self):
        """Without remat each iteration of MaxText's loop keeps every layer's residuals, stacked over the iterations; the
        backward of an iteration slices its own out of the stack for the loop over the stage's layers, a copy of one
        microbatch's residuals for the stage's 4 layers beside the stack (XLA's memory-usage report)."""
        from engine.memory.activations import transformer_layer_activation_bytes

        g = simulate(scenario_from_dict(_llm(parallelism={"pipeline_schedule": "gpipe"})))
        s = scenario_from_dict(_llm())
        layer = transformer_layer_activation_bytes(s.model, 64 // 4 // 8, "bf16", "none")  # one microbatch
        t = g.trace.extra["memory_timeline"].to_pandas()
        acts = t[t.category == "activations"]
        at_loss = float(acts[acts.phase == "loss"].bytes.iloc[0])
        backward = acts[acts.phase == "backward"].bytes.to_numpy()[1:-1]  # the stage's layers
        stack = 11 * 4 * layer  # 8 microbatches + 3 bubble iterations of the stage's 4 layers
        assert at_loss == pytest.approx(stack, rel=0.05)
        # each layer's backward: the stack, the iteration's copy, and its own transient beside them
        assert (backward >= stack + 4 * layer * 0.99).all()


class TestGradientAccumulation:
    def test_one_microbatch_of_activations_and_one_sync(self):
        base = _llm(parallelism={"pipeline": 1, "fsdp": 16}, training={"microbatches": 1})
        one = simulate(scenario_from_dict(base))
        acc = simulate(scenario_from_dict({**base, "training": {**base["training"], "microbatches": 4}}))
        assert acc.facts.hbm_breakdown_bytes["activations"] < one.facts.hbm_breakdown_bytes["activations"] / 3
        assert acc.facts.extra["gradient_accumulation_steps"] == 4
        assert acc.facts.extra["grad_allreduce_s"] == pytest.approx(one.facts.extra["grad_allreduce_s"])  # once per step
        step = lambda r: float(np.median(r.trace.steps.column("step_ns").to_numpy()))  # noqa: E731
        assert step(acc) > step(one)  # four passes pay four times the per-op fixed costs and weight reads
        assert acc.facts.model_flops_per_step == pytest.approx(one.facts.model_flops_per_step)


class TestBadInput:
    @pytest.mark.parametrize(
        "over, key, needle",
        [
            ({"parallelism": {"pipeline": 3, "fsdp": 1, "data": 3}}, "parallelism", ""),
            ({"parallelism": {"pipeline": 8, "fsdp": 2, "virtual_stages": 4, "pipeline_schedule": "interleaved"}},
             "parallelism.pipeline", "do not divide the model's 16 layers"),
            ({"parallelism": {"virtual_stages": 2}}, "parallelism.virtual_stages", "interleaved"),
            ({"training": {"microbatches": 3}}, "training.microbatches", "valid: a divisor of 16"),
            ({"parallelism": {"pipeline_schedule": "zigzag"}}, "parallelism.pipeline_schedule", "gpipe"),
        ],
    )
    def test_errors_name_the_key(self, over, key, needle):
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(_llm(**over))
        assert any(k.startswith(key) for k, _ in e.value.problems), e.value.problems
        assert needle in str(e.value)
