"""Known answers: how hosts tile each generation's slices, NIC sharing, and the cross-slice all-reduce."""

from __future__ import annotations

import numpy as np
import pytest

from engine.comm import collective_on_pod, dcn_all_reduce_time_s, dcn_time_s
from engine.pod.catalog import load_catalog
from engine.pod.topology import build_pod
from engine.scenario.calibration import Calibration

CAT = load_catalog()


class TestHostTiling:
    # Cloud TPU v5e / v6e slice tables: v5litepod-1, -4 and -8 are one host (1, 4, 8 chips); -16 is 4x4 on
    # 2 hosts, -32 4x8 on 4, -256 16x16 on 32. v4 / v5p hosts are 2x2x1 blocks of 4 chips; v3 hosts 2x2.
    @pytest.mark.parametrize(
        ("chip", "shape", "hosts", "chips_per_host"),
        [
            ("tpu-v5e", (1, 1), 1, 1),
            ("tpu-v5e", (2, 2), 1, 4),
            ("tpu-v5e", (2, 4), 1, 8),
            ("tpu-v5e", (4, 2), 1, 8),
            ("tpu-v5e", (4, 4), 2, 8),
            ("tpu-v5e", (4, 8), 4, 8),
            ("tpu-v5e", (16, 16), 32, 8),
            ("tpu-v6e", (2, 4), 1, 8),
            ("tpu-v6e", (4, 4), 2, 8),
            ("tpu-v4", (2, 2, 1), 1, 4),
            ("tpu-v4", (4, 4, 4), 16, 4),
            ("tpu-v5p", (4, 4, 8), 32, 4),
            ("tpu-v3", (2, 4), 2, 4),
            ("tpu-v3", (32, 32), 256, 4),
        ],
    )
    def test_hosts_per_slice(self, chip, shape, hosts, chips_per_host):
        pod = build_pod(CAT[chip], shape)
        assert pod.hosts_per_slice == hosts
        assert pod.chips_per_host == chips_per_host
        counts = np.bincount(pod.chip_table["host"])
        assert counts.tolist() == [chips_per_host] * hosts  # every host drives a whole block

    def test_v5e_2x4_is_one_host_whichever_way_it_is_written(self):
        for shape in ((2, 4), (4, 2)):
            pod = build_pod(CAT["tpu-v5e"], shape, slices=3)
            assert pod.hosts == 3
            assert set(pod.chip_table["host"][:8].tolist()) == {0}

    def test_a_host_block_is_contiguous_on_the_torus(self):
        pod = build_pod(CAT["tpu-v5e"], (4, 4))
        t = pod.chip_table
        for h in range(2):
            xs, ys = t["x"][t["host"] == h], t["y"][t["host"] == h]
            assert (xs.max() - xs.min() + 1) * (ys.max() - ys.min() + 1) == 8


class TestCrossSliceAllReduce:
    def test_ring_across_slices_by_hand(self):
        # 4 slices, 8 chips per host each holding a 1 MB shard, 25 GB/s NIC, 20 us per ring step:
        # 2 (S-1)/S x 8 MB / 25 GB/s = 480 us, plus 2 (S-1) = 6 steps x 20 us = 120 us.
        t = dcn_all_reduce_time_s(1e6, 4, 8, 25e9, 20e-6)
        assert t == pytest.approx(480e-6 + 120e-6)
        assert dcn_time_s("all-reduce", 1e6, 4, 8, 25e9, 20e-6) == pytest.approx(t)
        assert dcn_all_reduce_time_s(1e6, 1, 8, 25e9, 20e-6) == 0.0

    def test_nic_sharing_scales_with_the_chips_behind_one_nic(self):
        one = dcn_all_reduce_time_s(1e6, 2, 4, 25e9, 0.0)
        assert dcn_all_reduce_time_s(1e6, 2, 8, 25e9, 0.0) == pytest.approx(2 * one)
        assert one == pytest.approx(4e6 / 25e9)  # S = 2: each host sends (and receives) its chips' shards once

    def test_hierarchical_all_reduce_on_a_pod(self):
        # v5e 4x4 x 2 slices, 64 MB of gradients, ideal links: reduce-scatter over the slice's ICI, the
        # 64 MB / 16 = 4 MB shard of each chip all-reduced over DCN with 8 chips per NIC, all-gather back.
        pod = build_pod(CAT["tpu-v5e"], (4, 4), slices=2)
        cal = Calibration(ici_efficiency=1.0, dcn_efficiency=1.0, dcn_latency_s=20e-6, ici_hop_latency_s=1e-6)
        res, _, _ = collective_on_pod("all-reduce", 64e6, pod, cal)
        shard = 64e6 / 16
        dcn = 2 * 1 / 2 * shard * 8 / CAT["tpu-v5e"].dcn_bytes_per_s_per_host + 2 * 20e-6
        assert res.dcn_time_s == pytest.approx(dcn)
        single, _, _ = collective_on_pod("all-reduce", 64e6, build_pod(CAT["tpu-v5e"], (4, 4)), cal)
        assert res.ici_time_s == pytest.approx(single.time_s)  # the in-slice phases do not change
        assert res.time_s == pytest.approx(single.time_s + dcn)


class TestWeightUpdateSharding:
    def test_each_replica_updates_its_share(self):
        # ResNet-50 with momentum on 4 data-parallel chips: the update reads and writes 12 + 2 x 4 bytes
        # per parameter at the calibrated HBM rate; sharded (Xu et al. 2020), each chip does a quarter.
        from engine.model.models import model_cost
        from engine.scenario import scenario_from_dict
        from engine.scenario.calibration import load_calibration
        from engine.simulate import simulate

        def step_s(shard: bool) -> float:
            s = scenario_from_dict({"name": "r", "pod": {"chip": "tpu-v4", "topology": "2x2x1"}, "model": {"kind": "resnet50"},
                                    "training": {"global_batch": 64, "steps": 3, "optimizer": "momentum"},
                                    "parallelism": {"shard_weight_update": shard}, "sim": {"jitter_frac": 0.0, "trace": "summary"}})  # fmt: skip
            return float(np.median(simulate(s).trace.steps.column("step_ns").to_numpy())) / 1e9

        cal = load_calibration()
        params = model_cost(scenario_from_dict({"name": "r", "pod": {"chip": "tpu-v4", "topology": "2x2x1"}, "model": {"kind": "resnet50"},
                                                "training": {"global_batch": 64, "steps": 1}}).model).params  # fmt: skip
        update_s = params * 20 / (CAT["tpu-v4"].hbm_bytes_per_s * cal.hbm_efficiency)
        assert step_s(False) - step_s(True) == pytest.approx(0.75 * update_s, rel=1e-3, abs=2e-9)
