"""Torus construction, hosts, wraparound rules and the ring collective formulas."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import TopologyError, build_pod, load_catalog
from engine.comm import all_reduce_time_s, dcn_all_reduce_time_s, ring_phase
from engine.pod.topology import wraparound_for

CAT = load_catalog()


def test_coordinates_are_c_order_and_hosts_are_blocks():
    pod = build_pod(CAT["tpu-v4"], (4, 4, 4), slices=2)
    t = pod.chip_table
    assert pod.chips == 128 and pod.hosts == 32  # 2x2x1 chips per host
    # chip 1 is (0, 0, 1); chip 16 is (1, 0, 0)
    assert (t["x"][1], t["y"][1], t["z"][1]) == (0, 0, 1)
    assert (t["x"][16], t["y"][16], t["z"][16]) == (1, 0, 0)
    # every host holds exactly 4 chips, inside one slice
    counts = np.bincount(t["host"])
    assert (counts == 4).all()
    assert t["slice"][64] == 1 and t["host"][64] == 16


def test_graph_is_a_torus_when_it_wraps():
    pod = build_pod(CAT["tpu-v4"], (4, 4, 4))
    g = pod.slice.graph()
    assert g.number_of_nodes() == 64
    assert all(d == 6 for _, d in g.degree())
    assert nx.shortest_path_length(g, (0, 0, 0), (3, 0, 0)) == 1  # wraparound link


def test_graph_is_a_mesh_without_wraparound():
    pod = build_pod(CAT["tpu-v4"], (2, 2, 2))
    g = pod.slice.graph()
    assert pod.slice.wrap == (False, False, False)
    assert g.number_of_edges() == 12


@pytest.mark.parametrize(
    "chip, shape, wrap",
    [
        ("tpu-v3", (32, 32), (True, True)),
        ("tpu-v4", (4, 4, 8), (True, True, True)),
        ("tpu-v4", (2, 2, 4), (False, False, False)),  # partial cube: mesh
        ("tpu-v5e", (16, 16), (True, True)),
        ("tpu-v5e", (8, 16), (False, True)),
        ("tpu-v5e", (4, 4), (False, False)),
    ],
)
def test_wraparound_rules(chip, shape, wrap):
    assert wraparound_for(CAT[chip], shape) == wrap


def test_unsupported_shape_is_a_topology_error():
    with pytest.raises(TopologyError, match="2D torus"):
        build_pod(CAT["tpu-v3"], (4, 4, 4))
    with pytest.raises(TopologyError, match="at most 256"):
        build_pod(CAT["tpu-v5e"], (32, 16))


def test_ring_phase_by_hand():
    # 8-chip ring with wraparound, 1 GB, 100 GB/s links, 1 us hops: 7/8 * 1e9 / 2e11 + 4 hops
    assert ring_phase(1e9, 8, True, 1e11, 1e-6) == pytest.approx(7 / 8 * 1e9 / 2e11 + 4e-6)
    # same line without wraparound: one direction, 7 hops
    assert ring_phase(1e9, 8, False, 1e11, 1e-6) == pytest.approx(7 / 8 * 1e9 / 1e11 + 7e-6)
    assert ring_phase(1e9, 1, True, 1e11, 1e-6) == 0.0


def test_two_axis_all_reduce_shrinks_the_shard():
    t, phases = all_reduce_time_s(1.6e9, (4, 4), (True, True), 1e11, 0.0)
    rs_x = 3 / 4 * 1.6e9 / 2e11
    rs_y = 3 / 4 * 0.4e9 / 2e11
    assert t == pytest.approx(2 * (rs_x + rs_y))
    assert [p.op for p in phases] == ["reduce-scatter", "reduce-scatter", "all-gather", "all-gather"]
    assert [p.axis for p in phases] == [0, 1, 1, 0]


def test_dcn_all_reduce_by_hand():
    # 2 slices, 100 MB shard per chip, 4 chips per host on a 25 GB/s NIC: 2*(1/2)*400 MB / 25 GB/s
    assert dcn_all_reduce_time_s(1e8, 2, 4, 25e9, 0.0) == pytest.approx(4e8 / 25e9)
    assert dcn_all_reduce_time_s(1e8, 1, 4, 25e9, 0.0) == 0.0


@given(
    v=st.floats(1e3, 1e11),
    n=st.integers(1, 64),
    wrap=st.booleans(),
    bw=st.floats(1e9, 1e12),
    factor=st.floats(1.0, 10.0),
)
def test_more_bandwidth_never_slower_larger_message_never_faster(v, n, wrap, bw, factor):
    base = ring_phase(v, n, wrap, bw, 1e-6)
    assert ring_phase(v, n, wrap, bw * factor, 1e-6) <= base * (1 + 1e-12)
    assert ring_phase(v * factor, n, wrap, bw, 1e-6) >= base * (1 - 1e-12)
