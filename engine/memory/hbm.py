"""HBM use of a chip through one training step: model states, activations, temporaries.

Model states (:mod:`engine.memory.states`: 16 bytes per parameter under Adam, ZeRO's "16 Psi")
are sharded by ``fsdp x tensor`` (FSDP and tensor parallelism), and expert parallelism
by ``expert`` as MaxText shards a mixture of experts (a dense weight's model dimension over
``fsdp`` and ``expert``, the routed experts over ``expert``); a
parameter-server strategy keeps the embedding tables off the chips. A transformer's weight-shaped
arrays (weights, gradients, moments, compute copies) take the HBM XLA's TPU layouts give them: a
device-local shard with no dimension of 128 or more has its minor dimension padded to 128 lanes
(:mod:`engine.memory.layout`).

The activations each layer saves for the backward pass are :mod:`engine.memory.activations`'. A
transformer's layers run under ``jax.lax.scan``, and XLA keeps the scan's residuals as they are: stacked
over the layers and live until the backward loop ends, beside the backward loop's carry, the gradient of
the whole layer stack, and one stacked copy of the weights cast to the compute dtype. Other models' layers
are unrolled: activations are freed through the backward pass, each weight is updated in place once its
gradient is reduced (a gradient lives from its matmul to its update), and under FSDP a weight gathered in
the forward pass stays gathered until its backward use.

Temporaries: the bf16 (or gathered, under FSDP) copies of two weight tensors
(the one in use and the one prefetched: GSPMD gathers weight by weight, not layer
by layer), a layer's two largest weight gradients unsharded before their
reduce-scatters, and the logits in the compute dtype.

Headroom: a job may use what XLA's compiler lets one program use on the chip (its
compile-time HBM limit, the capacity less what the runtime reserves: 30.75 of 32 GiB on
TPU v4, 15.48 of 16 on v5e; ``data/chips.toml`` cites the compiler logs); on a generation
with no such log on record, the capacity less a fraction (``Calibration.hbm_reserved_frac``).
A job whose peak exceeds it is out of memory.

The step is laid out as a timeline (start, forward through each layer, loss,
backward through each layer in reverse, optimizer update): activations grow in
the forward pass; a scanned transformer holds them and its whole gradient through
the backward loop, an unrolled model releases them while its gradients grow.
The peak is the largest point, and its breakdown is what is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..model.compute import recomputes_layer
from ..model.models import ModelCost, layer_units
from ..trace import TABLES
from .activations import resnet_stem_output_bytes, transformer_layer_activation_bytes, unit_activations
from .layout import device_padded_batch, transformer_weight_padding
from .states import bytes_per_param, zero_shards
from ..units import BYTES_PER_ELEMENT

__all__ = [
    "MemoryPlan",
    "hbm_plan",
    "CATEGORIES",
    "REMAT_TARGET_FRACTION",
    "windowed_einsum",
]

#: From this many devices on the FSDP axis, XLA:TPU computes a weight's gradient as a loop over the shards that
#: overlaps its reduce-scatter (a windowed einsum, the collective matmul of Wang et al. 2023, ASPLOS, "Overlap
#: Communication with Dependent Computation via Decomposition in Large Deep Learning Models"; the loops are
#: ``windowed_dot_general_body_rs`` in the compiled module). The loop reads the output's gradient from HBM, so
#: XLA materialises it. Measured with libtpu 0.0.42.1 on the compiler's buffer assignment:
#: - the unembedding: a 1024-wide model at 118 sequences of 2,048 per device holds one bf16[118, 2048, 32000]
#:   buffer with FSDP over 2 or 4 devices (it fuses the logits' gradient into both of its matmuls) and two over 8
#:   or 16 (the second is the gradient), as does TPU7x over its 8 TensorCore devices; data x FSDP 2 x 4
#:   and FSDP 4 x tensor 2 hold one, FSDP 8 x tensor 2 two;
#: - an unrolled MLP without remat (8 layers of 1024, 300,000 samples per device, v5e): over 8 devices XLA
#:   schedules the layers' loops after the backward's chain of input gradients, so every layer's input and output
#:   gradient is live at once (10.9 GiB per device, over 4 devices 6.9 GiB); with each layer checkpointed
#:   (``full``) the recomputation gathers each layer's weights again, and where those gathers run beside compute
#:   (``xla_async_all_gather`` of data/chips.toml: v5e, TPU7x) the scheduler interleaves the loops with the chain
#:   (6.4 GiB); where they block (v4, v5p, v6e) it keeps them after it. At 220,928 samples per device v5e peaks at
#:   5.08 GiB, v6e at 6.33, and v5e with its gathers made blocking (``xla_tpu_enable_async_collective_fusion_fuse_all_gather
#:   =false``) at 6.33.
WINDOWED_EINSUM_MIN_FSDP_DEVICES = 8
#: ... and up to this many: from 64 devices on the FSDP axis XLA:TPU writes no windowed-einsum loop, and holds no
#: logits' gradient beside the logits. Measured with libtpu 0.0.42.1 (``windowed_einsum_loops`` of ``xla-check``) on
#: a 2-layer transformer of width 2,048 at 16 sequences of 2,048 per chip: 7 all-gather and 7 reduce-scatter loops
#: over 32 FSDP devices on v4 ``2x4x4``, v5e and v6e ``4x8``, v5p ``2x4x4`` (and over 8 and 16 on v5p, at 128
#: sequences per chip), none over 64 (v4 and v5p ``4x4x4``, v5e and v6e ``8x8``; on v5p also at 128 and 512
#: sequences per chip, at width 4,096, and over 128 devices on ``4x4x8``); TPU7x counts its TensorCore devices:
#: loops over 32 (16 chips, ``2x2x4``), none over 64 (``2x4x4``). Over 64 v5p devices at 128 sequences per chip
#: XLA's peak is 23.15 GiB per chip, in a layer's backward; counting the second logits-sized buffer, 35.5 GiB.
WINDOWED_EINSUM_MAX_FSDP_DEVICES = 32

def windowed_einsum(fsdp: int, devices_per_chip: int = 1, fsdp_shard: str = "all") -> bool:
    """Whether XLA:TPU writes windowed-einsum loops over the FSDP axis: it shards the gradients (:func:`zero_shards`)
    over :data:`WINDOWED_EINSUM_MIN_FSDP_DEVICES` to :data:`WINDOWED_EINSUM_MAX_FSDP_DEVICES` devices."""
    _, grads_sharded = zero_shards(fsdp_shard)
    return grads_sharded and WINDOWED_EINSUM_MIN_FSDP_DEVICES <= fsdp * devices_per_chip <= WINDOWED_EINSUM_MAX_FSDP_DEVICES


#: Fraction of the HBM a program may use that XLA's rematerialization keeps an unrolled program under: libtpu 0.0.42.1's
#: compile environment (``tpu_comp_env.txt`` of ``XLA_FLAGS=--xla_dump_to=DIR``) sets
#: ``xla_jf_rematerialization_percent_shared_memory_limit: 95`` (and the scheduler's
#: ``xla_tpu_scheduler_percent_shared_memory_limit: 95``). The compiler grid's data-parallel narrow MLPs without remat
#: bear it out on v4, v5e and v6e: XLA recomputes exactly as many hidden activations as bring its count under 95%
#: (:func:`hbm_plan`).
REMAT_TARGET_FRACTION = 0.95

CATEGORIES = ("params", "grads", "optimizer", "activations", "temporary")
MEMORY_TIMELINE = TABLES["extra_memory_timeline"]


@dataclass(frozen=True)
class MemoryPlan:
    """HBM use of the representative chip through one step."""

    breakdown_bytes: dict[str, float]  # by category, at the peak point
    peak_bytes: float
    peak_phase: str
    capacity_bytes: float
    usable_bytes: float
    model_state_bytes: float  # params + grads + optimizer once every gradient exists (whole step max)
    timeline: pa.Table  # TABLES["extra_memory_timeline"]
    recomputed_bytes: float = 0.0  # at the peak: what XLA's rematerialization recomputes or gathers again instead of keeping

    @property
    def oom(self) -> bool:
        return self.peak_bytes > self.usable_bytes

    @property
    def over_bytes(self) -> float:
        return max(0.0, self.peak_bytes - self.usable_bytes)

    @property
    def largest_term(self) -> str:
        return max(self.breakdown_bytes, key=self.breakdown_bytes.get)


def input_bytes_per_sample(cost: ModelCost, model, precision: str, context: int = 1) -> float:
    """A training sample's input and label on a chip as the family's JAX program takes them: a transformer's int32
    tokens and labels (one per position of the chip's ``seq_len / context``), an MLP's features and a ResNet-50's image
    in the compute dtype with an int32 label (0 without the model's section)."""
    if model is None:
        return 0.0
    if cost.kind == "transformer":
        return 2 * 4.0 * model.seq_len / context
    if cost.kind == "mlp":
        return model.layer_sizes[0] * BYTES_PER_ELEMENT[precision] + 4.0
    if cost.kind == "resnet50":
        return model.image_size**2 * 3 * BYTES_PER_ELEMENT[precision] + 4.0
    return 0.0


def _pipeline_activations(cost: ModelCost, model, saved: np.ndarray, recompute: np.ndarray, b: int, precision: str,
                          remat: str, tensor: int, context: int, pipeline: int, in_flight: float,
                          stage_remat: bool) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """A stage's activations through its microbatches in flight, as MaxText's pipeline loop keeps them (layers/pipeline.py).

    Each loop iteration is rematerialised with ``save_from_both_policies(remat policy, "iteration_input")``: it keeps
    its stage's input and what the remat policy saves of the stage's layers, for every iteration in flight. Under
    ``vmap`` over the stages a weight matmul has a batch dimension, so ``minimal`` (dots with no batch dimensions)
    saves nothing more than ``full``: the stage's input alone. The iteration whose backward runs then recomputes its
    layers, each keeping its input (and ``full``'s recomputed layer materialising its intermediates) beside it.
    ``none`` and ``selective`` keep their residuals per layer (the names ``selective`` saves survive ``vmap``), and the
    backward of each iteration holds a copy of that iteration's: the outer loop's body slices its residuals out of the
    stack over iterations to hand them to the inner loop over the stage's layers, and a loop's operand is a buffer
    of its own (libtpu's memory-usage report of 2 stages of 16 layers over 4 microbatches: each ``[5, 16, ...]``
    stack over the 5 iterations beside a ``[16, ...]`` copy).
    """
    if not stage_remat or cost.kind != "transformer":
        return saved * (in_flight / pipeline), recompute  # this stage's layers, for every microbatch in flight
    if remat not in ("full", "minimal"):
        rec = recompute.copy()
        rec[1:-1] += float(saved[1:-1].sum()) / pipeline  # the iteration's residuals, sliced out of the stack
        return saved * (in_flight / pipeline), rec
    n_layers = len(saved) - 2
    layer_input = transformer_layer_activation_bytes(model, b, precision, "full", tensor, context)
    out = saved.copy()
    out[1:-1] = layer_input * in_flight / n_layers  # the stage's input per iteration, spread over its layer units
    rec = recompute.copy()
    rec[1:-1] += layer_input * n_layers / pipeline  # the recomputed stage's layer inputs
    return out, rec


def _unit_weight_tensors(cost: ModelCost, units, p_unit: np.ndarray, expert: int = 1, model=None) -> list[np.ndarray]:
    """Parameters of each weight tensor of each unit (the granularity XLA gathers and reduce-scatters).

    Transformer layers hold their weights as MaxText and :mod:`profiler.xla_reference` store them:
    Q, K and V as three tensors, the output projection, and each MLP projection on its own (SwiGLU's
    gate and up projections are two tensors, ``wi_0`` and ``wi_1`` in MaxText); a routed expert's
    weight is one stacked tensor of this chip's experts; the embedding and unembedding are one
    tensor each. Other models' units are single GEMMs already.
    """
    if cost.kind != "transformer":
        return [np.array([p]) for p in p_unit]
    ops = cost.ops
    in_layer = np.array([name.startswith("layer.") for name in ops.names]) & ~ops.w_is_activation
    sizes = ops.k * ops.n * np.where(ops.is_expert, ops.copies / expert, 1.0)
    gated = model is not None and model.mlp == "swiglu"
    layer_tensors: list[float] = []
    for i in np.flatnonzero(in_layer):
        name = ops.names[i]
        if name == "layer.qkv" and model is not None:
            q_cols = model.heads * model.head_dim_eff
            kv_cols = model.kv_heads_eff * model.head_dim_eff
            layer_tensors += [float(ops.k[i]) * c for c in (q_cols, kv_cols, kv_cols)]
        elif gated and name in ("layer.mlp_in", "layer.expert_in", "layer.shared_in"):
            layer_tensors += [float(sizes[i]) / 2.0] * 2
        else:
            layer_tensors.append(float(sizes[i]))
    layer = np.asarray(layer_tensors)
    return [np.array([p_unit[0]]), *[layer for _ in range(len(units) - 2)], np.array([p_unit[-1]])]


def hbm_plan(
    cost: ModelCost,
    model,
    *,
    per_chip_batch: int,
    precision: str,
    optimizer: str,
    remat: str,
    fsdp: int,
    tensor: int,
    capacity_bytes: float,
    usable_bytes: float,
    sparse_off_chip: bool = False,
    expert: int = 1,
    pipeline: int = 1,
    in_flight: float = 1.0,
    stage_remat: bool = False,
    accumulation: int = 1,
    timeline: bool = True,
    context: int = 1,
    fsdp_shard: str = "all",
    optimizer_state: str = "fp32",
    ring_buffer_bytes: tuple[float, float] = (0.0, 0.0),
    weight_dtype: str = "fp32",
    devices_per_chip: int = 1,
    async_all_gather: bool = False,
    async_all_reduce: bool = False,
) -> MemoryPlan:
    """Timeline and peak of one chip's HBM use over a training step.

    Parameters
    ----------
    cost, model
        The model's cost description and its scenario section.
    per_chip_batch
        Samples per chip per step.
    fsdp, tensor
        Mesh axis sizes that shard the model states (and, for ``tensor``, activations).
    capacity_bytes, usable_bytes
        The chip's HBM, bytes, and the part of it a step may use (:meth:`~engine.pod.catalog.ChipSpec.usable_hbm_bytes`).
    sparse_off_chip
        True under the parameter-server strategy: embedding tables live on PS hosts.
    expert
        Expert-parallel degree: the routed experts' model states shard over it too.
    pipeline, in_flight
        Pipeline stages (each chip holds ``1 / pipeline`` of the layers and their states) and the
        microbatches whose activations the busiest stage holds at once (engine/model/pipeline.py);
        ``per_chip_batch`` is then one microbatch.
    stage_remat
        The pipeline is MaxText's loop (``gpipe``), whose iterations are rematerialised (:func:`_pipeline_activations`)
        and whose backward holds the stage's weight gradients twice (the loop's accumulator and an iteration's).
    accumulation
        Gradient accumulation over this many microbatches (1: none); ``per_chip_batch`` is then one microbatch.
    timeline
        False leaves the ``timeline`` table empty (the peak is the same; for fast evaluation).
    context
        Context-parallel degree: activations keep ``seq_len / context`` tokens per sample.
    fsdp_shard
        What ``fsdp`` shards (:func:`zero_shards`): under ``"grads+optimizer"`` the weights are
        replicated over it, under ``"optimizer"`` the weights and gradients; neither gathers weights.
    optimizer_state
        ``"fp32"`` or ``"bf16"`` moments (:data:`OPTIMIZER_STATE_BYTES_PER_ELEMENT`).
    ring_buffer_bytes
        Ring attention's blocks in flight (engine/model/context.py), temporary bytes during the forward
        and the backward pass.
    weight_dtype
        ``"fp32"`` (master weights and gradients, 4 bytes each) or ``"bf16"`` (2 each, no master copy).
    devices_per_chip
        JAX devices on one chip (:attr:`~engine.pod.catalog.ChipSpec.devices_per_chip`): the batch
        axis spans them, so each holds its own copy of what ``fsdp`` does not shard, and its own
        gathered weights and unsharded gradients.
    async_all_gather
        XLA runs the backward's weight all-gathers of a recomputed layer beside compute on this chip
        (:attr:`~engine.pod.catalog.ChipSpec.xla_async_all_gather`): an unrolled MLP under ``full`` over
        windowed-einsum FSDP then interleaves its weight-gradient loops with the chain of input gradients.
    async_all_reduce
        XLA runs the all-reduces of replicated gradients beside compute on this chip
        (:attr:`~engine.pod.catalog.ChipSpec.xla_async_all_reduce`) and the step has replicas to reduce over:
        an unrolled program then holds every gradient reduced so far, twice, up to the scheduler's memory limit.

    Returns
    -------
    MemoryPlan
        Bytes by category at the peak and the whole timeline.
    """
    per_chip_batch = device_padded_batch(per_chip_batch, devices_per_chip)
    grad_accumulator = accumulation > 1
    units = layer_units(cost)
    n = len(units)
    bpp = bytes_per_param(optimizer, precision, optimizer_state, weight_dtype)
    weights_sharded, grads_sharded = zero_shards(fsdp_shard)
    p_unit = np.array([u.params for u in units], dtype=np.float64)
    if sparse_off_chip:
        p_unit[0] = max(0.0, p_unit[0] - cost.sparse_params)
    # MaxText's rule (configs/base.yml logical_axis_rules, since 6ebe4cf8 of 2024-09-06): a dense weight's model
    # dimension shards over fsdp and expert ("embed"), a routed expert's over fsdp ("embed_no_exp") and its experts
    # over expert ("exp"), so every parameter is 1 / expert on this chip before fsdp and tensor shard it
    p_here = p_unit / float(expert)
    p_chip = p_here / float(fsdp * tensor)  # the optimizer state's shard, whatever the ZeRO stage
    p_tensor = p_here / float(tensor)  # a shard replicated over fsdp
    if pipeline > 1:  # each stage holds its layers; MaxText keeps the embedding and unembedding on every stage
        staged = np.ones(n, dtype=bool)
        if cost.kind == "transformer":
            staged[[0, -1]] = False
        p_chip, p_tensor = np.where(staged, p_chip / pipeline, p_chip), np.where(staged, p_tensor / pipeline, p_tensor)
    if cost.kind == "transformer" and model is not None:  # weight-shaped arrays as XLA's TPU layouts pad them
        embed_pad, layer_pad, head_pad = transformer_weight_padding(
            model, fsdp * devices_per_chip if fsdp > 1 else 1, tensor, expert, pipeline)
        pad = np.full(n, layer_pad)
        pad[0], pad[-1] = embed_pad, head_pad
        p_chip, p_tensor = p_chip * pad, p_tensor * pad
    params_b = float((p_chip if weights_sharded else p_tensor).sum()) * bpp.params
    opt_b = float(p_chip.sum()) * bpp.optimizer
    grads_unit = (p_chip if grads_sharded else p_tensor) * bpp.grads
    saved, recompute, loss_b = unit_activations(cost, model, per_chip_batch, precision, remat, tensor, units, context,
                                                devices_per_chip)  # fmt: skip
    windowed = windowed_einsum(fsdp, devices_per_chip, fsdp_shard)
    in_place_b = np.zeros(n)  # input gradients written over the activation they mask (below)
    if cost.kind == "mlp" and remat == "none" and fsdp * expert == 1:
        # Replicated weights, no remat: a layer's backward computes its weight gradient first, then its input
        # gradient, masked by the ReLU below it, in one fusion that reads that ReLU's output elementwise and writes
        # in its place (XLA shares an operand's buffer with an elementwise user that is its last reader). The
        # input gradient needs no buffer of its own: libtpu's buffer assignment of the data-parallel narrow MLP
        # gives each activation-sized buffer one forward and one backward value, and its peak is the forward's
        # end, the saved inputs beside the logits.
        in_place_b = cost.ops.in_elems_per_repeat * BYTES_PER_ELEMENT[precision] * per_chip_batch / tensor
        recompute = recompute - in_place_b
    if cost.kind == "transformer" and windowed:
        loss_b *= 2.0  # the logits' gradient beside the logits (WINDOWED_EINSUM_MIN_FSDP_DEVICES)
    if pipeline > 1:
        saved, recompute = _pipeline_activations(cost, model, saved, recompute, per_chip_batch, precision, remat, tensor,
                                                 context, pipeline, in_flight, stage_remat)  # fmt: skip
    # GSPMD gathers (or casts) weights one tensor at a time: each dot's weight operand gets its own
    # all-gather, and XLA's scheduler prefetches the next while the current one computes. So two
    # weight tensors are in compute form at once (in use + prefetched): gathered under FSDP, else cast.
    tensors = _unit_weight_tensors(cost, units, p_unit, expert, model)
    gathered = (fsdp > 1 or expert > 1) and weights_sharded
    copy_bytes = bpp.compute_copy if bpp.compute_copy else (bpp.params if gathered else 0.0)

    def two_in_compute_b(sizes: np.ndarray) -> float:  # the two largest of these weight tensors in compute form
        return float(np.sort(sizes)[-2:].sum()) / tensor * copy_bytes * devices_per_chip

    weights_tmp = two_in_compute_b(np.concatenate(tensors))
    # A transformer's layers run under jax.lax.scan (MaxText's default ``scan_layers``): the weights cast to
    # the compute dtype are one stacked residual (saved by the forward loop, or hoisted out of the backward
    # loop under remat), the stacked residuals live until the backward loop ends, and the backward loop's
    # carry is the whole gradient of the layer stack from its first iteration. The embedding and unembedding
    # run outside the loops (units 0 and -1), where they are used:
    # - the weights in flight inside a loop are the layer's own, so the two tensors in compute form there are
    #   the layer's two largest; the (un)embedding's cast or gathered copy exists at its own unit and the loss;
    # - the stacked cast holds the layers' weights; the (un)embedding is cast at its use (libtpu's memory-usage
    #   report lists bf16[L, ...] stacks of the layers' weights at the peak and no cast of the tables);
    # - their gradients are the gather's transpose and the unembedding matmul's outputs, in the compute dtype:
    #   the cast back to fp32 fuses into the optimizer's update, while the layers' gradients accumulate in the
    #   loop's fp32 carry (libtpu's buffer assignment: bf16[512, 8192] for the unembedding of 8 layers of width
    #   512, bf16[256, 32000] per device for 24 of 1,024 over FSDP 4);
    # - the input embedding's backward (a scatter-add into the table) runs after the backward loop (libtpu's
    #   live ranges, for both of those models), so its gradient is not in the loop's carry.
    scanned = cost.kind == "transformer"
    unit_wt = np.full(n, weights_tmp)  # weight tensors in compute form while each unit runs
    if scanned and n > 2:
        unit_wt[1:-1] = two_in_compute_b(tensors[1])
    stored = p_chip if weights_sharded else p_tensor
    compute_copies = float(stored[1:-1].sum()) * bpp.compute_copy if scanned else 0.0
    if fsdp == 1 and devices_per_chip > 1:  # replicated over the batch axis: one copy per device
        params_b, opt_b = params_b * devices_per_chip, opt_b * devices_per_chip
        grads_unit = grads_unit * devices_per_chip
        compute_copies *= devices_per_chip
    model_grads_b = float(grads_unit.sum())  # the model states' gradients, in the stored dtype
    if scanned and precision == "bf16" and bpp.compute_copy and not grad_accumulator:
        grads_unit = grads_unit.copy()
        grads_unit[[0, -1]] *= bpp.compute_copy / bpp.grads
    # Likewise a weight's gradient exists unsharded until its own reduce-scatter, which overlaps
    # the next weight's gradient: a unit's two largest weight gradients at once.
    scattered = (fsdp > 1 or expert > 1) and grads_sharded
    two_largest: dict[int, float] = {}  # the layers share one tensor list: sort it once
    for t in tensors if scattered else ():
        if id(t) not in two_largest:
            two_largest[id(t)] = float(np.sort(t)[-2:].sum())
    grad_tmp = (
        np.array([two_largest[id(t)] for t in tensors]) / tensor * BYTES_PER_ELEMENT[precision] * devices_per_chip
        if scattered
        else np.zeros(n)
    )
    ring_fwd_b, ring_bwd_b = ring_buffer_bytes

    # Rows: start, forward through each unit, loss, backward through each unit in reverse, optimizer;
    # columns: params, grads, optimizer, activations, temporary. Built as arrays (a search plans
    # thousands of steps); the gradients accumulate in backward order with a sequential cumsum.
    phases = ["start", *["forward"] * n, "loss", *["backward"] * n, "optimizer"]
    cum = np.cumsum(saved)
    grads_after = np.cumsum(grads_unit[::-1])  # gradients held once each backward unit is done
    grads_done = float(grads_after[-1])
    arr = np.empty((2 * n + 3, 5))
    # XLA's rematerialization (HloRematerialization, given the memory limit) recomputes what an unrolled program would
    # keep while its count passes REMAT_TARGET_FRACTION of the HBM a program may use, as far as the program allows; what
    # it cannot bring under the usable HBM is out of memory. The recomputation's FLOPs are not added to the step.
    target_b = REMAT_TARGET_FRACTION * usable_bytes
    recomputed_b = np.zeros(2 * n + 3)  # per point: what XLA's rematerialization does not keep

    def recompute_past_target(column: int, spare_b: np.ndarray | None = None, cut_b: np.ndarray | None = None) -> None:
        """Take off ``column`` what XLA recomputes: ``cut_b``, or as much of ``spare_b`` as brings a point to the target."""
        if cut_b is None:
            cut_b = np.clip(arr.sum(axis=1) - target_b, 0.0, spare_b)
        arr[:, column] -= cut_b
        recomputed_b[:] += cut_b

    arr[:, 0] = params_b
    arr[:, 2] = opt_b
    arr[0, [1, 3, 4]] = 0.0
    arr[1 : n + 1, 1] = 0.0
    arr[1 : n + 1, 3] = cum
    arr[1 : n + 1, 4] = unit_wt + compute_copies + ring_fwd_b
    arr[n + 1, [1, 3, 4]] = (0.0, float(cum[-1]), weights_tmp + compute_copies + loss_b)
    if scanned:
        arr[n + 2 : 2 * n + 2, 1] = grads_done
        if stage_remat:
            # Every iteration of MaxText's pipeline loop runs each stage's weights: the backward loop accumulates
            # their gradient in its carry while each iteration's layer scan writes the stage's stacked gradient
            # beside it, two copies in the gradients' dtype (XLA's buffer assignment of the loop's program)
            arr[n + 2 : 2 * n + 2, 1] += float(grads_unit[staged].sum())
        arr[n + 2 : 2 * n + 1, 1] -= float(grads_unit[0])  # the embedding's gradient comes after the loop
        held = np.full(n, float(cum[-1]))
        held[0] = float(saved[0])  # the embedding's backward runs after the loop has freed the stacks
        arr[n + 2 : 2 * n + 2, 3] = (held + recompute)[::-1]
    else:
        arr[n + 2 : 2 * n + 2, 1] = grads_after
        arr[n + 2 : 2 * n + 2, 3] = (cum + recompute)[::-1]
    arr[n + 2 : 2 * n + 2, 4] = unit_wt[::-1] + compute_copies + grad_tmp[::-1] + ring_bwd_b
    arr[-1, [1, 3, 4]] = (grads_done, 0.0, 0.0)
    # The step's input batch is the program's argument, live from the start to the update (libtpu's live ranges at a
    # ResNet-50 peak list the bf16 image batch): a transformer's int32 tokens and labels (a pipeline's counted for the
    # microbatch in flight: bytes per sample, not per layer), an MLP's features, ResNet-50's images. Under gradient
    # accumulation the split into strided microbatches copies it into microbatch order for the loop over them
    # (libtpu's memory-usage report: bf16[B / M, M, ...] and [M, B / M, ...]). An MLP's first layer keeps as its
    # saved input its microbatch of that argument or of the copy.
    input_b = np.full(2 * n + 3, input_bytes_per_sample(cost, model, precision, context) * per_chip_batch * accumulation)
    if grad_accumulator:
        input_b[1:-1] *= 2.0
    if cost.kind == "mlp":
        input_b[1:-1] -= saved[0]
    arr[:, 3] += input_b
    if not scanned and not grad_accumulator:
        # Unrolled layers: XLA updates each weight in place (parameters and moments donated) once its gradient
        # is reduced, so a gradient lives from its matmul to its update, unsharded in the compute dtype: this
        # unit's and the one reduced just before. Under FSDP XLA's CSE merges a weight's forward and backward
        # all-gathers, so each gathered weight lives from its forward to its backward use (not under full
        # remat or a named save: the checkpointed layer gathers again when it is recomputed).
        unit_grad_b = p_tensor * BYTES_PER_ELEMENT[precision] * devices_per_chip
        live_grad_b = unit_grad_b + np.r_[unit_grad_b[1:], 0.0]
        # Where that would pass the HBM a program may use, XLA's rematerialization (HloRematerialization,
        # given the memory limit) gathers again instead, down to the two tensors in flight.
        kept = gathered and not recomputes_layer(remat)
        held_w_b = np.cumsum(p_tensor * copy_bytes * devices_per_chip) if kept else np.full(n, weights_tmp)
        arr[1 : n + 1, 4] = held_w_b + ring_fwd_b
        arr[n + 1, 4] = held_w_b[-1] + loss_b
        arr[n + 2 : 2 * n + 2, 1] = 0.0
        arr[n + 2 : 2 * n + 2, 4] = (held_w_b + live_grad_b)[::-1] + ring_bwd_b
        if cost.kind == "mlp" and windowed and (remat == "none" or (remat == "full" and not async_all_gather)):
            # the weight gradients' loops run after the chain of input gradients (WINDOWED_EINSUM_MIN_FSDP_DEVICES;
            # under `full` where the recomputation's weight gathers block): every layer's input and the output
            # gradient of every layer already through its backward stay
            out_grad_b = cost.ops.n * BYTES_PER_ELEMENT[precision] * per_chip_batch / tensor
            later_b = np.r_[np.cumsum(out_grad_b[::-1])[::-1][1:], 0.0]
            arr[n + 2 : 2 * n + 2, 3] = (cum[-1] + later_b + recompute)[::-1] + input_b[n + 2 : 2 * n + 2]
        arr[-1, 1] = 0.0
        if async_all_reduce and not scattered:
            # Where XLA runs the gradients' all-reduces beside compute (xla_async_all_reduce: TPU7x's SparseCore
            # collective offload), each starts once its gradient is computed and ends by the update, so every
            # gradient reduced so far is live twice, the all-reduce's operand and its result, as far as the
            # scheduler's memory limit (REMAT_TARGET_FRACTION of the usable HBM) leaves room; beyond it the scheduler
            # holds fewer in flight. libtpu 0.0.42.1 on TPU7x, an unrolled MLP of 8 layers of 8,192 over 8 devices,
            # data parallel: 7.80 GiB per device, 6.06 with the offload off
            # (xla_tpu_enable_sparse_core_collective_offload_all_reduce=false), Podscope's blocking count 6.22; from
            # 101 layers on, where holding them all would pass the limit, XLA peaks at 179.6-179.7 GiB per chip, 95%
            # of the 189.5 GiB usable.
            rows = slice(n + 2, 2 * n + 2)
            in_flight_b = 2.0 * np.cumsum(unit_grad_b[::-1])  # backward order: the gradients reduced so far
            beyond_b = np.maximum(in_flight_b - live_grad_b[::-1], 0.0)
            arr[rows, 4] += np.minimum(beyond_b, np.maximum(target_b - arr[rows].sum(axis=1), 0.0))
        if kept:
            regather_b = np.r_[0.0, held_w_b, held_w_b[-1], held_w_b[::-1], 0.0] - weights_tmp
            recompute_past_target(4, np.maximum(regather_b, 0.0))
    if grad_accumulator:
        # Gradient accumulation (MaxText's gradient_accumulation_steps): the accumulator, zeros shaped, typed and
        # sharded as the parameters, is the carry of the loop over microbatches from the first microbatch to the
        # update, and in each microbatch's backward that microbatch's own gradients live beside it until they are added
        arr[1:-1, 1] += params_b
    if cost.kind == "resnet50" and remat == "none":
        # ResNet-50 programs Podscope would put at 110% to 153% of the usable HBM compile at 91-94% of it, their FLOPs
        # per image up 1-3% (the compiler grid's near-limit points; xla-check on v5e at 560-700 images per chip).
        # Podscope counts on it down to what one checkpoint per block keeps; XLA's own floor is a little lower (on v5e
        # it compiles 1,120 images per chip, 9% past that floor, at 23% more FLOPs per image, and refuses 1,131, 10%
        # past it).
        saved_f, recompute_f, _ = unit_activations(cost, model, per_chip_batch, precision, "full", tensor, units, context,
                                                   devices_per_chip)  # fmt: skip
        cum_f = np.cumsum(saved_f)
        floor = np.r_[0.0, cum_f, cum_f[-1], (cum_f + recompute_f)[::-1], 0.0]
        recompute_past_target(3, np.maximum(arr[:, 3] - floor, 0.0))
    if cost.kind == "resnet50" and remat == "full":
        # Under one checkpoint per block the stem stays outside every checkpoint, and XLA drops the stem convolution's
        # output that the batch norm's backward reads, recomputing the convolution from the image batch in the stem's
        # backward (libtpu's live ranges at the peak of v5e's ResNet-50 under `full`: at 906 images per chip, below the
        # limit, the bf16[906,112,112,64] output is live; at 1,141, past it, it is not, the stem's normalised output
        # and the blocks' checkpoints are, and the step's FLOPs grow by 2-3%). Podscope counts on that one tensor.
        stem_b = np.zeros(2 * n + 3)
        stem_b[2 : 2 * n + 1] = resnet_stem_output_bytes(cost.ops, per_chip_batch, BYTES_PER_ELEMENT[precision], tensor,
                                                         devices_per_chip)  # fmt: skip
        recompute_past_target(3, stem_b)
    if cost.kind == "mlp" and remat == "none" and pipeline == 1:
        # XLA recomputes a hidden layer's input from the layer below it (one layer's forward matmul) instead of keeping
        # it, a whole activation at a time. libtpu's live ranges at the peak of v5e's data-parallel narrow MLP (7
        # hidden layers of 1,024): all 7 hidden activations, the features and the logits at 726,272 samples per chip;
        # at 889,088 the 4th and 6th are gone, each dropped costing a layer's forward (3.7% of the step's FLOPs).
        # XLA counts before its buffer assignment writes an input gradient over the ReLU output it masks, so its count
        # holds that gradient too: the compiler grid's points on v4, v5e and v6e, with and without accumulation,
        # recompute exactly the activations that bring that count under the target (one at 90% of the usable HBM,
        # two at 100%, three or four at 110%). Recomputing from the layer below keeps every other hidden input:
        # Podscope drops at most half of those live at a point (the larger ones).
        hidden = saved[1:]
        view = arr.sum(axis=1)
        view[n + 2 : 2 * n + 2] += in_place_b[::-1]
        need = float(view.max() - target_b)
        dropped = np.cumsum(np.sort(hidden)[::-1][: len(hidden) // 2])
        if need > 0 and dropped.size:
            drops = min(int(np.searchsorted(dropped, need)) + 1, dropped.size)
            live = np.zeros(2 * n + 3, dtype=int)  # hidden inputs live at each point
            for m in range(1, len(hidden) + 1):
                live[m + 1] = m  # forward: units 0..m done
                live[2 * n + 1 - m] = m  # the backward of unit m: hidden 1..m still live
            live[n + 1] = len(hidden)  # the loss
            if windowed and not grad_accumulator:  # the weight gradients' loops after the input gradients: all stay live
                live[n + 2 : 2 * n + 2] = len(hidden)
            recompute_past_target(3, cut_b=np.array([float(np.sort(hidden[:m])[::-1][: min(drops, m // 2)].sum()) for m in live]))
    totals = arr.sum(axis=1)
    k = int(np.argmax(totals))
    npts, ncat = arr.shape
    table = MEMORY_TIMELINE.table(
        {
            "point": pa.array(np.repeat(np.arange(npts, dtype=np.int32), ncat)),
            "phase": pa.array(np.repeat(np.asarray(phases), ncat).tolist(), pa.string()),
            "category": pa.array(list(CATEGORIES) * npts, pa.string()),
            "bytes": pa.array(arr.reshape(-1), pa.float64()),
        }
    ) if timeline else MEMORY_TIMELINE.empty()
    return MemoryPlan(
        breakdown_bytes=dict(zip(CATEGORIES, (float(v) for v in arr[k]))),
        peak_bytes=float(totals[k]),
        peak_phase=phases[k],
        capacity_bytes=float(capacity_bytes),
        usable_bytes=float(usable_bytes),
        model_state_bytes=params_b + opt_b + model_grads_b,
        timeline=table,
        recomputed_bytes=float(recomputed_b[k]),
    )

