"""The scenario's ``[model]`` table: one section per model kind, told apart by ``kind``."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from .sections import PositiveInt, Section

__all__ = [
    "MlpModel",
    "ResNet50Model",
    "TransformerModel",
    "HloModel",
    "ModelSection",
    "AUTOSELECT_FLASH_MIN_SEQ",
    "HLO_MODEL_KEYS",
    "HLO_FIXED_TRAINING",
    "HLO_UNSUPPORTED_SECTIONS",
]

class MlpModel(Section):
    kind: Literal["mlp"]
    layer_sizes: Annotated[list[PositiveInt], Field(min_length=2)]
    # optional embedding table in front of the MLP (a sparse recommender model, DLRM-style)
    embedding_rows: PositiveInt | None = None
    embedding_dim: PositiveInt = 64
    embedding_lookups: PositiveInt = 1  # rows looked up per sample


class ResNet50Model(Section):
    kind: Literal["resnet50"]
    image_size: PositiveInt = 224
    classes: PositiveInt = 1000
    # Chips whose batch-norm statistics are pooled (distributed batch normalization, Ying et al. 2018,
    # arXiv:1811.06992): one all-reduce per batch-norm layer and pass among that many neighbouring
    # replicas (engine/model/batch_norm.py). 1: each chip normalises over its own images.
    batch_norm_group: PositiveInt = 1


#: shortest sequence for which ``attention = "autoselected"`` takes the flash kernel (MaxText
#: layers/attentions.py: ``attention_kernel == "autoselected" and length < 128`` -> dot product)
AUTOSELECT_FLASH_MIN_SEQ = 128


class TransformerModel(Section):
    kind: Literal["transformer"]
    layers: PositiveInt
    d_model: PositiveInt
    heads: PositiveInt
    d_ff: PositiveInt
    vocab: PositiveInt
    seq_len: PositiveInt
    kv_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    # "gelu" and "relu": two matrices around the activation; "swiglu": a gate and an up projection
    # (Shazeer 2020). They cost the same FLOPs per matrix; what the backward keeps differs (engine/memory/activations.py).
    mlp: Literal["gelu", "relu", "swiglu"] = "gelu"
    tied_embeddings: bool = False
    # Positions per sequence the loss reads. A masked language model projects only its masked positions onto
    # the vocabulary: BERT's pre-training gathers ``max_predictions_per_seq`` positions of the encoder's output
    # before its output layer (Devlin et al. 2019; google-research/bert run_pretraining.py get_masked_lm_output
    # and gather_indexes), 76 of 512 in MLPerf BERT. None: every position (a causal language model).
    loss_positions: PositiveInt | None = None
    # Attention and MLP side by side on one layer norm, their outputs summed (GPT-J; PaLM, Chowdhery et al.
    # 2022, sec. 2 "Parallel Layers"; MaxText's 2023 decoder layer): under tensor parallelism the two blocks'
    # partial sums add up before one all-reduce per layer and pass instead of two. False: one block after the other.
    parallel_block: bool = False
    # "flash": blockwise attention (Dao et al. 2022; Pallas splash attention on TPU) never stores the
    # seq x seq probabilities and recomputes them in the backward pass. "standard": the scores and
    # probabilities go through HBM. "autoselected" (the default) is what TPU training stacks pick
    # when the user names no kernel: see :attr:`attention_kernel`.
    attention: Literal["autoselected", "standard", "flash"] = "autoselected"
    # Mixture of experts (Shazeer et al. 2017; GShard, Lepikhin et al. 2020): every
    # `moe_layer_interval`-th layer replaces its MLP with `experts` routed experts (top-k routing,
    # each expert an MLP of width `d_ff_expert`) and `shared_experts` always-active ones (DeepSeekMoE,
    # Dai et al. 2024). 0 experts: a dense model.
    experts: Annotated[int, Field(ge=0)] = 0
    experts_per_token: PositiveInt = 2
    # 0: dropless (no capacity; MaxText's capacity_factor -1 with its megablox grouped matmuls, MegaBlocks,
    # Gale et al. 2023): every routed token is computed and the buffers hold its k copies.
    capacity_factor: Annotated[float, Field(ge=0)] = 1.25
    # How the experts compute their tokens. "grouped": tokens sorted by expert, one grouped matmul over
    # the tokens each expert kept (MegaBlocks, Gale et al. 2023; MaxText's megablox, sparse_matmul true).
    # "dense": GShard's einsum dispatch (Lepikhin et al. 2020, sec. 2.2 and appendix A.2; MaxText's
    # sparse_matmul false, layers/moe.py dense_matmul): one-hot dispatch and combine einsums move each
    # sequence's tokens into capacity-sized buffers per expert and back, and every expert computes its
    # whole buffer, empty slots included. Needs a capacity (capacity_factor > 0).
    moe_dispatch: Literal["grouped", "dense"] = "grouped"
    # The grouped matmul's tile (rows, contraction, output) under moe_dispatch "grouped". The megablox
    # kernel (jax.experimental.pallas.ops.tpu.megablox gmm.py; MaxText's kernels/megablox) computes whole
    # tiles: an expert's tokens that start inside a row tile cost that tile once more, and a contraction
    # or output dimension longer than its tile runs a last tile masked, not shortened. Default: MaxText
    # base.yml's tile_batch_seq 512, tile_activation_dim 1024, tile_weight_dim 1024 (the values its later
    # wi_tile_* / wo_tile_* keys keep); a dimension no longer than its tile is one tile of its own size.
    gmm_tiling: Annotated[list[PositiveInt], Field(min_length=3, max_length=3)] = [512, 1024, 1024]
    moe_layer_interval: PositiveInt = 1
    shared_experts: Annotated[int, Field(ge=0)] = 0
    d_ff_expert: PositiveInt | None = None

    @model_validator(mode="after")
    def _heads_divide(self) -> "TransformerModel":
        if self.head_dim is None and self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads}) unless head_dim is given")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.loss_positions is not None and self.loss_positions > self.seq_len:
            raise ValueError(f"loss_positions ({self.loss_positions}) exceeds seq_len ({self.seq_len}); "
                             f"valid: 1 .. {self.seq_len}, or leave it out for every position")  # fmt: skip
        if self.experts and self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) must not exceed experts ({self.experts}); "
                             f"valid: 1 .. {self.experts}")  # fmt: skip
        if self.experts and self.moe_dispatch == "dense" and self.capacity_factor <= 0:
            raise ValueError("moe_dispatch 'dense' computes capacity-sized expert buffers and needs capacity_factor > 0; "
                             "valid: capacity_factor > 0 with 'dense', or moe_dispatch 'grouped' for dropless routing")  # fmt: skip
        if self.experts and self.moe_layer_interval > self.layers:
            raise ValueError(f"moe_layer_interval ({self.moe_layer_interval}) exceeds layers ({self.layers}): no layer "
                             f"would be a mixture-of-experts layer; valid: 1 .. {self.layers}")  # fmt: skip
        return self

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def routed_copies_per_token(self) -> float:
        """Slots the dispatch buffers hold per token: ``k x capacity_factor`` (GShard's expert capacity
        summed over the experts), or ``k`` when dropless."""
        return self.experts_per_token * (self.capacity_factor or 1.0)

    @property
    def expert_capacity_per_sequence(self) -> int:
        """Slots each expert's buffer holds per sequence under ``moe_dispatch = "dense"``: MaxText's
        ``max(ceil(seq_len x k / experts) x capacity_factor, capacity_factor)`` (layers/moe.py generate_masks)."""
        per_expert = math.ceil(self.seq_len * self.experts_per_token / self.experts) * self.capacity_factor
        return int(max(per_expert, self.capacity_factor))

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (every ``moe_layer_interval``-th, counting from 1)."""
        return self.layers // self.moe_layer_interval if self.experts else 0

    @property
    def d_ff_expert_eff(self) -> int:
        return self.d_ff_expert if self.d_ff_expert is not None else self.d_ff

    @property
    def head_dim_eff(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.heads

    @property
    def loss_positions_eff(self) -> int:
        """Positions per sequence the unembedding and the loss compute: ``loss_positions``, else ``seq_len``."""
        return self.loss_positions if self.loss_positions is not None else self.seq_len

    @property
    def kv_heads_eff(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def attention_kernel(self) -> str:
        """The attention kernel the run assumes: ``"flash"`` or ``"standard"``.

        ``autoselected`` follows MaxText, whose ``configs/base.yml`` sets ``attention:
        'autoselected'`` and whose ``layers/attentions.py`` (``AttentionOp.apply_attention``)
        resolves it to the TPU flash kernel (Pallas splash attention,
        ``jax.experimental.pallas.ops.tpu``) for training and to the plain dot-product
        einsums only for decoding or sequences shorter than 128.
        """
        if self.attention != "autoselected":
            return self.attention
        return "flash" if self.seq_len >= AUTOSELECT_FLASH_MIN_SEQ else "standard"


class HloModel(Section):
    """The user's own program: an XLA HLO module of the train step (``compiled.as_text()``, plain or .gz).

    ``path`` is relative to the scenario file. The module fixes the model, precision,
    optimizer, remat and mesh, so those keys are not given (engine/hlo/run.py).
    """

    kind: Literal["hlo"]
    path: Annotated[str, Field(min_length=1, max_length=4096)]
    # the FLOPs the model needs per step, whole job (forward + backward, no recomputation): gives MFU
    model_flops_per_step: Annotated[float, Field(gt=0)] | None = None
    # each op's time: XLA:TPU's estimated cycles where the module has them ("xla"), or Podscope's roofline ("podscope")
    compute_source: Literal["xla", "podscope"] = "xla"


ModelSection = Annotated[Union[MlpModel, ResNet50Model, TransformerModel, HloModel], Field(discriminator="kind")]


#: keys an HLO module already fixes, and the idle-time sections not yet simulated for one
HLO_MODEL_KEYS = frozenset(HloModel.model_fields)
HLO_FIXED_TRAINING = ("precision", "optimizer", "remat", "weight_dtype", "gradient_reduce_dtype")
HLO_UNSUPPORTED_SECTIONS = ("parallelism", "input", "compile", "stragglers", "failures", "convergence", "cost")
