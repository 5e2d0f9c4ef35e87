"""What a training step keeps for its backward pass: the activations each layer saves, by model family and remat.

A transformer layer saves what JAX's reverse-mode autodiff saves of the layer :mod:`profiler.xla_reference`
writes (``jax.ad_checkpoint.print_saved_residuals``), which XLA keeps as it is under ``jax.lax.scan``; an
unrolled model (an MLP, ResNet-50) keeps what XLA's buffer assignment keeps of its step, which fuses the
elementwise chains autodiff would save. :func:`unit_activations` is what :func:`engine.memory.hbm.hbm_plan`
lays on its timeline, per unit of :func:`engine.model.models.layer_units`.
"""

from __future__ import annotations

import numpy as np

from ..model.compute import SAVED_OPS_BY_REMAT
from ..model.models import ModelCost
from .layout import feature_map_padding
from ..units import BYTES_PER_ELEMENT

__all__ = [
    "flash_backward_stat_bytes_per_token",
    "flash_block",
    "layer_residual_bytes_per_token",
    "materialized_layer_elements",
    "mlp_saved_elements",
    "resnet_stem_output_bytes",
    "transformer_layer_activation_bytes",
    "unit_activations",
]


def transformer_layer_activation_bytes(
    model, per_chip_batch: int, precision: str, remat: str, tensor: int = 1, context: int = 1
) -> float:
    """Bytes one transformer layer keeps for its backward pass on one chip: JAX's residuals of the layer.

    ``model`` is a :class:`~engine.scenario.TransformerModel` and the layer is the one
    :mod:`profiler.xla_reference` writes (MaxText's way). What reverse-mode autodiff saves of it is
    what ``jax.ad_checkpoint.print_saved_residuals`` lists, and under ``jax.lax.scan`` XLA keeps
    those residuals as they are, stacked over the layers (:func:`layer_residual_bytes_per_token`).
    Under ``full`` remat this is the layer's input only; the recomputed layer is a separate term.
    ``context`` splits the sequence: the chip keeps ``seq_len / context`` tokens of each sample (the
    attention scores of its queries still span every key, ``h s`` per token).
    """
    tokens = float(per_chip_batch) * model.seq_len / context
    per_token = layer_residual_bytes_per_token(model, precision, remat)
    if getattr(model, "moe_layers", 0) and remat != "full":
        per_token += model.moe_layers / model.layers * _moe_extra_bytes_per_token(model, remat, BYTES_PER_ELEMENT[precision])
    return tokens * per_token / tensor


#: fp32 scalars per token an RMSNorm keeps: the mean of squares and its reciprocal square root
_NORM_SCALAR_BYTES = 8.0
#: fp32 scalars per token and head the softmax (or the flash kernel) keeps: the row max and the row sum
_SOFTMAX_ROW_BYTES_PER_HEAD = 8.0


