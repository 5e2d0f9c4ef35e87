"""Model cost: parameter counts and per-op FLOPs/bytes for each model kind.

Every model is reduced to a list of GEMM-shaped ops per *sample*, forward pass
only: ``out[m, n] = in[m, k] @ w[k, n]``, repeated ``count`` times (e.g. once per
attention head). Convolutions are expressed as their im2col GEMM (m = output
positions, k = kh*kw*c_in, n = c_out). From this one description come

* model FLOPs (2*m*k*n per multiply-accumulate, forward; training = 3x forward,
  Kaplan et al. 2020 "Scaling Laws for Neural Language Models" sec. 2.1:
  backward costs twice the forward),
* HBM bytes per op for the roofline, and
* activation sizes for the memory model.

Formulas:
* MLP: dense layer params = in*out + out (weights + bias).
* ResNet-50: He et al. 2016 "Deep Residual Learning for Image Recognition",
  Table 1 (50-layer column): 7x7/2 stem, stages of [3, 4, 6, 3] bottleneck blocks
  (1x1, 3x3, 1x1; expansion 4), projection shortcut on each stage's first block,
  global average pool, 1000-way FC. Batch-norm adds 2 params per channel.
* Transformer (decoder-only): per layer Q/K/V/O projections, MLP (2 matrices,
  or 3 for SwiGLU: Shazeer 2020 "GLU Variants Improve Transformer"), two
  LayerNorms; attention score and value matmuls 2*T*Q per head per token each,
  i.e. the 12*L*H*Q*T training-FLOPs-per-token term of PaLM (Chowdhery et al.
  2022, Appendix B). Untied input and output embeddings unless ``tied``. The
  unembedding and its softmax cross-entropy cover the positions the loss reads
  (``loss_positions``: a masked LM's masked positions, else every position).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..scenario import MlpModel, ResNet50Model, TransformerModel

__all__ = ["GemmOps", "ModelCost", "model_cost", "TRAIN_FLOPS_MULTIPLIER", "LayerUnit", "layer_units"]

#: forward + backward (backward = 2x forward), Kaplan et al. 2020 sec. 2.1
TRAIN_FLOPS_MULTIPLIER = 3.0


@dataclass(frozen=True)
class GemmOps:
    """Columns describing the forward GEMMs of one sample (numpy arrays, one entry per op)."""

    names: tuple[str, ...]
    m: np.ndarray  # rows per sample (tokens, or output pixels)
    k: np.ndarray
    n: np.ndarray
    count: np.ndarray  # repeats (heads)
    w_is_activation: np.ndarray  # True when the right operand is per-sample (attention)
    elementwise_elems: np.ndarray  # per-sample elements touched by elementwise work after ONE repeat of the op
    launches: np.ndarray  # kernel launches per pass (heads of one layer run as one batched op)
    # Per-sample elements of the left operand read from HBM, one repeat. None: the m x k GEMM input.
    # A convolution reads its input feature map once (the im2col patches are formed on chip), which
    # is kh*kw times fewer bytes than its m x k im2col matrix.
    in_elems: np.ndarray | None = None
    # Distinct weight matrices of the op's shape: a routed-expert GEMM holds one per expert (its rows,
    # m, are the tokens routed to any of them). None: one weight matrix per repeat.
    w_copies: np.ndarray | None = None
    # True where the op's output only adds into the residual stream, so no backward op reads it: a
    # full-remat backward pass does not rerun that op (see engine/model/compute.py passes_per_op). None: none.
    residual_out: np.ndarray | None = None
    # True for a mixture of experts' dispatch and combine einsums (``moe_dispatch = "dense"``): activation x
    # activation GEMMs the chip executes that are not the model's FLOPs and not attention. None: none.
    routing: np.ndarray | None = None
    # Separate matmuls an op's output columns come from, each ``n / n_parts`` wide (a SwiGLU expert's
    # gate and up projections: two grouped-matmul calls, each tiled on its own). None: one each.
    n_parts: np.ndarray | None = None
    # True for ops outside the blocks a full remat checkpoints (ResNet-50's stem and classifier: one
    # jax.checkpoint per bottleneck block; a transformer's unembedding: one per layer), which it does not rerun.
    # None: none.
    outside_remat: np.ndarray | None = None
    # Channels of each op's input feature map (a convolution's; the map's minor dimension in NHWC), which with
    # the output's channels (``n``) sets the lanes a TPU layout pads the maps to. None: not a convolutional model.
    in_channels: np.ndarray | None = None
    # Rows the chip computes over ``m`` (its useful rows) where they differ: GShard's dense dispatch runs each
    # expert GEMM over every capacity slot, filled or not (``experts x capacity`` rows for ``seq_len x k`` routed
    # tokens). None: every op computes its useful rows.
    executed_rows_factor: np.ndarray | None = None
    # True where the op's ``m x k`` operand takes no gradient, so its backward is one GEMM: dense dispatch's one-hot
    # mask, a comparison's result (MaxText layers/moe.py generate_masks: the dispatch mask is the combine
    # weights' nonzeros, cast). None: none.
    no_input_grad: np.ndarray | None = None
    # True where the op's elementwise work starts with a reduction over its output (a normalisation's statistics, a
    # softmax, batch-norm statistics): XLA:TPU runs that as a fusion of its own after the matmul, one at a time on the
    # core. Pointwise work (a bias, an activation, a residual add) rides in the matmul's output fusion, or in the
    # next matmul's operand. None: none.
    reduction_pass: np.ndarray | None = None

    @property
    def is_routing(self) -> np.ndarray:
        return self.routing if self.routing is not None else np.zeros(len(self.names), dtype=bool)

    @property
    def is_attention(self) -> np.ndarray:
        """The attention core: activation x activation GEMMs (scores and values), not MoE routing einsums."""
        return self.w_is_activation & ~self.is_routing

    @property
    def copies(self) -> np.ndarray:
        return self.w_copies if self.w_copies is not None else np.ones(len(self.names))

    @property
    def is_expert(self) -> np.ndarray:
        """The routed-expert GEMMs (their weights shard over the ``expert`` mesh axis)."""
        return self.copies > 1

    @property
    def weight_elems(self) -> np.ndarray:
        """Weight elements of each op (all repeats and copies); 0 for activation x activation ops."""
        return np.where(self.w_is_activation, 0.0, self.k * self.n * self.count * self.copies)

    @property
    def in_elems_per_repeat(self) -> np.ndarray:
        return self.in_elems if self.in_elems is not None else self.m * self.k

    @property
    def flops_per_sample(self) -> np.ndarray:
        """FLOPs each op executes per sample (MoE routing einsums included)."""
        return 2.0 * self.m * self.k * self.n * self.count

    @property
    def model_flops_per_sample(self) -> np.ndarray:
        """The model's FLOPs per sample and op: 0 for the MoE routing einsums, which move tokens."""
        return np.where(self.is_routing, 0.0, self.flops_per_sample)

    @property
    def elementwise_elems_total(self) -> np.ndarray:
        return self.elementwise_elems * self.count

    @property
    def out_elems_per_sample(self) -> np.ndarray:
        return self.m * self.n * self.count


