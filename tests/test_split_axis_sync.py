"""Gradient sync over a data mesh axis that splits a torus axis: link faults, one-way links, load.

The scenario: a v4 4x4x4 slice with ``tensor = 2``. Tensor takes z:2 (contiguous pairs), so
``data = 32`` lays out as z:2 strided by 2, then y:4 and x:4 (whole wraparound rings). Along z
the data groups are the lines {0, 2} and {1, 3}: the cut between z=0 and z=1 is crossed by
group {0, 2} only, the middle cut (z=1..2) by both, the cut z=2..3 by {1, 3} only, and the
wraparound link z=3..0 by neither. With ideal calibration (no latency, full bandwidth) and
G bytes of gradients per chip, the z reduce-scatter puts 1/2 G on each link a group uses, so
the middle cut carries G per phase: G / W, twice (reduce-scatter, all-gather).
"""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import build_pod, load_catalog
from engine.comm import mesh_collective_s, mesh_gradient_sync
from engine.pod.mesh import resolve_mesh
from engine.scenario import DegradedLink, InterconnectSection, LinkRef
from tests.conftest import TORUS_MLP_TOML, simulate_toml

W = load_catalog()["tpu-v4"].ici_link_bytes_per_s
PARAMS = 2048 * 8192 + 8192 + 8192 * 2048 + 2048
G = PARAMS / 2 * 2.0  # bf16 gradients (as the bf16 matmuls write them) of this chip's tensor shard (tensor = 2)

SCEN = TORUS_MLP_TOML + "[parallelism]\ntensor = 2\n"


def run(extra: str = "", cal=None, scen: str = SCEN):
    return simulate_toml(scen + extra, cal)


def degraded(a, b, frac):
    return f"[interconnect]\ndegraded_links = [{{a = {a}, b = {b}, bandwidth_frac = {frac}}}]\n"


def z_link(ll, za, zb):
    """The link_load row of the directed z link (0,0,za) -> (0,0,zb) (chip id = z on this slice)."""
    row = ll[(ll.src_chip == za) & (ll.dst_chip == zb) & (ll.axis == "z")]
    assert len(row) == 1
    return row.iloc[0]