def layer_residual_bytes_per_token(model, precision: str, remat: str) -> float:
    """Bytes per token one transformer layer saves for its backward pass, by remat policy.

    What JAX's reverse-mode autodiff saves of the layer as :mod:`profiler.xla_reference` writes it
    (``jax.ad_checkpoint.print_saved_residuals``; ``tests/test_xla_reference.py`` checks this
    function against it), with ``e`` the bytes of an activation (2 in bf16):

    - ``none``: each RMSNorm computes in fp32 (as MaxText's ``RMSNorm``): its fp32 input, its fp32
      normalised value, its cast output and two fp32 scalars, ``(8 + e) d + 8``. Standard attention:
      the reshaped query and the key, value and attention output (``e (2 h q + 2 kv q)``), the masked
      scores in fp32 and the probabilities (``(4 + e) h s``), the softmax's row max and sum
      (``8 h``). The Pallas flash kernel keeps its query, key and value (repeated to every head) and
      output as it lays them out, the output again as the output projection's input, and its row
      statistics: ``5 e h q + 8 h``, no ``s`` term. The MLP: GELU (tanh form, ``jax.nn.gelu``'s
      default) and SwiGLU keep six ``d_ff``-wide tensors (the projections' outputs and the
      activation's intermediates), ReLU its output and a one-byte mask (JAX's ``relu`` derivative is
      ``select(x > 0, g, 0)``).
    - ``minimal`` (``checkpoint_dots_with_no_batch_dims``): the outputs of the weight matmuls Q, K, V,
      the attention's output projection and the MLP's first projection(s), and the layer's input,
      ``e ((h + 2 kv) q + ff_in + 2 d)``; the MLP's projection back to ``d`` feeds only the residual
      add, whose gradient needs no value, so autodiff does not save it.
    - ``selective``: the names it saves (:data:`profiler.xla_reference._SELECTIVE_NAMES`) and the
      layer's input: four ``d``-wide tensors (two with a parallel block), Q, K, V, the attention
      output, the MLP's pre-activation(s) and activation.
    - ``full``: the layer's input, ``e d``.
    - the named saves (MaxText's ``save_only_these_names`` policies, :data:`engine.model.compute.SAVED_OPS_BY_REMAT`):
      the layer's input and what each keeps that the backward reads: Q, K and V (``e (h + 2 kv) q``) and, from
      ``save_dot_except_mlp`` on, the attention's output projection (``e d``), from which with the layer's input
      the residual between the blocks is recomputed without a matmul. A parallel block's projection and the MLP's
      projection back to ``d`` (``mlpwo``) only add into the residual stream, whose gradient needs no value: JAX
      saves nothing of them.

    The layer's weights, cast to the compute dtype, are saved too: :func:`hbm_plan` counts them
    once for every layer (XLA hoists the cast of the stacked weights out of the loop under remat).
    """
    d, h, q, s = model.d_model, model.heads, model.head_dim_eff, model.seq_len
    kv = model.kv_heads_eff
    f = model.d_ff
    e = BYTES_PER_ELEMENT[precision]
    swiglu = model.mlp == "swiglu"
    parallel = getattr(model, "parallel_block", False)
    if remat == "full":
        return e * d
    if remat in SAVED_OPS_BY_REMAT:
        kept = SAVED_OPS_BY_REMAT[remat]
        out_proj = "layer.out" in kept and not parallel
        return e * (d + (h + 2 * kv) * q * ("layer.qkv" in kept) + d * out_proj)
    if remat == "minimal":
        return e * ((h + 2 * kv) * q + f * (2 if swiglu else 1) + 2 * d)
    if remat == "selective":
        return e * ((2 if parallel else 4) * d + 2 * h * q + 2 * kv * q + f * (3 if swiglu else 2))
    norms = 1 if parallel else 2
    norm = (8.0 + e) * d + _NORM_SCALAR_BYTES
    if model.attention_kernel == "flash":
        attn = 5.0 * e * h * q + _SOFTMAX_ROW_BYTES_PER_HEAD * h
    else:
        attn = e * (2 * h * q + 2 * kv * q) + (4.0 + e) * h * s + _SOFTMAX_ROW_BYTES_PER_HEAD * h
    return norms * norm + attn + mlp_saved_elements(model.mlp, f, e) * e


#: the Pallas TPU flash-attention kernel (``jax.experimental.pallas.ops.tpu.flash_attention``): the lanes its backward
#: broadcasts a row statistic to (``MIN_BLOCK_SIZE``), and the largest block :mod:`profiler.xla_reference` gives it
FLASH_MIN_BLOCK = 128
FLASH_MAX_BLOCK = 512


def flash_block(seq_len: int) -> int:
    """The flash kernel's block along the sequence as :mod:`profiler.xla_reference` sets it (every block size alike):
    512, halved until it divides ``seq_len``."""
    block = min(FLASH_MAX_BLOCK, seq_len)
    while block > 1 and seq_len % block:
        block //= 2
    return block


def flash_backward_stat_bytes_per_token(model) -> float:
    """Bytes per token the flash kernel's backward materialises beside a layer's backward: its fp32 row statistics
    broadcast along a minor dimension, each ``[batch, heads, seq, lanes]``.

    ``_flash_attention_bwd_dkv`` and ``_flash_attention_bwd_dq`` (JAX's ``flash_attention.py``) broadcast the row max
    ``m`` and sum ``l`` to ``MIN_BLOCK_SIZE`` = 128 lanes, and ``di`` (the row sums of ``O * dO``) to 128 lanes for
    the dK/dV kernel and to ``block_k_major`` for the dQ kernel; the kernels read them from HBM (custom calls, which
    XLA cannot fuse into), and XLA shares the ``m`` and ``l`` broadcasts between the two. While the dQ kernel runs,
    ``m``, ``l`` and its ``di`` are live: ``4 h (2 x 128 + block)`` bytes per token (libtpu's buffer assignment of a
    24-layer, 2048-wide model at 64 sequences per v5p device: ``f32[64, 16, 2048, 128]`` twice and
    ``f32[64, 16, 2048, 512]`` at the peak, inside the backward of a recomputed layer).
    """
    return 4.0 * model.heads * (2 * FLASH_MIN_BLOCK + flash_block(model.seq_len))


