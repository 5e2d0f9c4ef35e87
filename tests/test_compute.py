"""The per-op roofline, on cases small enough to work by hand."""

from __future__ import annotations

import dataclasses


import pytest

from engine import load_catalog
from engine.model.compute import step_compute
from engine.model.models import ModelCost, _ops, model_cost
from engine.scenario import MlpModel, TransformerModel


def test_single_dense_layer_memory_bound(ideal_calibration):
    v4 = load_catalog()["tpu-v4"]
    cost = model_cost(MlpModel(kind="mlp", layer_sizes=[1024, 4096]))
    b = 32
    c = step_compute(cost, v4, ideal_calibration, per_chip_batch=b, precision="bf16", remat="none")
    # FLOPs on MXU-padded shapes: the 32 rows pad to 128.
    t_flops = 2 * 128 * 1024 * 4096 / 275e12
    # bytes: input, weights, output, plus bias+activation touching the output twice; bf16 = 2 bytes
    t_bytes = (b * 1024 + 1024 * 4096 + b * 4096 + b * 2 * 4096) * 2 / 1200e9
    assert t_bytes > t_flops
    assert c.fwd_bwd_s == pytest.approx(3 * t_bytes)
    assert c.memory_s == pytest.approx(c.fwd_bwd_s) and c.matmul_s == 0
    assert c.model_flops == 3 * 2 * b * 1024 * 4096


def test_large_batch_becomes_compute_bound_and_remat_costs_a_forward(ideal_calibration):
    v4 = load_catalog()["tpu-v4"]
    cost = model_cost(MlpModel(kind="mlp", layer_sizes=[4096, 4096]))
    c = step_compute(cost, v4, ideal_calibration, per_chip_batch=8192, precision="bf16", remat="none")
    flops = 2 * 8192 * 4096 * 4096
    assert c.fwd_bwd_s == pytest.approx(3 * flops / 275e12)  # the bias and activation ride in the matmul's fusion
    r = step_compute(cost, v4, ideal_calibration, per_chip_batch=8192, precision="bf16", remat="full")
    assert r.fwd_bwd_s == pytest.approx(4 * flops / 275e12)
    assert r.hardware_flops == pytest.approx(4 / 3 * r.model_flops)


def test_int8_uses_the_int8_peak(ideal_calibration):
    v5e = load_catalog()["tpu-v5e"]
    cost = model_cost(MlpModel(kind="mlp", layer_sizes=[8192, 8192]))
    bf16 = step_compute(cost, v5e, ideal_calibration, per_chip_batch=16384, precision="bf16", remat="none")
    int8 = step_compute(cost, v5e, ideal_calibration, per_chip_batch=16384, precision="int8", remat="none")
    assert bf16.fwd_bwd_s / int8.fwd_bwd_s == pytest.approx(393 / 197, rel=1e-6)


def test_tensor_parallelism_splits_attention_by_heads_not_head_dim(ideal_calibration):
    """Megatron TP gives each chip whole heads: the attention core keeps its 128-wide GEMMs.

    Splitting head_dim 8 ways instead would pad every score/value GEMM from 16 to the MXU's
    128 columns (8x the FLOPs) and make tensor-parallel runs ~10-20% too slow.
    """
    v5p = load_catalog()["tpu-v5p"]
    model = TransformerModel(kind="transformer", layers=2, d_model=8192, heads=64, head_dim=128, d_ff=28672,
                             vocab=32768, seq_len=2048, mlp="swiglu")  # fmt: skip
    cost = model_cost(model)
    one = step_compute(cost, v5p, ideal_calibration, per_chip_batch=8, precision="bf16", remat="none", tensor=1)
    eight = step_compute(cost, v5p, ideal_calibration, per_chip_batch=8, precision="bf16", remat="none", tensor=8)
    assert eight.hardware_flops * 8 == pytest.approx(one.hardware_flops)
    # every dimension a multiple of 128 on both sides: no padding, so the work splits exactly
    assert eight.matmul_s * 8 == pytest.approx(one.matmul_s, rel=1e-9)
    assert eight.fwd_bwd_s * 8 == pytest.approx(one.fwd_bwd_s, rel=1e-9)


def test_tensor_degree_must_divide_the_heads():
    from engine.errors import ScenarioError
    from engine.scenario import scenario_from_dict

    raw = {
        "name": "tp", "pod": {"chip": "tpu-v5p", "topology": "4x4x4"},
        "model": {"kind": "transformer", "layers": 2, "d_model": 1536, "heads": 12, "d_ff": 4096, "vocab": 1000, "seq_len": 128},
        "training": {"global_batch": 64, "steps": 2}, "parallelism": {"fsdp": 8, "tensor": 8},
    }  # fmt: skip
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict(raw, source="tp.toml")
    assert any(key == "parallelism.tensor" and "12 attention heads" in msg and "1, 2, 4" in msg for key, msg in e.value.problems)
    raw["parallelism"] = {"fsdp": 16, "tensor": 4}
    assert scenario_from_dict(raw).parallelism.tensor == 4


