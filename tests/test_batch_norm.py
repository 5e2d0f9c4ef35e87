"""Distributed batch normalization: the all-reduces by hand, where they sit in the step, bad input, the MLPerf mapping."""

from __future__ import annotations

import pytest

from engine import ScenarioError, scenario_from_dict, simulate
from engine.model.analytic import evaluate, step_costs
from engine.model.batch_norm import STAT_BYTES_PER_CHANNEL, plan_batch_norm_sync
from engine.model.models import model_cost
from engine.scenario import ResNet50Model
from engine.scenario.calibration import load_calibration
from profiler.reference import resnet_batch_norm_group

W = 50e9  # one link, bytes/s
HOP_S = 1e-6
OP_S = 10e-6


def _resnet(group: int = 1, batch: int = 2048, topology: str = "8x8x4", **training) -> dict:
    return {"name": "bn", "pod": {"chip": "tpu-v4", "topology": topology}, "model": {"kind": "resnet50", "batch_norm_group": group},
            "training": {"global_batch": batch, "steps": 4, "optimizer": "momentum", **training}, "sim": {"jitter_frac": 0.0}}  # fmt: skip


class TestAllReducesByHand:
    def test_one_layer_on_a_line_of_two(self):
        # 2 chips on a line: reduce-scatter + all-gather, one hop each, each moving half of 2 C fp32 one way
        bn = plan_batch_norm_sync([256], ("conv",), 2, remat="none", link_bytes_per_s=W, hop_latency_s=HOP_S, collective_fixed_s=OP_S)
        nbytes = STAT_BYTES_PER_CHANNEL * 256  # 2 fp32 statistics per channel
        one = 2 * (0.5 * nbytes / W + HOP_S) + OP_S
        assert bn.forward_s == pytest.approx(one)
        assert bn.backward_s == pytest.approx(one)
        assert bn.bytes_per_pass == nbytes

    def test_a_line_of_four_pays_three_hops_per_phase(self):
        two = plan_batch_norm_sync([64], ("c",), 2, remat="none", link_bytes_per_s=1e30, hop_latency_s=HOP_S, collective_fixed_s=0.0)
        four = plan_batch_norm_sync([64], ("c",), 4, remat="none", link_bytes_per_s=1e30, hop_latency_s=HOP_S, collective_fixed_s=0.0)
        assert two.forward_s == pytest.approx(2 * HOP_S)
        assert four.forward_s == pytest.approx(2 * 3 * HOP_S)

    def test_every_layer_adds_and_full_remat_repeats_the_forward(self):
        ch = [64, 128, 256]
        bn = plan_batch_norm_sync(
            ch, ("a", "b", "c"), 2, remat="none", link_bytes_per_s=W, hop_latency_s=HOP_S, collective_fixed_s=OP_S
        )
        full = plan_batch_norm_sync(
            ch, ("a", "b", "c"), 2, remat="full", link_bytes_per_s=W, hop_latency_s=HOP_S, collective_fixed_s=OP_S
        )
        singles = [plan_batch_norm_sync([c], ("x",), 2, remat="none", link_bytes_per_s=W, hop_latency_s=HOP_S, collective_fixed_s=OP_S)
                   for c in ch]  # fmt: skip
        assert bn.forward_s == pytest.approx(sum(s.forward_s for s in singles))
        assert full.forward_s == pytest.approx(bn.forward_s)
        assert full.backward_s == pytest.approx(2 * bn.backward_s)
        assert bn.per_layer.num_rows == 3 * 2 and full.per_layer.num_rows == 3 * 3
        assert set(full.per_layer.column("phase").to_pylist()) == {"forward", "backward", "recompute"}
        assert set(bn.per_layer.column("mesh_axis").to_pylist()) == {"data"}

    def test_a_group_of_one_pools_nothing(self):
        bn = plan_batch_norm_sync(
            [64, 128], ("a", "b"), 1, remat="none", link_bytes_per_s=W, hop_latency_s=HOP_S, collective_fixed_s=OP_S
        )
        assert bn.exposed_s == 0.0 and bn.per_layer.num_rows == 0


class TestInTheStep:
    def test_resnet50_has_a_batch_norm_after_every_convolution(self):
        cost = model_cost(ResNet50Model(kind="resnet50"))
        names = [cost.ops.names[i] for i in cost.batch_norm_ops]
        assert len(names) == 53  # stem + 16 blocks x 3 + 4 projection shortcuts
        assert "fc" not in names

    def test_the_step_grows_by_exactly_the_exposed_all_reduces(self):
        cal = load_calibration()
        one, two = scenario_from_dict(_resnet(1)), scenario_from_dict(_resnet(2))
        c1, c2 = step_costs(one, cal), step_costs(two, cal)
        cost = model_cost(two.model)
        idx = list(cost.batch_norm_ops)
        chip = two.chip_spec()
        bn = plan_batch_norm_sync(cost.ops.n[idx], tuple(cost.ops.names[i] for i in idx), 2, remat="none",
                                  link_bytes_per_s=chip.ici_link_bytes_per_s * cal.ici_efficiency,
                                  hop_latency_s=cal.ici_hop_latency_s, collective_fixed_s=cal.collective_fixed_s)  # fmt: skip
        assert c2.comm_forward_s - c1.comm_forward_s == pytest.approx(bn.forward_s)
        assert c2.comm_backward_s - c1.comm_backward_s == pytest.approx(bn.backward_s)
        assert evaluate(two, cal).step_time_s - evaluate(one, cal).step_time_s == pytest.approx(bn.exposed_s, rel=1e-9)
        assert c1.forward_s == c2.forward_s  # compute untouched

    def test_a_simulated_run_shows_them_as_per_layer_collectives(self):
        res = simulate(scenario_from_dict(_resnet(4)))
        bn_rows = [r for r in res.trace.extra["layer_collectives"].to_pylist() if r["layer"].endswith(".bn")]
        assert len(bn_rows) == 53 * 2
        assert {r["op"] for r in bn_rows} == {"all-reduce"}


class TestBadInput:
    def test_a_group_that_does_not_divide_the_replicas_names_the_key(self):
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(_resnet(3))  # 8x8x4: 256 chips, all data-parallel
        keys = [k for k, _ in e.value.problems]
        assert keys == ["model.batch_norm_group"]
        assert "256 data-parallel replicas" in str(e.value) and "valid: 1, 2, 4" in str(e.value)

    def test_zero_is_refused(self):
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(_resnet(0))
        assert [k for k, _ in e.value.problems] == ["model.batch_norm_group"]


class TestMlperfMapping:
    @pytest.mark.parametrize(
        ("per_chip", "group"),
        [(256, 1), (128, 1), (64, 1), (32, 2), (16, 4), (8, 8)],  # v3-256, v4-128: own batch; v4-512: 2; v3-8192: 4 chips
    )
    def test_groups_pool_at_least_64_images(self, per_chip, group):
        assert resnet_batch_norm_group(per_chip) == group

    def test_the_v4_512_case_is_mapped_with_its_group(self):
        from profiler.reference import load_reference, map_entries

        cases, _ = map_entries(load_reference())
        by_id = {c.id: c for c in cases}
        assert by_id["mlperf_v0.7_tpu-v4-512-TF_resnet"].scenarios[0]["model"]["batch_norm_group"] == 2
        assert by_id["mlperf_v0.7_tpu-v3-8192-TF_resnet"].scenarios[0]["model"]["batch_norm_group"] == 4
        assert by_id["mlperf_v0.7_tpu-v4-128-TF_resnet"].scenarios[0]["model"]["batch_norm_group"] == 1