def materialized_layer_elements(model) -> float:
    """Elements per token a transformer layer materialises for its backward pass when XLA compiles it
    whole (not as stacked residuals): Korthikanti et al. 2022, sec. 4.1, without dropout.

    The two norms' inputs and outputs (``4 d``; ``2 d`` with a parallel block's one norm), Q, K, V
    (``(h + 2 kv) q``), the output projection's input (``h q``), the MLP's projection output(s) and
    activation, and the softmax probabilities (``h s``; never with the flash kernel).
    """
    d, h, q, s = model.d_model, model.heads, model.head_dim_eff, model.seq_len
    kv = model.kv_heads_eff
    ff_in = model.d_ff * (2 if model.mlp == "swiglu" else 1)
    norms = 2.0 if getattr(model, "parallel_block", False) else 4.0
    out = norms * d + (h + 2 * kv) * q + h * q + ff_in + model.d_ff
    if model.attention_kernel != "flash":
        out += h * s
    return out


#: d_ff-wide activations a GELU (tanh form) or SwiGLU MLP saves with no remat: ``print_saved_residuals``
#: of the reference layer lists six (the projections' outputs and the activation's intermediates)
_GATED_MLP_SAVED = 6


def mlp_saved_elements(mlp: str, d_ff: int, elem_bytes: float) -> float:
    """Elements per token an MLP of width ``d_ff`` keeps for its backward pass (no remat), in units of ``elem_bytes``.

    GELU (``jax.nn.gelu``'s tanh form) and SwiGLU keep six ``d_ff``-wide tensors: the
    projections' outputs and the intermediates of the activation, which JAX's autodiff saves
    rather than recomputes. ReLU keeps its output and a one-byte mask: JAX defines ``relu``'s
    derivative as ``select(x > 0, g, 0)`` (``jax/_src/nn/functions.py``), so the backward reads
    ``x > 0``, a boolean, instead of ``x`` (``jax.ad_checkpoint.print_saved_residuals`` lists a
    bf16 output and a bool residual for ``relu(x @ w1) @ w2``).
    """
    if mlp == "relu":
        return d_ff + d_ff * 1.0 / elem_bytes
    return _GATED_MLP_SAVED * d_ff


def _moe_extra_bytes_per_token(model, remat: str, elem_bytes: float) -> float:
    """Bytes per token a MoE layer saves beyond a dense layer's (its MLP terms replaced), as
    ``jax.ad_checkpoint.print_saved_residuals`` lists them for :mod:`profiler.xla_reference`'s layer
    (``tests/test_xla_reference.py`` holds the two equal).

    With no remat: the router's logits, its fp32 softmax with the softmax's two fp32 row scalars; the
    dispatched tokens and the experts' outputs at capacity (``d`` each per routed copy,
    ``model.routed_copies_per_token`` copies) and the experts' MLP activations for those routed plus the
    shared copies instead of the dense MLP's. Dense dispatch (MaxText's ``generate_masks``) also keeps its
    ``[experts, capacity]`` tensors per token: the one-hot slot (``capacity + 1`` wide), the combine weights
    and the dispatch mask; each grows with the sequence, since the capacity is a sequence's slots per expert.

    Under ``minimal`` (``checkpoint_dots_with_no_batch_dims``) the router's and the shared experts' first
    matmul outputs are saved, but not the routed experts' nor the dispatch and combine einsums': each has
    the experts (or the batch) as a batch dimension, so they are recomputed. A projection back to ``d``
    is saved by no layer: its output feeds only the residual add, whose gradient needs no value.
    """
    d, e, sh = model.d_model, model.experts, model.shared_experts
    ff_in = model.d_ff * (2 if model.mlp == "swiglu" else 1)
    ff_e = model.d_ff_expert_eff
    ff_e_in = ff_e * (2 if model.mlp == "swiglu" else 1)
    if remat == "minimal":
        return elem_bytes * (sh * ff_e_in + e - ff_in)
    copies = model.routed_copies_per_token
    mlp = (copies + sh) * mlp_saved_elements(model.mlp, ff_e, elem_bytes) - mlp_saved_elements(model.mlp, model.d_ff, elem_bytes)
    router = elem_bytes * e + BYTES_PER_ELEMENT["fp32"] * e + _SOFTMAX_ROW_BYTES_PER_HEAD
    masks = 0.0
    if model.moe_dispatch == "dense":
        slots = e * model.expert_capacity_per_sequence
        masks = elem_bytes * (3 * slots + e)
    return router + masks + elem_bytes * (2 * d * copies + mlp)