@dataclass(frozen=True)
class ModelCost:
    """What the simulator needs to know about a model, independent of hardware."""

    kind: str
    params: int
    ops: GemmOps
    tokens_per_sample: int | None  # None for non-sequence models
    layers: int  # repeated blocks (transformer layers, resnet blocks, dense layers)
    # Embedding tables a parameter-server strategy can keep off the chips (included in `params`),
    # and the table elements one sample looks up.
    sparse_params: int = 0
    sparse_elems_per_sample: float = 0.0
    # Mixture of experts: the routed experts' parameters (included in `params`) and the parameters
    # one token uses (shared and top-k routed experts, not the others). 0 / None for dense models.
    expert_params: int = 0
    active_params: int | None = None
    moe_layers: int = 0
    # Tensor-parallel all-reduces of a layer's output per pass (Megatron-LM, Shoeybi et al. 2019, sec. 3: one
    # after each row-parallel GEMM block): a transformer's attention and MLP blocks make 2, a parallel block 1
    # (both partial sums add before one all-reduce); other models 1 per GEMM output.
    tp_all_reduces_per_layer: int = 1
    # indices of the ops whose output a batch-norm layer normalises (its channels: the op's n)
    batch_norm_ops: tuple[int, ...] = ()
    # Of tp_all_reduces_per_layer, those a full-remat recompute runs again: the all-reduce after a block
    # whose last GEMM it does not rerun (GemmOps.residual_out) is not repeated. None: all of them.
    tp_all_reduces_recomputed_per_layer: int | None = None

    @property
    def active_params_eff(self) -> int:
        return self.active_params if self.active_params is not None else self.params

    @property
    def fwd_flops_per_sample(self) -> float:
        return float(self.ops.model_flops_per_sample.sum())

    @property
    def train_flops_per_sample(self) -> float:
        return TRAIN_FLOPS_MULTIPLIER * self.fwd_flops_per_sample


