"""HBM model: known answers worked by hand, sharding invariants, the step timeline, GPT-3 175B fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import scenario_from_dict, simulate
from engine.memory.activations import flash_backward_stat_bytes_per_token, flash_block, transformer_layer_activation_bytes
from engine.memory.hbm import CATEGORIES, REMAT_TARGET_FRACTION, hbm_plan
from engine.memory.states import bytes_per_param
from engine.model.models import layer_units, model_cost
from engine.pod.catalog import load_catalog
from engine.scenario import MlpModel, TransformerModel

GIB = 2**30


def _gpt(**kw) -> TransformerModel:
    dims = dict(kind="transformer", layers=2, d_model=64, heads=4, d_ff=256, vocab=100, seq_len=32)
    dims.update(kw)
    return TransformerModel(**dims)


def _lane_aligned_gpt(**kw) -> TransformerModel:
    """A model whose weights' shards keep a dimension of 128 (head dimension, vocabulary, d_ff) under any
    FSDP degree: TPU layouts pad nothing, so its model states are the logical counts."""
    return _gpt(**{"d_model": 128, "heads": 1, "d_ff": 256, "vocab": 128, **kw})


class TestBytesPerParam:
    def test_adam_is_zero_s_16_bytes(self):
        # ZeRO sec. 3.1: mixed-precision Adam keeps 16 bytes per parameter (here 4 master + 4 grad + 8 m, v)
        b = bytes_per_param("adam", "bf16")
        assert (b.params, b.grads, b.optimizer, b.model_states) == (4.0, 4.0, 8.0, 16.0)

    @pytest.mark.parametrize("opt, states", [("sgd", 8.0), ("momentum", 12.0), ("adafactor", 8.0)])
    def test_other_optimizers(self, opt, states):
        assert bytes_per_param(opt, "bf16").model_states == states

    def test_compute_copy_by_precision(self):
        assert [bytes_per_param("adam", p).compute_copy for p in ("fp32", "bf16", "int8")] == [0.0, 2.0, 2.0]


class TestTransformerActivations:
    """What JAX's autodiff saves of the reference layer (engine/memory/activations.py layer_residual_bytes_per_token),
    worked by hand for d 64, 4 heads of 16, d_ff 256, seq 32, batch 2 (64 tokens), bf16."""

    s, b, h, a = 32, 2, 64, 4
    tokens = 64

    def test_no_remat_keeps_fp32_norms_scores_and_six_mlp_tensors(self):
        got = transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "none")
        norms = 2 * ((8 + 2) * 64 + 8)  # two RMSNorms: fp32 input and normalised value, bf16 output, 2 fp32 scalars
        attn = 2 * (2 * 64 + 2 * 64) + (4 + 2) * 4 * 32 + 8 * 4  # q (reshaped), k, v, out; fp32 scores + probs; max, sum
        mlp = 6 * 256 * 2  # GELU's six d_ff-wide tensors
        assert (norms, attn, mlp) == (1296, 1312, 3072)
        assert got == self.tokens * (norms + attn + mlp)

    def test_selective_drops_the_attention_core(self):
        # layer input, two norm outputs, the residual between blocks (4 d), q, k, v, out (4 d), MLP pre + act (8 d)
        assert transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "selective") == self.s * self.b * self.h * 32

    def test_full_keeps_the_layer_input(self):
        assert transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "full") == 2 * self.s * self.b * self.h

    def test_named_saves_keep_the_layer_input_and_the_projections_the_backward_reads(self):
        # save_qkv_proj: the input (d) and q, k, v (3 x 4 heads x 16 = 3d); save_dot_except_mlp also the output
        # projection (d), from which the residual between the blocks is recomputed; the MLP's projection back to d
        # only adds into the residual stream, which no backward op reads: save_dot_except_mlpwi keeps nothing more
        per_token = {r: transformer_layer_activation_bytes(_gpt(), self.b, "bf16", r) / self.tokens
                     for r in ("save_qkv_proj", "save_dot_except_mlp", "save_dot_except_mlpwi")}  # fmt: skip
        assert per_token == {"save_qkv_proj": 2 * 4 * self.h, "save_dot_except_mlp": 2 * 5 * self.h,
                             "save_dot_except_mlpwi": 2 * 5 * self.h}  # fmt: skip
        # a parallel block's output projection adds into the residual stream as well
        parallel = _gpt(parallel_block=True)
        assert (transformer_layer_activation_bytes(parallel, self.b, "bf16", "save_dot_except_mlp")
                == transformer_layer_activation_bytes(parallel, self.b, "bf16", "save_qkv_proj"))  # fmt: skip

    def test_flash_never_stores_scores(self):
        none = transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "none")
        flash = transformer_layer_activation_bytes(_gpt(attention="flash"), self.b, "bf16", "none")
        # standard: 2 (2 h q + 2 kv q) + 6 h s + 8 h; flash: 5 x 2 h q + 8 h (its operands as laid out, and the output twice)
        assert none - flash == self.tokens * ((512 + 6 * 4 * 32) - 5 * 2 * 64)

    def test_minimal_saves_weight_matmul_outputs(self):
        # q, k, v (3d) + out-proj output (d) + MLP in (4d) + MLP out (d) = 9d per token
        assert transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "minimal") == 9 * self.h * 2 * self.s * self.b

    def test_relu_keeps_its_output_and_a_one_byte_mask(self):
        # JAX differentiates relu through select(x > 0, ...): the backward keeps bool x > 0 and the bf16 output
        gelu = transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "none")
        relu = transformer_layer_activation_bytes(_gpt(mlp="relu"), self.b, "bf16", "none")
        assert gelu - relu == self.tokens * (6 * 256 * 2 - (256 * 2 + 256))
        relu32 = transformer_layer_activation_bytes(_gpt(mlp="relu"), self.b, "fp32", "none")
        gelu32 = transformer_layer_activation_bytes(_gpt(), self.b, "fp32", "none")
        assert gelu32 - relu32 == self.tokens * (6 * 256 * 4 - (256 * 4 + 256))
        for remat in ("full", "minimal"):  # these keep no activation output
            assert transformer_layer_activation_bytes(_gpt(mlp="relu"), self.b, "bf16", remat) == (
                transformer_layer_activation_bytes(_gpt(), self.b, "bf16", remat)
            )

    def test_a_parallel_block_saves_one_norm(self):
        seq = transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "none")
        par = transformer_layer_activation_bytes(_gpt(parallel_block=True), self.b, "bf16", "none")
        assert seq - par == self.tokens * ((8 + 2) * 64 + 8)
        for remat in ("full", "minimal"):  # what these save has no norm in it
            assert transformer_layer_activation_bytes(_gpt(parallel_block=True), self.b, "bf16", remat) == (
                transformer_layer_activation_bytes(_gpt(), self.b, "bf16", remat)
            )

    def test_tensor_parallel_and_fp32(self):
        one = transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "none")
        assert transformer_layer_activation_bytes(_gpt(), self.b, "bf16", "none", tensor=4) == one / 4
        # fp32: the norms' fp32 values stay 4 bytes, everything else doubles
        fp32 = 2 * ((8 + 4) * 64 + 8) + 4 * (2 * 64 + 2 * 64) + (4 + 4) * 4 * 32 + 8 * 4 + 6 * 256 * 4
        assert transformer_layer_activation_bytes(_gpt(), self.b, "fp32", "none") == self.tokens * fp32
        assert transformer_layer_activation_bytes(_gpt(), self.b, "int8", "none") == one  # AQT keeps bf16 activations

    @settings(max_examples=50, deadline=None)
    @given(
        d_heads=st.sampled_from([(64, 4), (128, 8), (256, 16), (96, 3)]),
        ff=st.integers(1, 1024),
        seq=st.integers(1, 512),
        b=st.integers(1, 16),
        swiglu=st.booleans(),
    )
    def test_policies_are_ordered(self, d_heads, ff, seq, b, swiglu):
        m = _gpt(d_model=d_heads[0], heads=d_heads[1], d_ff=ff, seq_len=seq, mlp="swiglu" if swiglu else "gelu")
        by = {r: transformer_layer_activation_bytes(m, b, "bf16", r) for r in ("none", "selective", "minimal", "full")}
        assert by["full"] <= by["minimal"] <= by["selective"] <= by["none"]


def _plan(cost, model, **kw):
    args = dict(per_chip_batch=4, precision="bf16", optimizer="adam", remat="none", fsdp=1, tensor=1,
                capacity_bytes=16 * GIB, usable_bytes=16 * GIB * 0.95)  # fmt: skip
    args.update(kw)
    return hbm_plan(cost, model, **args)


class TestPlan:
    @settings(max_examples=25, deadline=None)
    @given(fsdp=st.sampled_from([2, 4, 8, 16, 64, 256]), opt=st.sampled_from(["sgd", "momentum", "adam", "adafactor"]))
    def test_fsdp_shards_model_states_exactly_by_its_size(self, fsdp, opt):
        model = _lane_aligned_gpt(layers=4)
        cost = model_cost(model)
        one = _plan(cost, model, optimizer=opt)
        many = _plan(cost, model, optimizer=opt, fsdp=fsdp)
        start_one = one.timeline.to_pandas().query("point == 0").set_index("category")["bytes"]
        start_many = many.timeline.to_pandas().query("point == 0").set_index("category")["bytes"]
        assert start_one["params"] == cost.params * 4.0
        for cat in ("params", "optimizer"):
            assert start_many[cat] * fsdp == pytest.approx(start_one[cat], rel=1e-12)
        assert many.model_state_bytes * fsdp == pytest.approx(one.model_state_bytes, rel=1e-12)
        assert one.model_state_bytes == pytest.approx(cost.params * bytes_per_param(opt, "bf16").model_states)

    def test_timeline_shape_and_peak(self):
        model = _gpt(layers=6)
        cost = model_cost(model)
        plan = _plan(cost, model, fsdp=2)
        df = plan.timeline.to_pandas()
        assert list(plan.timeline.schema.names) == ["point", "phase", "category", "bytes"]
        wide = df.pivot(index="point", columns="category", values="bytes")[list(CATEGORIES)]
        phases = df.drop_duplicates("point").set_index("point")["phase"]
        assert phases.iloc[0] == "start" and phases.iloc[-1] == "optimizer"
        act = wide["activations"].to_numpy()
        fwd = phases[phases == "forward"].index
        bwd = phases[phases == "backward"].index
        assert act[0] == act[-1] == 4 * 32 * 2 * 4  # only the step's int32 tokens and labels at the start and the update
        assert (np.diff(act[fwd]) >= 0).all()  # grow through the forward pass
        # a layer's backward holds the attention probabilities' gradient the unembedding's does not (4 x 32 x 4 heads
        # x 32 in bf16), then activations are released through the backward pass
        assert act[bwd][1] - act[bwd][0] == 4 * 32 * 4 * 32 * 2
        assert (np.diff(act[bwd][1:]) <= 0).all()
        assert (np.diff(wide["grads"].to_numpy()[bwd]) >= 0).all()  # gradients accumulate
        totals = wide.sum(axis=1).to_numpy()
        assert plan.peak_bytes == pytest.approx(totals.max())
        assert sum(plan.breakdown_bytes.values()) == pytest.approx(plan.peak_bytes)
        assert not plan.oom

    def test_remat_and_tensor_shrink_the_peak(self):
        model = _gpt(layers=8, seq_len=256, attention="standard")  # selective drops the seq x seq term flash never keeps
        cost = model_cost(model)
        peaks = [_plan(cost, model, remat=r).peak_bytes for r in ("none", "selective", "full")]
        assert peaks[0] > peaks[1] > peaks[2]
        assert _plan(cost, model, tensor=2).peak_bytes < peaks[0]

    @pytest.mark.parametrize("parallel_block", [False, True])
    def test_full_remat_holds_every_input_and_one_recomputed_layer(self, parallel_block):
        # In the scanned backward: every layer's checkpointed input (stacked, freed when the loop ends) plus
        # the recomputed layer's materialised tensors (Korthikanti's count), less the input it reads, and the
        # attention probabilities' gradient.
        from engine.memory.activations import materialized_layer_elements

        model = _gpt(layers=4, seq_len=64, attention="standard", parallel_block=parallel_block)
        cost = model_cost(model)
        df = _plan(cost, model, remat="full").timeline.to_pandas()
        last_layer = df.query("phase == 'backward' and category == 'activations'")["bytes"].iloc[1]
        b = 4  # _plan's per-chip batch
        full = transformer_layer_activation_bytes(model, b, "bf16", "full")
        final_norm = b * 64 * 2 * 64 * 2  # the final norm's bf16 input and output
        recomputed = b * 64 * materialized_layer_elements(model) * 2 - full + b * 64 * model.heads * 64 * 2
        tokens = b * 64 * 2 * 4  # the step's int32 tokens and labels
        assert last_layer == pytest.approx(model.layers * full + final_norm + recomputed + tokens)

    def test_scanned_backward_holds_the_whole_gradient_from_its_first_layer(self):
        model = _lane_aligned_gpt(layers=4)
        cost = model_cost(model)
        units = layer_units(cost)
        embed, unembed = units[0].params, units[-1].params
        layers = cost.params - embed - unembed
        df = _plan(cost, model).timeline.to_pandas()
        grads = df.query("phase == 'backward' and category == 'grads'")["bytes"].to_numpy()
        # the loop's carry is every layer's fp32 gradient from its first iteration; the unembedding's gradient is
        # its matmul's bf16 output, made at the loss; the embedding's (bf16) comes after the loop, at its own row
        assert (grads[:-1] == layers * 4.0 + unembed * 2.0).all()
        assert grads[-1] == layers * 4.0 + unembed * 2.0 + embed * 2.0
        update = df.query("phase == 'optimizer' and category == 'grads'")["bytes"].item()
        assert update == grads[-1]

    def test_gradients_of_the_embeddings_stay_in_the_stored_dtype_under_accumulation_or_bf16_weights(self):
        model = _lane_aligned_gpt(layers=4)
        cost = model_cost(model)
        for kw, per_param in (({"accumulation": 4}, 4.0), ({"weight_dtype": "bf16"}, 2.0)):
            df = _plan(cost, model, **kw).timeline.to_pandas()
            assert df.query("phase == 'optimizer' and category == 'grads'")["bytes"].item() == cost.params * per_param

    @pytest.mark.parametrize("fsdp", [1, 4])
    def test_accumulation_holds_the_accumulator_beside_each_microbatchs_own_gradients(self, fsdp):
        """The accumulator (zeros shaped, typed and sharded as the parameters) lives from the first microbatch to the
        update; in a microbatch's backward its own gradients live beside it, as without accumulation."""
        model = _lane_aligned_gpt(layers=4)
        cost = model_cost(model)
        plain = _plan(cost, model, fsdp=fsdp).timeline.to_pandas()
        acc = _plan(cost, model, fsdp=fsdp, accumulation=4).timeline.to_pandas()
        params_b = cost.params * 4.0 / fsdp
        grads = lambda df, phase: df.query("phase == @phase and category == 'grads'")["bytes"].to_numpy()  # noqa: E731
        for phase in ("forward", "loss"):
            assert (grads(acc, phase) == params_b).all() and (grads(plain, phase) == 0.0).all()
        plain_bwd, acc_bwd = grads(plain, "backward"), grads(acc, "backward")
        # the microbatch's gradients keep the stored dtype (fp32): its tables are added to the fp32 accumulator
        assert (acc_bwd - params_b >= plain_bwd).all() and acc_bwd[-1] == 2 * params_b
        assert grads(acc, "optimizer").item() == params_b

    def test_mlp_activations_are_layer_inputs(self):
        model = MlpModel(kind="mlp", layer_sizes=[1024, 4096, 1024])
        cost = model_cost(model)
        plan = _plan(cost, model, per_chip_batch=8)
        # saved per sample: each layer's input in bf16 (1024 + 4096), the first of them the step's input; XLA derives
        # ReLU's mask from the next input; and the int32 label
        expected = 8 * (1024 + 4096) * 2 + 8 * 4
        assert plan.timeline.to_pandas().query("phase == 'loss' and category == 'activations'")["bytes"].item() == expected

    def test_a_replicated_mlp_writes_its_input_gradients_in_place(self):
        """Without remat and with replicated weights the backward's peak is the forward's end (saved inputs and the
        logits); over FSDP each layer's backward adds its input gradient."""
        model = MlpModel(kind="mlp", layer_sizes=[1024, 1024, 1024, 1000])
        cost = model_cost(model)

        def acts(fsdp: int):
            df = _plan(cost, model, per_chip_batch=64, remat="none", fsdp=fsdp).timeline.to_pandas()
            return df.query("category == 'activations'").groupby("phase")["bytes"].max()

        replicated, sharded = acts(1), acts(4)
        assert replicated["backward"] <= replicated["loss"] + 64 * 1000 * 2
        assert sharded["backward"] - replicated["backward"] == 64 * 1024 * 2

    @pytest.mark.parametrize("seq_len, block", [(2048, 512), (512, 512), (384, 384), (640, 128), (256, 256)])
    def test_the_flash_block_is_512_or_the_sequence_halved_until_it_divides_it(self, seq_len, block):
        assert flash_block(seq_len) == block

    def test_the_flash_backward_statistics_are_fp32_rows_broadcast_along_lanes(self):
        # m and l at 128 lanes, di at the dQ kernel's block (512 at 2,048 positions): 4 bytes each, per head
        model = _gpt(d_model=2048, heads=16, seq_len=2048, attention="flash")
        assert flash_backward_stat_bytes_per_token(model) == 4 * 16 * (128 + 128 + 512)

    @pytest.mark.parametrize("remat", ["none", "minimal", "full"])
    def test_a_flash_layers_backward_peaks_at_its_attention_or_its_mlp(self, remat):
        """Without remat the statistics add to the layer's backward; with a recomputed layer its backward peaks at
        the larger of the MLP phase (the whole layer) and the attention phase (the MLP freed, the statistics live)."""
        units_of = lambda m: layer_units(model_cost(m))  # noqa: E731
        from engine.memory.activations import materialized_layer_elements, unit_activations

        b = 8
        for heads in (16, 64):  # few heads: the MLP phase; many: the attention phase
            model = _gpt(d_model=2048, heads=heads, d_ff=8192, seq_len=2048, attention="flash")
            cost = model_cost(model)
            _, recompute, _ = unit_activations(cost, model, b, "bf16", remat, 1, units_of(model))
            tokens = b * 2048
            stats = tokens * flash_backward_stat_bytes_per_token(model)
            if remat == "none":
                assert recompute[1] == pytest.approx(stats)
                continue
            layer = transformer_layer_activation_bytes(model, b, "bf16", remat)
            whole = max(0.0, tokens * materialized_layer_elements(model) * 2 - layer)
            attention = max(0.0, tokens * (materialized_layer_elements(model) - 2 * 8192) * 2 - layer) + stats
            assert recompute[1] == pytest.approx(max(whole, attention))

    def test_usable_bytes_decide_oom_not_capacity(self):
        model = _gpt()
        cost = model_cost(model)
        peak = _plan(cost, model).peak_bytes
        assert not _plan(cost, model, capacity_bytes=peak * 1.01, usable_bytes=peak * 1.01).oom
        assert _plan(cost, model, capacity_bytes=peak * 1.01, usable_bytes=peak * 0.99).oom


