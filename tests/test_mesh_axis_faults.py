"""Link faults on the per-layer collectives: FSDP all-gathers / reduce-scatters and TP all-reduces.

The scenarios: a v4 4x4x4 slice (every axis a wraparound ring of 4) with an MLP
2048 -> 8192 -> 2048, so the per-layer table has two units. With ideal calibration (no latency,
full bandwidth) and an S-byte array, a gather over a bidirectional ring of 4 puts
``3/4 * S / 2`` on every directed link of that ring: ``3 S / (8 W)``. One link of the ring at
half bandwidth makes that link take ``3 S / (4 W)``, and the slowest ring sets the pace of a
synchronous collective, so the whole gather doubles. An all-reduce is a reduce-scatter and an
all-gather, each slowed alike.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import load_catalog
from tests.conftest import TORUS_MLP_TOML, simulate_toml

W = load_catalog()["tpu-v4"].ici_link_bytes_per_s

BASE = TORUS_MLP_TOML
FSDP_X = '[parallelism]\nfsdp = 4\nmapping = { fsdp = ["x"], data = ["y", "z"] }\n'
TP_Z = '[parallelism]\ntensor = 4\nmapping = { tensor = ["z"], data = ["x", "y"] }\n'


def run(par: str, faults: str = "", cal=None, scen: str = BASE):
    return simulate_toml(scen + par + faults, cal)


def degraded(a, b, frac):
    return f"[interconnect]\ndegraded_links = [{{a = {a}, b = {b}, bandwidth_frac = {frac}}}]\n"


def failed(a, b):
    return f"[interconnect]\nfailed_links = [{{a = {a}, b = {b}}}]\n"


def rows(r, axis: str):
    t = r.trace.extra["layer_collectives"].to_pandas()
    return t[t.mesh_axis == axis].reset_index(drop=True)


def collective_ns(r) -> int:
    e = r.trace.events.to_pandas()
    return int(e[e.kind == "collective"].dur_ns.sum())


class TestFsdp:
    def test_healthy_gather_by_hand(self, ideal_calibration):
        t = rows(run(FSDP_X, cal=ideal_calibration), "fsdp")
        assert len(t) == 6  # two units: forward gather, backward gather, reduce-scatter
        assert t.time_ns.to_numpy() == pytest.approx(3 / 8 * t.bytes.to_numpy() / W * 1e9, abs=1)

    def test_half_bandwidth_link_on_the_fsdp_ring_doubles_every_gather_and_reduce_scatter(self, ideal_calibration):
        healthy = rows(run(FSDP_X, cal=ideal_calibration), "fsdp")
        slow = rows(run(FSDP_X, degraded([0, 0, 0], [1, 0, 0], 0.5), cal=ideal_calibration), "fsdp")
        assert (slow.bytes == healthy.bytes).all()
        assert slow.time_ns.to_numpy() == pytest.approx(3 / 4 * slow.bytes.to_numpy() / W * 1e9, abs=1)
        assert slow.time_ns.to_numpy() == pytest.approx(2 * healthy.time_ns.to_numpy(), abs=2)

    def test_a_fault_on_an_axis_fsdp_does_not_use_leaves_it_alone(self, ideal_calibration):
        healthy = rows(run(FSDP_X, cal=ideal_calibration), "fsdp")
        slow = rows(run(FSDP_X, degraded([0, 0, 0], [0, 0, 1], 0.1), cal=ideal_calibration), "fsdp")
        assert slow.time_ns.tolist() == healthy.time_ns.tolist()

    def test_a_failed_link_detours_and_adds_its_hops(self, ideal_calibration):
        # Hop latency 1 us: a healthy gather over the ring of 4 pays ceil(3/2) = 2 hops. The failed x
        # link's 3-hop detour lands on the neighbouring x ring's link in the same direction, which
        # then carries two rings' bytes (3 S / (4 W)), and the ring is 2 hops longer.
        cal = replace(ideal_calibration, ici_hop_latency_s=1e-6)
        healthy = rows(run(FSDP_X, cal=cal), "fsdp")
        broken = rows(run(FSDP_X, failed([0, 0, 0], [1, 0, 0]), cal=cal), "fsdp")
        s = broken.bytes.to_numpy()
        assert healthy.time_ns.to_numpy() == pytest.approx((3 / 8 * s / W + 2e-6) * 1e9, abs=1)
        assert broken.time_ns.to_numpy() == pytest.approx((3 / 4 * s / W + 4e-6) * 1e9, abs=1)

    def test_the_step_pays_what_it_cannot_hide(self, ideal_calibration):
        # the first gather of each pass and the last reduce-scatter are exposed whatever the compute
        healthy = run(FSDP_X, cal=ideal_calibration)
        slow = run(FSDP_X, degraded([0, 1, 2], [1, 1, 2], 0.5), cal=ideal_calibration)
        assert collective_ns(slow) > collective_ns(healthy)
        assert slow.facts.extra["grad_allreduce_s"] == healthy.facts.extra["grad_allreduce_s"]  # data is on y, z

    def test_strided_fsdp_lines_never_use_the_wraparound(self, ideal_calibration):
        # tensor = 2 takes z:2, fsdp = 2 strides over it on z: lines {0, 2} and {1, 3}, never 3..0
        par = '[parallelism]\ntensor = 2\nfsdp = 2\nmapping = { tensor = ["z:2"], fsdp = ["z:2"], data = ["x", "y"] }\n'
        healthy = rows(run(par, cal=ideal_calibration), "fsdp")
        wrap = rows(run(par, degraded([0, 0, 3], [0, 0, 0], 0.1), cal=ideal_calibration), "fsdp")
        assert wrap.time_ns.tolist() == healthy.time_ns.tolist()
        # the middle cut carries both lines: at half bandwidth, each phase there takes twice as long
        mid = rows(run(par, degraded([0, 0, 1], [0, 0, 2], 0.5), cal=ideal_calibration), "fsdp")
        assert mid.time_ns.to_numpy() == pytest.approx(2 * healthy.time_ns.to_numpy(), abs=2)


class TestTensor:
    def test_quarter_bandwidth_link_on_the_tensor_ring_quadruples_its_all_reduces(self, ideal_calibration):
        healthy = rows(run(TP_Z, cal=ideal_calibration), "tensor")
        slow = rows(run(TP_Z, degraded([2, 3, 0], [2, 3, 1], 0.25), cal=ideal_calibration), "tensor")
        assert len(healthy) == 2 * 2  # one all-reduce per GEMM output, forward and backward
        # all-reduce = reduce-scatter + all-gather, each 3/4 * A / 2 per link of the ring of 4
        a = healthy.bytes.to_numpy()
        assert healthy.time_ns.to_numpy() == pytest.approx(2 * 3 / 8 * a / W * 1e9, abs=1)
        assert slow.time_ns.to_numpy() == pytest.approx(4 * 2 * 3 / 8 * a / W * 1e9, abs=2)
        assert collective_ns(run(TP_Z, degraded([2, 3, 0], [2, 3, 1], 0.25), cal=ideal_calibration)) > collective_ns(
            run(TP_Z, cal=ideal_calibration)
        )

    def test_a_fault_in_another_slice_slows_every_slice(self, ideal_calibration):
        two = BASE.replace("[pod]", "[pod]\nslices = 2").replace("1024", "2048")
        healthy = rows(run(TP_Z, cal=ideal_calibration, scen=two), "tensor")
        f = degraded([0, 0, 0], [0, 0, 1], 0.5).replace("bandwidth_frac", "slice = 1, bandwidth_frac")
        slow = rows(run(TP_Z, f, cal=ideal_calibration, scen=two), "tensor")
        assert slow.time_ns.to_numpy() == pytest.approx(2 * healthy.time_ns.to_numpy(), abs=2)


# Meshes on the 4x4x4 slice: (fsdp, tensor), default layout (tensor innermost, then fsdp, data).
MESHES = [(4, 1), (1, 4), (4, 4), (2, 2), (16, 1), (2, 8), (1, 2), (8, 2)]
AXES = [(1, 0, 0), (0, 1, 0), (0, 0, 1)]


@settings(max_examples=20, deadline=None)
@given(
    mesh=st.sampled_from(MESHES),
    chip=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    step=st.sampled_from(AXES),
    frac=st.floats(0.05, 1.0),
    fail=st.booleans(),
)
def test_a_fault_never_makes_any_collective_faster(mesh, chip, step, frac, fail):
    """Every per-layer collective, the gradient sync and the step's collective time: never faster."""
    fsdp, tensor = mesh
    par = f"[parallelism]\nfsdp = {fsdp}\ntensor = {tensor}\n"
    a = list(chip)
    b = [(c + d) % 4 for c, d in zip(chip, step)]
    healthy = run(par)
    hurt = run(par, failed(a, b) if fail else degraded(a, b, frac))
    h, f = healthy.trace.extra["layer_collectives"].to_pandas(), hurt.trace.extra["layer_collectives"].to_pandas()
    assert (f.bytes.to_numpy() == h.bytes.to_numpy()).all()
    assert (f.time_ns.to_numpy() >= h.time_ns.to_numpy()).all()
    assert hurt.facts.extra["grad_allreduce_s"] >= healthy.facts.extra["grad_allreduce_s"] * (1 - 1e-12)
    assert collective_ns(hurt) >= collective_ns(healthy)
