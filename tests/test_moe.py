"""Mixture of experts: parameters and FLOPs of a MoE layer, expert all-to-all, routing imbalance, bad input."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from engine import ScenarioError, scenario_from_dict, simulate
from engine.comm import mesh_all_to_all_s
from engine.model.compute import step_compute
from engine.pod.catalog import load_catalog
from engine.pod.mesh import MeshAxis, Segment1D, axis_index_of_chips, resolve_mesh
from engine.model.models import layer_units, model_cost
from engine.model.moe import plan_routing
from engine.scenario import TransformerModel

TINY = dict(kind="transformer", layers=1, d_model=8, heads=1, d_ff=16, vocab=10, seq_len=2, experts=4, experts_per_token=2,
            d_ff_expert=8)  # fmt: skip


class TestMoeLayerCost:
    def test_parameters_total_and_active_by_hand(self):
        c = model_cost(TransformerModel(**TINY))
        # attention 8x24 + 8x8, two LayerNorms 32, router 8x4, 4 experts x (8x8 + 8x8), embeddings 2x10x8, final LN 16
        assert c.params == 192 + 64 + 32 + 32 + 4 * 128 + 160 + 16
        assert c.expert_params == 4 * 128
        assert c.active_params == c.params - (4 - 2) * 128  # a token uses 2 of the 4 experts
        assert sum(u.params for u in layer_units(c)) == c.params

    def test_forward_flops_of_one_moe_layer_by_hand(self):
        c = model_cost(TransformerModel(**TINY))
        flops = dict(zip(c.ops.names, c.ops.flops_per_sample))
        t = 2
        assert flops["layer.router"] == 2 * t * 8 * 4
        assert flops["layer.expert_in"] == 2 * (t * 2) * 8 * 8  # k copies of every token
        assert flops["layer.expert_out"] == 2 * (t * 2) * 8 * 8
        assert "layer.mlp_in" not in flops  # the only layer is a MoE layer

    def test_dense_dispatch_adds_the_dispatch_and_combine_einsums_by_hand(self):
        """GShard's einsums BSM,BSEC->EBCM and EBCM,BSEC->BSM with C = ceil(seq x k / E) x capacity factor
        slots per expert: executed FLOPs, not model FLOPs, and not attention (flash leaves them alone). The dispatch
        mask takes no gradient (one backward GEMM, the combine's two), and the experts' GEMMs run over every slot."""
        m = TransformerModel(**{**TINY, "seq_len": 64, "capacity_factor": 1.5, "moe_dispatch": "dense"})
        assert m.expert_capacity_per_sequence == 48  # ceil(64 x 2 / 4) x 1.5
        dense, grouped = model_cost(m), model_cost(m.model_copy(update={"moe_dispatch": "grouped"}))
        flops = dict(zip(dense.ops.names, dense.ops.flops_per_sample))
        assert flops["layer.dispatch"] == flops["layer.combine"] == 2 * 64 * (4 * 48) * 8
        assert dense.train_flops_per_sample == grouped.train_flops_per_sample  # the model's FLOPs are the routed tokens'
        assert [n for n, r in zip(dense.ops.names, dense.ops.is_routing) if r] == ["layer.dispatch", "layer.combine"]
        assert not (dense.ops.is_attention & dense.ops.is_routing).any() and dense.ops.is_attention.sum() == 2
        chip = load_catalog()["tpu-v5p"]
        from engine.scenario.calibration import Calibration

        a, b = (step_compute(c, chip, Calibration(), 8, "bf16", "none", flash=True) for c in (dense, grouped))
        slots_over_routed = 4 * 48 / (64 * 2)
        experts = flops["layer.expert_in"] + flops["layer.expert_out"]
        extra = 8 * ((2 + 3) * flops["layer.dispatch"] + 3 * (slots_over_routed - 1) * experts)
        assert a.model_flops == b.model_flops and a.hardware_flops == pytest.approx(b.hardware_flops + extra)
        assert a.attention_forward_s == b.attention_forward_s

    def test_grouped_dispatch_moves_the_routed_copies_through_hbm_by_hand(self, ideal_calibration):
        """MaxText's permute and unpermute: gathers of each token's k copies, no MXU work."""
        grouped = model_cost(TransformerModel(**{**TINY, "seq_len": 64}))
        ops = grouped.ops
        i, j = ops.names.index("layer.permute"), ops.names.index("layer.unpermute")
        assert ops.flops_per_sample[i] == ops.flops_per_sample[j] == 0
        t, k, d = 64, 2, 8
        assert ops.in_elems_per_repeat[i] == ops.in_elems_per_repeat[j] == t * k * d  # read the k copies
        assert ops.elementwise_elems[i] == t * k * d  # write them sorted by expert
        assert ops.elementwise_elems[j] == 2 * t * k * d + 2 * t * d  # unsort, weighted sum, residual add
        dense = model_cost(TransformerModel(**{**TINY, "seq_len": 64, "moe_dispatch": "dense"}))
        assert "layer.permute" not in dense.ops.names  # GShard's einsums move the tokens on the MXU instead
        chip = load_catalog()["tpu-v5p"]
        still = np.array([n not in ("layer.permute", "layer.unpermute") for n in ops.names])
        unmoved = replace(grouped, ops=replace(ops, in_elems=ops.in_elems_per_repeat * still, elementwise_elems=ops.elementwise_elems * still))
        with_moves, without = (step_compute(c, chip, ideal_calibration, 8, "bf16", "none") for c in (grouped, unmoved))
        moved_bytes = 8 * (2 * t * k * d + t * k * d + 2 * t * k * d + 2 * t * d) * 2  # reads + writes of 8 samples, bf16
        # forward and backward (3 passes), bound by HBM, no FLOPs
        assert with_moves.memory_s - without.memory_s == pytest.approx(3 * moved_bytes / chip.hbm_bytes_per_s)
        assert with_moves.matmul_s == without.matmul_s

    def test_minimal_remat_recomputes_the_batched_expert_and_routing_dots(self):
        """checkpoint_dots_with_no_batch_dims saves no dot with a batch dimension: the routed experts' GEMMs (batched over
        the experts) and the dense dispatch and combine einsums run a fourth pass, the router and the attention
        projections keep three; the dispatch, whose mask takes no gradient, one fewer throughout."""
        from engine.model.compute import passes_per_op

        c = model_cost(TransformerModel(**{**TINY, "moe_dispatch": "dense"}))
        p = dict(zip(c.ops.names, passes_per_op(c.ops, "minimal")))
        assert p["layer.expert_in"] == p["layer.expert_out"] == p["layer.combine"] == 4
        assert p["layer.router"] == p["layer.qkv"] == p["layer.dispatch"] == 3
        none = dict(zip(c.ops.names, passes_per_op(c.ops, "none")))
        assert none["layer.dispatch"] == 2 and none["layer.combine"] == 3

    def test_moe_layer_interval_keeps_dense_mlps(self):
        c = model_cost(TransformerModel(**{**TINY, "layers": 4, "moe_layer_interval": 2}))
        counts = dict(zip(c.ops.names, c.ops.count))
        assert counts["layer.mlp_in"] == 2 and counts["layer.expert_in"] == 2 and c.moe_layers == 2

    def test_expert_weight_bytes_shard_over_the_expert_axis(self, ideal_calibration):
        m = TransformerModel(**{**TINY, "d_model": 1024, "d_ff": 4096, "d_ff_expert": 4096, "seq_len": 128, "heads": 8,
                                "experts": 8})  # fmt: skip
        c = model_cost(m)
        chip = load_catalog()["tpu-v5p"]
        one = step_compute(c, chip, ideal_calibration, 1, "bf16", "none", expert=1)
        eight = step_compute(c, chip, ideal_calibration, 1, "bf16", "none", expert=8)
        # at batch 1 the expert GEMMs are weight-bound: 8 experts' weights vs 1 per chip
        assert eight.expert_forward_s < one.expert_forward_s / 4
        assert eight.model_flops == one.model_flops


class TestAllToAll:
    def test_known_ring(self):
        # 8 chips on a wraparound ring, 8 MB per chip: V = 64 MB, ring distances sum to 16,
        # busiest link V * 16 / (2 * 8 * 8) = 8 MB -> 80 us at 100 GB/s, plus 4 hops of 1 us
        axis = MeshAxis("expert", 8, (Segment1D(0, 8, True, 1),))
        assert mesh_all_to_all_s(8e6, axis, 100e9, 1e-6) == pytest.approx(80e-6 + 4e-6)

    def test_known_line(self):
        # 4 chips on a line: the middle link carries 2 x 2 x V / (4 x 4) = V / 4 = one chip's bytes
        axis = MeshAxis("expert", 4, (Segment1D(0, 4, False, 1),))
        assert mesh_all_to_all_s(1e6, axis, 100e9, 0.0) == pytest.approx(1e6 / 100e9)

    def test_a_quarter_of_an_all_gather_on_an_even_ring(self):
        from engine.comm import ring_phase

        axis = MeshAxis("expert", 16, (Segment1D(0, 16, True, 1),))
        v = 16 * 4e6
        ag = ring_phase(v, 16, True, 100e9, 0.0)
        assert mesh_all_to_all_s(4e6, axis, 100e9, 0.0) == pytest.approx(ag / 4 * 16 / 15)  # ((n-1)/n in the gather)

    def test_chip_positions_along_a_split_axis(self):
        mesh = resolve_mesh((4, 4), (True, True), {"data": 2, "expert": 8})
        xs, ys = np.meshgrid(np.arange(4), np.arange(4), indexing="ij")
        idx = axis_index_of_chips(mesh["expert"], [xs.ravel(), ys.ravel()])
        assert sorted(np.bincount(idx)) == [2] * 8  # every expert group on 2 chips (the data replicas)


def _moe_scenario(**over) -> dict:
    model = {"kind": "transformer", "layers": 4, "d_model": 1024, "heads": 8, "d_ff": 4096, "vocab": 32000,
             "seq_len": 512, "mlp": "swiglu", "experts": 8, "experts_per_token": 2, "d_ff_expert": 2048}  # fmt: skip
    model.update(over.pop("model", {}))
    par = {"fsdp": 2, "expert": 8}
    par.update(over.pop("parallelism", {}))
    return {"name": "moe", "pod": {"chip": "tpu-v5p", "topology": "2x2x4"}, "model": model,
            "training": {"global_batch": 64, "steps": 12}, "parallelism": par, **over}  # fmt: skip


class TestRouting:
    def test_capacity_drops_tokens(self):
        rng = np.random.default_rng(0)
        assert plan_routing(8, 0.5, 8, 50, rng).dropped_frac.mean() == pytest.approx(0.5, abs=0.01)
        high = plan_routing(8, 8.0, 8, 50, np.random.default_rng(0))
        assert high.dropped_frac.max() == 0.0  # capacity = all tokens: nothing dropped
        assert high.group_factor.sum(axis=1) == pytest.approx(np.full(50, 8.0))

    def test_dropless_drops_nothing_and_keeps_every_routed_token(self):
        capped = plan_routing(8, 1.0, 8, 50, np.random.default_rng(0))
        dropless = plan_routing(8, 0.0, 8, 50, np.random.default_rng(0))
        assert capped.dropped_frac.mean() > 0 and dropless.dropped_frac.max() == 0.0
        # with one expert per group, a group's factor is its expert's share x 8: the busiest expert, uncapped
        assert dropless.group_factor.max(axis=1) == pytest.approx(dropless.busiest_over_mean)
        assert dropless.group_factor.sum(axis=1) == pytest.approx(np.full(50, 8.0))

    def test_dropless_buffers_hold_k_copies_per_token(self):
        """Per token, a dropless MoE layer's activations are those of capacity factor 1 (k slots), and
        capacity factor 2 adds exactly k more copies of the dispatch/combine and expert-MLP terms."""
        from engine.memory.activations import transformer_layer_activation_bytes

        def layer_bytes(cf):
            s = scenario_from_dict(_moe_scenario(model={"capacity_factor": cf}))
            return transformer_layer_activation_bytes(s.model, 4, "bf16", "none")

        assert layer_bytes(0.0) == layer_bytes(1.0)
        d, k, ff_e = 1024, 2, 2048
        per_copy = 2 * d + 6 * ff_e  # dispatched + combined token, SwiGLU's six d_ff-wide tensors
        assert layer_bytes(2.0) - layer_bytes(1.0) == pytest.approx(4 * 512 * k * per_copy * 2)  # 4 x 512 tokens, 2 B

    def test_dense_dispatch_computes_every_buffer_and_nobody_waits(self):
        """Every expert computes its whole capacity buffer: each group's work is capacity_factor x an even share,
        whatever the load; tokens over capacity are still dropped."""
        d = plan_routing(8, 1.25, 4, 50, np.random.default_rng(0), dense=True)
        g = plan_routing(8, 1.25, 4, 50, np.random.default_rng(0))
        assert (d.group_factor == 1.25).all() and g.group_factor.max() < 1.25
        assert d.dropped_frac == pytest.approx(g.dropped_frac)
        grouped = simulate(scenario_from_dict(_moe_scenario(model={"capacity_factor": 1.25})))
        dense = simulate(scenario_from_dict(_moe_scenario(model={"capacity_factor": 1.25, "moe_dispatch": "dense"}, sim={"jitter_frac": 0.0})))
        ev = dense.trace.events.to_pandas()
        assert ev[ev.kind == "sync_wait"].dur_ns.sum() == 0  # every group computes the same
        from engine.model.analytic import evaluate

        assert evaluate(dense.scenario).step_time_s > evaluate(grouped.scenario).step_time_s
        assert dense.facts.extra["moe_busiest_group_factor"] == pytest.approx(1.25)
        # the all-to-alls carry the whole buffers: 512 x 2 x 1.25 slots per sequence instead of 512 x 2 copies
        a2a = [x.trace.extra["layer_collectives"].to_pandas() for x in (dense, grouped)]
        ratio = a2a[0][a2a[0].op == "all-to-all"].bytes.iloc[0] / a2a[1][a2a[1].op == "all-to-all"].bytes.iloc[0]
        assert ratio == pytest.approx(1.25)

    def test_dropless_summary(self):
        r = simulate(scenario_from_dict(_moe_scenario(model={"capacity_factor": 0.0})))
        assert r.facts.extra["moe_capacity_factor"] == 0.0 and r.facts.extra["moe_dropped_token_frac"] == 0.0

    def test_busiest_group_is_waited_for(self):
        r = simulate(scenario_from_dict(_moe_scenario()))
        ev = r.trace.events.to_pandas()
        # per step: the chips of the busiest expert group have no barrier wait, the others do
        busy = ev[ev.kind == "compute"].groupby(["step", "chip"]).dur_ns.sum().unstack()
        wait = ev[ev.kind == "sync_wait"].groupby(["step", "chip"]).dur_ns.sum().unstack().reindex_like(busy).fillna(0)
        for step in busy.index[1:]:
            slowest = busy.loc[step].idxmax()
            assert wait.loc[step, slowest] == 0
            assert wait.loc[step].max() > 0
        facts = r.facts.extra
        assert facts["params_active"] < facts["params_total"]
        assert facts["moe_busiest_group_factor"] > 1.0 and facts["expert_all_to_all_s"] > 0

    def test_same_seed_same_trace_other_seed_other_load(self):
        a = simulate(scenario_from_dict(_moe_scenario()))
        b = simulate(scenario_from_dict(_moe_scenario()))
        c = simulate(scenario_from_dict(_moe_scenario(sim={"seed": 7})))
        assert a.trace.events.equals(b.trace.events)
        assert a.facts.extra["moe_dropped_token_frac"] != c.facts.extra["moe_dropped_token_frac"] or \
            a.facts.extra["moe_busiest_group_factor"] != c.facts.extra["moe_busiest_group_factor"]

    def test_expert_layer_collectives_rows(self):
        r = simulate(scenario_from_dict(_moe_scenario()))
        lc = r.trace.extra["layer_collectives"].to_pandas()
        a2a = lc[lc.op == "all-to-all"]
        assert len(a2a) == 2 * 4  # forward and backward, 4 MoE layers
        # per chip: 64/16 = 4 samples x 512 tokens x 2 copies x 1024 x 2 bytes, dispatch + combine
        assert a2a.bytes.iloc[0] == pytest.approx(2 * 4 * 512 * 2 * 1024 * 2)

    def test_expert_weights_in_hbm_fall_with_the_expert_axis(self):
        one = simulate(scenario_from_dict(_moe_scenario(parallelism={"fsdp": 2, "expert": 1})))
        eight = simulate(scenario_from_dict(_moe_scenario()))
        assert eight.facts.extra["hbm_expert_weight_bytes"] == pytest.approx(one.facts.extra["hbm_expert_weight_bytes"] / 8)
        assert eight.facts.hbm_breakdown_bytes["params"] < one.facts.hbm_breakdown_bytes["params"]

    def test_every_weight_shards_over_the_expert_axis_as_maxtext_shards_it(self):
        """MaxText's ``embed`` rule shards a dense weight's model dimension over fsdp and expert, and its ``exp`` rule
        the routed experts over expert: the optimizer state of fsdp 2 x expert 8 is every parameter over 16 chips,
        dense ones included (d_model 1024 and d_ff 4096 leave no tile padding)."""
        s = scenario_from_dict(_moe_scenario(model={"d_ff_expert": 4096}, training={"global_batch": 64, "steps": 12,
                                                                                    "optimizer": "adam"}))  # fmt: skip
        r = simulate(s)
        n = model_cost(s.model).params
        assert r.facts.hbm_breakdown_bytes["optimizer"] == pytest.approx(8.0 * n / 16, rel=1e-9)

    def test_dense_weights_gather_over_expert_and_no_gradient_is_all_reduced_over_it(self):
        lc = simulate(scenario_from_dict(_moe_scenario())).trace.extra["layer_collectives"].to_pandas()
        on_expert = lc[lc.mesh_axis == "expert"]
        assert set(on_expert.op) == {"all-to-all", "all-gather", "reduce-scatter"}
        gathers = on_expert[(on_expert.op == "all-gather") & (on_expert.phase == "forward")]
        assert len(gathers) == 6  # the embedding, the 4 layers' attention and router weights, the unembedding


class TestBadInput:
    @pytest.mark.parametrize(
        "over, key, needle",
        [
            ({"model": {"experts_per_token": 9}}, "model", "valid: 1 .. 8"),
            ({"model": {"capacity_factor": -1.0}}, "model.capacity_factor", "greater than or equal to 0"),
            ({"model": {"capacity_factor": 0.0, "moe_dispatch": "dense"}}, "model", "needs capacity_factor > 0"),
            ({"model": {"moe_dispatch": "sparse"}}, "model.moe_dispatch", "'grouped' or 'dense'"),
            ({"parallelism": {"expert": 3, "fsdp": 1}}, "parallelism", ""),
            ({"parallelism": {"expert": 16, "fsdp": 1}}, "parallelism.expert", "does not divide the model's 8 experts"),
            ({"model": {"experts": 0}}, "parallelism.expert", "the model has no experts"),
            ({"parallelism": {"data": 2, "fsdp": 2, "expert": 8}}, "parallelism", "data x fsdp x tensor x expert = 2x2x1x8 = 32"),
        ],
    )
    def test_errors_name_the_key(self, over, key, needle):
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(_moe_scenario(**over))
        keys = [k for k, _ in e.value.problems]
        assert any(k.startswith(key) for k in keys), e.value.problems
        assert needle in str(e.value)


def test_published_moe_entries_become_predicted_cases():
    from profiler.reference import load_reference, map_entries
    from profiler.validation import build_scenarios

    cases, skipped = map_entries(load_reference())
    moe = {c.id: c for c in cases if c.family == "MaxText MoE"}
    assert set(moe) == {"e2e_maxtext_deepseek2_16b_v5p8", "e2e_maxtext_v6e_700b_moe", "e2e_maxtext_v6e_700b_moe_4pods",
                        "e2e_maxtext_v6e_700b_moe_cf1.0"}
    assert not [s for s in skipped if "mixture-of-experts" in s.reason]
    deepseek = build_scenarios(moe["e2e_maxtext_deepseek2_16b_v5p8"])[0]
    assert deepseek.model.experts == 64 and deepseek.parallelism.fsdp == 4
    big = build_scenarios(moe["e2e_maxtext_v6e_700b_moe"])[0]
    assert (big.model.experts, big.model.experts_per_token, big.model.capacity_factor) == (16, 2, 1.5)
    assert model_cost(big.model).params == pytest.approx(7.54e11, rel=0.03)  # the entry's total
    assert deepseek.model.capacity_factor == 0.0  # MaxText's default: dropless


def test_the_700b_moe_run_is_mapped_as_its_linked_configuration_ran():
    """custom_model.md links the run's configuration: 1 x 8192 tokens per chip, FSDP 16 x expert 16, flash
    attention, SGD. Mapped as FSDP over all 256 chips at MaxText's default sequence, the FSDP all-gathers of a
    754B model would dominate a step that the real mesh never paid for."""
    from profiler.reference import load_reference, map_entries
    from profiler.validation import build_scenarios

    cases, _ = map_entries(load_reference())
    big = build_scenarios(next(c for c in cases if c.id == "e2e_maxtext_v6e_700b_moe"))[0]
    assert (big.model.seq_len, big.training.global_batch) == (8192, 256)
    assert (big.parallelism.fsdp, big.parallelism.expert) == (16, 16)
    assert (big.model.attention, big.training.optimizer, big.training.weight_dtype) == ("flash", "sgd", "bf16")
    assert big.model.moe_dispatch == "dense"  # the configuration's sparse_matmul False


def test_the_700b_moe_capacity_figure_is_a_check_of_what_capacity_costs():
    """The source's experimental configuration differs from the final one only in capacity_factor (1.0 vs 1.5):
    MFU 49.8% vs 38.1%. Dense dispatch computes every slot, so capacity 1.5 costs ~1.5x the expert work."""
    from profiler.reference import load_reference, map_entries
    from profiler.validation import build_scenarios

    cases, _ = map_entries(load_reference())
    check = next(c for c in cases if c.id == "e2e_maxtext_v6e_700b_moe_cf1.0")
    other, run = build_scenarios(check)
    assert (other.model.capacity_factor, run.model.capacity_factor) == (1.0, 1.5)
    assert other.model.model_copy(update={"capacity_factor": 1.5}) == run.model
    assert check.published == pytest.approx(0.381 / 0.498) and not check.fit


def test_the_700b_moe_run_fits_and_its_four_pod_figure_is_a_dcn_check():
    """It ran on 32 GiB chips with bf16 weights and SGD: it fits. Its 4-pod MFU over its 1-pod MFU is a weak-scaling
    check over DCN, with the per-chip batch and mesh held and the all-reduce overlapped as the configuration's flags say."""
    from engine.model.analytic import evaluate
    from profiler.reference import load_reference, map_entries
    from profiler.validation import build_scenarios

    cases, _ = map_entries(load_reference())
    one = next(c for c in cases if c.id == "e2e_maxtext_v6e_700b_moe")
    assert not evaluate(build_scenarios(one)[0]).oom
    check = next(c for c in cases if c.id == "e2e_maxtext_v6e_700b_moe_4pods")
    single, multi = build_scenarios(check)
    assert (check.kind, check.entry_id, check.published) == ("collective", one.id, pytest.approx(0.353 / 0.381))
    assert (single.pod.slices, multi.pod.slices) == (1, 4) and multi.per_chip_batch == single.per_chip_batch
    assert multi.interconnect.overlap and not check.fit