def _gpt3(topology: str, fsdp: int, global_batch: int, remat: str = "full") -> dict:
    # GPT-3 175B: Brown et al. 2020, Table 2.1
    return {
        "name": "gpt3",
        "pod": {"chip": "tpu-v5p", "topology": topology},
        "model": {"kind": "transformer", "layers": 96, "d_model": 12288, "heads": 96, "d_ff": 49152, "vocab": 50257, "seq_len": 2048},
        "training": {"global_batch": global_batch, "steps": 2, "optimizer": "adam", "remat": remat},
        "parallelism": {"fsdp": fsdp},
    }


def test_gpt3_175b_adam_too_few_chips_is_oom_with_detail():
    r = simulate(scenario_from_dict(_gpt3("2x2x4", 16, 16)))
    f = r.facts
    assert 174e9 < f.params < 176e9
    assert f.oom
    d = f.extra["oom_detail"]
    print(f"GPT-3 175B on 16 v5p: peak {f.peak_hbm_bytes / GIB:.1f} GiB, over by {d['over_bytes'] / GIB:.1f} GiB, term {d['term']}")
    # 175e9 x 16 bytes / 16 chips = 175 GB of model states alone, vs 95 GiB of HBM
    assert d["term"] == "optimizer" and d["chip"] == 0
    assert d["over_bytes"] == pytest.approx(f.peak_hbm_bytes - f.extra["hbm_usable_bytes"])
    assert any("bigger slice" in s for s in d["suggestions"])
    assert r.trace.extra["chip_memory"].num_rows == 16


