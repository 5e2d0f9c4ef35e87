"""The built-in transformer as a JAX program: the mapping's known answers, the live xla-check, no-JAX installs.

The live tests compile with libtpu on this CPU (``jax[tpu]``, requirements-tpu.txt). Locally
they skip when JAX or libtpu is missing; in CI (``CI=true``) a missing install is a failure.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from engine import load_scenario, scenario_from_dict
from engine.errors import InputError
from engine.hlo.live_range import SOURCES
from engine.memory.states import bytes_per_param
from engine.model.models import model_cost
from profiler import cli, xla_check, xla_reference
from tests.test_tpu_capture import BLOCK_JAX

ROOT = Path(__file__).resolve().parent.parent


def _scenario(model=None, training=None, parallelism=None, chip="tpu-v5p", topology="2x2x1"):
    raw = {
        "name": "xla-ref",
        "pod": {"chip": chip, "topology": topology},
        "model": {"kind": "transformer", "layers": 2, "d_model": 256, "heads": 4, "d_ff": 1024, "vocab": 4096,
                  "seq_len": 256, "attention": "standard", **(model or {})},
        "training": {"global_batch": 8, "steps": 2, **(training or {})},
        "parallelism": parallelism or {"fsdp": 4},
        "sim": {"trace": "summary"},
    }  # fmt: skip
    return scenario_from_dict(raw)


def _norm_biases(s) -> int:
    """Norm parameters Podscope counts that the program does not have: Podscope counts two LayerNorms
    (scale and bias) per layer and a final one; the program has scale-only RMSNorms, one per layer
    with a parallel block."""
    m = s.model
    podscope = (4 * m.layers + 2) * m.d_model
    program = (m.layers * (1 if m.parallel_block else 2) + 1) * m.d_model
    return podscope - program


# --- known answers (no JAX) -------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        {},
        {"mlp": "swiglu"},
        {"tied_embeddings": True},
        {"heads": 8, "kv_heads": 2, "head_dim": 64},
        {"parallel_block": True, "mlp": "relu"},
    ],
)
def test_program_parameters_are_podscopes_less_the_norm_biases(model):
    s = _scenario(model)
    assert xla_reference.program_params(s) == model_cost(s.model).params - _norm_biases(s)


def test_program_parameters_of_a_hand_counted_model():
    # 2 layers x (qkv 256*3*256 + out 256*256 + mlp 2*256*1024 + 2 norms 256) + embed, unembed 2*4096*256 + final norm 256
    s = _scenario()
    per_layer = 256 * 768 + 256 * 256 + 2 * 256 * 1024 + 2 * 256
    assert xla_reference.program_params(s) == 2 * per_layer + 2 * 4096 * 256 + 256


@pytest.mark.parametrize(
    "parallelism, chip, axes",
    [
        ({"fsdp": 4}, "tpu-v5p", {"data": 1, "fsdp": 4, "expert": 1, "tensor": 1}),
        ({"data": 4}, "tpu-v5p", {"data": 4, "fsdp": 1, "expert": 1, "tensor": 1}),
        ({"fsdp": 2, "tensor": 2}, "tpu-v5p", {"data": 1, "fsdp": 2, "expert": 1, "tensor": 2}),
        ({"fsdp": 4}, "tpu-v4", {"data": 1, "fsdp": 4, "expert": 1, "tensor": 1}),  # one megacore device per chip
        ({"fsdp": 4}, "tpu7x", {"data": 1, "fsdp": 8, "expert": 1, "tensor": 1}),  # one device per TensorCore
        ({"data": 2, "tensor": 2}, "tpu7x", {"data": 4, "fsdp": 1, "expert": 1, "tensor": 2}),
    ],
)
def test_mesh_puts_the_second_tensorcore_on_the_batch_axis(parallelism, chip, axes):
    assert xla_reference.mesh_axes(_scenario(parallelism=parallelism, chip=chip)) == axes


@pytest.mark.parametrize(
    "change, says",
    [
        ({"model": {"experts": 4}}, "model.moe_dispatch 'grouped'"),
        ({"model": {"experts": 4, "moe_dispatch": "dense", "moe_layer_interval": 2}}, "moe_layer_interval = 2"),
        ({"parallelism": {"fsdp": 2, "pipeline": 2}, "training": {"microbatches": 2}}, "pipeline_schedule '1f1b'"),
        ({"parallelism": {"fsdp": 2, "context": 2}}, "parallelism.context"),
        # two microbatches of a TPU7x chip's 2 samples: one row on each of its TensorCores' devices, which cannot split it
        ({"chip": "tpu7x", "training": {"microbatches": 2}}, "splits its rows into the microbatches"),
        ({"parallelism": {"fsdp": 4, "fsdp_shard": "optimizer"}}, "ZeRO-3"),
    ],
)
def test_unmapped_scenarios_are_refused_with_a_reason(change, says):
    s = _scenario(**change)
    assert says in xla_reference.refusal(s)
    with pytest.raises(InputError, match=says):
        xla_reference.build_program(s)


def _mlp(model=None, parallelism=None, training=None):
    raw = {"name": "m", "pod": {"chip": "tpu-v5e", "topology": "2x2"},
           "model": {"kind": "mlp", "layer_sizes": [256, 512, 512, 10], **(model or {})},
           "training": {"global_batch": 64, "steps": 2, **(training or {})}, "parallelism": parallelism or {"fsdp": 4}}  # fmt: skip
    return scenario_from_dict(raw)


def test_families_without_a_program_are_refused():
    assert "grouped matmul (megablox) is not mapped" in xla_reference.refusal(load_scenario(ROOT / "data/scenarios/moe-8x-top2-v5p-64.toml"))
    assert xla_reference.refusal(_mlp()) is None
    assert "embedding_rows" in xla_reference.refusal(_mlp({"embedding_rows": 1000}))
    assert "tensor = 1" in xla_reference.refusal(_mlp(parallelism={"fsdp": 2, "tensor": 2}))


def _resnet(chip="tpu-v4", topology="2x2x1", batch=64, **model):
    raw = {"name": "r", "pod": {"chip": chip, "topology": topology}, "model": {"kind": "resnet50", **model},
           "training": {"global_batch": batch, "steps": 2, "optimizer": "momentum"}, "parallelism": {"data": 4}}  # fmt: skip
    return scenario_from_dict(raw)


def test_resnet_program_parameters_are_podscopes_and_he_et_als():
    """25,557,032: He et al. 2016's 25.5M with batch norm's scale and offset on every convolution and a 1000-way
    classifier with its bias; Podscope's count of the same network is the program's."""
    s = _resnet()
    assert xla_reference.program_params(s) == model_cost(s.model).params == 25_557_032
    assert xla_reference.program_params(_resnet(classes=10)) == 25_557_032 - 2048 * 990 - 990


def test_resnet_scenarios_the_program_cannot_hold_are_refused():
    s = _resnet(chip="tpu7x", batch=60)  # 4 TPU7x chips are 8 devices
    assert "valid: a multiple of 8" in xla_reference.refusal(s)
    with pytest.raises(InputError, match="valid: a multiple of 8"):
        xla_reference.build_program(s)
    fsdp = scenario_from_dict({**_resnet().to_dict(), "parallelism": {"fsdp": 4}})
    assert "ResNet-50 is mapped data-parallel only" in xla_reference.refusal(fsdp)


def test_mlp_program_parameters_are_podscopes():
    s = _mlp()
    assert xla_reference.program_params(s) == model_cost(s.model).params == 256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10


@pytest.mark.parametrize("remat", ["none", "full"])
def test_mlp_saved_activations_are_podscopes_count(live, remat):
    """``jax.ad_checkpoint``'s residuals of the MLP program's layers, against the activations Podscope's
    HBM timeline holds at the loss: each layer's input in bf16. Left out of the listing: ReLU's
    one-byte mask and zero tangent (XLA derives the mask from the next layer's saved input and folds
    the broadcast constant into its select; the grid's compiled MLPs hold their inputs only) and the
    loss's log-softmax, which XLA fuses into the last layer's gradient."""
    from jax._src.ad_checkpoint import saved_residuals

    from engine.memory.hbm import hbm_plan

    s = _mlp(training={"remat": remat})
    prog = xla_reference.build_program(s)
    params, _, x, labels, _ = prog.args
    b = s.training.global_batch
    per_batch = sum(math.prod(aval.shape) * aval.dtype.itemsize
                    for aval, where in saved_residuals(prog.loss, params, x, labels)
                    if aval.shape[:1] == (b,) and aval.dtype != bool and "broadcast_in_dim" not in where
                    and "log_softmax" not in where and "take_along_axis" not in where)  # fmt: skip
    masks = sum(math.prod(aval.shape) for aval, _ in saved_residuals(prog.loss, params, x, labels) if aval.dtype == bool)
    assert masks == (b * (512 + 512) if remat == "none" else 0)  # what JAX saves and XLA does not store
    plan = hbm_plan(model_cost(s.model), s.model, per_chip_batch=b, precision="bf16", optimizer="adam", remat=remat,
                    fsdp=1, tensor=1, capacity_bytes=2**34, usable_bytes=2**34)  # fmt: skip
    at_loss = plan.timeline.to_pandas().query("phase == 'loss' and category == 'activations'")["bytes"].item()
    assert per_batch == at_loss - b * 4 == b * 2 * (256 + 512 + 512)  # beside them the step's int32 labels


# --- the program's abstract arguments (JAX, no compile) ---------------------------------------


def _nbytes(jax, tree) -> int:
    return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree))


@pytest.mark.parametrize(
    "training",
    [
        {"optimizer": "adam"},
        {"optimizer": "momentum"},
        {"optimizer": "sgd"},
        {"optimizer": "adam", "weight_dtype": "bf16"},
        {"optimizer": "adam", "optimizer_state": "bf16"},
    ],
)
def test_argument_bytes_are_weights_and_optimizer_state_at_their_dtypes(live, training):
    s = _scenario(training=training)
    prog = xla_reference.build_program(s)
    params, state, tokens, labels, count = prog.args
    n = xla_reference.program_params(s)
    assert sum(math.prod(x.shape) for x in live.tree.leaves(params)) == n
    bpp = bytes_per_param(s.training.optimizer, s.training.precision, s.training.optimizer_state, s.training.weight_dtype)
    assert _nbytes(live, params) == n * bpp.params
    assert _nbytes(live, state) == n * bpp.optimizer
    assert tokens.shape == labels.shape == (8, 256)


def test_adafactor_state_is_factored_rows_and_columns(live):
    s = _scenario(training={"optimizer": "adafactor"})
    state = xla_reference.build_program(s).args[1]
    assert state["rows"]["layers.w1"].shape == (2, 256) and state["cols"]["layers.w1"].shape == (2, 1024)
    assert _nbytes(live, state) < xla_reference.program_params(s)  # far under one byte per parameter


def test_weights_shard_fsdp_on_d_model_and_tensor_on_heads_and_d_ff(live):
    prog = xla_reference.build_program(_scenario(parallelism={"fsdp": 2, "tensor": 2}))
    params = prog.args[0]
    embed = ("fsdp", "expert")  # MaxText's embed rule: the model dimension over fsdp and expert
    assert tuple(params["layers.wq"].sharding.spec) == (None, embed, "tensor", None)
    assert tuple(params["layers.w1"].sharding.spec) == (None, embed, "tensor")
    assert tuple(params["layers.w2"].sharding.spec) == (None, "tensor", embed)


def test_experts_shard_over_expert_and_their_model_dimension_over_fsdp(live):
    s = _scenario(model={"experts": 4, "moe_dispatch": "dense", "mlp": "swiglu", "shared_experts": 1},
                  parallelism={"fsdp": 2, "expert": 2})  # fmt: skip
    params = xla_reference.build_program(s).args[0]
    assert tuple(params["layers.we_in"].sharding.spec) == (None, "expert", "fsdp", "tensor")
    assert tuple(params["layers.we_out"].sharding.spec) == (None, "expert", "tensor", "fsdp")
    assert tuple(params["layers.wrouter"].sharding.spec) == (None, ("fsdp", "expert"), None)
    assert {"layers.we_gate", "layers.ws_in", "layers.ws_gate", "layers.ws_out"} <= set(params)
    assert "layers.w1" not in params


# --- what autodiff saves per layer, against Podscope's count (JAX, no compile) ------------------


#: a mixture of experts with MaxText's dense dispatch in every layer
_DENSE_MOE = {"experts": 8, "experts_per_token": 2, "capacity_factor": 1.25, "moe_dispatch": "dense"}


@pytest.mark.parametrize(
    "model, remat",
    [
        ({}, "none"),
        ({"mlp": "relu"}, "none"),
        ({"mlp": "swiglu"}, "none"),
        ({"attention": "flash"}, "none"),
        ({"heads": 8, "kv_heads": 2, "head_dim": 32}, "none"),
        ({"parallel_block": True}, "none"),
        ({}, "minimal"),
        ({"mlp": "swiglu"}, "minimal"),
        ({}, "selective"),
        ({}, "full"),
        ({}, "save_qkv_proj"),
        ({"heads": 8, "kv_heads": 2, "head_dim": 32, "attention": "flash"}, "save_qkv_proj"),
        ({"mlp": "swiglu"}, "save_dot_except_mlp"),
        ({"parallel_block": True}, "save_dot_except_mlp"),
        ({"mlp": "swiglu"}, "save_dot_except_mlpwi"),
        (_DENSE_MOE, "none"),
        (_DENSE_MOE, "minimal"),
        ({**_DENSE_MOE, "seq_len": 512, "capacity_factor": 2.0}, "none"),
        ({**_DENSE_MOE, "mlp": "swiglu", "shared_experts": 1}, "none"),
        ({**_DENSE_MOE, "mlp": "swiglu", "shared_experts": 1}, "minimal"),
    ],
)
def test_stacked_residuals_per_layer_are_podscopes_count(live, model, remat):
    """``jax.ad_checkpoint``'s residuals of the program's layer scan, per token and layer, equal
    :func:`engine.memory.activations.transformer_layer_activation_bytes` per token plus, with no remat, the
    layer's weights cast to bf16 (which Podscope counts once for the whole stack)."""
    from jax._src.ad_checkpoint import saved_residuals

    from engine.memory.activations import transformer_layer_activation_bytes

    s = _scenario(model=model, training={"remat": remat}, parallelism={"data": 4})
    prog = xla_reference.build_program(s)
    params, _, tokens, labels, _ = prog.args
    m = s.model
    stacked = sum(math.prod(aval.shape) * aval.dtype.itemsize
                  for aval, where in saved_residuals(prog.loss, params, tokens, labels) if "output of scan" in where)  # fmt: skip
    per_token_layer = stacked / (m.layers * s.training.global_batch * m.seq_len)
    layer_weights = sum(math.prod(x.shape) for k, x in params.items() if k.startswith("layers.w")) / m.layers
    casts = 2.0 * layer_weights / (s.training.global_batch * m.seq_len) if remat == "none" else 0.0
    norm_scales = 4.0 * m.d_model * (1 if m.parallel_block else 2) / (s.training.global_batch * m.seq_len) if remat == "none" else 0.0
    podscope = transformer_layer_activation_bytes(m, 1, "bf16", remat) / m.seq_len
    assert per_token_layer == pytest.approx(podscope + casts + norm_scales, rel=1e-9)


# --- live: compile and compare ----------------------------------------------------------------


def _xla_check_json(toml: Path, text: str, process: bool = False) -> tuple[Path, dict]:
    """Write ``text`` to ``toml`` and return it with ``xla-check TOML --json``'s output: run in this process (JAX and
    libtpu load once for the module), or with ``process`` as ``python -m profiler`` in a process of its own."""
    toml.write_text(text)
    if process:
        p = subprocess.run([sys.executable, "-m", "profiler", "xla-check", str(toml), "--json"], cwd=ROOT, capture_output=True,
                           text=True, timeout=600)  # fmt: skip
        assert p.returncode == 0, p.stderr
        return toml, json.loads(p.stdout)
    return toml, xla_check_in_process(toml)


def xla_check_in_process(toml: Path, *options: str) -> dict:
    """``xla-check TOML --json`` (with ``--xla-flag`` ``options``) through :func:`profiler.cli.main` in this process:
    JAX and libtpu load once, and each compile takes its own options."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["xla-check", str(toml), "--json", *(f"--xla-flag={f}" for f in options)])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


def test_xla_check_compiles_a_tiny_scenario_and_compares(live, tmp_path):
    toml, out = _xla_check_json(
        tmp_path / "tiny.toml",
        'name = "tiny"\n[pod]\nchip = "tpu-v5e"\ntopology = "2x2"\n'
        '[model]\nkind = "transformer"\nlayers = 2\nd_model = 128\nheads = 2\nd_ff = 512\nvocab = 1024\nseq_len = 128\n'
        'attention = "standard"\n[training]\nglobal_batch = 8\nsteps = 2\nremat = "full"\n[parallelism]\nfsdp = 4\n',
        process=True,
    )
    x, pod = out["xla"], out["podscope"]
    assert not x["oom"] and not pod["oom"] and out["verdicts_agree"]
    assert x["peak_hbm_bytes"] == out["xla_compile"]["memory"]["peak_bytes"] > 0  # one device per v5e chip
    # the parameters and Adam state (4 + 8 bytes per parameter, sharded over 4 chips) are donated: aliased
    n = xla_reference.program_params(load_scenario(toml))
    assert out["xla_compile"]["memory"]["alias_bytes"] >= 12 * n / 4
    assert x["flops_per_chip"] > 0 and out["flops_diff_pct"] is not None
    assert out["hbm_diff_pct"] == pytest.approx(100 * (pod["peak_hbm_bytes"] / x["peak_hbm_bytes"] - 1))
    text = xla_check.format_check("tiny", out, out["xla_compile"])
    assert "XLA       peak" in text and "temporaries" in text and "agree" in text
    assert "memory-space assignment" in text  # a program this small: what XLA keeps on chip weighs on its peak
    # what XLA holds live at its peak, by what made it: the donated weights and Adam moments among the arguments
    live = x["live_peak"]
    assert live["live_bytes"] == sum(live[k] for k in SOURCES) > 0 and live == out["xla_compile"]["live_peak"]  # 1 device per chip
    assert live["by_argument"]["params"] >= 4 * n / 4 and live["by_argument"]["state"] >= 8 * n / 4
    assert f"at XLA's peak {live['live_bytes'] / 2**30:.3f} GiB per chip live in HBM" in text
    # compute: the compiler's cycle estimates at v5e's 1.5 GHz against Podscope's forward and backward
    cycles = out["xla_compile"]["estimated_cycles_per_device"]
    assert x["compute_s"] == pytest.approx(cycles / 1.5e9) and pod["compute_s"] > 0
    assert out["compute_diff_pct"] == pytest.approx(100 * (pod["compute_s"] / x["compute_s"] - 1))
    assert f"XLA's cycle estimates {x['compute_s']:.4g} s" in text
    # both sides by part: the compiler's fusions with a dot and the rest; Podscope's terms, the update among them
    kinds, terms = x["compute_by_kind_s"], pod["compute_terms_s"]
    assert kinds["dot"] > 0 and kinds["other"] > 0 and sum(kinds.values()) == pytest.approx(x["compute_s"])
    assert terms["update"] > 0 and sum(terms.values()) == pytest.approx(pod["compute_s"])
    assert f"XLA: {kinds['dot']:.4g} s in fusions with a dot" in text and f"{terms['update']:.4g} s optimizer update" in text
    # of the rest, what the compiler gives past its bytes at v5e's 819 GB/s: a part of it, the line says how much
    beyond = x["compute_beyond_hbm_s"]
    assert 0.0 <= beyond <= kinds["other"] and f"{beyond:.4g} s of it" in text


def test_xla_check_compiles_an_mlp_scenario_and_its_weights_are_the_arguments(live, tmp_path):
    toml, out = _xla_check_json(
        tmp_path / "mlp.toml",
        'name = "mlp"\n[pod]\nchip = "tpu-v5e"\ntopology = "2x2"\n[model]\nkind = "mlp"\nlayer_sizes = [512, 2048, 2048, 10]\n'
        '[training]\nglobal_batch = 256\nsteps = 2\n[parallelism]\ndata = 1\nfsdp = 4\n',
    )
    assert not out["xla"]["oom"] and out["verdicts_agree"]
    n = xla_reference.program_params(load_scenario(toml))
    inputs = 256 * 512 * 2 + 256 * 4  # bf16 features and int32 labels, sharded with the batch
    # the weights and Adam state (12 bytes per parameter over 4 chips; biases replicated) and the batch
    assert out["xla_compile"]["memory"]["argument_bytes"] >= 12 * n / 4 + inputs / 4
    assert out["xla_compile"]["memory"]["alias_bytes"] >= 12 * n / 4
    assert abs(out["flops_diff_pct"]) < 10


def test_xla_check_compiles_a_resnet_scenario_with_pooled_batch_norm(live, tmp_path):
    """ResNet-50 on 4 v4 chips (4 megacore devices) at 8 images of 64 x 64 per chip, batch norm pooled over 2 chips:
    the replicated weights and momentum are donated, and the FLOPs are Podscope's convolutions less the taps of a
    "SAME" window that fall outside the image, which XLA does not count. At 64 pixels the last stage's maps are 2 x 2,
    where 5 of a 3 x 3 window's 9 taps fall outside, so Podscope counts 5-12% more; at 224 pixels the compiler grid's
    ResNet programs hold it within 3% (a compile of 224-pixel ResNet takes minutes on a CPU)."""
    toml, out = _xla_check_json(
        tmp_path / "resnet.toml",
        'name = "resnet"\n[pod]\nchip = "tpu-v4"\ntopology = "2x2x1"\n[model]\nkind = "resnet50"\nbatch_norm_group = 2\n'
        'image_size = 64\n[training]\nglobal_batch = 32\nsteps = 2\noptimizer = "momentum"\n[parallelism]\ndata = 4\n',
    )
    assert out["xla_compile"]["mesh"] == {"data": 2, "bn": 2} and out["xla_compile"]["devices_per_chip"] == 1
    assert not out["xla"]["oom"] and out["verdicts_agree"]
    n = xla_reference.program_params(load_scenario(toml))
    assert out["xla_compile"]["memory"]["alias_bytes"] >= 8 * n  # fp32 weights and momentum on every device
    assert 5 < out["flops_diff_pct"] < 12
    assert out["xla_compile"]["estimated_cycles_per_device"] > 0


def test_xla_check_compiles_maxtexts_pipeline_loop(live, tmp_path):
    """Two stages x fsdp 2 on 4 v5p chips, 4 microbatches under full remat: the stage axis is on the mesh, the stages
    hold their layers (the embeddings on every stage), and the FLOPs are Podscope's: five passes of each layer (the
    loop's iteration remat reruns a stage, the layer checkpoint each layer again) over 4 + 2 - 1 iterations, short only
    of the elementwise FLOPs XLA counts too (norms, GELU, softmax and the loss: 2-4% of a model this narrow)."""
    toml, out = _xla_check_json(
        tmp_path / "pp.toml",
        'name = "pp"\n[pod]\nchip = "tpu-v5p"\ntopology = "2x2x1"\n[model]\nkind = "transformer"\nlayers = 4\n'
        'd_model = 256\nheads = 4\nd_ff = 1024\nvocab = 4096\nseq_len = 256\nattention = "standard"\n[training]\n'
        'global_batch = 16\nsteps = 2\nmicrobatches = 4\nremat = "full"\n[parallelism]\nfsdp = 2\npipeline = 2\n'
        'pipeline_schedule = "gpipe"\n',
    )
    assert out["xla_compile"]["mesh"] == {"data": 1, "stage": 2, "fsdp": 2, "expert": 1, "tensor": 1}
    assert not out["xla"]["oom"] and out["verdicts_agree"]
    assert -5 < out["flops_diff_pct"] < 0
    assert abs(out["hbm_diff_pct"]) < 15


def test_xla_check_compiles_gradient_accumulation(live, tmp_path):
    """Four microbatches over FSDP on 4 v5p chips (a 64-layer narrow model, 1.7 GiB per chip: past the sizes where the
    compiler's on-chip placement weighs on the peak): the step's FLOPs are four microbatches' (the adds of the
    accumulation are XLA's only extra), and XLA's peak holds the parameter-sized accumulator beside the microbatch's
    own gradients, as Podscope counts them."""
    _, out = _xla_check_json(
        tmp_path / "acc.toml",
        'name = "acc"\n[pod]\nchip = "tpu-v5p"\ntopology = "2x2x1"\n[model]\nkind = "transformer"\nlayers = 64\n'
        'd_model = 512\nheads = 8\nd_ff = 2048\nvocab = 8192\nseq_len = 512\nattention = "standard"\n[training]\n'
        'global_batch = 128\nsteps = 2\nmicrobatches = 4\nremat = "full"\n[parallelism]\nfsdp = 4\n',
    )
    assert not out["xla"]["oom"] and out["verdicts_agree"]
    assert out["xla"]["peak_hbm_bytes"] > 2**30
    assert abs(out["flops_diff_pct"]) < 5
    assert abs(out["hbm_diff_pct"]) < 5


def test_xla_check_compiles_a_masked_lm_head_over_its_positions(live, tmp_path):
    """A masked LM's head (BERT's gather of the masked positions, 32 of 256, through the tied embedding) on 4 v5e chips:
    the FLOPs XLA saves against the same model's loss over every position are the ones Podscope saves, and each
    program's FLOPs are Podscope's within a few percent."""
    text = ('name = "mlm"\n[pod]\nchip = "tpu-v5e"\ntopology = "2x2"\n[model]\nkind = "transformer"\nlayers = 2\n'
            'd_model = 256\nheads = 4\nd_ff = 1024\nvocab = 16384\nseq_len = 256\nattention = "standard"\n'
            'tied_embeddings = true\n{extra}[training]\nglobal_batch = 16\nsteps = 2\n[parallelism]\ndata = 4\n')  # fmt: skip
    _, every = _xla_check_json(tmp_path / "every.toml", text.format(extra=""))
    _, masked = _xla_check_json(tmp_path / "masked.toml", text.format(extra="loss_positions = 32\n"))
    for out in (every, masked):
        assert not out["xla"]["oom"] and out["verdicts_agree"]
        assert abs(out["flops_diff_pct"]) < 5
    xla_saved = every["xla"]["flops_per_chip"] - masked["xla"]["flops_per_chip"]
    podscope_saved = every["podscope"]["flops_per_chip"] - masked["podscope"]["flops_per_chip"]
    assert podscope_saved > 0.3 * every["podscope"]["flops_per_chip"]  # the head is most of a model this narrow
    assert podscope_saved == pytest.approx(xla_saved, rel=0.05)


@pytest.mark.parametrize("topology, fsdp, loops", [("2x4", 8, True), ("2x2", 4, False)])
def test_xla_check_names_the_windowed_einsum_loops_xla_wrote(live, tmp_path, topology, fsdp, loops):
    """An MLP over FSDP: over 8 v5e devices XLA writes its weights' all-gathers and its gradients' reduce-scatters
    as loops over the shards, and xla-check says how many; over 4 devices it gathers whole."""
    _, out = _xla_check_json(
        tmp_path / "mlp.toml",
        f'name = "mlp"\n[pod]\nchip = "tpu-v5e"\ntopology = "{topology}"\n[model]\nkind = "mlp"\n'
        'layer_sizes = [1024, 1024, 1024, 1024, 1000]\n[training]\nglobal_batch = 65536\nsteps = 2\nremat = "full"\n'
        f'[parallelism]\ndata = 1\nfsdp = {fsdp}\n',
    )
    found = out["xla_compile"]["windowed_einsum_loops"]
    text = xla_check.format_check("mlp", out, out["xla_compile"])
    if loops:
        assert found["all_gather"] >= 4 and found["reduce_scatter"] >= 4  # one per layer's weight at least
        assert f"XLA wrote {found['all_gather']} all-gather(s)" in text
    else:
        assert found == {"all_gather": 0, "reduce_scatter": 0} and "windowed-einsum" not in text


def test_over_64_fsdp_devices_xla_writes_no_windowed_loop_and_holds_the_logits_once(live, tmp_path):
    """Over 64 v5e devices XLA gathers whole (no windowed-einsum loop) and keeps no logits' gradient beside the logits:
    Podscope's peak, at the loss of a head-heavy model, is XLA's (counting the second buffer it would be 2x)."""
    _, out = _xla_check_json(
        tmp_path / "fsdp64.toml",
        'name = "fsdp64"\n[pod]\nchip = "tpu-v5e"\ntopology = "8x8"\n'
        '[model]\nkind = "transformer"\nlayers = 2\nd_model = 256\nheads = 4\nd_ff = 1024\nvocab = 32000\nseq_len = 1024\n'
        'attention = "standard"\n[training]\nglobal_batch = 512\nsteps = 2\nremat = "full"\n[parallelism]\nfsdp = 64\n',
    )
    assert out["xla_compile"]["windowed_einsum_loops"] == {"all_gather": 0, "reduce_scatter": 0}
    assert out["podscope"]["peak_phase"] == "loss" and abs(out["hbm_diff_pct"]) < 10
    # XLA's largest buffer at its peak is the logits the forward pass made: 8 sequences x 1024 x 32000 in bf16
    largest = out["xla"]["live_peak"]["largest"][0]
    assert largest["bytes"] == 8 * 1024 * 32000 * 2 and "jvp(" in largest["name"]


@pytest.mark.parametrize("model", [
    'kind = "transformer"\nlayers = 2\nd_model = 256\nheads = 4\nd_ff = 1024\nvocab = 4096\nseq_len = 256\nattention = "standard"',
    'kind = "mlp"\nlayer_sizes = [1024, 2048, 2048, 1000]',
])  # fmt: skip
def test_xla_reduces_data_parallel_gradients_in_bf16_over_fp32_weights_as_podscope_does(live, tmp_path, model):
    """The default ``gradient_reduce_dtype = "compute"``: the compiled jit program all-reduces its gradients as
    the bf16 matmuls write them (only the norms' and biases' fp32), the bytes Podscope charges."""
    _, out = _xla_check_json(
        tmp_path / "dp.toml",
        f'name = "dp"\n[pod]\nchip = "tpu-v5e"\ntopology = "2x2"\n[model]\n{model}\n'
        '[training]\nglobal_batch = 16\nsteps = 2\n[parallelism]\ndata = 4\n',
    )
    by = out["xla_compile"]["collective_bytes_by_dtype"]["all-reduce"]
    pod = out["podscope"]
    assert pod["gradient_reduce_dtype"] == "bf16"
    assert by["bf16"] > 0.95 * sum(by.values())
    assert pod["gradient_reduction_bytes"] == pytest.approx(sum(by.values()), rel=0.03)
    assert "gradients Podscope reduces" in xla_check.format_check("dp", out, out["xla_compile"])


def test_xla_check_refuses_a_family_without_a_program_with_exit_2():
    p = subprocess.run([sys.executable, "-m", "profiler", "xla-check", "moe-8x-top2-v5p-64"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2 and "grouped matmul (megablox) is not mapped" in p.stderr


# --- without JAX --------------------------------------------------------------------------------



def test_without_jax_the_module_imports_and_building_says_what_to_install():
    code = BLOCK_JAX + """
from engine import load_scenario
from engine.errors import InputError
from profiler import xla_reference, xla_check
from profiler.cli import main
assert not any(m.split(".")[0] == "jax" for m in sys.modules)
try:
    xla_reference.build_program(load_scenario("data/scenarios/llm-1b-v5p-64.toml", {"parallelism.data": 1, "parallelism.fsdp": 64}))
except InputError as e:
    print("InputError:", e)
sys.exit(main(["xla-check", "llm-1b-v5p-64", "--set", "parallelism.data=1", "--set", "parallelism.fsdp=64"]))
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "InputError:" in p.stdout and "pip install -r requirements-tpu.txt" in p.stdout
    assert "requirements-tpu.txt" in p.stderr


# --- run --xla: the run's HBM as the TPU compiler gives it --------------------------------------

_TINY_RUN = (
    'name = "tiny"\n[pod]\nchip = "tpu-v5e"\ntopology = "2x2"\n'
    '[model]\nkind = "transformer"\nlayers = 2\nd_model = 128\nheads = 2\nd_ff = 512\nvocab = 1024\nseq_len = 128\n'
    'attention = "standard"\n[training]\nglobal_batch = 8\nsteps = 2\nremat = "full"\n[parallelism]\nfsdp = 4\n'
)


def _run(tmp_path, *extra):
    toml = tmp_path / "tiny.toml"
    toml.write_text(_TINY_RUN)
    return subprocess.run([sys.executable, "-m", "profiler", "run", str(toml), "--xla", "--json", "--db", str(tmp_path / "p.duckdb"),
                           "--create", *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip


def test_run_xla_stores_xlas_peak_and_keeps_podscopes_beside_it(live, tmp_path):
    p = _run(tmp_path)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["hbm_source"] == "xla" and not s["oom"]
    assert s["peak_hbm_bytes"] == pytest.approx(sum(s["hbm_breakdown_bytes"].values()))
    assert s["hbm_podscope_peak_bytes"] > 0 and s["hbm_podscope_peak_bytes"] != s["peak_hbm_bytes"]
    n = xla_reference.program_params(load_scenario(tmp_path / "tiny.toml"))
    assert s["hbm_breakdown_bytes"]["params"] >= 12 * n / 4  # weights and Adam state sharded over 4 chips, in tiles


def test_run_xla_is_an_out_of_memory_run_with_xlas_message_when_xla_refuses(live, tmp_path):
    p = _run(tmp_path, "--set", "model.layers=128", "--set", "model.d_model=1024", "--set", "model.d_ff=4096",
             "--set", "training.remat=none", "--set", "training.global_batch=64", "--set", "model.seq_len=1024")  # fmt: skip
    assert p.returncode == 3, p.stderr
    s = json.loads(p.stdout)
    d = s["oom_detail"]
    assert s["oom"] and s["hbm_source"] == "xla" and d["source"] == "xla" and "RESOURCE_EXHAUSTED" in d["message"]
    assert d["peak_bytes"] > d["usable_bytes"] > 15 * 2**30  # per device, as XLA's message says (v5e: 15.75 GiB)
    assert d["suggestions"]


def test_run_xla_refuses_a_family_with_no_jax_program_and_stores_nothing(tmp_path):
    db = tmp_path / "p.duckdb"
    p = subprocess.run([sys.executable, "-m", "profiler", "run", "moe-8x-top2-v5p-64", "--xla", "--db", str(db), "--create"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert p.returncode == 2 and "--xla" in p.stderr and "grouped matmul (megablox) is not mapped" in p.stderr
    assert not db.exists()