def _resnet_activations(ops, b: int, elem: float, remat: str, tensor: int, devices_per_chip: int = 1) -> tuple[np.ndarray, np.ndarray, float]:
    """What XLA keeps of a ResNet-50 step (:mod:`profiler.xla_resnet`'s program; the TPU compiler grid's ResNet-50
    configurations), per unit (one per convolution, then the classifier).

    Each convolution's bf16 output, from which XLA's fusions recompute the batch norm and ReLU wherever the
    backward reads them (the next convolution's input among them), and each bottleneck block's output (the
    residual add and ReLU), the next block's input; the stem also keeps its normalised output, the max-pool's
    input, and the max-pool's output, the first block's input. JAX's autodiff alone would save the fp32
    normalisation chain too (``jax.ad_checkpoint.print_saved_residuals``: about seven times as much); XLA fuses it.
    Under ``full`` remat (one ``jax.checkpoint`` per block) the stem's tensors and each block's input stay (the first
    block's input is the max-pool's output the stem keeps), and the
    block in its backward holds its convolutions' outputs and its own output again. While a convolution's backward
    runs, the gradients of its output and input are live. Each map takes its TPU layout's lanes
    (:func:`~engine.memory.layout.feature_map_padding` at the device's batch: libtpu's two devices per chip on v4
    and TPU7x each hold half of the chip's images).
    """
    names = ops.names
    n_dev = float(b) / max(devices_per_chip, 1)
    channels_in = ops.in_channels if ops.in_channels is not None else ops.n
    out = ops.m * ops.n * ops.count * feature_map_padding(ops.n, n_dev)
    inputs = ops.in_elems_per_repeat * feature_map_padding(channels_in, n_dev)
    block_of = np.array([name.split(".")[0] if "." in name else name for name in names])
    is_block_end = np.array([name.endswith(".conv3") for name in names])
    stem = np.array([name == "stem" for name in names])
    first_block = np.flatnonzero(np.char.startswith(block_of.astype(str), "s0b0"))
    pool_out = float(inputs[first_block[0]]) if first_block.size else 0.0
    scale = float(b) * elem / tensor
    kept = np.where(ops.w_is_activation, 0.0, out) + np.where(is_block_end, out, 0.0) + np.where(stem, out + pool_out, 0.0)
    grad_io = (inputs + out) * scale
    n = len(names)
    if remat != "full":
        return kept * scale, grad_io, 0.0
    saved = np.where(stem, kept, 0.0)
    recompute = grad_io.copy()
    for block in dict.fromkeys(block_of[~stem & (block_of != "fc")]):
        rows = np.flatnonzero(block_of == block)
        if rows[0] != first_block[0]:  # the first block's input is the max-pool's output, which the stem keeps
            saved[rows[0]] += inputs[rows[0]]  # the block's input, its checkpoint
        recompute[rows] += kept[rows].sum() * scale
    return saved * scale, recompute, 0.0 if n else 0.0


def resnet_stem_output_bytes(ops, b: int, elem: float, tensor: int, devices_per_chip: int = 1) -> float:
    """Bytes per chip of ResNet-50's stem convolution output (one of the tensors :func:`_resnet_activations` has the
    stem keep), at ``b`` images per chip in its TPU layout."""
    stem = np.flatnonzero(np.asarray(ops.names) == "stem")
    if not stem.size:
        return 0.0
    i = int(stem[0])
    n_dev = float(b) / max(devices_per_chip, 1)
    out = float(ops.m[i] * ops.n[i] * ops.count[i] * feature_map_padding(ops.n[i], n_dev))
    return out * float(b) * elem / tensor