def test_gpt3_175b_adam_fits_on_enough_chips():
    r = simulate(scenario_from_dict(_gpt3("4x4x8", 128, 128)))
    assert not r.facts.oom and r.facts.extra["oom_detail"] is None
    assert r.facts.peak_hbm_bytes < load_catalog()["tpu-v5p"].hbm_bytes


def _resnet_v3(remat: str = "none"):
    from engine import scenario_from_dict

    return scenario_from_dict({"name": "r50", "pod": {"chip": "tpu-v3", "topology": "4x4"}, "model": {"kind": "resnet50"},
                               "training": {"global_batch": 16 * 64, "steps": 2, "optimizer": "momentum", "remat": remat}})  # fmt: skip


def test_resnet_keeps_each_convolutions_output_and_each_blocks_output():
    """ResNet-50 without remat, 64 images per chip, bf16: at the peak, what XLA keeps of the step: each convolution's
    output (the batch norm and ReLU are recomputed from it), each block's output (the 16 conv3-sized outputs of the
    residual add) and the stem's normalised (112 x 112 x 64) and max-pooled (56 x 56 x 64) outputs, beside the step's
    images (the program's argument); not every
    convolution's input too. With 64 channels and 64 images on the device, whichever is minor fills half of each
    128-lane tile: the first stage's maps take twice their elements."""
    from engine import simulate
    from engine.model.models import model_cost

    s = _resnet_v3()
    ops = model_cost(s.model).ops
    lanes = np.where(ops.n < 128, 2.0, 1.0)
    out = ops.m * ops.n * ops.count * lanes
    convs = float(out[:-1].sum())  # every row but the classifier
    blocks = float(sum(o for name, o in zip(ops.names, out) if name.endswith(".conv3")))
    per_image = convs + blocks + 2 * (112 * 112 * 64 + 56 * 56 * 64)
    got = simulate(s).facts.hbm_breakdown_bytes["activations"]
    # with the step's bf16 images and int32 labels; the peak adds the last block's conv3 gradients in flight (under 1%)
    assert got == pytest.approx((per_image * 2 + 224 * 224 * 3 * 2 + 4) * 64, rel=0.01)
    inputs_and_outputs = float((ops.in_elems_per_repeat * ops.count * np.where(ops.in_channels < 128, 2.0, 1.0)).sum()) + convs
    assert got < 0.85 * inputs_and_outputs * 64 * 2


