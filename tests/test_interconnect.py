"""Collective plans, per-link loads, faults, overlap and the [interconnect] section: known answers by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import ScenarioError, TopologyError, build_pod, load_catalog, load_scenario, simulate
from engine.scenario.calibration import Calibration
from engine.comm import collective_time, ring_schedule
from engine.comm import collective_on_pod, overlap_exposed_s
from engine.comm import Fabric
from engine.scenario import LinkRef
from engine.pod.topology import Slice, is_supported_shape
from tests.conftest import TORUS_MLP_TOML

CAT = load_catalog()
W = 1e11  # one link, one way
A = 1e-6  # hop latency


def t(op, v, shape, wrap, **kw):
    link = kw.pop("link", W)
    alpha = kw.pop("alpha", A)
    return collective_time(ring_schedule(op, v, shape, wrap, **kw), link, alpha).time_s


class TestOneRing:
    def test_all_gather_and_reduce_scatter_on_a_ring(self):
        # 8 chips with wraparound: each direction carries half of 7/8 of 1 GB; 4 hops
        assert t("all-gather", 1e9, (8,), (True,)) == pytest.approx(7 / 8 * 1e9 / 2 / W + 4 * A)
        assert t("reduce-scatter", 1e9, (8,), (True,)) == pytest.approx(7 / 8 * 1e9 / 2 / W + 4 * A)

    def test_line_and_unidirectional_ring_pay_one_direction(self):
        assert t("all-gather", 1e9, (8,), (False,)) == pytest.approx(7 / 8 * 1e9 / W + 7 * A)
        assert t("all-gather", 1e9, (8,), (True,), unidirectional=True) == pytest.approx(7 / 8 * 1e9 / W + 7 * A)

    def test_all_reduce_is_reduce_scatter_then_all_gather(self):
        assert t("all-reduce", 1e9, (8,), (True,)) == pytest.approx(2 * (7 / 8 * 1e9 / 2 / W + 4 * A))

    def test_all_to_all(self):
        # even ring of 8: ring distances 1+2+3+4+3+2+1 = 16; per link V*16/(2*8*8) = V/8; max distance 4
        assert t("all-to-all", 1e9, (8,), (True,)) == pytest.approx(1e9 / 8 / W + 4 * A)
        # line of 8: the middle link carries 4*4 pair shares of V/64 each way
        assert t("all-to-all", 1e9, (8,), (False,)) == pytest.approx(16 * 1e9 / 64 / W + 7 * A)

    def test_single_chip_or_empty_costs_nothing(self):
        assert t("all-reduce", 1e9, (1,), (False,)) == 0.0
        assert t("all-reduce", 0.0, (8,), (True,)) == 0.0


class TestTorus:
    def test_2d_sequential_shrinks_the_shard(self):
        # 4x4 torus, 1.6 GB: RS x on 1.6 GB, RS y on 0.4 GB, then back; 2 hops per phase
        rs_x = 3 / 4 * 1.6e9 / 2 / W + 2 * A
        rs_y = 3 / 4 * 0.4e9 / 2 / W + 2 * A
        assert t("all-reduce", 1.6e9, (4, 4), (True, True), schedule="sequential") == pytest.approx(2 * (rs_x + rs_y))

    def test_2d_simultaneous_uses_both_axes(self):
        # two 0.8 GB pieces, one starting on x, one on y; each stage has equal phases
        s0 = 3 / 4 * 0.8e9 / 2 / W + 2 * A
        s1 = 3 / 4 * 0.2e9 / 2 / W + 2 * A
        assert t("all-reduce", 1.6e9, (4, 4), (True, True)) == pytest.approx(2 * (s0 + s1))

    def test_2d_mesh_without_wraparound(self):
        rs_x = 3 / 4 * 1.6e9 / W + 3 * A
        rs_y = 3 / 4 * 0.4e9 / W + 3 * A
        assert t("all-reduce", 1.6e9, (4, 4), (False, False), schedule="sequential") == pytest.approx(2 * (rs_x + rs_y))

    def test_3d_all_gather_over_one_axis_of_a_cube(self):
        # gather over z only: each (x, y) ring of 4 gathers the whole 1 GB array
        assert t("all-gather", 1e9, (4, 4, 4), (True,) * 3, axes=(2,)) == pytest.approx(3 / 4 * 1e9 / 2 / W + 2 * A)

    def test_3d_simultaneous_all_gather_is_v_over_w_times_axes(self):
        # three pieces of V/3; piece chain sums to (V/3)(1 - 1/64)/(2W); hops 2 per stage, 3 stages
        v = 3e9
        expect = (v / 3) * (1 - 1 / 64) / (2 * W) + 3 * 2 * A
        assert t("all-gather", v, (4, 4, 4), (True,) * 3) == pytest.approx(expect)

    def test_3d_sequential_with_mesh_axes(self):
        v = 6.4e9
        expect = 2 * (3 / 4 * v / W + 3 * A + 3 / 4 * v / 4 / W + 3 * A + 1 / 2 * v / 16 / W + 1 * A)
        assert t("all-reduce", v, (4, 4, 2), (False, False, False), schedule="sequential") == pytest.approx(expect)

    def test_bad_op_schedule_or_axes(self):
        with pytest.raises(TopologyError, match="valid"):
            ring_schedule("broadcast", 1.0, (4,), (True,))
        with pytest.raises(TopologyError, match="valid"):
            ring_schedule("all-reduce", 1.0, (4,), (True,), schedule="fastest")
        with pytest.raises(TopologyError, match="distinct"):
            ring_schedule("all-reduce", 1.0, (4,), (True,), axes=(1,))


class TestDcn:
    def test_multi_slice_adds_the_dcn_all_reduce_of_the_shard(self):
        plan = ring_schedule("all-reduce", 1.6e9, (4, 4), (True, True))
        one = collective_time(plan, W, 0.0)
        two = collective_time(plan, W, 0.0, slices=2, chips_per_host=4, dcn_host_bytes_per_s=25e9)
        # shard 1.6e9/16 = 1e8 per chip, 4 chips per host, ring of 2: 2*(1/2)*4e8 / 25e9
        assert two.dcn_time_s == pytest.approx(4e8 / 25e9)
        assert two.time_s == pytest.approx(one.time_s + 4e8 / 25e9)
        assert two.participants == 32


class TestLinkLoad:
    def test_healthy_loads_match_the_closed_form(self):
        sl = Slice((4, 4, 4), (True,) * 3)
        f = Fabric(sl, W)
        assert f.n_links == 64 * 6
        plan = ring_schedule("all-reduce", 1.2e9, sl.shape, sl.wrap)
        loads = f.stage_loads(plan)
        # stage 0: three 0.4 GB pieces, one per axis, each link carries 3/4 * 0.4 GB / 2
        assert np.allclose(loads[0], 0.15e9)
        bw = f.stage_bw_time_s(plan, loads)
        assert sum(bw) == pytest.approx(collective_time(plan, W, 0.0).time_s)

    def test_line_all_to_all_loads_the_middle_most(self):
        f = Fabric(Slice((4,), (False,)), W)
        plan = ring_schedule("all-to-all", 1.6e9, (4,), (False,))
        loads = f.stage_loads(plan)[0]
        by_pos = {int(p): loads[i] for i, p in enumerate(f.links["pos"])}
        # cut i carries (i+1)(n-i-1) pair shares of V/16 each way: 3, 4, 3
        assert by_pos == {0: pytest.approx(0.3e9), 1: pytest.approx(0.4e9), 2: pytest.approx(0.3e9)}

    def test_failed_link_detours_and_slows(self):
        sl = Slice((4, 4), (True, True))
        plan = ring_schedule("all-reduce", 1.6e9, sl.shape, sl.wrap, schedule="sequential")
        healthy = Fabric(sl, W)
        broken = Fabric(sl, W, failed=(((0, 0), (1, 0)),))
        lh, lb = healthy.stage_loads(plan), broken.stage_loads(plan)
        # the failed link carries nothing; total link-bytes grow by 2 extra hops per direction
        dead = broken._link_ids((0, 0), (1, 0))
        assert (lb[:, dead] == 0).all()
        assert lb.sum() == pytest.approx(lh.sum() + 2 * lh[:, dead].sum())
        # the detour lands on a busy x link: the stage on x takes twice as long
        assert broken.stage_bw_time_s(plan)[0] == pytest.approx(2 * healthy.stage_bw_time_s(plan)[0])
        assert broken.detour_hops(broken.stage_loads(plan, reroute=False)).max() == 2  # 3 hops instead of 1

    def test_degraded_link_bounds_its_stage(self):
        sl = Slice((8,), (True,))
        plan = ring_schedule("all-gather", 1e9, sl.shape, sl.wrap)
        slow = Fabric(sl, W, degraded={((0,), (1,)): 0.25})
        assert slow.stage_bw_time_s(plan)[0] == pytest.approx(4 * Fabric(sl, W).stage_bw_time_s(plan)[0])

    def test_disconnecting_failures_are_refused(self):
        f = Fabric(Slice((4,), (False,)), W, failed=(((1,), (2,)),))
        with pytest.raises(TopologyError, match="detour"):
            f.stage_loads(ring_schedule("all-gather", 1e9, (4,), (False,)))

    def test_collective_on_pod_with_a_failed_link(self):
        pod = build_pod(CAT["tpu-v4"], (4, 4, 4))
        cal = Calibration(ici_efficiency=1.0, ici_hop_latency_s=0.0)
        ok, _, _ = collective_on_pod("all-reduce", 1e9, pod, cal)
        bad, fabrics, loads = collective_on_pod("all-reduce", 1e9, pod, cal, failed=[LinkRef(a=[0, 0, 0], b=[0, 0, 1])])
        assert bad.time_s > ok.time_s
        assert set(fabrics) == {-1, 0}


@settings(max_examples=25, deadline=None)
@given(
    frac=st.floats(0.01, 1.0),
    link=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 1)),
    op=st.sampled_from(["all-reduce", "all-gather", "all-to-all"]),
    fail=st.booleans(),
)
def test_a_degraded_or_failed_link_never_speeds_a_collective(frac, link, op, fail):
    sl = Slice((4, 4), (True, True))
    x, y, axis = link
    a = (x, y)
    b = ((x + 1) % 4, y) if axis == 0 else (x, (y + 1) % 4)
    plan = ring_schedule(op, 1e9, sl.shape, sl.wrap)
    healthy = sum(Fabric(sl, W).stage_bw_time_s(plan))
    faulty = Fabric(sl, W, failed=((a, b),)) if fail else Fabric(sl, W, degraded={(a, b): frac})
    assert sum(faulty.stage_bw_time_s(plan)) >= healthy * (1 - 1e-12)


class TestOverlap:
    def test_by_hand(self):
        # 4 buckets of 1 ms each (4 ms bandwidth, no latency) under an 8 ms backward: only the last is exposed
        assert overlap_exposed_s(4e-3, 0.0, 8e-3, 4) == pytest.approx((1e-3, 3e-3))
        # a 2 ms backward cannot hide much: 4 ms - 3/4 * 2 ms = 2.5 ms exposed
        assert overlap_exposed_s(4e-3, 0.0, 2e-3, 4) == pytest.approx((2.5e-3, 1.5e-3))
        # one bucket: nothing overlaps
        assert overlap_exposed_s(4e-3, 1e-4, 8e-3, 1) == pytest.approx((4.1e-3, 0.0))

    @given(bw=st.floats(0, 1), lat=st.floats(0, 1e-3), bwd=st.floats(0, 1), b=st.integers(1, 64))
    def test_exposed_plus_overlapped_is_the_whole(self, bw, lat, bwd, b):
        exposed, overlapped = overlap_exposed_s(bw, lat, bwd, b)
        assert exposed + overlapped == pytest.approx(bw + b * lat, abs=1e-12)
        assert exposed >= bw / b + lat - 1e-15 and overlapped >= 0


SHAPES = st.sampled_from([((8,), (True,)), ((8,), (False,)), ((4, 4), (True, True)), ((4, 8), (False, True)), ((4, 4, 4), (True,) * 3), ((2, 4, 4), (False, True, True))])


@settings(max_examples=60, deadline=None)
@given(
    shape=SHAPES,
    op=st.sampled_from(["all-reduce", "reduce-scatter", "all-gather", "all-to-all"]),
    sched=st.sampled_from(["sequential", "simultaneous"]),
    v=st.floats(1e3, 1e11),
    factor=st.floats(1.0, 10.0),
    uni=st.booleans(),
)
def test_more_bandwidth_never_slower_larger_never_faster(shape, op, sched, v, factor, uni):
    sizes, wrap = shape
    base = t(op, v, sizes, wrap, schedule=sched, unidirectional=uni)
    assert t(op, v, sizes, wrap, schedule=sched, unidirectional=uni, link=W * factor) <= base * (1 + 1e-12)
    assert t(op, v * factor, sizes, wrap, schedule=sched, unidirectional=uni) >= base * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(shape=SHAPES, sched=st.sampled_from(["sequential", "simultaneous"]), v=st.floats(1e3, 1e11), uni=st.booleans())
def test_all_reduce_is_reduce_scatter_plus_all_gather(shape, sched, v, uni):
    sizes, wrap = shape
    ar = t("all-reduce", v, sizes, wrap, schedule=sched, unidirectional=uni)
    rs_ag = t("reduce-scatter", v, sizes, wrap, schedule=sched, unidirectional=uni) + t(
        "all-gather", v, sizes, wrap, schedule=sched, unidirectional=uni
    )
    assert ar == pytest.approx(rs_ag, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(shape=SHAPES, v=st.floats(1e6, 1e11))
def test_simultaneous_never_slower_than_sequential_on_bandwidth(shape, v):
    sizes, wrap = shape
    seq = t("all-reduce", v, sizes, wrap, schedule="sequential", alpha=0.0)
    sim = t("all-reduce", v, sizes, wrap, schedule="simultaneous", alpha=0.0)
    assert sim <= seq * (1 + 1e-12)


class TestShapes:
    @pytest.mark.parametrize(
        "chip, shape, ok",
        [("tpu-v4", (4, 4, 8), True), ("tpu-v4", (2, 2, 1), True), ("tpu-v4", (4, 4, 6), False), ("tpu-v4", (3, 3, 3), False),
         ("tpu-v5e", (8, 16), True), ("tpu-v5e", (4, 16), False), ("tpu-v3", (32, 32), True), ("tpu-v3", (2, 8), False)],
    )  # fmt: skip
    def test_supported(self, chip, shape, ok):
        assert is_supported_shape(CAT[chip], shape) is ok

    def test_unsupported_shape_lists_the_supported_ones(self):
        with pytest.raises(TopologyError, match="supported shapes: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"):
            build_pod(CAT["tpu-v5e"], (4, 16))


SCEN = TORUS_MLP_TOML.replace("steps = 3", "steps = 4")  # the overlap table below has a row per step


class TestScenario:
    def test_bad_keys_and_faults_name_their_dotted_key(self, write_toml):
        with pytest.raises(ScenarioError, match=r"interconnect\.schedul"):
            load_scenario(write_toml(SCEN + "[interconnect]\nschedul = 'sequential'\n"))
        with pytest.raises(ScenarioError, match=r"interconnect\.failed_links\.0: .*not neighbours"):
            load_scenario(write_toml(SCEN + "[interconnect]\nfailed_links = [{a = [0, 0, 0], b = [2, 0, 0]}]\n"))
        with pytest.raises(ScenarioError, match=r"interconnect\.degraded_links\.0\.bandwidth_frac"):
            load_scenario(write_toml(SCEN + "[interconnect]\ndegraded_links = [{a = [0, 0, 0], b = [1, 0, 0], bandwidth_frac = 0}]\n"))

    def test_unsupported_topology_is_reported_with_the_list(self, write_toml):
        with pytest.raises(ScenarioError, match=r"pod\.topology.*supported: 2x2x1"):
            load_scenario(write_toml(SCEN.replace("4x4x4", "4x4x6").replace("1024", "96")))

    def _collective_ns(self, r):
        e = r.trace.events
        mask = np.asarray(e.column("kind").to_pylist()) == "collective"
        return int(e.column("dur_ns").to_numpy()[mask].max())

    def test_link_load_table_and_faults_in_a_run(self, write_toml):
        healthy = simulate(load_scenario(write_toml(SCEN)))
        ll = healthy.trace.extra["link_load"]
        assert ll.num_rows == 64 * 6
        assert set(ll.column("axis").to_pylist()) == {"x", "y", "z"}
        assert healthy.facts.extra["grad_allreduce_overlapped_s"] == 0.0
        broken = simulate(load_scenario(write_toml(SCEN + "[interconnect]\nfailed_links = [{a = [0, 0, 0], b = [1, 0, 0]}]\n")))
        assert self._collective_ns(broken) > self._collective_ns(healthy)
        bl = broken.trace.extra["link_load"].to_pandas()
        dead = bl[(bl.src_chip == 0) & (bl.dst_chip == 16)]
        assert dead.bytes_per_step.tolist() == [0.0] and dead.bandwidth_frac.tolist() == [0.0]
        assert bl.bytes_per_step.max() > ll.column("bytes_per_step").to_numpy().max()  # the detour

    def test_overlap_hides_part_of_the_all_reduce_and_records_it(self, write_toml):
        plain = simulate(load_scenario(write_toml(SCEN)))
        over = simulate(load_scenario(write_toml(SCEN + "[interconnect]\noverlap = true\nbuckets = 8\n")))
        f = over.facts.extra
        assert f["grad_allreduce_overlapped_s"] > 0
        assert f["grad_allreduce_exposed_s"] < plain.facts.extra["grad_allreduce_exposed_s"]
        assert self._collective_ns(over) < self._collective_ns(plain)
        ov = over.trace.extra["collective_overlap"]
        assert ov.num_rows == 4 and (ov.column("overlapped_ns").to_numpy() > 0).all()

    def test_multi_slice_adds_dcn_rows(self, write_toml):
        r = simulate(load_scenario(write_toml(SCEN.replace("[pod]", "[pod]\nslices = 2").replace("1024", "2048"))))
        ll = r.trace.extra["link_load"].to_pandas()
        dcn = ll[ll.axis == "dcn"]
        assert len(dcn) == r.facts.hosts and (dcn.bytes_per_step > 0).all()
        assert len(ll) == 2 * 64 * 6 + r.facts.hosts


def test_link_load_is_stored_with_the_run(write_toml, db):
    from profiler.store import write_run

    r = simulate(load_scenario(write_toml(SCEN)))
    run_id = write_run(db, r)
    with db.read() as con:
        n, util = con.execute("SELECT count(*), max(utilization) FROM extra_link_load WHERE run_id = ?", [run_id]).fetchone()
    assert n == 384 and 0 < util <= 1
    assert math.isfinite(util)


@pytest.mark.parametrize(("weight_dtype", "reduce_dtype", "grad_bytes"),
                         [("fp32", "compute", 2), ("fp32", "weights", 4), ("bf16", "compute", 2), ("bf16", "weights", 2)])
def test_run_charges_the_hand_computed_all_reduce(write_toml, ideal_calibration, weight_dtype, reduce_dtype, grad_bytes):
    """Ideal links, no latency: the collective event is the simultaneous ring all-reduce worked by hand, on bf16
    gradients as their matmuls write them, or in the stored weights' dtype when the program reduces them so."""
    text = SCEN.replace("steps = 4", f"steps = 4\nweight_dtype = '{weight_dtype}'\ngradient_reduce_dtype = '{reduce_dtype}'")
    r = simulate(load_scenario(write_toml(text)), calibration=ideal_calibration)
    params = 2048 * 8192 + 8192 + 8192 * 2048 + 2048
    v = params * grad_bytes
    w = CAT["tpu-v4"].ici_link_bytes_per_s
    s0 = 3 / 4 * (v / 3) / 2 / w  # stage 0: a third of the array on each axis, both directions
    expect_s = 2 * s0 * (1 + 1 / 4 + 1 / 16)  # shard shrinks 4x per stage; reduce-scatter then all-gather
    assert r.facts.extra["grad_allreduce_s"] == pytest.approx(expect_s)
    e = r.trace.events.to_pandas()
    assert (e[e.kind == "collective"].dur_ns == round(expect_s * 1e9)).all()
    # every axis hosts exactly one piece per stage, so every directed link carries the same bytes
    ll = r.trace.extra["link_load"].column("bytes_per_step").to_numpy()
    assert ll == pytest.approx(np.full(384, 2 * s0 * (1 + 1 / 4 + 1 / 16) * w))
