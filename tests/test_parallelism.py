"""Mesh-on-torus mapping, per-strategy collectives and their overlap, parameter servers, int8 compute."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import ScenarioError, TopologyError, scenario_from_dict, simulate
from engine.pod.catalog import load_catalog
from engine.comm import ring_phase
from engine.model.compute import step_compute
from engine.model.models import layer_units, model_cost
from engine.comm import mesh_collective_s, plan_step_comm
from engine.pod.mesh import resolve_mesh
from engine.scenario import TransformerModel

W = 100e9  # one link, bytes/s


def _sizes(data, fsdp, tensor):
    return {"data": data, "fsdp": fsdp, "tensor": tensor}


class TestResolveMesh:
    def test_default_puts_tensor_innermost_on_whole_rings(self):
        mesh = resolve_mesh((4, 4, 4), (True, True, True), _sizes(1, 16, 4))
        assert [(s.torus_axis, s.chips, s.wrap, s.stride) for s in mesh["tensor"].segments] == [(2, 4, True, 1)]
        assert [(s.torus_axis, s.chips) for s in mesh["fsdp"].segments] == [(1, 4), (0, 4)]
        assert mesh["data"].segments == ()
        assert mesh.describe() == "data=1, fsdp=16 on y:4*x:4, tensor=4 on z:4"

    def test_split_axis_loses_wraparound_and_outer_part_strides(self):
        mesh = resolve_mesh((4, 4, 4), (True, True, True), _sizes(1, 32, 2))
        (t,) = mesh["tensor"].segments
        assert (t.torus_axis, t.chips, t.wrap, t.stride) == (2, 2, False, 1)
        outer = mesh["fsdp"].segments[0]
        assert (outer.torus_axis, outer.chips, outer.wrap, outer.stride) == (2, 2, False, 2)

    def test_explicit_mapping(self):
        mesh = resolve_mesh((8, 8, 8), (True,) * 3, _sizes(1, 64, 8), {"tensor": ["x"], "fsdp": ["y", "z"]})
        assert [s.torus_axis for s in mesh["tensor"].segments] == [0]
        assert [s.torus_axis for s in mesh["fsdp"].segments] == [1, 2]

    @pytest.mark.parametrize(
        "sizes, mapping, needle",
        [
            (_sizes(1, 16, 4), {"tensor": ["z"], "fsdp": ["x"]}, "size is 16"),  # fsdp gets only 4 chips
            (_sizes(1, 16, 4), {"tensor": ["z"], "fsdp": ["x", "z"]}, "mapping uses"),  # z used twice, y unused
            (_sizes(1, 16, 4), {"tensor": ["w"], "fsdp": ["x", "y"]}, "torus axis 'w'"),
            (_sizes(1, 16, 4), {"tensor": ["z:3"], "fsdp": ["x", "y"]}, "must divide"),
        ],
    )
    def test_bad_mappings_are_topology_errors(self, sizes, mapping, needle):
        with pytest.raises(TopologyError, match=needle):
            resolve_mesh((4, 4, 4), (True,) * 3, sizes, mapping)

    def test_mesh_that_only_factors_in_another_axis_order(self):
        # innermost first, tensor=4 takes y:2 and then cannot finish on y's remaining 3; x first works
        mesh = resolve_mesh((2, 6), (False, False), _sizes(1, 3, 4))
        assert [(s.torus_axis, s.chips) for s in mesh["tensor"].segments] == [(0, 2), (1, 2)]
        assert [(s.torus_axis, s.chips) for s in mesh["fsdp"].segments] == [(1, 3)]

    @settings(max_examples=60, deadline=None)
    @given(
        shape=st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), min_size=1, max_size=3),
        split=st.data(),
    )
    def test_default_mapping_covers_the_slice_exactly_or_refuses(self, shape, split):
        n = math.prod(shape)
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        tensor = split.draw(st.sampled_from(divisors))
        fsdp = split.draw(st.sampled_from([d for d in divisors if (n // tensor) % d == 0]))
        sizes = _sizes(n // (tensor * fsdp), fsdp, tensor)
        try:
            mesh = resolve_mesh(shape, [True] * len(shape), sizes)
        except TopologyError:
            return
        used = [1] * len(shape)
        for axis in mesh.axes:
            assert math.prod(seg.chips for seg in axis.segments) == axis.size
            for seg in axis.segments:
                used[seg.torus_axis] *= seg.chips
                assert seg.wrap == (seg.chips == shape[seg.torus_axis])
        assert used == list(shape)

    def test_scenario_reports_mapping_under_its_key(self):
        raw = {
            "name": "m",
            "pod": {"chip": "tpu-v4", "topology": "2x2x2"},
            "model": {"kind": "mlp", "layer_sizes": [8, 8]},
            "training": {"global_batch": 8, "steps": 1},
            "parallelism": {"fsdp": 2, "tensor": 2, "mapping": {"tensor": ["x"], "fsdp": ["x"]}},
        }
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(raw, source="m.toml")
        assert any(key == "parallelism.mapping" for key, _ in e.value.problems)


class TestMeshCollective:
    def test_one_wrapped_ring_known_answer(self):
        mesh = resolve_mesh((4, 4, 4), (True,) * 3, _sizes(1, 16, 4))
        v = 8e9
        # bidirectional ring of 4: 3/4 x V / (2 W)
        assert mesh_collective_s("all-gather", v, mesh["tensor"], W, 0.0) == pytest.approx(0.75 * v / (2 * W))
        assert mesh_collective_s("all-reduce", v, mesh["tensor"], W, 0.0) == pytest.approx(2 * 0.75 * v / (2 * W))

    def test_strided_segment_shares_its_links(self):
        mesh = resolve_mesh((4, 4, 4), (True,) * 3, _sizes(1, 32, 2))
        fsdp = mesh["fsdp"]
        v = 1e9
        expected = ring_phase(v, 2, False, W / 2, 0.0) + ring_phase(v / 2, 4, True, W, 0.0) + ring_phase(v / 8, 4, True, W, 0.0)
        assert mesh_collective_s("reduce-scatter", v, fsdp, W, 0.0) == pytest.approx(expected)

    @settings(max_examples=30, deadline=None)
    @given(v=st.floats(1e3, 1e11), w=st.floats(1e9, 1e12), more=st.floats(1.0, 10.0), op=st.sampled_from(["all-gather", "all-reduce"]))
    def test_more_bandwidth_is_never_slower(self, v, w, more, op):
        axis = resolve_mesh((4, 4, 8), (True,) * 3, _sizes(2, 8, 8))["fsdp"]
        assert mesh_collective_s(op, v, axis, w * more, 1e-6) <= mesh_collective_s(op, v, axis, w, 1e-6) * (1 + 1e-12)


def _plan(mesh, fwd_s, bwd_s, cost=None, **kw):
    cost = cost or model_cost(TransformerModel(kind="transformer", layers=4, d_model=1024, heads=8, d_ff=4096, vocab=1000, seq_len=128))
    args = dict(fwd_compute_s=fwd_s, bwd_compute_s=bwd_s, per_chip_batch=2, precision="bf16", slices=1, chips_per_host=4,
                link_bytes_per_s=W, hop_latency_s=0.0, dcn_bytes_per_s_per_host=25e9, dcn_latency_s=0.0)  # fmt: skip
    args.update(kw)
    return cost, plan_step_comm(cost, mesh, **args)


class TestPlanCollectives:
    mesh = resolve_mesh((4, 4, 4), (True,) * 3, _sizes(1, 64, 1))

    def test_fsdp_hides_behind_ample_compute_except_the_first_gather(self):
        cost, plan = _plan(self.mesh, 1e3, 2e3)
        t = plan.per_layer.to_pandas()
        ag = t[(t.op == "all-gather") & (t.phase == "forward")].sort_values("unit")["time_ns"].to_numpy() / 1e9
        rs = t[t.op == "reduce-scatter"].sort_values("unit")["time_ns"].to_numpy() / 1e9
        # the embedding lookup has no GEMM to hide layer0's gather behind, so that one is exposed too
        assert plan.forward_s == pytest.approx(ag[0] + ag[1], abs=2e-9)
        assert plan.backward_s == pytest.approx(ag[-1] + rs[0], abs=2e-9)

    def test_without_compute_every_collective_is_exposed(self):
        cost, plan = _plan(self.mesh, 0.0, 0.0)
        t = plan.per_layer.to_pandas()
        layer = t[t.unit >= 0]
        assert plan.forward_s + plan.backward_s == pytest.approx(layer["time_ns"].sum() / 1e9, abs=len(layer) * 1e-9)
        # six rows per transformer unit: a gather each pass and a reduce-scatter, embed + 4 layers + unembed
        assert len(layer) == 3 * 6

    def test_fsdp_gathers_exactly_the_layer_shard_bytes(self):
        cost, plan = _plan(self.mesh, 0.0, 0.0)
        t = plan.per_layer.to_pandas()
        layer0 = t[(t.layer == "layer0") & (t.op == "all-gather")]["bytes"].to_numpy()
        d, ff = 1024, 4096
        assert (layer0 == (4 * d * d + 2 * d * ff) * 2.0).all()  # bf16 GEMM weights of one layer (norms ride with the embedding)

    def test_blocking_tensor_parallel_all_reduces_are_exposed(self):
        mesh = resolve_mesh((4, 4, 4), (True,) * 3, _sizes(16, 1, 4))
        _, plan = _plan(mesh, 1e3, 2e3, collective_matmul=False)
        t = plan.per_layer.to_pandas()
        tp = t[t.mesh_axis == "tensor"]
        assert len(tp) == 2 * 4  # forward and backward, 4 layers
        # 2 all-reduces per layer of b x s x d bf16 activations
        assert (tp["bytes"] == 2 * 2 * 128 * 1024 * 2.0).all()
        assert plan.forward_s == pytest.approx(tp[tp.phase == "forward"]["time_ns"].sum() / 1e9, abs=len(tp) * 1e-9)
        # full remat re-runs the forward inside the backward pass with the attention block's all-reduce,
        # not the MLP's: its down-projection is not recomputed (engine/model/compute.py passes_per_op)
        _, full = _plan(mesh, 1e3, 2e3, remat="full", collective_matmul=False)
        assert full.backward_s == pytest.approx(1.5 * plan.backward_s, rel=1e-12)
        assert full.forward_s == plan.forward_s
        rec = full.per_layer.to_pandas().query("phase == 'recompute' and mesh_axis == 'tensor'")
        assert len(rec) == 4 and (rec["bytes"] == 2 * 128 * 1024 * 2.0).all()  # one all-reduce per layer

    def test_a_parallel_block_all_reduces_once_per_layer_and_pass(self):
        """Attention and MLP side by side: their partial sums add before one all-reduce (PaLM sec. 2)."""
        mesh = resolve_mesh((4, 4, 4), (True,) * 3, _sizes(16, 1, 4))
        model = dict(kind="transformer", layers=4, d_model=1024, heads=8, d_ff=4096, vocab=1000, seq_len=128)
        _, seq = _plan(mesh, 0.0, 0.0, cost=model_cost(TransformerModel(**model)))
        _, par = _plan(mesh, 0.0, 0.0, cost=model_cost(TransformerModel(**model, parallel_block=True)))
        t_seq, t_par = (p.per_layer.to_pandas() for p in (seq, par))
        tp_seq, tp_par = t_seq[t_seq.mesh_axis == "tensor"], t_par[t_par.mesh_axis == "tensor"]
        assert (tp_par["bytes"].to_numpy() == 1 * 2 * 128 * 1024 * 2.0).all()  # one all-reduce of b x s x d bf16
        assert tp_par["bytes"].sum() == tp_seq["bytes"].sum() / 2
        assert par.forward_s == pytest.approx(seq.forward_s / 2, rel=1e-12)  # nothing to hide behind: all exposed
        # full remat reruns neither output projection of a parallel block, so not its all-reduce either
        _, par_full = _plan(mesh, 0.0, 0.0, cost=model_cost(TransformerModel(**model, parallel_block=True)), remat="full")
        assert par_full.backward_s == pytest.approx(par.backward_s, rel=1e-12)
        assert "recompute" not in set(par_full.per_layer.to_pandas()["phase"])

    def test_collective_matmul_hides_tp_all_reduces_behind_ample_compute(self):
        mesh = resolve_mesh((4, 4, 4), (True,) * 3, _sizes(16, 1, 4))
        _, blocking = _plan(mesh, 1e3, 2e3, collective_matmul=False)
        _, decomposed = _plan(mesh, 1e3, 2e3)
        assert blocking.forward_s > 0 and blocking.backward_s > 0
        # every layer's compute outlasts its all-reduces: the decomposed loop never waits
        assert decomposed.forward_s == 0.0 and decomposed.backward_s == 0.0
        # the collectives themselves are unchanged, only how much of them is exposed
        assert decomposed.per_layer.equals(blocking.per_layer)

    def test_collective_matmul_exposes_only_what_outlasts_the_layer_compute(self):
        mesh = resolve_mesh((4, 4, 4), (True,) * 3, _sizes(16, 1, 4))
        cost, blocking = _plan(mesh, 0.0, 0.0, collective_matmul=False)
        t = blocking.per_layer.to_pandas()
        tp_fwd_s = t[(t.phase == "forward") & (t.mesh_axis == "tensor")].groupby("unit")["time_ns"].sum() / 1e9
        units = layer_units(cost)
        # forward compute of half the blocking all-reduce time, spread over units by FLOP share
        fwd_s = float(tp_fwd_s.sum()) / 2
        hideable_s = np.array([u.flops_frac for u in units]) * fwd_s
        expected_s = sum(max(0.0, tp_fwd_s.get(i, 0.0) - hideable_s[i]) for i in range(len(units)))
        _, plan = _plan(mesh, fwd_s, 0.0, cost=cost)
        assert plan.forward_s == pytest.approx(expected_s, abs=len(units) * 1e-9)  # the table rounds to whole ns
        assert 0.0 < plan.forward_s < blocking.forward_s
        # without compute to hide behind, decomposed or not, every all-reduce is exposed
        _, none = _plan(mesh, 0.0, 0.0)
        assert none.forward_s == blocking.forward_s and none.backward_s == blocking.backward_s

    def test_data_parallel_gradient_sync_only(self):
        mesh = resolve_mesh((4, 4, 4), (True,) * 3, _sizes(64, 1, 1))
        cost, plan = _plan(mesh, 1.0, 2.0)
        assert plan.forward_s == plan.backward_s == 0.0
        t = plan.per_layer.to_pandas()
        assert list(t.phase) == ["gradient_sync"]
        # gradients are reduced as the bf16 matmuls write them (2 bytes), over fp32 weights
        assert t["bytes"].item() == cost.params * 2.0
        assert plan.gradient_sync_s == pytest.approx(mesh_collective_s("all-reduce", cost.params * 2.0, mesh["data"], W, 0.0))
        # reduced in the weights' dtype (a pmap psum, TF's CrossShardOptimizer): fp32, 4 bytes
        _, wide = _plan(mesh, 1.0, 2.0, gradient_reduce_dtype="weights")
        assert wide.per_layer.to_pandas()["bytes"].item() == cost.params * 4.0
        # fp32 training's matmuls write fp32 gradients
        _, fp32 = _plan(mesh, 1.0, 2.0, precision="fp32")
        assert fp32.per_layer.to_pandas()["bytes"].item() == cost.params * 4.0


def _ps_scenario(hosts: int) -> dict:
    return {
        "name": "ps",
        "pod": {"chip": "tpu-v4", "topology": "2x2x2"},
        "model": {"kind": "mlp", "layer_sizes": [1024, 1024, 1], "embedding_rows": 10_000_000, "embedding_dim": 64, "embedding_lookups": 16},
        "training": {"global_batch": 4096, "steps": 3},
        "parallelism": {"strategy": "parameter_server", "parameter_server": {"hosts": hosts}},
        "sim": {"jitter_frac": 0.0},
    }


class TestParameterServer:
    def test_embedding_lives_off_chip_and_is_pulled_and_pushed(self):
        r = simulate(scenario_from_dict(_ps_scenario(2)))
        spmd = simulate(scenario_from_dict({**_ps_scenario(2), "parallelism": {}}))
        sparse = 10_000_000 * 64
        assert spmd.facts.hbm_breakdown_bytes["params"] - r.facts.hbm_breakdown_bytes["params"] == pytest.approx(sparse * 4.0)
        ops = r.trace.extra["layer_collectives"].to_pandas()
        pull = ops[ops.op == "ps-pull"]
        assert pull["bytes"].item() == 4096 / 8 * 16 * 64 * 4.0  # rows looked up by one chip's batch, fp32

    def test_fewer_parameter_servers_are_never_faster(self):
        steps = [np.median(simulate(scenario_from_dict(_ps_scenario(h))).trace.steps.column("step_ns").to_numpy()) for h in (1, 4, 64)]
        assert steps[0] >= steps[1] >= steps[2]

    def test_parameter_server_needs_plain_data_parallel(self):
        raw = _ps_scenario(2)
        raw["parallelism"]["fsdp"] = 2
        with pytest.raises(ScenarioError, match="parallelism.strategy"):
            scenario_from_dict(raw)


def test_int8_runs_weight_matmuls_at_int8_peak_and_attention_at_bf16(ideal_calibration):
    # unlimited HBM bandwidth: every op is compute bound, so time = padded FLOPs / peak
    v5e = dataclasses.replace(load_catalog()["tpu-v5e"], hbm_bytes_per_s=1e18)
    m = TransformerModel(kind="transformer", layers=2, d_model=4096, heads=32, d_ff=16384, vocab=32768, seq_len=2048)
    cost = model_cost(m)
    bf16 = step_compute(cost, v5e, ideal_calibration, per_chip_batch=8, precision="bf16", remat="none")
    int8 = step_compute(cost, v5e, ideal_calibration, per_chip_batch=8, precision="int8", remat="none")
    att = cost.ops.w_is_activation
    f = cost.ops.flops_per_sample
    # all compute bound at this size: time = padded FLOPs / peak, attention stays at the bf16 peak
    expected = bf16.fwd_bwd_s * (f[att].sum() + f[~att].sum() * 197 / 393) / f.sum()
    assert int8.fwd_bwd_s == pytest.approx(expected, rel=0.01)
    assert 1.0 < bf16.fwd_bwd_s / int8.fwd_bwd_s < 393 / 197


def test_selective_remat_recomputes_only_the_attention_core(ideal_calibration):
    v5p = load_catalog()["tpu-v5p"]
    m = TransformerModel(kind="transformer", layers=2, d_model=1024, heads=8, d_ff=4096, vocab=1000, seq_len=512)
    cost = model_cost(m)
    none = step_compute(cost, v5p, ideal_calibration, per_chip_batch=4, precision="bf16", remat="none")
    sel = step_compute(cost, v5p, ideal_calibration, per_chip_batch=4, precision="bf16", remat="selective")
    full = step_compute(cost, v5p, ideal_calibration, per_chip_batch=4, precision="bf16", remat="full")
    att_flops = float((2.0 * 4 * cost.ops.m * cost.ops.k * cost.ops.n * cost.ops.count)[cost.ops.w_is_activation].sum())
    assert sel.hardware_flops == pytest.approx(none.hardware_flops + att_flops)
    assert none.hardware_flops < sel.hardware_flops < full.hardware_flops


def test_simulated_run_has_contract_tables_and_few_events_per_chip_step():
    raw = {
        "name": "fsdp-tp",
        "pod": {"chip": "tpu-v5p", "topology": "2x2x4"},
        "model": {"kind": "transformer", "layers": 8, "d_model": 1024, "heads": 8, "d_ff": 4096, "vocab": 1000, "seq_len": 256},
        "training": {"global_batch": 16, "steps": 4},
        "parallelism": {"fsdp": 4, "tensor": 4},
    }
    r = simulate(scenario_from_dict(raw))
    extra = r.trace.extra
    assert extra["memory_timeline"].schema.names == ["point", "phase", "category", "bytes"]
    assert extra["chip_memory"].schema.names == ["chip", "peak_bytes"] and extra["chip_memory"].num_rows == 16
    assert r.facts.extra["mesh"] == "data=1, fsdp=4 on y:2*x:2, tensor=4 on z:4"
    per_chip_step = r.trace.events.num_rows / (16 * 4)
    assert per_chip_step <= 8  # per-layer collectives aggregated per pass; detail in layer_collectives
    kinds = set(r.trace.events.column("kind").to_pylist())
    assert "collective" in kinds
    assert math.isclose(extra["chip_memory"].column("peak_bytes")[0].as_py(), r.facts.peak_hbm_bytes)


def test_default_layout_tries_other_axis_orders_when_innermost_does_not_divide():
    # PaLM 540B: 12-way tensor parallelism on a 12x16x16 v4 slice; 12 does not divide z = 16, but x is 12.
    mesh = resolve_mesh((12, 16, 16), (True, True, True), {"data": 1, "fsdp": 256, "tensor": 12})
    assert [(s.torus_axis, s.chips) for s in mesh["tensor"].segments] == [(0, 12)]
    assert mesh["fsdp"].size == 256
    # the innermost-first default is kept whenever it fits
    mesh = resolve_mesh((4, 4, 4), (True, True, True), {"data": 16, "fsdp": 1, "tensor": 4})
    assert [(s.torus_axis, s.chips) for s in mesh["tensor"].segments] == [(2, 4)]