def test_resnet_full_remat_keeps_block_inputs_and_recomputes_one_block():
    """One checkpoint per bottleneck block: far less than without remat, more than the block inputs alone."""
    from engine import simulate
    from engine.model.models import model_cost

    none = simulate(_resnet_v3()).facts.hbm_breakdown_bytes["activations"]
    full = simulate(_resnet_v3("full")).facts.hbm_breakdown_bytes["activations"]
    ops = model_cost(_resnet_v3().model).ops
    block_inputs = float(sum(i for name, i in zip(ops.names, ops.in_elems_per_repeat) if name.endswith(".conv1"))) * 64 * 2
    assert block_inputs < full < 0.55 * none



def _resnet_v5e(per_chip_batch: int, remat: str = "none"):
    from engine import scenario_from_dict

    return scenario_from_dict({"name": "r50", "pod": {"chip": "tpu-v5e", "topology": "2x2"}, "model": {"kind": "resnet50"},
                               "training": {"global_batch": 4 * per_chip_batch, "steps": 2, "optimizer": "momentum", "remat": remat},
                               "parallelism": {"data": 4}})  # fmt: skip


@pytest.mark.parametrize("per_chip_batch", [560, 700])
def test_resnet_past_the_limit_fits_by_xlas_rematerialization_down_to_one_checkpoint_per_block(per_chip_batch):
    """Without remat, ResNet-50 past the usable HBM is what XLA's rematerialization brings under it: ``podscope
    xla-check`` of this program at 560 and 700 images per chip compiles both, at 93% and 94% of the usable HBM,
    where Podscope's plan without rematerialization needs 124% and 153%; XLA recomputes down to 95% of it
    (REMAT_TARGET_FRACTION), and the floor is what one checkpoint per block keeps."""
    from engine.model.analytic import evaluate

    none, full = evaluate(_resnet_v5e(per_chip_batch)), evaluate(_resnet_v5e(per_chip_batch, "full"))
    assert full.peak_hbm_bytes < none.usable_hbm_bytes
    assert not none.oom and none.peak_hbm_bytes == pytest.approx(REMAT_TARGET_FRACTION * none.usable_hbm_bytes)
    below = evaluate(_resnet_v5e(400))  # under the limit XLA keeps everything: nothing is recomputed
    assert below.peak_hbm_bytes < 0.95 * below.usable_hbm_bytes


