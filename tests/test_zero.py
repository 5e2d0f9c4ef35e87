"""ZeRO stages for FSDP, bf16 optimizer state and bf16 weights: per-chip model-state bytes, the collectives each stage issues.

Rajbhandari et al. 2020 ("ZeRO", Figure 1) with Podscope's bytes per parameter: fp32 weights P = 4,
fp32 gradients G = 4, optimizer state K (Adam 8 in fp32, 4 in bf16), Psi parameters over Nd chips:
ZeRO-3 ``(P + G + K) Psi / Nd``, ZeRO-2 ``P Psi + (G + K) Psi / Nd``, ZeRO-1 ``(P + G) Psi + K Psi / Nd``.
"""

from __future__ import annotations

import pytest

from engine import ScenarioError, scenario_from_dict, simulate
from engine.comm import mesh_collective_s, plan_step_comm
from engine.memory.hbm import hbm_plan
from engine.memory.states import bytes_per_param, optimizer_state_bytes_per_param
from engine.model.models import model_cost
from engine.pod.mesh import resolve_mesh
from engine.scenario import MlpModel

W = 100e9
MLP = MlpModel(kind="mlp", layer_sizes=[1024, 1024, 1024])
PSI = 2 * (1024 * 1024 + 1024)


def _states(fsdp_shard: str, optimizer_state: str = "fp32", fsdp: int = 4, weight_dtype: str = "fp32") -> float:
    plan = hbm_plan(model_cost(MLP), MLP, per_chip_batch=1, precision="bf16", optimizer="adam", remat="none", fsdp=fsdp, tensor=1,
                    capacity_bytes=1e12, usable_bytes=1e12, fsdp_shard=fsdp_shard, optimizer_state=optimizer_state,
                    weight_dtype=weight_dtype)  # fmt: skip
    return plan.model_state_bytes


class TestModelStateBytes:
    @pytest.mark.parametrize(
        "stage, formula",
        [
            ("all", (4 + 4 + 8) * PSI / 4),  # ZeRO-3
            ("grads+optimizer", 4 * PSI + (4 + 8) * PSI / 4),  # ZeRO-2
            ("optimizer", (4 + 4) * PSI + 8 * PSI / 4),  # ZeRO-1
        ],
    )
    def test_each_stage_against_the_paper(self, stage, formula):
        assert _states(stage) == pytest.approx(formula)

    def test_bf16_moments_halve_the_optimizer_state(self):
        assert optimizer_state_bytes_per_param("adam", "bf16") == 4.0
        assert optimizer_state_bytes_per_param("momentum", "bf16") == 2.0
        assert optimizer_state_bytes_per_param("sgd", "bf16") == 0.0
        assert bytes_per_param("adam", "bf16", "bf16").model_states == 4 + 4 + 4  # master weights and gradients stay fp32
        assert _states("all", "bf16") == pytest.approx((4 + 4 + 4) * PSI / 4)
        assert _states("optimizer", "bf16") == pytest.approx((4 + 4) * PSI + 4 * PSI / 4)

    def test_bf16_weights_halve_weights_and_gradients_and_drop_the_cast(self):
        """MaxText's weight_dtype bfloat16: weights and gradients 2 bytes each, the optimizer state unchanged;
        a bf16 weight needs no bf16 compute copy, while fp8 compute still casts."""
        assert bytes_per_param("adam", "bf16", "fp32", "bf16") == bytes_per_param("adam", "bf16", "fp32", "fp32").__class__(2, 2, 8, 0)
        assert bytes_per_param("adam", "bf16").compute_copy == 2 and bytes_per_param("adam", "fp8", "fp32", "bf16").compute_copy == 1
        assert _states("all", weight_dtype="bf16") == pytest.approx((2 + 2 + 8) * PSI / 4)
        assert _states("optimizer", "bf16", weight_dtype="bf16") == pytest.approx((2 + 2) * PSI + 4 * PSI / 4)

    def test_without_fsdp_every_stage_is_the_same(self):
        assert _states("all", fsdp=1) == _states("optimizer", fsdp=1) == _states("grads+optimizer", fsdp=1) == 16 * PSI