class TestKnownAnswers:
    def test_the_data_axis_is_split(self, ideal_calibration):
        assert run(cal=ideal_calibration).facts.extra["mesh"] == "data=32 on z:2*y:4*x:4, fsdp=1, tensor=2 on z:2"

    def test_healthy_sync_is_the_mesh_estimate_and_its_links_are_loaded(self, ideal_calibration):
        r = run(cal=ideal_calibration)
        f = r.facts.extra
        z = 2 * G / W  # middle cut: G per phase, two phases
        y = 2 * (3 / 4 * (G / 2) / 2) / W  # bidirectional ring of 4 on the half shard
        x = 2 * (3 / 4 * (G / 8) / 2) / W
        assert f["grad_allreduce_s"] == pytest.approx(z + y + x, rel=1e-12)
        assert f["grad_allreduce_exposed_s"] == f["grad_allreduce_s"] and f["grad_allreduce_overlapped_s"] == 0.0
        ll = r.trace.extra["link_load"].to_pandas()
        assert len(ll) == 64 * 6
        assert z_link(ll, 1, 2).bytes_per_step == pytest.approx(2 * G)  # both groups
        assert z_link(ll, 2, 1).bytes_per_step == pytest.approx(2 * G)  # out and back
        assert z_link(ll, 0, 1).bytes_per_step == pytest.approx(G)  # group {0, 2} only
        assert z_link(ll, 3, 0).bytes_per_step == 0.0  # the wraparound: no group uses it
        assert ll[ll.axis == "y"].bytes_per_step.to_numpy() == pytest.approx(np.full(128, 2 * 3 / 16 * G))

    @pytest.mark.parametrize("frac", [0.5, 0.2])
    def test_a_degraded_link_on_the_busiest_cut_slows_the_sync_by_hand(self, ideal_calibration, frac):
        healthy = run(cal=ideal_calibration).facts.extra["grad_allreduce_s"]
        r = run(degraded([0, 0, 1], [0, 0, 2], frac), cal=ideal_calibration)
        # the middle cut's G per phase now moves at frac W: 2 phases x G/W x (1/frac - 1) more
        assert r.facts.extra["grad_allreduce_s"] - healthy == pytest.approx(2 * G / W * (1 / frac - 1), rel=1e-9)
        assert z_link(r.trace.extra["link_load"].to_pandas(), 1, 2).bandwidth_frac == frac

    def test_an_end_cut_carries_one_group_so_half_bandwidth_is_enough(self, ideal_calibration):
        healthy = run(cal=ideal_calibration).facts.extra["grad_allreduce_s"]
        half = run(degraded([0, 0, 0], [0, 0, 1], 0.5), cal=ideal_calibration).facts.extra["grad_allreduce_s"]
        assert half == pytest.approx(healthy, rel=1e-12)
        quarter = run(degraded([0, 0, 0], [0, 0, 1], 0.25), cal=ideal_calibration).facts.extra["grad_allreduce_s"]
        # G/2 per phase at W/4 takes 2 G/W, one G/W more than the middle cut's bound, twice
        assert quarter - healthy == pytest.approx(2 * G / W, rel=1e-9)

    def test_a_degraded_wraparound_link_the_groups_never_use_costs_nothing(self, ideal_calibration):
        healthy = run(cal=ideal_calibration).facts.extra["grad_allreduce_s"]
        assert run(degraded([0, 0, 3], [0, 0, 0], 0.1), cal=ideal_calibration).facts.extra["grad_allreduce_s"] == healthy

    def test_a_failed_wraparound_link_the_groups_never_use_costs_nothing(self):
        healthy = run().facts.extra["grad_allreduce_s"]  # real calibration: hop latency counts too
        assert run("[interconnect]\nfailed_links = [{a = [0, 0, 3], b = [0, 0, 0]}]\n").facts.extra["grad_allreduce_s"] == healthy

    def test_a_failed_link_detours_and_slows_the_step(self):
        healthy = run()
        broken = run("[interconnect]\nfailed_links = [{a = [0, 0, 1], b = [0, 0, 2]}]\n")
        assert broken.facts.extra["grad_allreduce_s"] > healthy.facts.extra["grad_allreduce_s"]
        e, h = broken.trace.events.to_pandas(), healthy.trace.events.to_pandas()
        assert e[e.kind == "collective"].dur_ns.sum() > h[h.kind == "collective"].dur_ns.sum()
        ll = broken.trace.extra["link_load"].to_pandas()
        dead = z_link(ll, 1, 2)
        assert dead.bytes_per_step == 0.0 and dead.bandwidth_frac == 0.0
        assert ll.bytes_per_step.sum() > healthy.trace.extra["link_load"].column("bytes_per_step").to_numpy().sum()

    def test_a_detour_lengthens_only_the_phases_whose_rings_cross_it(self, ideal_calibration):
        # The middle z link's detour takes 3 hops for 1; of the six phases (RS z, y, x; AG x, y, z)
        # only the two on z cross it. Differencing 1 us hops against none isolates the latency.
        from dataclasses import replace

        slow = replace(ideal_calibration, ici_hop_latency_s=1e-6)
        broken = "[interconnect]\nfailed_links = [{a = [0, 0, 1], b = [0, 0, 2]}]\n"

        def added(cal):
            return run(broken, cal=cal).facts.extra["grad_allreduce_s"] - run(cal=cal).facts.extra["grad_allreduce_s"]

        assert added(slow) - added(ideal_calibration) == pytest.approx(2 * 2 * 1e-6, rel=1e-6)

    def test_one_way_links_double_the_whole_rings_bandwidth_time(self, ideal_calibration):
        healthy = run(cal=ideal_calibration).facts.extra["grad_allreduce_s"]
        one_way = run("[interconnect]\nunidirectional = true\n", cal=ideal_calibration).facts.extra["grad_allreduce_s"]
        y = 2 * (3 / 4 * (G / 2) / 2) / W
        x = 2 * (3 / 4 * (G / 8) / 2) / W
        assert one_way - healthy == pytest.approx(y + x, rel=1e-9)  # the z lines already go out and back

    def test_overlap_hides_part_of_it(self):
        plain = run().facts.extra
        over = run("[interconnect]\noverlap = true\nbuckets = 8\n")
        f = over.facts.extra
        assert f["grad_allreduce_overlapped_s"] > 0
        assert f["grad_allreduce_exposed_s"] < plain["grad_allreduce_exposed_s"]
        assert over.trace.extra["collective_overlap"].num_rows == 3

    def test_multi_slice_faults_in_one_slice_and_dcn_rows(self, ideal_calibration):
        two = SCEN.replace("[pod]", "[pod]\nslices = 2").replace("1024", "2048")
        healthy = run(cal=ideal_calibration, scen=two)
        r = run(degraded([0, 0, 1], [0, 0, 2], 0.5).replace("bandwidth_frac", "slice = 1, bandwidth_frac"),
                cal=ideal_calibration, scen=two)  # fmt: skip
        # the slowest slice sets the time
        assert r.facts.extra["grad_allreduce_s"] - healthy.facts.extra["grad_allreduce_s"] == pytest.approx(2 * G / W, rel=1e-9)
        ll = r.trace.extra["link_load"].to_pandas()
        assert len(ll) == 2 * 64 * 6 + r.facts.hosts
        assert (ll[ll.axis == "dcn"].bytes_per_step > 0).all()
        assert z_link(ll, 1, 2).bandwidth_frac == 1.0  # slice 0 is healthy
        assert ll[(ll.src_chip == 64 + 1) & (ll.dst_chip == 64 + 2)].bandwidth_frac.tolist() == [0.5]


