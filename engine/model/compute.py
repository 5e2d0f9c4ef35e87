"""Chip compute time: a per-op roofline over the model's GEMMs.

For each op, time = max(FLOPs / achievable FLOP/s, bytes / achievable HBM B/s) +
a fixed per-op overhead (Williams et al. 2009, "Roofline"). FLOPs are counted on
MXU-padded shapes: every GEMM dimension is rounded up to the chip's systolic
array edge (``mxu_dim``), which is why small or oddly shaped layers run far below
peak on TPUs. Backward is twice the forward (same roofline, 2x work); full
rematerialisation reruns the forward of every op whose output a backward op reads
(see :func:`passes_per_op`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..pod.catalog import ChipSpec
from ..scenario.calibration import Calibration
from ..units import BYTES_PER_ELEMENT
from .models import ModelCost

__all__ = ["SAVED_OPS_BY_REMAT", "ComputeCost", "grouped_matmul_rows", "kernel_tiled", "pad_to_mxu", "recomputes_layer",
           "roofline_terms_s", "step_compute"]

#: MaxText's remat policies that keep named projections of each checkpointed layer and recompute the rest of it
#: (MaxText layers/decoders.py ``get_remat_policy``: ``jax.checkpoint_policies.save_only_these_names`` over
#: ``query_proj``, ``key_proj``, ``value_proj``, then ``out_proj``, then ``mlpwo``): the engine's ops whose outputs
#: they keep. They apply to a dense transformer's layers (engine/scenario/validation.py).
SAVED_OPS_BY_REMAT = {
    "save_qkv_proj": frozenset({"layer.qkv"}),
    "save_dot_except_mlp": frozenset({"layer.qkv", "layer.out"}),
    "save_dot_except_mlpwi": frozenset({"layer.qkv", "layer.out", "layer.mlp_out"}),
}

#: forward passes executed per training step by remat policy (forward + backward = 1 + 2);
#: "selective" and "minimal" recompute the attention core, so its ops run 4 passes and the rest 3; the named saves
#: rerun the layer as "full" does, but for the ops they keep (:func:`passes_per_op`)
PASSES_BY_REMAT = {"none": 3.0, "full": 4.0, "selective": 3.0, "minimal": 3.0} | {name: 4.0 for name in SAVED_OPS_BY_REMAT}


def recomputes_layer(remat: str) -> bool:
    """Whether the policy reruns a checkpointed layer's forward in its backward, all of it but what it keeps:
    ``full`` and the named saves (:data:`SAVED_OPS_BY_REMAT`)."""
    return remat == "full" or remat in SAVED_OPS_BY_REMAT


def passes_per_op(ops, remat: str, flash: bool = False, stage_recompute: bool = False) -> np.ndarray:
    """Forward-pass equivalents each op runs per training step under a remat policy.

    ``selective`` and ``minimal`` recompute the attention core (the ops whose right
    operand is an activation) in the backward pass; ``minimal`` also a mixture of experts' routed-expert
    GEMMs and its dispatch and combine einsums, dots with a batch dimension (the experts, or the batch)
    that ``checkpoint_dots_with_no_batch_dims`` does not save. The flash kernel's backward
    (Dao et al. 2022, "FlashAttention", Algorithm 4) recomputes the scores ``S = Q K^T``
    block by block from Q, K and the saved softmax statistics, but not ``P V``: the
    output O is saved. So the scores op runs one more pass than the policy gives and
    the value op none; its five backward matmuls (S again, dV, dP, dQ, dK) are 2.5
    forward passes of the core. Under ``selective`` that recompute *is* the policy's
    attention-core recompute; under ``minimal`` (``checkpoint_dots_with_no_batch_dims``,
    which saves no kernel output) and ``full`` the kernel's forward is rerun as well.

    ``full`` (``jax.checkpoint`` with no saving policy) recomputes a layer's *linearization points*
    from its saved input (the jax.checkpoint docstring): what its backward ops read. A GEMM's
    gradient reads its inputs, not its output, so an op whose output only adds into the residual
    stream (``GemmOps.residual_out``: a transformer's MLP down-projection, and the attention output
    projection of a parallel block) is not rerun: 3 passes; nor is an op outside the checkpointed blocks
    (``GemmOps.outside_remat``: ResNet-50's stem and classifier, a transformer's unembedding). XLA's own FLOP count agrees
    (``tests/fixtures/remat/remat_flops.json``, made by ``scripts/fixtures/make_remat_flops.py``):
    a full-remat layer recomputes 0.767 of its forward FLOPs where the forward without the
    down-projection is 0.765, and a parallel block 0.708 where without both projections it is 0.706.

    The named saves (:data:`SAVED_OPS_BY_REMAT`, MaxText's ``save_qkv_proj``, ``save_dot_except_mlp`` and
    ``save_dot_except_mlpwi``) rerun the layer as ``full`` does but for the ops whose outputs they keep, which run 3
    passes: the attention core still reruns (its backward reads the probabilities, or the flash kernel's statistics,
    neither kept), and so do the MLP's input projections.

    An op whose ``m x k`` operand takes no gradient (``GemmOps.no_input_grad``: dense dispatch's one-hot mask) runs
    one backward GEMM, one pass fewer.

    ``stage_recompute``: the layers run inside MaxText's pipeline loop (``pipeline_schedule = "gpipe"``), whose
    iterations are rematerialised too (they save their stages' inputs). Under ``full`` or ``minimal`` (whose weight
    matmuls have a batch dimension under the loop's ``vmap`` over stages, so it saves nothing more) the backward
    reruns a stage's forward, then each layer's forward again inside it: one more pass of every layer op than
    ``full``. XLA's FLOP count of the compiled loop agrees (the TPU compiler grid's pipeline configurations).
    """
    if stage_recompute and remat in ("full", "minimal"):
        passes = passes_per_op(ops, "full", flash)
        return passes + np.array([name.startswith("layer.") for name in ops.names], dtype=np.float64)
    if remat in SAVED_OPS_BY_REMAT:
        passes = passes_per_op(ops, "full", flash)
        kept = np.array([name in SAVED_OPS_BY_REMAT[remat] for name in ops.names], dtype=bool)
        passes[kept] = np.minimum(passes[kept], PASSES_BY_REMAT["none"])
        return passes
    attn = np.asarray(ops.is_attention, dtype=bool)
    passes = np.full(len(ops.names), PASSES_BY_REMAT[remat])
    if remat == "full" and ops.residual_out is not None:
        passes[ops.residual_out] = PASSES_BY_REMAT["none"]
    if remat == "full" and ops.outside_remat is not None:
        passes[ops.outside_remat] = PASSES_BY_REMAT["none"]
    if remat in ("selective", "minimal"):
        passes[attn] = 4.0
    if remat == "minimal":  # batched dots (over the experts, or the batch): checkpoint_dots_with_no_batch_dims keeps none
        passes[ops.is_expert | ops.is_routing] = 4.0
    if flash:
        scores = attn & np.concatenate([attn[1:], [False]])  # the first op of each attention pair
        if remat == "selective":
            passes[attn] = 3.0
        passes[scores] += 1.0
    if ops.no_input_grad is not None:  # one backward GEMM, not two
        passes[ops.no_input_grad] -= 1.0
    return passes


def pad_to_mxu(x, mxu_dim: int):
    """A GEMM dimension rounded up to the systolic array's edge (what the MXU actually computes)."""
    return np.ceil(x / mxu_dim) * mxu_dim


def grouped_matmul_rows(rows, groups, tile_rows: int):
    """Rows a grouped matmul computes for ``rows`` rows sorted into ``groups`` groups (expected value).

    The megablox kernel (``jax.experimental.pallas.ops.tpu.megablox`` ``gmm.py``,
    ``make_group_metadata``) visits every row tile once for the group that owns it and once more
    for each further group that starts inside it: ``tiles + groups - 1`` visits at most, each a
    whole tile. A group starts inside a tile unless its offset is a multiple of the tile, and is
    visited only if it has rows: with rows routed evenly at random, ``groups (1 - (1 - 1/groups)^rows)``
    groups are non-empty. A tile is ``min(tile_rows, rows)`` rows.
    """
    rows = np.asarray(rows, dtype=np.float64)
    groups = np.maximum(np.asarray(groups, dtype=np.float64), 1.0)
    tile = np.maximum(np.minimum(float(tile_rows), rows), 1.0)
    nonempty = groups * (1.0 - (1.0 - 1.0 / groups) ** rows)
    extra = np.maximum(nonempty - 1.0, 0.0) * (1.0 - 1.0 / tile)
    return (np.ceil(rows / tile) + extra) * tile


def kernel_tiled(x, tile: int):
    """A dimension as a tiled kernel computes it: itself when it fits one tile, else whole tiles
    (Pallas masks the last tile's extra rows or columns; the MXU still computes them)."""
    x = np.asarray(x, dtype=np.float64)
    return np.where(x <= tile, x, np.ceil(x / tile) * tile)


def roofline_terms_s(flops_padded, bytes_, flop_rate_per_s, byte_rate_per_s):
    """(seconds bound by the MXU, seconds bound by HBM) of GEMM kernels; a kernel takes the larger of the two."""
    return flops_padded / flop_rate_per_s, bytes_ / byte_rate_per_s


@dataclass(frozen=True)
class ComputeCost:
    """Compute of one chip for one training step (before jitter), in seconds and FLOPs."""

    fwd_bwd_s: float
    model_flops: float  # useful FLOPs per chip per step (forward + backward, no remat)
    hardware_flops: float  # FLOPs the chip executes (MXU padding excluded; remat, MoE routing einsums and dense dispatch's empty capacity slots included)
    matmul_s: float  # part of fwd_bwd_s bound by FLOPs
    memory_s: float  # part bound by HBM bandwidth (memory-bound GEMMs and the passes run after a matmul)
    overhead_s: float
    forward_s: float = 0.0  # the forward pass alone; the rest of fwd_bwd_s is backward (incl. recomputation)
    # the routed-expert GEMMs' share of forward_s and of fwd_bwd_s (what a busier expert stretches)
    expert_forward_s: float = 0.0
    expert_fwd_bwd_s: float = 0.0
    # the attention core's (scores and values GEMMs) share of forward_s and of fwd_bwd_s: what a
    # ring-attention K/V send hides behind (engine/model/context.py)
    attention_forward_s: float = 0.0
    attention_fwd_bwd_s: float = 0.0
    # FLOPs the attention core executes (remat included): under flash attention, the FLOPs of the Pallas
    # kernels, which the compiler's module does not count (a custom call is opaque to XLA)
    attention_hardware_flops: float = 0.0
    # how many times a step runs the attention core's forward to its output (``P V``): 1, and once more for each time the
    # backward reruns it (a recomputing remat policy, a rematerialised pipeline stage; not the flash kernel's backward,
    # which recomputes the scores block by block from the saved statistics but keeps the output): the passes of the
    # ring's K/V blocks before its backward (engine/model/context.py)
    attention_forward_passes: int = 1
    # the routed-expert GEMMs' executed work (whole MXU edges, whole grouped-matmul tiles) over their FLOPs
    expert_work_over_flops: float = 1.0


def step_compute(
    cost: ModelCost,
    chip: ChipSpec,
    cal: Calibration,
    per_chip_batch: int,
    precision: str,
    remat: str,
    tensor: int = 1,
    flash: bool = False,
    expert: int = 1,
    context: int = 1,
    gmm_tiling: tuple[int, int, int] | list[int] | None = None,
    stage_recompute: bool = False,
) -> ComputeCost:
    """Roofline compute time of forward + backward for one chip.

    Parameters
    ----------
    per_chip_batch
        Samples processed by this chip per step.
    tensor
        Tensor-parallel degree: each op's output dimension is split this many ways.
    expert
        Expert-parallel degree: each chip holds ``experts / expert`` of every routed-expert
        GEMM's weights and, after the dispatch all-to-all, computes the tokens routed to them:
        on average as many rows as its own batch routes (the load imbalance is applied per step).
    context
        Context-parallel degree: each chip holds ``seq_len / context`` of every sequence, so every
        op's rows (tokens) are divided by it; the attention core's keys and values still span the
        whole sequence (their blocks arrive over the ring, engine/model/context.py), so its FLOPs per chip
        are ``1 / context`` of the sequence's. Attention is counted unmasked (PaLM's convention), so
        the split is even; under a causal mask the striped layout (Brandon et al. 2023, "Striped
        Attention", arXiv:2311.09431) or MaxText's load-balanced zig-zag reordering keeps it so.
    gmm_tiling
        The grouped matmul's ``(rows, contraction, output)`` tile when the routed experts run as one
        (``moe_dispatch = "grouped"``): their GEMMs then execute whole tiles
        (:func:`grouped_matmul_rows`, :func:`kernel_tiled`) over this chip's ``experts / expert``
        groups. The backward's two grouped matmuls are MaxText's with the same tiling
        (kernels/megablox/ops.py ``_gmm_bwd``), so they are taken to pad as the forward does.
        None: every GEMM pads to the MXU edge only.
    stage_recompute
        The layers run in MaxText's rematerialised pipeline loop (:func:`passes_per_op`).
    """
    ops = cost.ops
    b = float(per_chip_batch)
    elem = BYTES_PER_ELEMENT[precision]
    # Tensor parallelism (Megatron-LM, Shoeybi et al. 2019 sec. 3) splits a weight GEMM's output
    # dimension across chips but gives each chip whole attention heads: the attention core (the
    # ops whose right operand is an activation) keeps its GEMM shape and runs count / tensor times.
    # Splitting head_dim instead would pad a 128-wide head to the MXU edge 8-16x over.
    heads_split = ops.w_is_activation
    n_shard = np.where(heads_split, ops.n, ops.n / tensor)
    count = np.where(heads_split, ops.count / tensor, ops.count)
    m_rows = b * ops.m / context
    flops_useful = 2.0 * m_rows * ops.k * n_shard * count
    d = chip.mxu_dim
    # Where a chip's TensorCores are separate devices (v2, v3, TPU7x: no megacore), each runs the op on its own
    # shard of the batch, and pads that shard's rows to the MXU edge.
    devices = chip.devices_per_chip
    flops_padded = 2.0 * devices * pad_to_mxu(m_rows / devices, d) * pad_to_mxu(ops.k, d) * pad_to_mxu(n_shard, d) * count
    if gmm_tiling is not None and ops.w_copies is not None:
        tm, tk, tn = gmm_tiling
        parts = ops.n_parts if ops.n_parts is not None else np.ones(len(ops.names))
        rows_run = grouped_matmul_rows(m_rows / devices, ops.copies / expert, tm)  # per device
        n_run = parts * pad_to_mxu(kernel_tiled(n_shard / parts, tn), d)
        gmm = 2.0 * devices * pad_to_mxu(rows_run, d) * pad_to_mxu(kernel_tiled(ops.k, tk), d) * n_run * count
        flops_padded = np.where(ops.is_expert, gmm, flops_padded)
    w_elems = np.where(ops.w_is_activation, b * ops.k * n_shard, ops.k * n_shard) * count
    if ops.w_copies is not None:
        w_elems = w_elems * np.where(ops.is_expert, ops.copies / expert, 1.0)
    in_elems = b * ops.in_elems_per_repeat * count / context
    out_elems = m_rows * n_shard * count
    elementwise_elems = b * ops.elementwise_elems_total / tensor / context
    attn = ops.is_attention
    values = attn & np.concatenate([[False], attn[:-1]])  # the second op of each attention pair: P V
    if flash:
        # Flash attention (Dao et al. 2022; Pallas splash attention on TPU) tiles the attention core
        # in on-chip memory: the seq x seq scores, their softmax and the probabilities (one attention
        # op's output and the next one's input) never reach HBM; only Q, K, V and the output do.
        next_attn = np.concatenate([attn[1:], [False]])
        in_elems = np.where(values, 0.0, in_elems)
        out_elems = np.where(attn & next_attn, 0.0, out_elems)
        elementwise_elems = np.where(attn, 0.0, elementwise_elems)
    # The elementwise passes after an op (batch-norm statistics, normalise, activation) re-read the
    # output just written, from HBM: TPU v4's 128 MiB CMEM (Jouppi et al. 2023, sec. 2) is the TPU
    # compiler's alternate memory for buffers it prefetches and evicts (a 64 MiB preallocated temporary
    # per TensorCore in libtpu's buffer assignment), not bandwidth that frees these passes; its own cost
    # estimates of a v4 ResNet-50 step make a sample's elementwise fusions dearer at a small per-chip
    # batch, not cheaper (docs/model.md, compute).
    # Passes that start with a reduction (a normalisation's statistics, a softmax, batch-norm statistics) are fusions
    # of their own: XLA:TPU runs a step's fusions one after another on each TensorCore (the compiled module's
    # schedule; only collectives and copies between memory spaces run beside them), and those fusions carry no dot (a
    # fifth to a third of the compiler's estimated cycles of a d_model 4096 layer on v4, v5e, v5p and v6e, docs/model.md).
    # Their HBM time adds to the op's. Pointwise passes ride in the matmul's output fusion: inside its roofline.
    reduces = ops.reduction_pass if ops.reduction_pass is not None else np.zeros(len(ops.names), dtype=bool)
    separate_elems = np.where(reduces, elementwise_elems, 0.0)
    gemm_bytes = (in_elems + w_elems + out_elems + elementwise_elems - separate_elems) * elem
    elementwise_bytes = separate_elems * elem
    # AQT quantises the weight matmuls only; activation x activation einsums stay in bf16.
    # fp8 recipes (MaxText / AQT fp8, NVIDIA Transformer Engine) likewise quantise the weight matmuls.
    peak = np.where(ops.w_is_activation & (precision in ("int8", "fp8")), chip.peak_flops_per_s("bf16"), chip.peak_flops_per_s(precision))
    flop_rate = peak * cal.mxu_efficiency
    byte_rate = chip.hbm_bytes_per_s * cal.hbm_efficiency
    t_flops, t_gemm_bytes = roofline_terms_s(flops_padded, gemm_bytes, flop_rate, byte_rate)
    t_elementwise = elementwise_bytes / byte_rate
    per_pass = np.maximum(t_flops, t_gemm_bytes) + t_elementwise
    passes = passes_per_op(ops, remat, flash, stage_recompute)
    overhead = float((ops.launches * passes).sum()) * cal.op_overhead_s
    flop_bound = t_flops >= t_gemm_bytes
    matmul_s = float((t_flops * passes)[flop_bound].sum())  # the MXU-bound kernels; their own fusions are memory_s
    fwd = float(per_pass.sum()) + float(ops.launches.sum()) * cal.op_overhead_s
    total = float((per_pass * passes).sum()) + overhead
    ex = ops.is_expert
    # P V's passes are one forward, two backward, and its reruns
    attention_forward_passes = int(passes[values].max()) - 2 if values.any() else 1
    useful = np.where(ops.is_routing, 0.0, flops_useful)  # the MoE routing einsums move tokens: not model FLOPs
    flops_executed = flops_useful * ops.executed_rows_factor if ops.executed_rows_factor is not None else flops_useful
    expert_flops = float(flops_useful[ex].sum())
    return ComputeCost(
        expert_work_over_flops=float(flops_padded[ex].sum()) / expert_flops if expert_flops > 0 else 1.0,
        expert_forward_s=float(per_pass[ex].sum()),
        expert_fwd_bwd_s=float((per_pass * passes)[ex].sum()),
        attention_forward_s=float(per_pass[attn].sum()),
        attention_fwd_bwd_s=float((per_pass * passes)[attn].sum()),
        attention_hardware_flops=float((flops_useful * passes)[attn].sum()),
        attention_forward_passes=attention_forward_passes,
        fwd_bwd_s=total,
        model_flops=float(useful.sum()) * 3.0,
        hardware_flops=float((flops_executed * passes).sum()),
        matmul_s=matmul_s,
        memory_s=float((per_pass * passes).sum()) - matmul_s,
        overhead_s=overhead,
        forward_s=fwd,
    )
