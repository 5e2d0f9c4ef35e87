"""TPU memory layouts: the HBM an array occupies once XLA tiles it.

XLA's TPU backend stores an array in tiles over its two most-minor dimensions: 128 lanes by 8
sublanes for 32-bit elements (``T(8,128)`` in a compiled module's layouts; 16-bit arrays pack two
rows per sublane, ``T(8,128)(2,1)``), with smaller sublane tiles (``T(4,128)``, ``T(2,128)``) for a
second-minor dimension of fewer than 8 rows. The minor dimension is padded to a multiple of 128.
XLA's layout assignment picks which dimension is minor: a weight ``f32[4096, 64]`` is laid out
``{0,1:T(8,128)}``, its 4096-long dimension minor, and costs no padding; a query projection
``f32[8, 64, 4, 64]`` (layers, ``d_model`` over 4 FSDP shards, 4 heads, head dimension 64) has no
dimension of 128 or more and is laid out ``{3,2,1,0:T(4,128)}``, twice its elements (libtpu
0.0.42.1, the entry computation layout of :mod:`profiler.xla_reference`'s train step).

So a transformer whose device-local weight shards have every dimension under 128 (a head dimension
of 64 with few heads per chip and ``d_model / fsdp`` under 128) holds its weights, their
gradients and optimizer moments padded. :func:`transformer_weight_padding` gives the factor.

A convolution's NHWC feature maps take the channels or the device's batch as their minor dimension,
whichever pads least: ResNet-50's 64-channel maps are ``bf16[32,56,56,64]{3,0,2,1:T(8,128)(2,1)}`` at 32
images per device (channels minor, twice their elements) and ``bf16[509,56,56,64]{0,3,2,1:T(8,128)(2,1)}`` at
509 (the batch minor, padded to 512) in libtpu 0.0.42.1's modules of :mod:`profiler.xla_resnet`'s step.
:func:`feature_map_padding` gives the factor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

__all__ = ["LANES", "device_padded_batch", "feature_map_padding", "tiled_elements", "transformer_weight_padding"]

#: lanes of a TPU vector register and of an HBM tile's minor dimension (``T(8,128)``)
LANES = 128


def tiled_elements(shape: Iterable[int]) -> int:
    """Elements an array of ``shape`` occupies when its minor dimension is padded to :data:`LANES`,
    with the minor dimension the one that pads least (as XLA's layout assignment picks it).

    The sublane dimension is not padded: arrays with fewer than 8 rows there take XLA's smaller tiles.
    """
    dims = [max(int(d), 1) for d in shape]
    if not dims:
        return 1
    logical = math.prod(dims)
    return min(logical // d * (math.ceil(d / LANES) * LANES) for d in dims)


def device_padded_batch(per_chip_batch: int, devices_per_chip: int) -> int:
    """Samples a chip holds and computes of ``per_chip_batch``: GSPMD splits a batch over the chip's devices in
    shards of ``ceil(b / devices)`` samples, padding the last and replicating a batch smaller than the devices (4
    samples per microbatch over 8 TensorCore devices of 4 chips hold one sample per device in libtpu's compiled pipeline
    loops, where half a sample each would be half the activations and FLOPs)."""
    return devices_per_chip * -(-per_chip_batch // devices_per_chip)


def feature_map_padding(channels, batch_per_device: float) -> np.ndarray:
    """HBM elements over logical elements of NHWC feature maps with ``channels`` channels (an array) at
    ``batch_per_device`` images: the channels or the batch padded to :data:`LANES`, whichever is less."""
    c = np.maximum(np.asarray(channels, dtype=np.float64), 1.0)
    n = max(float(batch_per_device), 1.0)
    by_channels = np.ceil(c / LANES) * LANES / c
    by_batch = math.ceil(n / LANES) * LANES / n
    return np.minimum(by_channels, by_batch)


def _shard(n: int, ways: int) -> int:
    return max(1, math.ceil(n / max(ways, 1)))


def transformer_weight_padding(model, fsdp: int, tensor: int, expert: int = 1, pipeline: int = 1) -> tuple[float, float, float]:
    """(embedding, layer, unembedding) HBM bytes over logical bytes of a transformer's weights on one device.

    The device-local shards of the tensors :mod:`profiler.xla_reference` and MaxText store (``d_model``
    over ``fsdp`` and, in a dense weight, ``expert`` too: MaxText's ``embed`` rule; heads, ``d_ff`` and the vocabulary over ``tensor``, routed experts over
    ``expert``), each layer tensor stacked over the layers this device holds (``jax.lax.scan``'s
    leading dimension, ``layers / pipeline``): Q, K and V as ``[d, heads, head_dim]``, the output projection as ``[heads, head_dim,
    d]``, the MLP's projections as ``[d, d_ff]`` and ``[d_ff, d]``, the embedding ``[vocab, d]``.
    ``fsdp`` counts devices (libtpu's two per chip on v4 and tpu7x included). The factor applies to
    every array of a weight's shape: the weights, their gradients and the optimizer's moments.
    """
    d, h, kv, q = model.d_model, model.heads, model.kv_heads_eff, model.head_dim_eff
    dl, ht = _shard(d, fsdp * expert), _shard(h, tensor)
    de = _shard(d, fsdp)  # a routed expert's model dimension: fsdp only
    kvt = _shard(kv, tensor) if kv % tensor == 0 else kv
    ff = _shard(model.d_ff, tensor)
    shapes = [(dl, ht, q), (dl, kvt, q), (dl, kvt, q), (ht, q, dl)]
    dense_mlp = not getattr(model, "experts", 0) or getattr(model, "moe_layers", 0) < model.layers
    n_in = 2 if model.mlp == "swiglu" else 1
    if dense_mlp:
        shapes += [(dl, ff)] * n_in + [(ff, dl)]
    if getattr(model, "experts", 0):
        e_local, ffe = _shard(model.experts, expert), _shard(model.d_ff_expert_eff, tensor)
        shapes += [(e_local, de, ffe)] * n_in + [(e_local, ffe, de)]
    stacked = [(_shard(model.layers, pipeline), *s) for s in shapes]  # the scan's layer dimension may be the minor one
    layer = sum(tiled_elements(s) for s in stacked) / sum(math.prod(s) for s in stacked)
    vocab = (_shard(model.vocab, tensor), dl)
    embed = tiled_elements(vocab) / math.prod(vocab)
    return embed, layer, embed