NEIGHBOURS = [((0, 0, z), (0, 0, (z + 1) % 8)) for z in range(8)] + [((0, y, 1), (0, (y + 1) % 4, 1)) for y in range(4)]


@settings(max_examples=25, deadline=None)
@given(
    link=st.sampled_from(NEIGHBOURS),
    frac=st.floats(0.05, 1.0),
    fail=st.booleans(),
    uni=st.booleans(),
    tensor=st.sampled_from([2, 4, 8]),
)
def test_a_fault_never_speeds_the_split_sync(link, frac, fail, uni, tensor):
    """On a 4x4x8 slice (tensor splits z), a degraded or failed link never makes the sync faster."""
    pod = build_pod(load_catalog()["tpu-v4"], (4, 4, 8), 1)
    from engine.scenario.calibration import load_calibration

    cal = load_calibration()
    mesh = resolve_mesh(pod.slice.shape, pod.slice.wrap, {"data": 128 // tensor, "fsdp": 1, "tensor": tensor})
    data = mesh["data"]
    link_s = pod.chip.ici_link_bytes_per_s * cal.ici_efficiency
    est = mesh_collective_s("all-reduce", 1e8, data, link_s, cal.ici_hop_latency_s)
    a, b = link
    faults = InterconnectSection(
        unidirectional=uni,
        degraded_links=[] if fail else [DegradedLink(a=list(a), b=list(b), bandwidth_frac=frac)],
        failed_links=[LinkRef(a=list(a), b=list(b))] if fail else [],
    )
    base = mesh_gradient_sync(pod, 1e8, cal, InterconnectSection(unidirectional=uni), 0.0, data.segments, est, data.size)
    hurt = mesh_gradient_sync(pod, 1e8, cal, faults, 0.0, data.segments, est, data.size)
    assert hurt.total_s >= base.total_s * (1 - 1e-12)
    if not uni:
        assert base.total_s == est  # healthy, two-way links: exactly the mesh model's estimate