def unit_activations(
    cost: ModelCost, model, b: int, precision: str, remat: str, tensor: int, units, context: int = 1, devices_per_chip: int = 1
) -> tuple[np.ndarray, np.ndarray, float]:
    """(saved bytes per unit, recompute bytes per unit during its backward, loss temporary bytes) per chip at ``b``
    samples per chip, which its ``devices_per_chip`` JAX devices split."""
    n = len(units)
    elem = BYTES_PER_ELEMENT[precision]
    saved = np.zeros(n)
    recompute = np.zeros(n)
    if cost.kind == "transformer":
        layer = transformer_layer_activation_bytes(model, b, precision, remat, tensor, context)
        saved[1:-1] = layer
        if remat != "none":
            # The layer being recomputed materialises what its backward reads beside what the policy
            # saved: its matmuls' inputs and outputs and the softmax. Outside the scan's stacked residuals
            # XLA fuses the elementwise chains (the fp32 norm, the activation's intermediates) into their
            # consumers, so this is the count of Korthikanti et al. 2022 (sec. 4.1, no dropout).
            tokens = float(b) * model.seq_len / context
            recompute[1:-1] = max(0.0, tokens * materialized_layer_elements(model) * elem / tensor - layer)
        tokens = float(b) * model.seq_len / context
        if model.attention_kernel == "flash":
            # The flash kernel's backward broadcasts its row statistics (flash_backward_stat_bytes_per_token). It runs
            # after the MLP's backward (the layer's backward runs in reverse), whose recomputed projections and
            # activation are then freed: the layer's backward peaks at the larger of the two phases (libtpu's buffer
            # assignment of a 2048-wide model at 16 and 32 sequences per v5p device: within 1% of XLA's peak, where
            # counting the statistics beside the whole recomputed layer is 10-13% over it and leaving them out 4-5%
            # under it). Without remat the stacked residuals hold the layer; the statistics are the backward's own.
            stats = tokens * flash_backward_stat_bytes_per_token(model) / tensor
            if remat == "none":
                recompute[1:-1] += stats
            else:
                mlp = model.d_ff * (3 if model.mlp == "swiglu" else 2)  # the projections' outputs and the activation
                attention_phase = max(0.0, tokens * (materialized_layer_elements(model) - mlp) * elem / tensor - layer)
                recompute[1:-1] = np.maximum(recompute[1:-1], attention_phase + stats)
        else:
            # The attention's backward writes the probabilities' gradient (dO V^T, a matmul's output as large as the
            # probabilities) to HBM beside them; the scores' gradient, elementwise in the two, XLA fuses into the
            # two matmuls that read it (dQ and dK), as it fuses the logits' gradient into the unembedding's
            recompute[1:-1] += tokens * model.heads * model.seq_len * elem / tensor
        # the final norm's input and output: outside the scan XLA fuses its fp32 arithmetic into them
        saved[-1] = tokens * 2 * model.d_model * elem / tensor
        # the logits in the compute dtype, at the positions the loss reads: XLA fuses the fp32 log-softmax and its
        # gradient into the unembedding's matmuls instead of materialising them
        loss = float(b) * model.loss_positions_eff / context * model.vocab / tensor * elem
        return saved, recompute, loss
    ops = cost.ops
    if cost.kind == "mlp":
        # Each dense layer keeps its input. JAX also saves ReLU's one-byte mask (relu's derivative is
        # select(x > 0, g, 0): mlp_saved_elements), but in an unrolled program XLA derives it from the next
        # layer's saved input, the ReLU's output (positive exactly where the pre-activation is); the grid's
        # compiled MLPs hold their inputs only. Under full remat the recomputed layer holds the mask again.
        inputs = ops.in_elems_per_repeat * elem * b / tensor
        masks = np.r_[ops.n[:-1].astype(np.float64), 0.0] * b / tensor
        saved[:] = inputs
        # the layer's backward holds the gradients of its output and of its input (with replicated weights and no
        # remat XLA writes the input's over the ReLU output it masks: engine.memory.hbm.hbm_plan)
        grad_io = (ops.in_elems_per_repeat + ops.n) * elem * b / tensor
        recompute[:] = grad_io + (masks if remat == "full" else 0.0)
        return saved, recompute, 0.0
    if cost.kind == "resnet50":
        return _resnet_activations(ops, b, elem, remat, tensor, devices_per_chip)
    # The weight gradient needs each GEMM's input as stored: a convolution's input feature map, not the
    # kh*kw-times larger im2col matrix (XLA convolves in place; in_elems_per_repeat is the map).
    per_row = ops.in_elems_per_repeat * ops.count + np.where(ops.w_is_activation, ops.k * ops.n * ops.count, 0.0)
    per_row = per_row + 0.5 * ops.elementwise_elems_total
    per_row = per_row * b * elem / tensor
    if remat == "full":
        blocks = max(cost.layers, 1)
        boundary = float(ops.in_elems_per_repeat[0]) * b * elem / tensor
        saved[:] = boundary * blocks / n
        recompute[:] = per_row.sum() / blocks
    else:
        saved[:] = per_row
    return saved, recompute, 0.0