def test_resnet_past_its_per_block_checkpoints_is_called_out_of_memory():
    """Without remat Podscope counts on XLA's rematerialization only down to one checkpoint per block, and calls a
    program past that out of memory. XLA's floor is a little lower: ``podscope xla-check`` of this program at 1,120
    images per chip, whose per-block plan needs 109% of the usable HBM, compiles at 97% of it with 23% more FLOPs per
    image; from 1,131 images (110%) on, XLA refuses it too. Under ``full`` the floor also leaves out the stem
    convolution's output (:func:`test_resnet_full_past_the_limit_drops_the_stem_convolutions_output`)."""
    from engine.model.analytic import evaluate

    none, full = evaluate(_resnet_v5e(1400)), evaluate(_resnet_v5e(1400, "full"))
    assert full.oom and none.oom
    stem_output_bytes = 1400 * 112 * 112 * 64 * 2
    assert none.peak_hbm_bytes == pytest.approx(full.peak_hbm_bytes + stem_output_bytes, rel=0.05)


def test_resnet_full_past_the_limit_drops_the_stem_convolutions_output():
    """Under one checkpoint per block the stem is outside every checkpoint. The compiler grid's v5e program at 906
    images per chip (Podscope 90% of the usable HBM) compiles at 88% of it, the stem convolution's bf16 output live
    at the peak; at 1,141 (Podscope 110% counting that output) XLA compiles at 95% without it, and refuses 1,956.
    Podscope counts on that one tensor past the limit and no further."""
    from engine.model.analytic import evaluate

    below, past, far = (evaluate(_resnet_v5e(b, "full")) for b in (906, 1141, 1956))
    assert not below.oom and below.peak_hbm_bytes < 0.95 * below.usable_hbm_bytes
    # the plan counting every tensor (no limit to recompute for) is past the limit at 1,141 images: the fit there is the
    # dropped output (its feature map padded to the TPU layout: 1,141 images take 1,152 lanes)
    kept = past.costs.replan(usable_bytes=float("inf")).peak_bytes
    assert kept > 1.05 * past.usable_hbm_bytes
    assert not past.oom and past.peak_hbm_bytes == pytest.approx(kept - 1152 * 112 * 112 * 64 * 2)
    stem_output_bytes = 1956 * 112 * 112 * 64 * 2
    assert far.oom and far.peak_hbm_bytes > far.usable_hbm_bytes + 0.5 * stem_output_bytes

