"""Known-answer tests for model parameter counts and FLOPs, worked by hand."""

from __future__ import annotations

import pytest

from engine.model.models import model_cost
from engine.scenario import MlpModel, ResNet50Model, TransformerModel


def test_keras_dense_example_counts():
    # Dense(128) on 784 inputs + Dense(10): Keras model.summary() reports 101,770 params.
    cost = model_cost(MlpModel(kind="mlp", layer_sizes=[784, 128, 10]))
    assert cost.params == 784 * 128 + 128 + 128 * 10 + 10 == 101_770
    assert cost.fwd_flops_per_sample == 2 * (784 * 128 + 128 * 10)
    assert cost.train_flops_per_sample == 3 * cost.fwd_flops_per_sample
    assert cost.tokens_per_sample is None


def test_resnet50_matches_reference_counts():
    cost = model_cost(ResNet50Model(kind="resnet50"))
    # torchvision's resnet50 (ResNet v1.5, with batch-norm parameters): 25,557,032 parameters.
    assert cost.params == 25_557_032
    # torchvision lists 4.09 G multiply-accumulates per 224x224 image: 2 FLOPs each.
    assert cost.fwd_flops_per_sample == pytest.approx(2 * 4.09e9, rel=0.01)


def test_tiny_transformer_by_hand():
    m = TransformerModel(kind="transformer", layers=2, d_model=8, heads=2, d_ff=16, vocab=10, seq_len=4)
    cost = model_cost(m)
    q = 4
    per_layer = 8 * (2 + 2 * 2) * q + 2 * q * 8 + 8 * 16 + 16 * 8 + 2 * 2 * 8
    assert per_layer == 544
    assert cost.params == 2 * per_layer + 2 * 10 * 8 + 2 * 8 == 1264
    # forward FLOPs per sequence: 2 x (matmul weights used per token) x T + attention 4 x H x Q x T per token
    matmul_weights = 2 * (8 * 6 * q + 2 * q * 8 + 8 * 16 + 16 * 8) + 8 * 10
    attention = 2 * 4 * 2 * q * 4  # layers x (2 matmuls x 2 FLOPs) x H x Q x T
    assert cost.fwd_flops_per_sample == 4 * (2 * matmul_weights + attention)
    assert cost.tokens_per_sample == 4


def test_swiglu_and_gqa_change_counts():
    base = dict(kind="transformer", layers=1, d_model=64, heads=8, d_ff=128, vocab=100, seq_len=16)
    plain = model_cost(TransformerModel(**base)).params
    swiglu = model_cost(TransformerModel(**base, mlp="swiglu")).params
    gqa = model_cost(TransformerModel(**base, kv_heads=2)).params
    assert swiglu - plain == 64 * 128  # one extra d x d_ff gate matrix
    assert plain - gqa == 2 * 64 * (8 - 2) * 8  # K and V shrink from 8 to 2 heads of 8 dims
    tied = model_cost(TransformerModel(**base, tied_embeddings=True)).params
    assert plain - tied == 100 * 64


def test_large_transformer_is_close_to_6n():
    # Kaplan et al.: training FLOPs per token ~ 6N when d_model >> seq_len.
    m = TransformerModel(kind="transformer", layers=48, d_model=8192, heads=64, d_ff=32768, vocab=50000, seq_len=1024)
    cost = model_cost(m)
    per_token = cost.train_flops_per_sample / 1024
    assert per_token == pytest.approx(6 * cost.params, rel=0.05)


def test_convolutions_read_their_input_once_not_the_im2col_matrix():
    ops = model_cost(ResNet50Model(kind="resnet50")).ops
    i = {name: j for j, name in enumerate(ops.names)}
    # Stem: the 224x224x3 image is read once; its im2col matrix is 112*112 rows x 7*7*3 columns.
    assert ops.in_elems_per_repeat[i["stem"]] == 224 * 224 * 3
    assert ops.m[i["stem"]] * ops.k[i["stem"]] == 112 * 112 * 147
    # First 3x3 of stage 2 (stride 2 on the 3x3, ResNet v1.5): reads the 56x56x128 map, writes 28x28.
    assert ops.in_elems_per_repeat[i["s1b0.conv2"]] == 56 * 56 * 128
    assert ops.m[i["s1b0.conv2"]] == 28 * 28
    # A 1x1 convolution's input is its GEMM input.
    j = i["s0b0.conv3"]
    assert ops.in_elems_per_repeat[j] == ops.m[j] * ops.k[j]


def test_transformer_gemm_inputs_default_to_m_by_k():
    ops = model_cost(TransformerModel(kind="transformer", layers=1, d_model=8, heads=2, d_ff=16, vocab=10, seq_len=4)).ops
    assert (ops.in_elems_per_repeat == ops.m * ops.k).all()


def test_masked_lm_head_projects_only_the_positions_the_loss_reads():
    # BERT's pre-training head gathers its masked positions before the output layer: with 2 of 4 positions read, the
    # unembedding (2 x d x vocab FLOPs per position) runs over 2 positions a sequence and the layers over all 4
    base = dict(kind="transformer", layers=2, d_model=8, heads=2, d_ff=16, vocab=10, seq_len=4)
    every, masked = model_cost(TransformerModel(**base)), model_cost(TransformerModel(**base, loss_positions=2))
    assert every.fwd_flops_per_sample - masked.fwd_flops_per_sample == 2 * (4 - 2) * 8 * 10
    assert masked.params == every.params and masked.tokens_per_sample == every.tokens_per_sample == 4
    assert model_cost(TransformerModel(**base, loss_positions=4)).fwd_flops_per_sample == every.fwd_flops_per_sample


def test_loss_positions_beyond_the_sequence_are_refused():
    from engine import ScenarioError, scenario_from_dict

    raw = {"name": "mlm", "pod": {"chip": "tpu-v5e", "topology": "2x2"},
           "model": {"kind": "transformer", "layers": 2, "d_model": 8, "heads": 2, "d_ff": 16, "vocab": 10, "seq_len": 4,
                     "loss_positions": 5},
           "training": {"global_batch": 4, "steps": 1}, "parallelism": {"data": 4}}  # fmt: skip
    with pytest.raises(ScenarioError, match=r"loss_positions \(5\) exceeds seq_len \(4\); valid: 1 \.\. 4"):
        scenario_from_dict(raw)
    raw["model"]["loss_positions"] = 0
    with pytest.raises(ScenarioError, match="model.loss_positions"):
        scenario_from_dict(raw)