def test_flash_attention_keeps_the_scores_off_hbm(ideal_calibration):
    """Flash attention reads Q, K, V and writes the output; the seq x seq scores never reach HBM.

    One layer, one head, seq 4096, head_dim 128, batch 1, bf16, v5e. By hand: standard
    attention moves Q, K (scores in), the 4096^2 scores out, softmax over them (read + write),
    probabilities and V in, output out; flash moves only Q, K, V and the output.
    """
    v5e = load_catalog()["tpu-v5e"]
    t, q = 4096, 128
    model = TransformerModel(kind="transformer", layers=1, d_model=q, heads=1, d_ff=128, vocab=128, seq_len=t)
    std = model_cost(model)
    flash = model_cost(model.model_copy(update={"attention": "flash"}))
    hbm = 819e9  # v5e HBM bytes/s (data/chips.toml)
    bf16 = 2
    std_bytes = (t * q + t * q + t * t) + 2 * t * t + (t * t + t * q + t * q)
    flash_bytes = (t * q + t * q) + (t * q + t * q)
    c_std = step_compute(std, v5e, ideal_calibration, per_chip_batch=1, precision="bf16", remat="none")
    c_flash = step_compute(flash, v5e, ideal_calibration, per_chip_batch=1, precision="bf16", remat="none", flash=True)
    # the attention core is HBM-bound in standard attention and FLOP-bound in flash attention
    attn_flops = 2 * 2 * t * t * q
    assert std_bytes * bf16 / hbm > attn_flops / 197e12 > flash_bytes * bf16 / hbm
    # forward pass difference = the attention core's difference (the other ops are identical)
    assert c_std.forward_s - c_flash.forward_s == pytest.approx(std_bytes * bf16 / hbm - attn_flops / 197e12, rel=1e-9)


def test_separate_tensorcore_devices_pad_their_own_rows(ideal_calibration):
    """A v3 chip is two JAX devices (no megacore): each core runs its half of the batch and pads it to the MXU edge."""
    v3 = load_catalog()["tpu-v3"]
    assert v3.devices_per_chip == 2
    cost = model_cost(MlpModel(kind="mlp", layer_sizes=[4096, 4096]))
    gemm_s = 3 * 2 * 4096 * 4096 / 123e12  # forward and backward of one padded row
    two = step_compute(cost, v3, ideal_calibration, per_chip_batch=264, precision="bf16", remat="none")
    one = step_compute(cost, dataclasses.replace(v3, devices_per_chip=1), ideal_calibration, per_chip_batch=264,
                       precision="bf16", remat="none")  # fmt: skip
    assert two.matmul_s == pytest.approx(2 * 256 * gemm_s)  # 132 rows per core, each padded to 256
    assert one.matmul_s == pytest.approx(384 * gemm_s)  # 264 rows on one device pad to 384
    assert two.model_flops == one.model_flops


def test_catalog_devices_per_chip_follow_jax_chip_table():
    """Each chip's JAX devices: one per TensorCore where JAX's TPU table says the chip has no megacore."""
    pltpu = pytest.importorskip("jax.experimental.pallas.tpu")
    versions = {"tpu-v2": "v2", "tpu-v3": "v3", "tpu-v4": "v4", "tpu-v5e": "v5e", "tpu-v5p": "v5p", "tpu-v6e": "v6e", "tpu7x": "7x"}
    catalog = load_catalog()
    assert set(versions) <= set(catalog)
    for chip, version in versions.items():
        v = pltpu.ChipVersion(version)
        assert catalog[chip].tensorcores_per_chip == v.num_physical_tensor_cores_per_chip, chip
        expected = 1 if v.supports_megacore else v.num_physical_tensor_cores_per_chip
        assert catalog[chip].devices_per_chip == expected, chip


def test_a_pass_that_reduces_first_is_a_fusion_of_its_own(ideal_calibration):
    """A normalisation or softmax after a matmul runs as its own fusion: its HBM time adds to the matmul's, where a
    pointwise pass (bias, activation) rides in the matmul's output fusion, under its FLOPs."""
    v5p = load_catalog()["tpu-v5p"]
    rows = [("op", 2048, 4096, 4096, 1, False, 2 * 2048 * 4096)]  # one sequence of 2048 tokens, two passes over the output
    pointwise = ModelCost("transformer", 4096 * 4096, _ops(rows), 2048, 1, 0, 0.0)
    reducing = ModelCost("transformer", 4096 * 4096, _ops(rows, reduction_pass={"op"}), 2048, 1, 0, 0.0)
    a = step_compute(pointwise, v5p, ideal_calibration, per_chip_batch=4, precision="bf16", remat="none")
    b = step_compute(reducing, v5p, ideal_calibration, per_chip_batch=4, precision="bf16", remat="none")
    flops_s = 2 * 4 * 2048 * 4096 * 4096 / 459e12
    pass_s = 4 * 2 * 2048 * 4096 * 2 / 2765e9  # two bf16 passes over the 4 x 2048 x 4096 output
    assert a.fwd_bwd_s == pytest.approx(3 * flops_s) and a.memory_s == 0.0
    assert b.fwd_bwd_s == pytest.approx(3 * (flops_s + pass_s))
    assert b.matmul_s == pytest.approx(3 * flops_s) and b.memory_s == pytest.approx(3 * pass_s)