def _narrow_mlp_v5e(per_chip_batch: int, microbatches: int = 1):
    from engine import scenario_from_dict

    training = {"global_batch": 4 * per_chip_batch, "steps": 2, "optimizer": "adam", "remat": "none"}
    if microbatches > 1:
        training["microbatches"] = microbatches
    return scenario_from_dict({"name": "mlp", "pod": {"chip": "tpu-v5e", "topology": "2x2"},
                               "model": {"kind": "mlp", "layer_sizes": [1024] * 9 + [1000]}, "training": training,
                               "parallelism": {"data": 4}})  # fmt: skip


def test_an_mlp_past_the_limit_fits_by_recomputing_every_other_hidden_input():
    """The compiler grid's data-parallel narrow MLP on v5e without remat: at 889,088 samples per chip Podscope's count of
    every kept tensor needs 110% of the usable HBM and XLA compiles it at 77% of it, having recomputed three hidden
    layers' inputs from the layers below: the fewest that bring its count (the last layer's input gradient as a buffer
    of its own) under 95% of the usable HBM. With 4 microbatches XLA refuses 3,225,600 samples per chip at 128% after
    recomputing, and Podscope, dropping at most half of the hidden inputs, calls it out of memory."""
    from engine.model.analytic import evaluate

    activation = 1024 * 2  # one hidden layer's input per sample, bf16

    def kept(estimate) -> float:  # the plan counting every tensor: no limit to recompute for
        return estimate.costs.replan(usable_bytes=float("inf")).peak_bytes

    below, past, far = (evaluate(_narrow_mlp_v5e(b)) for b in (682_240, 889_088, 1_700_000))
    assert below.peak_hbm_bytes == kept(below)  # 85% of the usable HBM: nothing recomputed
    assert kept(past) > 1.05 * past.usable_hbm_bytes
    assert not past.oom and past.peak_hbm_bytes == pytest.approx(kept(past) - 3 * activation * 889_088)
    # half of the 8 hidden layers' inputs is the most Podscope counts on (the peak, without them, a little later)
    assert far.oom and far.peak_hbm_bytes == pytest.approx(kept(far) - 4 * activation * 1_700_000, rel=0.01)
    assert evaluate(_narrow_mlp_v5e(3_225_600, microbatches=4)).oom


def test_fsdp_temporaries_are_two_weight_tensors_not_two_layers():
    """GSPMD gathers one weight at a time: the forward's temporaries are the two largest weights.

    d_model 128, d_ff 256, one head of 128, vocab 128, gelu: per layer the weights are Q, K, V
    128x128 each, out 128x128, MLP in 128x256 and MLP out 256x128; the (un)embedding 128x128. The
    two largest are the MLP matrices, 2 x 32,768 params, gathered in bf16 (2 B): 131,072 bytes,
    whatever the layer count (two whole layers would be 2 x 131,072 params). Beside them, the bf16
    copy of every layer weight's shard (the scanned stack's cast): the layers' params / 2 x 2 B.
    """
    model = _lane_aligned_gpt(layers=6)
    cost = model_cost(model)
    assert cost.params == 822_528
    plan = _plan(cost, model, fsdp=2)
    df = plan.timeline.to_pandas()
    fwd = df[(df.phase == "forward") & (df.category == "temporary")]["bytes"]
    # the cast stack holds the layers' weights only: the (un)embedding is cast where it is used, outside the loop
    units = layer_units(cost)
    layers_params = sum(u.params for u in units[1:-1])
    assert layers_params == 6 * (4 * 128 * 128 + 2 * 128 * 256)  # Q, K, V, out, MLP (norms go with the embedding unit)
    assert (fwd == 2 * 128 * 256 * 2 + layers_params).all()
    # backward: plus one layer's two largest weight gradients, unsharded, in the wire dtype (bf16)
    bwd = df[(df.phase == "backward") & (df.category == "temporary")]["bytes"].to_numpy()
    assert bwd.max() == 2 * 128 * 256 * 2 + 2 * 128 * 256 * 2 + layers_params


def test_inside_the_loops_the_weights_in_flight_are_the_layers_not_the_vocabulary_tables():
    """With a vocabulary table larger than any layer weight, the forward rows of the layers hold the layer's two largest
    weights gathered (the MLP matrices, 2 x 128 x 256 params in bf16), the loss row the two tables (2 x 4096 x 128)."""
    model = _lane_aligned_gpt(layers=4, vocab=4096)
    cost = model_cost(model)
    units = layer_units(cost)
    layers_params = sum(u.params for u in units[1:-1])
    df = _plan(cost, model, fsdp=2).timeline.to_pandas()
    tmp = df[df.category == "temporary"]
    forward = tmp[tmp.phase == "forward"]["bytes"].to_numpy()
    assert (forward[1:-1] == 2 * 128 * 256 * 2 + layers_params).all()  # the layers' units
    tables_b = (units[0].params + units[-1].params) * 2  # the embedding unit (its table and the norms) and the unembedding
    assert units[-1].params == 4096 * 128
    assert forward[0] == forward[-1] == tables_b + layers_params
    assert tmp[tmp.phase == "loss"]["bytes"].item() >= tables_b + layers_params


