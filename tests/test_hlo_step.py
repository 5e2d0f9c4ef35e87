"""An HLO module on a pod: device placement, collective pricing and the compute roofline, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.hlo import describe_hlo, parse_hlo
from engine.hlo.placement import DCN, group_links, permute_hops, permute_links, place_groups
from engine.hlo.step import hlo_step_cost, matmul_precision
from engine.pod.catalog import load_catalog
from engine.pod.mesh import Segment1D
from engine.pod.topology import build_pod
from engine.scenario import InterconnectSection
from engine.scenario.calibration import Calibration

V5P = load_catalog()["tpu-v5p"]
CAL = Calibration()  # the defaults, so the hand arithmetic below does not move with a refit


@pytest.fixture(scope="module")
def pod_2x2x4():
    return build_pod(V5P, (2, 2, 4))  # 16 chips, no wraparound; chip id = 8x + 4y + z


class TestPlaceGroups:
    def test_contiguous_groups_span_z(self, pod_2x2x4):
        p = place_groups(np.arange(16).reshape(4, 4), pod_2x2x4)
        assert (p.axes, p.whole, p.group_size, p.slices) == ((2,), True, 4, 1)

    def test_strided_groups_span_x_and_y(self, pod_2x2x4):
        p = place_groups(np.arange(16).reshape(4, 4).T, pod_2x2x4)
        assert (p.axes, p.whole) == ((1, 0), True)

    def test_part_of_an_axis_is_a_segment(self, pod_2x2x4):
        p = place_groups(np.arange(16).reshape(8, 2), pod_2x2x4)
        assert not p.whole
        assert p.segments == (Segment1D(torus_axis=2, chips=2, wrap=False, stride=1),)

    def test_every_other_chip_is_strided(self, pod_2x2x4):
        groups = np.array([[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]])
        (seg,) = place_groups(groups, pod_2x2x4).segments
        assert (seg.chips, seg.stride) == (2, 2)

    def test_permute_hops(self, pod_2x2x4):
        hops, across = permute_hops(np.array([[0, 1], [0, 3], [0, 12]]), pod_2x2x4)
        assert (hops, across) == ([0, 0, 3], False)  # 0 -> 3 on a 4-chip line without wraparound

    def test_permute_on_a_torus_takes_the_short_way(self):
        pod = build_pod(V5P, (4, 4, 4))
        hops, _ = permute_hops(np.array([[0, 3]]), pod)
        assert hops == [0, 0, 1]

    def test_a_ring_collective_keeps_both_directions_of_its_axes_busy(self, pod_2x2x4):
        p = place_groups(np.arange(16).reshape(4, 4).T, pod_2x2x4)  # over x and y
        assert group_links(p) == {(0, 1), (0, -1), (1, 1), (1, -1)}
        assert group_links(p, unidirectional=True) == {(0, 1), (1, 1)}

    def test_a_permute_takes_the_directions_its_pairs_move_in(self):
        pod = build_pod(V5P, (4, 4, 4))  # wraparound on every axis
        forward = np.array([[z, (z + 1) % 4] for z in range(4)])  # each chip to the next along z, round the ring
        backward = forward[:, ::-1]
        assert permute_links(forward, pod) == {(2, 1)}
        assert permute_links(backward, pod) == {(2, -1)}
        assert permute_links(np.array([[0, 4], [0, 16]]), pod) == {(1, 1), (0, 1)}  # one step along y, one along x (chip 16x + 4y + z)

    def test_a_permute_across_slices_takes_the_dcn(self):
        pod = build_pod(V5P, (2, 2, 2), slices=2)
        assert DCN in permute_links(np.array([[0, 8]]), pod)


def _module(body: str, params: str, partitions: int = 16) -> str:
    return f"HloModule m, num_partitions={partitions}\n\n%add (a: f32[], b: f32[]) -> f32[] {{\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}}\n\nENTRY %main ({params}) -> f32[] {{\n{body}\n}}\n"


def test_all_reduce_over_z_is_two_ring_phases(pod_2x2x4):
    n_bytes = 4 * 2**20
    text = _module(
        f"  %p = f32[{n_bytes // 4}] parameter(0)\n"
        f"  ROOT %ar = f32[{n_bytes // 4}] all-reduce(%p), replica_groups=[4,4]<=[16], to_apply=%add",
        "p: f32[1]",
    )
    step = hlo_step_cost(describe_hlo(parse_hlo(text)), pod_2x2x4, CAL, InterconnectSection())
    link = V5P.ici_link_bytes_per_s * CAL.ici_efficiency
    # a 4-chip line (no wraparound): one direction, 3 hops; reduce-scatter then all-gather
    ring = 3 / 4 * n_bytes / link + 3 * CAL.ici_hop_latency_s
    assert step.collective_s == pytest.approx(2 * ring, rel=1e-9)
    assert step.collectives.column("torus_axes").to_pylist() == ["z"]


def test_dot_roofline_pads_to_the_mxu(pod_2x2x4):
    text = _module(
        "  %a = bf16[100,100] parameter(0)\n  %b = bf16[100,100] parameter(1)\n"
        "  ROOT %d = bf16[100,100] dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "a: bf16[100,100], b: bf16[100,100]",
    )
    step = hlo_step_cost(describe_hlo(parse_hlo(text)), pod_2x2x4, CAL, InterconnectSection())
    t_flops = 2 * 128**3 / (V5P.peak_flops_per_s("bf16") * CAL.mxu_efficiency)
    t_bytes = 3 * 100 * 100 * 2 / (V5P.hbm_bytes_per_s * CAL.hbm_efficiency)
    assert step.compute_s == pytest.approx(max(t_flops, t_bytes) + CAL.op_overhead_s, rel=1e-9)
    assert step.precision == "bf16"
    assert step.hardware_flops == 2 * 100**3


def test_elementwise_kernels_cost_bytes_but_no_launch(pod_2x2x4):
    text = _module("  %a = f32[1024] parameter(0)\n  ROOT %e = f32[1024] exponential(%a)", "a: f32[1024]")
    step = hlo_step_cost(describe_hlo(parse_hlo(text)), pod_2x2x4, CAL, InterconnectSection())
    assert step.overhead_s == 0
    assert step.compute_s == pytest.approx(2 * 4096 / (V5P.hbm_bytes_per_s * CAL.hbm_efficiency))


class TestMatmulPrecision:
    def test_cpu_upcast_of_a_bf16_program(self):
        assert matmul_precision("f32", {"bf16"}) == "bf16"

    def test_a_real_fp32_program(self):
        assert matmul_precision("f32", {"f32", "bf16"}) == "fp32"
        assert matmul_precision("s8", {"bf16"}) == "int8"


def test_bigger_collective_never_faster(pod_2x2x4):
    times = []
    for n in (2**10, 2**16, 2**20):
        text = _module(
            f"  %p = f32[{n}] parameter(0)\n  ROOT %ag = f32[{4 * n}] all-gather(%p), replica_groups=[4,4]<=[4,4]T(1,0), dimensions={{0}}",
            "p: f32[1]",
        )
        times.append(hlo_step_cost(describe_hlo(parse_hlo(text)), pod_2x2x4, CAL, InterconnectSection()).collective_s)
    assert times == sorted(times) and times[0] > 0
    assert not math.isclose(times[0], times[-1])


@pytest.fixture(scope="module")
def two_slices():
    return build_pod(V5P, (2, 2, 2), slices=2)  # chips 0-7 on slice 0, 8-15 on slice 1


class TestAcrossSlices:
    def test_group_within_a_slice(self, two_slices):
        p = place_groups(np.arange(16).reshape(4, 4), two_slices)
        assert (p.axes, p.whole, p.slices) == ((2, 1), True, 1)

    def test_one_chip_per_slice_is_the_dcn_alone(self, two_slices):
        groups = np.stack([np.arange(8), np.arange(8) + 8], axis=1)
        p = place_groups(groups, two_slices)
        assert (p.axes, p.slices, p.group_size) == ((), 2, 2)
        text = _module(
            "  %p = f32[262144] parameter(0)\n"
            "  ROOT %ar = f32[262144] all-reduce(%p), replica_groups=[8,2]<=[2,8]T(1,0), to_apply=%add",
            "p: f32[1]",
        )
        step = hlo_step_cost(describe_hlo(parse_hlo(text)), two_slices, CAL, InterconnectSection())
        host_bw = V5P.dcn_bytes_per_s_per_host * CAL.dcn_efficiency
        cph = min(V5P.chips_per_host, 8)
        # ring all-reduce over 2 slices: 2(S-1)/S of each host's chips' bytes through its NIC [ring]
        expected_bw_s = 2 * (1 / 2) * 262144 * 4 * cph / host_bw
        assert step.collective_s == pytest.approx(expected_bw_s, rel=0.2)
        assert step.collective_s > expected_bw_s

    def test_permute_across_slices_goes_over_the_dcn(self, two_slices):
        hops, across = permute_hops(np.array([[0, 8]]), two_slices)
        assert across and hops == [0, 0, 0]


class TestSchedule:
    """The core and the interconnect through a scheduled module (engine.hlo.step.run_schedule), worked by hand."""

    @staticmethod
    def _overlap_module(cycles: int, gathered: int = 2**20) -> str:
        # an all-gather over z started before a fusion of `cycles` estimated cycles and awaited after it
        return _module(
            f"  %p = bf16[{gathered // 4}]{{0:T(1024)}} parameter(0)\n  %w = bf16[512,512]{{1,0:T(8,128)(2,1)}} parameter(1)\n"
            f"  %ag-start = (bf16[{gathered // 4}], bf16[{gathered}]) all-gather-start(%p), replica_groups=[4,4]<=[16], dimensions={{0}}\n"
            f'  %f = bf16[512,512]{{1,0:T(8,128)(2,1)}} fusion(%w), kind=kLoop, calls=%add, backend_config={{"window_config":{{"estimated_cycles":"{cycles}"}}}}\n'
            f"  %ag-done = bf16[{gathered}] all-gather-done(%ag-start)\n"
            "  ROOT %t = (bf16[512,512], bf16[1]) tuple(%f, %ag-done)",
            f"p: bf16[{gathered // 4}], w: bf16[512,512]",
        )

    def _step(self, text, pod, **kw):
        return hlo_step_cost(describe_hlo(parse_hlo(text)), pod, CAL, InterconnectSection(), **kw)

    def test_async_all_gather_hidden_behind_a_longer_fusion(self, pod_2x2x4):
        step = self._step(self._overlap_module(10_000_000), pod_2x2x4)  # 10M cycles / 1.75 GHz = 5.7 ms
        gather_s = step.collectives.column("time_ns")[0].as_py() / 1e9
        fusion_s = 10_000_000 / V5P.clock_hz
        assert gather_s < fusion_s
        assert step.compute_source == "xla"
        assert step.compute_s == pytest.approx(fusion_s)
        assert step.collective_s == pytest.approx(0.0, abs=1e-12)
        assert step.collective_total_s == pytest.approx(gather_s, abs=1e-9)  # time_ns is whole nanoseconds
        assert step.collectives.column("asynchronous").to_pylist() == [True]

    def test_async_all_gather_exposed_by_what_outlasts_the_fusion(self, pod_2x2x4):
        step = self._step(self._overlap_module(1_000), pod_2x2x4)  # 0.57 us of compute
        gather_s = step.collectives.column("time_ns")[0].as_py() / 1e9
        fusion_s = 1_000 / V5P.clock_hz
        assert step.collective_s == pytest.approx(gather_s - fusion_s, abs=1e-9)
        assert step.collectives.column("exposed_ns").to_pylist() == [round((gather_s - fusion_s) * 1e9)]

    def test_an_op_the_compiler_has_no_estimate_for_gets_the_roofline(self, pod_2x2x4):
        """libtpu writes INT64_MAX cycles where its cost model has none (a TPU7x copy): no estimate, not 168 years."""
        text = self._overlap_module(2**63 - 1)
        (op,) = [o for o in describe_hlo(parse_hlo(text)).ops if o.name == "f"]
        assert op.estimated_cycles is None
        step = self._step(text, pod_2x2x4)
        (f,) = [o for o in step.ops.to_pylist() if o["name"] == "f"]
        assert f["xla_ns"] is None and step.compute_s == pytest.approx(f["podscope_ns"] / 1e9, abs=1e-9) and step.compute_s < 1e-3

    def test_podscope_roofline_when_asked(self, pod_2x2x4):
        step = self._step(self._overlap_module(10_000_000), pod_2x2x4, compute_source="podscope")
        assert step.compute_source == "podscope"
        ops = step.ops.to_pylist()
        assert [o["name"] for o in ops] == ["f"]
        assert ops[0]["xla_ns"] == round(10_000_000 / V5P.clock_hz * 1e9)
        assert step.compute_s == pytest.approx(ops[0]["podscope_ns"] / 1e9, abs=1e-9)

    def test_run_schedule_serialises_collectives_on_the_interconnect(self):
        from engine.hlo.cost import ScheduleBlock
        from engine.hlo.step import run_schedule

        # start A (3 s), start B (2 s), op (1 s), done A, done B: B waits for A's link, so ends at 5 s
        block = ScheduleBlock(1, (("start", 0), ("start", 1), ("op", 0), ("done", 0), ("done", 1)))
        elapsed, exposed = run_schedule(block, np.array([1.0]), np.array([3.0, 2.0]))
        assert elapsed == pytest.approx(5.0)
        assert exposed.tolist() == pytest.approx([2.0, 2.0])

    def test_collectives_on_different_links_run_at_once(self):
        from engine.hlo.cost import ScheduleBlock
        from engine.hlo.step import run_schedule

        # the same schedule, A on z's links and B on x's: B no longer waits for A, so both end by 3 s
        block = ScheduleBlock(1, (("start", 0), ("start", 1), ("op", 0), ("done", 0), ("done", 1)))
        z, x = frozenset({(2, 1), (2, -1)}), frozenset({(0, 1), (0, -1)})
        elapsed, exposed = run_schedule(block, np.array([1.0]), np.array([3.0, 2.0]), [z, x])
        assert elapsed == pytest.approx(3.0)
        assert exposed.tolist() == pytest.approx([2.0, 0.0])
        # one direction each way round the same ring: a full-duplex link carries both at once
        elapsed, _ = run_schedule(block, np.array([1.0]), np.array([3.0, 2.0]), [frozenset({(2, 1)}), frozenset({(2, -1)})])
        assert elapsed == pytest.approx(3.0)
        # sharing one direction of one axis, they queue as on one interconnect
        elapsed, _ = run_schedule(block, np.array([1.0]), np.array([3.0, 2.0]), [z, frozenset({(2, 1)})])
        assert elapsed == pytest.approx(5.0)

    def test_a_collective_pipelined_across_loop_trips(self):
        from engine.hlo.cost import ScheduleBlock
        from engine.hlo.step import run_schedule

        # each trip: 1 s of compute, wait for the transfer the previous trip started, 1 s more, start the next (1.5 s).
        # Trip 1 waits for nothing (2 s); trips 2-4 wait 0.5 s each (2.5 s); the last transfer drains at the end.
        body = ScheduleBlock(4, (("op", 0), ("done", 0), ("op", 0), ("start", 0)))
        elapsed, exposed = run_schedule(ScheduleBlock(1, (("loop", body),)), np.array([1.0]), np.array([1.5]))
        assert elapsed == pytest.approx(2.0 + 3 * 2.5 + 1.5)
        assert exposed.tolist() == pytest.approx([3 * 0.5 + 1.5])


def test_devices_per_core_split_the_chip():
    # a TPU7x module compiled per TensorCore (2 devices per chip): each core has half the chip's HBM bandwidth
    chip = load_catalog()["tpu7x"]
    pod = build_pod(chip, (2, 2, 1))
    text = _module("  %a = f32[1024] parameter(0)\n  ROOT %e = f32[1024] exponential(%a)", "a: f32[1024]", partitions=8)
    step = hlo_step_cost(describe_hlo(parse_hlo(text)), pod, CAL, InterconnectSection(), devices_per_chip=2)
    assert step.compute_s == pytest.approx(2 * 4096 / (chip.hbm_bytes_per_s * CAL.hbm_efficiency / 2))