def _ops(
    rows: list[tuple[str, int, int, int, int, bool, int]],
    launches: list[int] | None = None,
    in_elems: list[int] | None = None,
    copies: list[int] | None = None,
    residual_out: set[str] | frozenset[str] = frozenset(),
    routing: set[str] | frozenset[str] = frozenset(),
    n_parts: dict[str, int] | None = None,
    outside_remat: set[str] | frozenset[str] = frozenset(),
    in_channels: list[int] | None = None,
    executed_rows_factor: dict[str, float] | None = None,
    no_input_grad: set[str] | frozenset[str] = frozenset(),
    reduction_pass: set[str] | frozenset[str] = frozenset(),
) -> GemmOps:
    names, m, k, n, count, wact, elem = zip(*rows)
    return GemmOps(
        names=tuple(names),
        m=np.asarray(m, dtype=np.float64),
        k=np.asarray(k, dtype=np.float64),
        n=np.asarray(n, dtype=np.float64),
        count=np.asarray(count, dtype=np.float64),
        w_is_activation=np.asarray(wact, dtype=bool),
        elementwise_elems=np.asarray(elem, dtype=np.float64),
        launches=np.asarray(launches if launches is not None else count, dtype=np.float64),
        in_elems=np.asarray(in_elems, dtype=np.float64) if in_elems is not None else None,
        w_copies=np.asarray(copies, dtype=np.float64) if copies is not None else None,
        residual_out=np.array([name in residual_out for name in names], dtype=bool) if residual_out else None,
        routing=np.array([name in routing for name in names], dtype=bool) if routing else None,
        n_parts=np.array([n_parts.get(name, 1) for name in names], dtype=np.float64) if n_parts else None,
        outside_remat=np.array([name in outside_remat for name in names], dtype=bool) if outside_remat else None,
        in_channels=np.asarray(in_channels, dtype=np.float64) if in_channels is not None else None,
        executed_rows_factor=(np.array([executed_rows_factor.get(name, 1.0) for name in names], dtype=np.float64)
                              if executed_rows_factor else None),  # fmt: skip
        no_input_grad=np.array([name in no_input_grad for name in names], dtype=bool) if no_input_grad else None,
        reduction_pass=np.array([name in reduction_pass for name in names], dtype=bool) if reduction_pass else None,
    )


def _mlp(model: MlpModel) -> ModelCost:
    sizes = model.layer_sizes
    rows = []
    params = 0
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        params += fan_in * fan_out + fan_out
        # bias add + activation fused onto the output
        rows.append((f"dense{i}", 1, fan_in, fan_out, 1, False, 2 * fan_out))
    sparse = model.embedding_rows * model.embedding_dim if model.embedding_rows else 0
    lookups = float(model.embedding_lookups * model.embedding_dim) if model.embedding_rows else 0.0
    return ModelCost("mlp", params + sparse, _ops(rows), None, len(sizes) - 1, sparse, lookups)