@pytest.mark.parametrize("fsdp, devices_per_chip, fsdp_shard, buffers", [
    (1, 1, "all", 1), (4, 1, "all", 1), (4, 2, "all", 2), (8, 1, "all", 2), (32, 1, "all", 2), (16, 2, "all", 2),
    (64, 1, "all", 1), (256, 1, "all", 1), (32, 2, "all", 1),  # no loop over 64 devices or more
    (8, 1, "optimizer", 1),  # gradients all-reduced, not reduce-scattered: no loop over the shards
])
def test_logits_gradient_is_a_buffer_beside_the_logits_over_eight_to_thirty_two_fsdp_devices(fsdp, devices_per_chip, fsdp_shard,
                                                                                             buffers):  # fmt: skip
    """At the loss XLA holds the logits in the compute dtype; over 8 to 32 devices on the FSDP axis, where it loops
    over the shards for the unembedding's weight gradient, their gradient beside them (libtpu's buffer assignment;
    ``xla-check``'s loop count: none from 64 devices on)."""
    model = _lane_aligned_gpt(layers=2, vocab=4096)
    cost = model_cost(model)
    logits = 4 * model.seq_len * model.vocab * 2.0  # per_chip_batch 4, bf16
    df = _plan(cost, model, fsdp=fsdp, devices_per_chip=devices_per_chip, fsdp_shard=fsdp_shard).timeline.to_pandas()
    fwd = df.query("phase == 'forward' and category == 'temporary'")["bytes"].iloc[-1]
    loss = df.query("phase == 'loss' and category == 'temporary'")["bytes"].iloc[0]
    assert loss - fwd == buffers * logits