def test_the_published_deepseek_run_fits_in_hbm():
    """The run was logged using 44.6 of 95.7 GB after init with an XLA estimate of 100.4 GB in all: it
    ran, so it fits. Dropless dispatch buffers hold each token's 6 routed copies, not 64."""
    from engine.model.analytic import evaluate
    from profiler.reference import load_reference, map_entries
    from profiler.validation import build_scenarios

    cases, _ = map_entries(load_reference())
    case = next(c for c in cases if c.id == "e2e_maxtext_deepseek2_16b_v5p8")
    est = evaluate(build_scenarios(case)[0])
    assert not est.oom, est.costs.mem.breakdown_bytes


def test_mesh_axes_are_declared_once_and_scenarios_accept_exactly_them():
    import typing

    from engine.pod.mesh import LAYOUT_ORDER, MESH_AXES
    from engine.scenario import MeshAxisName

    assert set(LAYOUT_ORDER) == set(MESH_AXES)
    assert typing.get_args(MeshAxisName) == MESH_AXES


def test_full_remat_repeats_the_all_to_alls_in_the_backward_pass():
    def run(remat):
        raw = _moe_scenario()
        raw["training"]["remat"] = remat
        return simulate(scenario_from_dict(raw))

    none, full = run("none"), run("full")
    lc = full.trace.extra["layer_collectives"].to_pandas()
    a2a = lc[lc.op == "all-to-all"]
    assert sorted(a2a.phase.value_counts().items()) == [("backward", 4), ("forward", 4), ("recompute", 4)]
    assert full.facts.extra["expert_all_to_all_s"] == pytest.approx(1.5 * none.facts.extra["expert_all_to_all_s"])