class TestCollectives:
    mesh = resolve_mesh((4, 4, 4), (True,) * 3, {"data": 1, "fsdp": 64, "tensor": 1})

    def _plan(self, stage, gradient_reduce_dtype="weights"):
        return plan_step_comm(model_cost(MLP), self.mesh, fwd_compute_s=0.0, bwd_compute_s=0.0, per_chip_batch=1, precision="bf16",
                              slices=1, chips_per_host=4, link_bytes_per_s=W, hop_latency_s=0.0, dcn_bytes_per_s_per_host=25e9,
                              dcn_latency_s=0.0, fsdp_shard=stage, gradient_reduce_dtype=gradient_reduce_dtype)  # fmt: skip

    def _ops(self, stage):
        t = self._plan(stage).per_layer.to_pandas()
        return sorted(zip(t.phase, t.op, t.mesh_axis))

    def test_zero3_gathers_every_layer_twice_and_scatters_its_gradients(self):
        layers = [("backward", "all-gather", "fsdp"), ("backward", "reduce-scatter", "fsdp"), ("forward", "all-gather", "fsdp")]
        assert self._ops("all") == sorted(layers * 2)
        p = self._plan("all")
        assert p.weight_gather_s == 0.0 and p.fsdp_grad_sync_s == 0.0

    def test_zero2_scatters_gradients_and_gathers_the_updated_weights_once(self):
        assert self._ops("grads+optimizer") == sorted([("backward", "reduce-scatter", "fsdp")] * 2 + [("update", "all-gather", "fsdp")])
        p = self._plan("grads+optimizer")
        assert p.weight_gather_s == pytest.approx(mesh_collective_s("all-gather", PSI * 4.0, self.mesh["fsdp"], W, 0.0))
        assert p.forward_s == 0.0  # no per-layer gather of replicated weights

    def test_zero1_reduce_scatters_gradients_and_gathers_the_updated_weights_once(self):
        assert self._ops("optimizer") == sorted([("gradient_sync", "reduce-scatter", "fsdp"), ("update", "all-gather", "fsdp")])
        p = self._plan("optimizer")
        assert p.fsdp_grad_sync_s == pytest.approx(mesh_collective_s("reduce-scatter", PSI * 4.0, self.mesh["fsdp"], W, 0.0))
        # ZeRO's sec. 7.2.1: stage 1 moves what data parallelism moves, a reduce-scatter plus an all-gather
        ar = mesh_collective_s("all-reduce", PSI * 4.0, self.mesh["fsdp"], W, 0.0)
        assert p.fsdp_grad_sync_s + p.weight_gather_s == pytest.approx(ar, rel=1e-6)
        assert p.forward_s == 0.0 and p.backward_s == 0.0
        # gradients reduced as their bf16 matmuls write them: the reduce-scatter moves 2 bytes a parameter, the
        # gather of the updated fp32 weights still 4
        c = self._plan("optimizer", "compute")
        assert c.fsdp_grad_sync_s == pytest.approx(mesh_collective_s("reduce-scatter", PSI * 2.0, self.mesh["fsdp"], W, 0.0))
        assert c.weight_gather_s == pytest.approx(p.weight_gather_s)


def _llm(**over) -> dict:
    return {"name": "z", "pod": {"chip": "tpu-v5p", "topology": "2x2x4"},
            "model": {"kind": "transformer", "layers": 4, "d_model": 1024, "heads": 8, "d_ff": 4096, "vocab": 32000, "seq_len": 1024},
            "training": {"global_batch": 16, "steps": 4, **over.pop("training", {})},
            "parallelism": {"fsdp": 16, **over.pop("parallelism", {})}, "sim": {"jitter_frac": 0.0}}  # fmt: skip


class TestRun:
    def test_stage_facts_and_replicated_weights(self):
        r = simulate(scenario_from_dict(_llm(parallelism={"fsdp_shard": "grads+optimizer"}, training={"optimizer_state": "bf16"})))
        x = r.facts.extra
        assert x["fsdp_shard"] == "grads+optimizer" and x["optimizer_state"] == "bf16" and x["zero_weight_gather_s"] > 0
        base = simulate(scenario_from_dict(_llm()))
        assert "fsdp_shard" not in base.facts.extra and "optimizer_state" not in base.facts.extra
        # replicated weights: 16x the params bytes of ZeRO-3 on this chip
        assert r.facts.hbm_breakdown_bytes["params"] == pytest.approx(16 * base.facts.hbm_breakdown_bytes["params"])

    def test_bf16_weights_halve_the_update_and_the_gradients_reduced_in_their_dtype(self):
        """bf16 weights halve the stored weights and the update's bytes. The FSDP reduce-scatters move bf16 gradients
        as their matmuls write them either way; reduced in the weights' dtype, fp32 weights move twice the bytes.
        The run says which dtypes it assumed."""
        base = simulate(scenario_from_dict(_llm()))
        r = simulate(scenario_from_dict(_llm(training={"weight_dtype": "bf16"})))
        wide = simulate(scenario_from_dict(_llm(training={"gradient_reduce_dtype": "weights"})))
        assert r.facts.extra["weight_dtype"] == "bf16" and "weight_dtype" not in base.facts.extra
        assert r.facts.hbm_breakdown_bytes["params"] == pytest.approx(base.facts.hbm_breakdown_bytes["params"] / 2)
        assert "bf16 weights and gradients" in r.facts.extra["precision_recipe"]
        assert "fp32 master weights" in base.facts.extra["precision_recipe"]
        assert base.facts.extra["precision_recipe"].endswith("gradients reduced in bf16")
        assert wide.facts.extra["precision_recipe"].endswith("gradients reduced in fp32")
        lc, b, w = (x.trace.extra["layer_collectives"].to_pandas() for x in (r, base, wide))
        rs, rs0, rs_w = (t[t.op == "reduce-scatter"].bytes.sum() for t in (lc, b, w))
        ag, ag0 = lc[lc.op == "all-gather"].bytes.sum(), b[b.op == "all-gather"].bytes.sum()
        assert rs0 > 0 and rs == pytest.approx(rs0) and rs_w == pytest.approx(2 * rs0)
        assert ag == pytest.approx(ag0)  # weights gather in bf16 either way

    def test_bad_values_name_the_key(self):
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(_llm(parallelism={"fsdp_shard": "weights"}))
        assert any(k == "parallelism.fsdp_shard" for k, _ in e.value.problems) and "grads+optimizer" in str(e.value)
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(_llm(training={"optimizer_state": "fp16"}))
        assert any(k == "training.optimizer_state" for k, _ in e.value.problems) and "bf16" in str(e.value)
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(_llm(training={"precision": "fp32", "weight_dtype": "bf16"}))
        assert any(k == "training.weight_dtype" for k, _ in e.value.problems) and "valid: fp32 with precision fp32" in str(e.value)