def _resnet50(model: ResNet50Model) -> ModelCost:
    rows: list[tuple[str, int, int, int, int, bool, int]] = []
    in_elems: list[int] = []
    in_channels: list[int] = []
    params = 0

    def conv(name: str, hw_out: int, kernel: int, c_in: int, c_out: int, hw_in: int | None = None) -> None:
        nonlocal params
        params += kernel * kernel * c_in * c_out + 2 * c_out  # weights (no bias) + batch-norm gamma/beta
        # batch-norm statistics + normalise + ReLU: ~2 extra passes over the output
        rows.append((name, hw_out * hw_out, kernel * kernel * c_in, c_out, 1, False, 2 * hw_out * hw_out * c_out))
        hw_read = hw_in if hw_in is not None else hw_out
        in_elems.append(hw_read * hw_read * c_in)
        in_channels.append(c_in)

    size = model.image_size
    hw = -(-size // 2)  # 7x7 stride-2 stem, 'same' padding
    conv("stem", hw, 7, 3, 64, hw_in=size)
    hw = -(-hw // 2)  # 3x3 stride-2 max-pool
    c_in = 64
    blocks = 0
    for stage, (width, repeats) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        for b in range(repeats):
            stride = 2 if (b == 0 and stage > 0) else 1
            hw_out = -(-hw // stride)
            c_out = 4 * width
            tag = f"s{stage}b{b}"
            conv(f"{tag}.conv1", hw, 1, c_in, width)  # stride on the 3x3 (ResNet v1.5)
            conv(f"{tag}.conv2", hw_out, 3, width, width, hw_in=hw)
            conv(f"{tag}.conv3", hw_out, 1, width, c_out)
            if b == 0:
                conv(f"{tag}.proj", hw_out, 1, c_in, c_out, hw_in=hw)
            c_in, hw = c_out, hw_out
            blocks += 1
    params += c_in * model.classes + model.classes
    rows.append(("fc", 1, c_in, model.classes, 1, False, model.classes))
    in_elems.append(c_in)
    in_channels.append(c_in)
    bn_ops = tuple(i for i, r in enumerate(rows) if r[0] != "fc")  # every convolution is followed by a batch norm
    ops = _ops(rows, in_elems=in_elems, outside_remat={"stem", "fc"}, in_channels=in_channels,
               reduction_pass={rows[i][0] for i in bn_ops})  # each batch norm's statistics
    return ModelCost("resnet50", params, ops, None, blocks, batch_norm_ops=bn_ops)


#: a transformer's ops outside its layers' checkpoints: remat wraps each decoder layer (MaxText layers/decoders.py
#: applies ``nn.remat`` to the layer the scan repeats; profiler/xla_reference.py checkpoints the scanned layer), so
#: ``full`` does not rerun the unembedding and its softmax cross-entropy
_OUTSIDE_REMAT = frozenset({"unembed"})
#: a transformer's ops whose elementwise work reduces first: the pre-attention normalisation, the attention softmax,
#: the loss's softmax over the vocabulary, a mixture of experts' router softmax
_REDUCTION_PASS = frozenset({"layer.qkv", "layer.scores", "unembed", "layer.router"})


def _tp_all_reduces(model: TransformerModel) -> int:
    """Tensor-parallel all-reduces per layer and pass: attention then MLP end in one each; a parallel block's
    two partial sums add before a single one."""
    return 1 if model.parallel_block else 2


def _residual_out(model: TransformerModel) -> frozenset[str]:
    """The layer's GEMMs whose output only adds into the residual stream, so no backward op reads it.

    A sequential block's attention output feeds the MLP's LayerNorm, whose gradient needs its input:
    it is read. The MLP's (and shared experts') down-projection adds into the next layer's input
    and nothing of this layer's backward reads it; in a parallel block the attention output
    projection joins it. A routed expert's output is read: the gate's gradient needs it.
    """
    return frozenset({"layer.mlp_out", "layer.shared_out"} | ({"layer.out"} if model.parallel_block else set()))


def _tp_recomputed(model: TransformerModel) -> int:
    """Of a layer's tensor-parallel all-reduces, those after a GEMM a full-remat recompute reruns.

    A sequential block reruns its attention block's (the output is read, :func:`_residual_out`), a
    parallel block neither projection. A mixture-of-experts block's routed outputs are read, so its
    all-reduce reruns too; the dense layers of a model that interleaves them are charged the same
    (one all-reduce per such layer and step counted twice).
    """
    if model.parallel_block:
        return 0
    return 2 if model.moe else 1


def _transformer(model: TransformerModel) -> ModelCost:
    t, d, h, q, kv = model.seq_len, model.d_model, model.heads, model.head_dim_eff, model.kv_heads_eff
    ff_in = model.d_ff * (2 if model.mlp == "swiglu" else 1)
    per_layer = d * (h + 2 * kv) * q + h * q * d + d * ff_in + model.d_ff * d + 2 * 2 * d  # + two LayerNorms
    params = model.layers * per_layer + model.vocab * d * (1 if model.tied_embeddings else 2) + 2 * d
    n_l = model.layers  # identical layers with distinct weights: one row each, count x layers
    rows = [
        ("layer.qkv", t, d, (h + 2 * kv) * q, n_l, False, 2 * t * d),  # pre-LayerNorm reads/writes x
        ("layer.scores", t, q, t, h * n_l, True, 2 * t * t),  # softmax over each head's scores
        ("layer.values", t, t, q, h * n_l, True, 0),
        ("layer.out", t, h * q, d, n_l, False, 2 * t * d),  # residual add
        ("layer.mlp_in", t, d, ff_in, n_l, False, t * ff_in),  # activation (gelu / swish * gate)
        ("layer.mlp_out", t, model.d_ff, d, n_l, False, 2 * t * d),  # residual add
    ]
    if not model.moe:
        # softmax cross-entropy over the positions the loss reads (a masked LM gathers them first)
        p = model.loss_positions_eff
        rows.append(("unembed", p, d, model.vocab, 1, False, 2 * p * model.vocab))
        launches = [n_l] * 6 + [1]
        # the input embedding is the sparse part: each token looks up one d-wide row
        return ModelCost("transformer", params, _ops(rows, launches, residual_out=_residual_out(model), outside_remat=_OUTSIDE_REMAT,
                                                     reduction_pass=_REDUCTION_PASS),
                         t, model.layers,
                         model.vocab * d, float(t * d), tp_all_reduces_per_layer=_tp_all_reduces(model),
                         tp_all_reduces_recomputed_per_layer=_tp_recomputed(model))  # fmt: skip
    return _moe_transformer(model, rows, params)


def _moe_transformer(model: TransformerModel, rows: list, dense_params: int) -> ModelCost:
    """A transformer whose every ``moe_layer_interval``-th MLP is a mixture of experts.

    Per MoE layer and token: a router GEMM ``d x experts`` (softmax over the logits), the
    top-k routed experts' MLPs (each ``d x d_ff_expert`` in, ``d_ff_expert x d`` out, SwiGLU
    doubling the in-projection) and the shared experts' MLPs (GShard, Lepikhin et al. 2020;
    DeepSeekMoE, Dai et al. 2024). The routed GEMMs' rows are the ``k`` copies of every token,
    their weights one matrix per expert (``w_copies``). Model FLOPs count the tokens routed,
    ``k`` per token; tokens over capacity, the imbalance across experts and the empty slots of
    capacity buffers are the step's concern (engine/model/moe.py), not the model's.

    ``moe_dispatch = "dense"`` adds GShard's dispatch and combine einsums per sequence (Lepikhin et al.
    2020, appendix A.2; MaxText layers/moe.py dense_matmul: ``BSM,BSEC->EBCM`` and
    ``EBCM,BSEC->BSM``): one-hot masks of ``seq_len x experts x C`` (C slots per expert,
    :attr:`~engine.scenario.TransformerModel.expert_capacity_per_sequence`) contracted with the tokens,
    ``2 seq_len x experts x C x d_model`` FLOPs each, executed (``GemmOps.routing``) but not model FLOPs (the
    dispatch mask takes no gradient, so the dispatch's backward is one such GEMM: ``GemmOps.no_input_grad``); and the
    expert GEMMs execute over all ``experts x C`` slots, the empty ones too (``GemmOps.executed_rows_factor``: the
    chip's hardware FLOPs, not the model's).

    ``moe_dispatch = "grouped"`` moves the tokens instead (MaxText layers/moe.py ``permute`` and
    ``unpermute``): a gather reads each token's ``k`` copies and writes them sorted by expert
    before the grouped matmul, and after it a gather reads them back into token order and the
    weighted sum over the ``k`` copies (``BKE,BK->BE``) writes one row per token. Neither runs on
    the MXU: ``layer.permute`` and ``layer.unpermute`` are rows without FLOPs (``n = 0``) whose
    reads (``m x k``) and writes (elementwise) go through HBM.
    """
    t, d = model.seq_len, model.d_model
    e, k, sh = model.experts, model.experts_per_token, model.shared_experts
    ff_e = model.d_ff_expert_eff
    ff_e_in = ff_e * (2 if model.mlp == "swiglu" else 1)
    ff_in = model.d_ff * (2 if model.mlp == "swiglu" else 1)
    n_moe = model.moe_layers
    n_dense = model.layers - n_moe
    dense_mlp = d * ff_in + model.d_ff * d
    expert_mlp = d * ff_e_in + ff_e * d
    params = dense_params - n_moe * dense_mlp + n_moe * (d * e + (e + sh) * expert_mlp)
    expert_params = n_moe * e * expert_mlp
    active = params - n_moe * (e - k) * expert_mlp
    kept = [r for r in rows if not r[0].startswith("layer.mlp_")]
    mlp = [r[:4] + (n_dense,) + r[5:] for r in rows if r[0].startswith("layer.mlp_")] if n_dense else []
    router = ("layer.router", t, d, e, n_moe, False, t * e)  # softmax over the expert logits, top-k
    expert_in = ("layer.expert_in", t * k, d, ff_e_in, n_moe, False, t * k * ff_e_in)
    expert_out = ("layer.expert_out", t * k, ff_e, d, n_moe, False, 0)  # combined by the op after it
    if model.moe_dispatch == "dense":
        slots = e * model.expert_capacity_per_sequence  # every expert's buffer, per sequence
        moe = [router, ("layer.dispatch", slots, t, d, n_moe, True, 0), expert_in, expert_out,
               ("layer.combine", t, slots, d, n_moe, True, 2 * t * d)]  # weighted combine + residual add  # fmt: skip
        routing = frozenset({"layer.dispatch", "layer.combine"})
        executed = {name: slots / (t * k) for name in ("layer.expert_in", "layer.expert_out")}
    else:
        moe = [router,
               ("layer.permute", t * k, d, 0, n_moe, False, t * k * d),  # read k copies, write them sorted
               expert_in, expert_out,
               # read the sorted outputs (m x k), write them in token order, read them again for the
               # weighted sum, then the sum and residual add (2 t d, as the dense combine)
               ("layer.unpermute", t * k, d, 0, n_moe, False, 2 * t * k * d + 2 * t * d)]  # fmt: skip
        routing = frozenset()
        executed = None
    if sh:
        moe += [
            ("layer.shared_in", t, d, sh * ff_e_in, n_moe, False, t * sh * ff_e_in),
            ("layer.shared_out", t, sh * ff_e, d, n_moe, False, t * d),
        ]
    p = model.loss_positions_eff
    rows = kept + mlp + moe + [("unembed", p, d, model.vocab, 1, False, 2 * p * model.vocab)]
    launches = [model.layers if r[0] in ("layer.qkv", "layer.scores", "layer.values", "layer.out") else r[4] for r in rows[:-1]] + [1]
    copies = [e if r[0] in ("layer.expert_in", "layer.expert_out") else 1 for r in rows]
    return ModelCost(
        "transformer", params,
        _ops(rows, launches, copies=copies, residual_out=_residual_out(model), routing=routing,
             n_parts={"layer.expert_in": 2} if model.mlp == "swiglu" else None, executed_rows_factor=executed,
             no_input_grad={"layer.dispatch"} if model.moe_dispatch == "dense" else frozenset(), outside_remat=_OUTSIDE_REMAT,
             reduction_pass=_REDUCTION_PASS),  # fmt: skip
        t, model.layers,
        model.vocab * d, float(t * d), expert_params=expert_params, active_params=active, moe_layers=n_moe,
        tp_all_reduces_per_layer=_tp_all_reduces(model), tp_all_reduces_recomputed_per_layer=_tp_recomputed(model),
    )  # fmt: skip


def model_cost(model: MlpModel | ResNet50Model | TransformerModel) -> ModelCost:
    """Parameter count and per-sample forward GEMMs for a scenario's model section."""
    if isinstance(model, MlpModel):
        return _mlp(model)
    if isinstance(model, ResNet50Model):
        return _resnet50(model)
    return _transformer(model)


@dataclass(frozen=True)
class LayerUnit:
    """A unit FSDP gathers at once (a transformer layer, or one GEMM of other models)."""

    name: str
    params: float  # parameters gathered (whole model replica, before any sharding)
    flops_frac: float  # share of the forward FLOPs
    act_out_elems: float  # elements per sample of the output a tensor-parallel all-reduce carries
    expert_params: float = 0.0  # of `params`, the routed experts' (sharded over the expert axis)


#: layer units of recently seen model costs, by identity (a cost's arrays make it unhashable);
#: the cost is kept beside its units so an id is never reused for another object while cached
_UNITS_CACHE: dict[int, tuple[ModelCost, tuple[LayerUnit, ...]]] = {}
_UNITS_CACHE_SIZE = 64


def layer_units(cost: ModelCost) -> tuple[LayerUnit, ...]:
    """Split the model into the units FSDP gathers and TP synchronises, in forward order.

    Transformers: the embedding, ``layers`` identical layers, the unembedding.
    Other models: one unit per GEMM row. Parameters not in any GEMM (embeddings,
    norms, biases) go to the first unit. Cached per cost object: the communication
    and memory models both ask for them, and a search asks thousands of times.
    """
    hit = _UNITS_CACHE.get(id(cost))
    if hit is not None and hit[0] is cost:
        return hit[1]
    units = tuple(_layer_units(cost))
    if len(_UNITS_CACHE) >= _UNITS_CACHE_SIZE:
        _UNITS_CACHE.clear()
    _UNITS_CACHE[id(cost)] = (cost, units)
    return units


def _layer_units(cost: ModelCost) -> list[LayerUnit]:
    ops = cost.ops
    w = ops.weight_elems
    flops = ops.flops_per_sample
    total_flops = float(flops.sum()) or 1.0
    if cost.kind == "transformer":
        is_layer = np.array([n.startswith("layer.") for n in ops.names])
        L = cost.layers
        tokens, d_model = float(ops.m[0]), float(ops.k[0])  # the qkv row: m = tokens, k = d_model
        layer_p = float(w[is_layer].sum()) / L
        layer_f = float(flops[is_layer].sum()) / L / total_flops
        head_p = float(w[~is_layer].sum())
        units = [LayerUnit("embed", cost.params - layer_p * L - head_p, 0.0, 0.0)]
        layer_e = float(w[is_layer & ops.is_expert].sum()) / L  # MoE layers' experts, spread over the layers
        units += [LayerUnit(f"layer{i}", layer_p, layer_f, tokens * d_model, layer_e) for i in range(L)]
        units.append(LayerUnit("unembed", head_p, float(flops[~is_layer].sum()) / total_flops, 0.0))
        return units
    units = [
        LayerUnit(n, float(p), float(f) / total_flops, float(o)) for n, p, f, o in zip(ops.names, w, flops, ops.out_elems_per_sample)
    ]
    extra = cost.params - float(w.sum())
    first = units[0]
    units[0] = LayerUnit(first.name, first.params + extra, first.flops_frac, first.act_out_elems)
    return units