def test_a_masked_lms_logits_are_its_loss_positions_only():
    """A masked LM's head gathers the positions its loss reads (BERT's gather_indexes) before the unembedding: the
    logits at the loss are those positions' rows, a quarter of the sequence's here."""
    model = _lane_aligned_gpt(layers=2, vocab=4096)
    masked = model.model_copy(update={"loss_positions": model.seq_len // 4})
    at_loss = []
    for m in (model, masked):
        df = _plan(model_cost(m), m).timeline.to_pandas()
        fwd = df.query("phase == 'forward' and category == 'temporary'")["bytes"].iloc[-1]
        at_loss.append(df.query("phase == 'loss' and category == 'temporary'")["bytes"].iloc[0] - fwd)
    assert at_loss[0] == 4 * model.seq_len * model.vocab * 2.0  # per_chip_batch 4, bf16
    assert at_loss[1] == at_loss[0] / 4


@pytest.mark.parametrize("per_chip_batch, devices_per_chip, held", [(1, 1, 1), (1, 2, 2), (3, 2, 4), (4, 2, 4)])
def test_a_chips_batch_splits_over_its_devices_in_whole_padded_shards(per_chip_batch, devices_per_chip, held):
    """GSPMD shards b samples over the chip's devices ceil(b / devices) at a time, so a device holds at least one."""
    model = _lane_aligned_gpt(layers=2)
    cost = model_cost(model)
    def saved(b: int, dpc: int) -> float:
        df = _plan(cost, model, per_chip_batch=b, devices_per_chip=dpc, fsdp=4).timeline.to_pandas()
        return float(df.query("phase == 'loss' and category == 'activations'")["bytes"].iloc[0])
    assert saved(per_chip_batch, devices_per_chip) == pytest.approx(held * saved(1, 1))


class TestUnrolled:
    """An unrolled model (MLP): gradients live from their matmul to their in-place update; under FSDP the
    forward's gathered weights stay until their backward use (XLA's CSE of the two all-gathers)."""

    model = MlpModel(kind="mlp", layer_sizes=[1024, 4096, 4096, 1024])

    def _frame(self, **kw):
        return _plan(model_cost(self.model), self.model, per_chip_batch=8, **kw).timeline.to_pandas()

    def test_no_gradient_accumulates_and_two_are_live_in_bf16(self):
        df = self._frame()
        assert (df.query("category == 'grads'")["bytes"] == 0.0).all()
        bwd = df.query("phase == 'backward' and category == 'temporary'")["bytes"].to_numpy()
        # units' parameters: the first layer with every bias (1024 x 4096 + 9,216), 4096 x 4096, 4096 x 1024
        first, middle, last = 1024 * 4096 + 9216, 4096 * 4096, 4096 * 1024
        casts = 2 * (middle + first)  # the two largest weights cast to bf16, in use and prefetched
        # backward from the last layer: its bf16 gradient alone, then each with the one reduced just before
        assert bwd.tolist() == [casts + 2 * last, casts + 2 * (middle + last), casts + 2 * (first + middle)]

    def test_where_gradient_all_reduces_overlap_compute_every_reduced_gradient_is_live_twice_up_to_the_limit(self):
        """Asynchronous all-reduces (``xla_async_all_reduce``) hold each gradient, operand and result, from its matmul
        to the update; the scheduler holds no more in flight than its memory limit leaves room for."""
        first, middle, last = 1024 * 4096 + 9216, 4096 * 4096, 4096 * 1024
        casts = 2 * (middle + first)
        bwd = self._frame(async_all_reduce=True).query("phase == 'backward' and category == 'temporary'")["bytes"]
        assert bwd.tolist() == [casts + 4 * last, casts + 4 * (middle + last), casts + 4 * (first + middle + last)]
        cost = model_cost(self.model)
        blocking = _plan(cost, self.model, per_chip_batch=8)
        usable = blocking.peak_bytes / REMAT_TARGET_FRACTION + 2 * middle  # room for one more gradient in flight
        tight = _plan(cost, self.model, per_chip_batch=8, async_all_reduce=True, usable_bytes=usable, capacity_bytes=usable)
        assert tight.peak_bytes == pytest.approx(REMAT_TARGET_FRACTION * usable) and not tight.oom

    def test_fsdp_keeps_the_gathered_weights_from_forward_to_backward_but_not_under_full_remat(self):
        fwd = self._frame(fsdp=4).query("phase == 'forward' and category == 'temporary'")["bytes"].to_numpy()
        assert (np.diff(fwd) > 0).all()  # one more gathered weight per layer
        full = self._frame(fsdp=4, remat="full").query("phase == 'forward' and category == 'temporary'")["bytes"]
        assert full.nunique() == 1 and full.iloc[0] < fwd[-1]

    @pytest.mark.parametrize("fsdp, remat, async_all_gather, all_held", [
        (4, "none", False, False), (8, "none", False, True), (8, "none", True, True), (16, "none", False, True),
        (8, "full", False, True), (8, "full", True, False), (4, "full", False, False)])  # fmt: skip
    def test_over_eight_fsdp_devices_every_input_and_output_gradient_waits_for_the_weight_loops_unless_gathers_overlap(
            self, fsdp, remat, async_all_gather, all_held):  # fmt: skip
        """From 8 FSDP devices XLA computes each weight gradient as a loop over the shards, scheduled after the chain
        of input gradients: at the first layer's backward every layer's input is still held, and the output gradient of
        every layer after it, beside what two FSDP devices' schedule holds there. Under ``full`` the recomputed layers
        gather their weights again, and where XLA overlaps those gathers with compute (``xla_async_all_gather``) it
        interleaves the loops with the chain instead."""
        b = 8

        def first_layer_backward(fsdp: int) -> float:
            frame = self._frame(fsdp=fsdp, remat=remat, async_all_gather=async_all_gather)
            bwd = frame.query("phase == 'backward' and category == 'activations'")["bytes"]
            return float(bwd.iloc[-1])

        later_inputs = 2 * b * (4096 + 4096)  # bf16 inputs of the second and third layers
        later_out_grads = 2 * b * (4096 + 1024)  # the second and third layers' output gradients
        extra = later_inputs + later_out_grads if all_held else 0
        assert first_layer_backward(fsdp) - first_layer_backward(2) == extra

    def test_rematerialization_gathers_again_rather_than_pass_the_limit(self):
        deep = MlpModel(kind="mlp", layer_sizes=[1024, *[4096] * 8, 1024])
        cost = model_cost(deep)
        roomy = _plan(cost, deep, per_chip_batch=8, fsdp=4)
        tight = _plan(cost, deep, per_chip_batch=8, fsdp=4, usable_bytes=roomy.peak_bytes * 0.8,
                      capacity_bytes=roomy.peak_bytes)  # fmt: skip
        # down to the share of the usable HBM XLA's rematerialization keeps the program under
        assert not roomy.oom and not tight.oom
        assert REMAT_TARGET_FRACTION * tight.usable_bytes <= tight.peak_bytes < tight.usable_bytes
        states = cost.params / 4 * 12  # fp32 weights and Adam moments, sharded four ways
        impossible = _plan(cost, deep, per_chip_batch=8, fsdp=4, usable_bytes=states, capacity_bytes=states)
        assert impossible.oom  # gathering again cannot take the model states below the limit


@pytest.mark.parametrize(
    "model, parallelism, needle",
    [
        ({"kind": "mlp", "layer_sizes": [64, 64, 10]}, {}, "the mlp model has no named projections"),
        ({"kind": "resnet50"}, {}, "the resnet50 model has no named projections"),
        ({"experts": 8, "experts_per_token": 2}, {}, "mixture-of-experts"),
        ({}, {"pipeline": 2, "fsdp": 2}, "pipeline loop"),
    ],
)
def test_a_named_save_is_a_dense_transformers_policy(model, parallelism, needle):
    from engine import ScenarioError

    raw = _gpt3("2x2x1", 4, 8, remat="save_qkv_proj")
    raw["model"] = {**raw["model"], "layers": 4, **model} if "kind" not in model else model
    raw["parallelism"] = parallelism or raw["parallelism"]
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict(raw)
    problems = dict(e.value.problems)
    assert "training.remat" in problems and needle in problems["training.remat"] and "valid here: none, full" in problems["training.remat"]


def test_out_of_memory_under_a_named_save_suggests_the_saves_that_keep_less_then_full():
    r = simulate(scenario_from_dict(_gpt3("2x2x4", 16, 64, remat="save_dot_except_mlp")))
    suggestions = r.facts.extra["oom_detail"]["suggestions"]
    remats = [s.split("'")[1] for s in suggestions if s.startswith("training.remat")]
    assert remats == ["save_qkv_proj", "full"]
    peaks = [float(s.split("peak ")[1].split(" GiB")[0]) for s in suggestions if s.startswith("training.remat")]
    assert peaks[0] > peaks[1] and r.facts.peak_hbm_bytes / GIB > peaks[0]  # each keeps less than the one before
    # save_dot_except_mlpwi keeps what save_dot_except_mlp does: that policy is no suggestion from it
    r = simulate(scenario_from_dict(_gpt3("2x2x4", 16, 64, remat="save_dot_except_mlpwi")))
    remats = [s.split("'")[1] for s in r.facts.extra["oom_detail"]["suggestions"] if s.startswith("training.remat")]
    assert remats == ["save_qkv_proj", "full"]


def test_every_named_save_is_a_scenario_value_and_ranked_for_the_out_of_memory_advice():
    from typing import get_args

    from engine.memory.oom import NAMED_SAVES_BY_SIZE
    from engine.model.compute import SAVED_OPS_BY_REMAT
    from engine.scenario.sections import TrainingSection

    assert sorted(NAMED_SAVES_BY_SIZE) == sorted(SAVED_OPS_BY_REMAT)
    assert set(SAVED_OPS_BY_REMAT) <= set(get_args(TrainingSection.model_fields["remat"].annotation))
