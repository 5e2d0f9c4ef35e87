"""Scenario files: TOML in, frozen validated objects out.

A scenario is parsed into pydantic models that reject unknown keys, then checked
against the hardware catalog (chip exists, topology fits, mesh product matches
chips). Every problem is collected with its dotted key path and reported at once
through a single :class:`~engine.errors.ScenarioError` naming the file.

New scenario sections (input pipeline, compilation, faults, ...) slot in as extra
optional fields on :class:`Scenario` with defaults, so older files stay valid.
"""

from __future__ import annotations

import copy
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..convergence.section import ConvergenceSection, CostSection, convergence_problems
from ..errors import ScenarioError, TopologyError
from ..hlo.module_file import module_problems
from ..idle.compilation import CompileSection
from ..idle.failures import FailureSection
from ..idle.input_pipeline import InputSection
from ..idle.stragglers import StragglerSection
from ..pod.catalog import ChipSpec, load_catalog
from ..pod.mesh import MESH_AXES, resolve_mesh
from ..pod.topology import fault_problems, is_supported_shape, supported_shapes, wraparound_for
from .names import name_problem
from .validation_messages import problem_from_error

__all__ = [
    "Scenario",
    "with_parallelism",
    "PodSection",
    "MlpModel",
    "ResNet50Model",
    "TransformerModel",
    "HloModel",
    "TrainingSection",
    "ParallelismSection",
    "ParameterServerSection",
    "SimSection",
    "DEFAULT_SAMPLE_CHIPS",
    "InterconnectSection",
    "load_scenario",
    "scenario_from_dict",
    "apply_overrides",
    "parse_topology",
]


class _Section(BaseModel):
    # strict: TOML has real booleans, integers and strings, so `steps = true` or `steps = "100"`
    # is a mistake, not a 1 or a 100 (pydantic's lax mode would coerce both); ints still fill
    # float fields, which strict mode allows.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


PositiveInt = Annotated[int, Field(gt=0)]


class PodSection(_Section):
    chip: str
    topology: str
    slices: PositiveInt = 1


class MlpModel(_Section):
    kind: Literal["mlp"]
    layer_sizes: Annotated[list[PositiveInt], Field(min_length=2)]
    # optional embedding table in front of the MLP (a sparse recommender model, DLRM-style)
    embedding_rows: PositiveInt | None = None
    embedding_dim: PositiveInt = 64
    embedding_lookups: PositiveInt = 1  # rows looked up per sample


class ResNet50Model(_Section):
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


class TransformerModel(_Section):
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
    # (Shazeer 2020). They cost the same FLOPs per matrix; what the backward keeps differs (engine/memory/hbm.py).
    mlp: Literal["gelu", "relu", "swiglu"] = "gelu"
    tied_embeddings: bool = False
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


class HloModel(_Section):
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


class TrainingSection(_Section):
    global_batch: PositiveInt
    steps: PositiveInt
    precision: Literal["bf16", "int8", "fp32", "fp8"] = "bf16"  # fp8: only on chips whose catalog entry has an fp8 peak
    optimizer: Literal["sgd", "momentum", "adam", "adafactor"] = "adam"
    remat: Literal["none", "full", "selective", "minimal"] = "none"
    # with parallelism.pipeline > 1: pipeline microbatches; otherwise gradient accumulation steps
    microbatches: PositiveInt = 1
    # dtype of the optimizer's moments (Adam m and v, momentum), whatever the weights' dtype.
    # "bf16": DeepSeek-V3 (arXiv:2412.19437, sec. 3.3.3) tracks AdamW's moments in BF16; optax exposes
    # it as adam(mu_dtype=...) and sgd(accumulator_dtype=...) (engine/memory/hbm.py).
    optimizer_state: Literal["fp32", "bf16"] = "fp32"
    # dtype the weights are stored, reduced and updated in; their gradients take it too (engine/units.py
    # WEIGHT_BYTES_PER_ELEMENT). "fp32": mixed precision's master copy; "bf16": no master copy
    # (MaxText's weight_dtype: bfloat16), half the model-state HBM and gradient traffic.
    weight_dtype: Literal["fp32", "bf16"] = "fp32"


class ParameterServerSection(_Section):
    """TF ParameterServerStrategy: embedding tables live on CPU parameter-server hosts over DCN."""

    hosts: PositiveInt = 1  # parameter-server hosts holding the sparse (embedding) parameters
    dcn_gbps_per_host: Annotated[float, Field(gt=0)] = 25.0  # each PS host's NIC, GB/s (same class as a TPU host's)


MeshAxisName = Literal["data", "fsdp", "tensor", "expert", "pipeline", "context"]  # engine.pod.mesh.MESH_AXES


class ParallelismSection(_Section):
    data: PositiveInt | None = None  # default: whatever the other axes leave
    fsdp: PositiveInt = 1
    tensor: PositiveInt = 1
    # XLA's collective matmul (Wang et al. 2023): tensor-parallel collectives decomposed and overlapped
    # with the matmuls beside them, TPU's default; false prices them blocking (engine/comm/mesh_comm.py)
    collective_matmul: bool = True
    expert: PositiveInt = 1  # expert-parallel axis: each chip holds experts / expert of every MoE layer
    # pipeline stages (engine/model/pipeline.py); with several slices, a stage count that is a multiple of the
    # slice count spans the slices (their boundaries cross the DCN), otherwise each slice holds the pipeline
    pipeline: PositiveInt = 1
    pipeline_schedule: Literal["gpipe", "1f1b", "interleaved"] = "1f1b"
    virtual_stages: PositiveInt = 1  # stages per chip under "interleaved"
    # context (sequence) parallelism: each chip holds seq_len / context of every sequence, and
    # attention passes K/V blocks around a ring over this axis (ring attention, engine/model/context.py)
    context: PositiveInt = 1
    # what FSDP shards (ZeRO stages, Rajbhandari et al. 2020): "all" = weights, gradients and optimizer
    # state (ZeRO-3); "grads+optimizer" (ZeRO-2); "optimizer" (ZeRO-1). engine/comm/mesh_comm.py, memory.py
    fsdp_shard: Literal["all", "grads+optimizer", "optimizer"] = "all"
    strategy: Literal["spmd", "parameter_server"] = "spmd"
    # mesh axis -> torus axes it spans, e.g. {tensor = ["z"], fsdp = ["x", "y"]}; "y:2" takes a
    # 2-chip part of axis y. Empty: the default mapping of engine/pod/mesh.py (tensor innermost).
    mapping: dict[MeshAxisName, list[str]] = Field(default_factory=dict)
    parameter_server: ParameterServerSection | None = None
    # Cross-replica weight-update sharding (Xu et al. 2020, "Automatic Cross-Replica Sharding of Weight
    # Update in Data-Parallel Training"; used by the MLPerf ResNet-50 TPU submissions, Kumar et al. 2019
    # and 2021): the gradient all-reduce becomes reduce-scatter + all-gather of the updated weights, and
    # each data-parallel replica applies the optimizer to its 1/replicas share only.
    shard_weight_update: bool = False


class SimSection(_Section):
    seed: Annotated[int, Field(ge=0)] = 0
    jitter_frac: Annotated[float, Field(ge=0, le=1)] | None = None  # None: the calibrated default
    # summary: per-step/per-chip aggregates only, no event rows; sampled: those aggregates of every
    # chip plus every event of sample_chips chips chosen to be worth looking at (engine/sampling.py)
    trace: Literal["full", "summary", "sampled"] = "full"
    sample_chips: PositiveInt | None = None  # sampled only; None: DEFAULT_SAMPLE_CHIPS, or every chip of a smaller pod


NonNegInt = Annotated[int, Field(ge=0)]
Coordinate = Annotated[list[NonNegInt], Field(min_length=1, max_length=3)]


class LinkRef(_Section):
    """One ICI link: the slice-local coordinates of its two end chips (neighbours)."""

    a: Coordinate
    b: Coordinate
    slice: NonNegInt = 0


class DegradedLink(LinkRef):
    bandwidth_frac: Annotated[float, Field(gt=0, le=1)]


class InterconnectSection(_Section):
    """How collectives run on the ICI: schedule, link direction, overlap and link faults.

    ``schedule = "simultaneous"`` (all torus axes busy at once on separate pieces) is
    the default because it is what the published TPU figures describe; see
    engine/comm/collectives.py. ``overlap`` lets the gradient all-reduce run in
    ``buckets`` during the backward pass; only the exposed part is charged.
    ``unidirectional`` makes wraparound axes run one-way rings; a mesh axis' ring
    already uses each direction once (out and back), so it is unchanged.
    Faults name links by the slice-local coordinates of their two end chips.
    """

    schedule: Literal["sequential", "simultaneous"] = "simultaneous"
    unidirectional: bool = False
    overlap: bool = False
    buckets: PositiveInt = 4
    degraded_links: list[DegradedLink] = []
    failed_links: list[LinkRef] = []


class Scenario(_Section):
    """A validated scenario. Build with :func:`load_scenario` or :func:`scenario_from_dict`."""

    name: str
    pod: PodSection
    model: ModelSection
    training: TrainingSection
    parallelism: ParallelismSection = ParallelismSection()
    sim: SimSection = SimSection()
    interconnect: InterconnectSection = InterconnectSection()
    # Idle-time mechanisms (engine/idle/input_pipeline.py, compilation.py, stragglers.py, failures.py); absent = off.
    input: InputSection | None = None
    compile: CompileSection | None = None
    stragglers: StragglerSection | None = None
    failures: FailureSection | None = None
    # When training is done and what a chip-hour costs (engine/convergence/); absent = per-step answers only.
    convergence: ConvergenceSection | None = None
    cost: CostSection | None = None

    # Derived views (not inputs) -------------------------------------------------
    @property
    def slice_shape(self) -> tuple[int, ...]:
        return parse_topology(self.pod.topology)

    @property
    def chips_per_slice(self) -> int:
        return math.prod(self.slice_shape)

    @property
    def total_chips(self) -> int:
        return self.chips_per_slice * self.pod.slices

    @property
    def sampled_chip_count(self) -> int:
        """Chips whose events a ``trace = "sampled"`` run stores: ``sim.sample_chips``, or the default capped by the pod."""
        return self.sim.sample_chips if self.sim.sample_chips is not None else min(DEFAULT_SAMPLE_CHIPS, self.total_chips)

    @property
    def data_parallel(self) -> int:
        """Data-parallel degree inside one slice (the `data` mesh axis)."""
        p = self.parallelism
        return p.data if p.data is not None else self.chips_per_slice // self.model_axes_product

    @property
    def model_axes_product(self) -> int:
        """Chips one data-parallel replica spans inside a slice: the product of every mesh axis but ``data``."""
        return math.prod(v for k, v in self.mesh_sizes_given.items() if k != "data")

    @property
    def mesh_sizes_given(self) -> dict[str, int]:
        p = self.parallelism
        return {"data": p.data or 1, "fsdp": p.fsdp, "tensor": p.tensor, "expert": p.expert, "pipeline": self.pipeline_in_slice,
                "context": p.context}

    @property
    def pipeline_spans_slices(self) -> bool:
        """Whether the pipeline's stages run across slices (over the DCN) rather than inside each slice."""
        p = self.parallelism
        return self.pod.slices > 1 and p.pipeline > 1 and p.pipeline % self.pod.slices == 0

    @property
    def pipeline_in_slice(self) -> int:
        """Stages inside one slice: all of them, or ``pipeline / slices`` when the pipeline spans the slices."""
        p = self.parallelism
        return p.pipeline // self.pod.slices if self.pipeline_spans_slices else p.pipeline

    @property
    def dcn_data_parallel(self) -> int:
        """Data-parallel replicas across slices: every slice, unless the pipeline spans them."""
        return 1 if self.pipeline_spans_slices else self.pod.slices

    @property
    def mesh_sizes(self) -> dict[str, int]:
        """Every mesh axis' size inside a slice (engine.pod.mesh.MESH_AXES), ``data`` resolved."""
        sizes = {a: 1 for a in MESH_AXES}
        sizes.update(self.mesh_sizes_given)
        sizes["data"] = self.data_parallel
        return sizes

    @property
    def batch_shards(self) -> int:
        """How many ways the global batch is split: data x fsdp x expert inside a slice, times slices.

        The expert axis shards the batch outside the expert layers (GShard; MaxText's
        ``activation_batch`` rule), as data and fsdp do.
        """
        return self.data_parallel * self.parallelism.fsdp * self.parallelism.expert * self.dcn_data_parallel

    @property
    def per_chip_batch(self) -> int:
        return self.training.global_batch // self.batch_shards

    def chip_spec(self) -> ChipSpec:
        return load_catalog()[self.pod.chip]

    def to_dict(self) -> dict[str, Any]:
        out = self.model_dump(mode="json")
        if self.model.kind == "hlo":  # the keys the module fixes are not the scenario's: a dump must reload
            for section in _HLO_UNSUPPORTED_SECTIONS:
                out.pop(section, None)
            for key in _HLO_FIXED_TRAINING:
                out["training"].pop(key, None)
        return out


def parse_topology(text: str) -> tuple[int, ...]:
    """Parse ``"16x16"`` / ``"4x4x8"`` / ``"8"`` into a tuple of axis sizes.

    Raises
    ------
    ValueError
        If the text is not 1-3 positive integers joined by ``x``.
    """
    parts = text.lower().split("x")
    if not 1 <= len(parts) <= 3 or not all(p.strip().isascii() and p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"topology {text!r} must be 1 to 3 positive integers joined by 'x', e.g. '16x16' or '4x4x8'")
    return tuple(int(p) for p in parts)


#: largest scenario file read; real ones are under 2 KiB
MAX_SCENARIO_BYTES = 1024 * 1024

#: chips a ``sim.trace = "sampled"`` run keeps every event of, unless ``sim.sample_chips`` says:
#: one 16x16 slice's worth, which the Timeline draws at once (profiler.queries.TIMELINE_MAX_CHIPS)
DEFAULT_SAMPLE_CHIPS = 256
#: upper bound on chips x steps in one run: the trace holds ~5 events per chip-step, so this
#: caps a run at ~80 M events (~2 GB in memory, ~1 GB in DuckDB), far past the 4,096-chip,
#: 100-step runs the engine is built for; longer studies simulate fewer steps.
MAX_CHIP_STEPS = 16 * 2**20
#: the same bound for ``sim.trace = "summary"`` (and the aggregates of ``"sampled"``), which keeps
#: per-step, per-chip arrays but no events: measured ~40 bytes per chip-step at peak
#: (resnet50-v3-32, 20k vs 80k steps; 2.24 GiB for 50,944 chips x 1,000 steps), so this caps such
#: a run near 3 GiB and admits the largest reported job (50,944 chips, MAX_POD_CHIPS) for 1,000 steps
MAX_SUMMARY_CHIP_STEPS = 64 * 2**20
SUMMARY_BYTES_PER_CHIP_STEP = 48  # the measured ~40, rounded up: the estimate quoted in errors
#: most chips in one run: above the largest training job reported, 50,944 TPU v5e chips
#: (Google Cloud blog, "Google Cloud demonstrates the world's largest distributed training job
#: for large language models across 50000+ TPU v5e chips", Nov 2023)
MAX_POD_CHIPS = 65_536
#: deepest nesting of arrays and tables in a scenario or sweep file (real ones nest 3 deep)
MAX_TOML_DEPTH = 32


def _depth(value: Any) -> int:
    """Nesting depth of parsed TOML (tables and arrays), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, d + 1)
        if deepest > MAX_TOML_DEPTH:
            return deepest
        stack.extend((c, d + 1) for c in children)
    return deepest


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """Parse a scenario or sweep file's TOML, refusing nesting deeper than :data:`MAX_TOML_DEPTH`.

    Raises
    ------
    ScenarioError
        Malformed TOML, or nested too deep (the parser recurses per level: a 2 KB file of
        brackets would otherwise exhaust Python's stack).
    """
    too_deep = ScenarioError(source, [("", f"arrays or tables nested more than {MAX_TOML_DEPTH} deep; "
                                           "valid: a scenario nests sections a few levels deep")])  # fmt: skip
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(source, [("", f"malformed TOML: {e}")]) from None
    except RecursionError:
        raise too_deep from None
    if _depth(raw) > MAX_TOML_DEPTH:
        raise too_deep
    return raw


def _sample_problems(s: Scenario, chips: int) -> list[tuple[str, str]]:
    """``sim.sample_chips``: only with ``trace = "sampled"``, and at most the pod's chips."""
    given = s.sim.sample_chips
    if given is None:
        return []
    if s.sim.trace != "sampled":
        return [("sim.sample_chips", f"{given} sampled chips, but sim.trace = {s.sim.trace!r} stores "
                 f"{'every chip' if s.sim.trace == 'full' else 'no chip'}'s events; valid: set sim.trace = \"sampled\", "
                 "or remove sim.sample_chips")]  # fmt: skip
    if given > chips:
        return [("sim.sample_chips", f"{given:,} sampled chips, but the pod has {chips:,}; valid: 1 to {chips:,}")]
    return []


def _example_topology(axes: int) -> str:
    return "x".join(["4"] * axes)


def _semantic_problems(s: Scenario) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if (bad_name := name_problem(s.name)) is not None:
        problems.append(("name", bad_name))
    catalog = load_catalog()
    chip = catalog.get(s.pod.chip)
    if chip is None:
        problems.append(("pod.chip", f"unknown chip {s.pod.chip!r}; valid: {', '.join(sorted(catalog))}"))
    try:
        shape = parse_topology(s.pod.topology)
    except ValueError as e:
        problems.append(("pod.topology", str(e)))
        return problems
    n = math.prod(shape)
    if chip is not None:
        if len(shape) > chip.torus_dims:
            problems.append(
                ("pod.topology", f"{s.pod.topology!r} has {len(shape)} axes but {chip.key} has a {chip.torus_dims}D torus; "
                 f"give at most {chip.torus_dims} axes, e.g. {_example_topology(chip.torus_dims)!r}")
            )
        if n > chip.max_slice_chips:
            problems.append(
                ("pod.topology", f"{s.pod.topology!r} is {n} chips; a {chip.key} slice holds at most {chip.max_slice_chips} "
                 "(use more pod.slices for larger jobs)")
            )
    p = s.parallelism
    given = s.mesh_sizes_given
    named = [a for a in MESH_AXES if a in ("data", "fsdp", "tensor") or given.get(a, 1) > 1]
    model_named = [a for a in named if a != "data"]
    mesh = math.prod(given[a] for a in named)
    if p.data is None:
        if n % s.model_axes_product:
            problems.append(
                ("parallelism", f"{' x '.join(model_named)} = {s.model_axes_product} does not divide the {n} chips per slice; "
                 f"valid: a divisor of {n}")
            )
    elif mesh != n:
        problems.append(
            ("parallelism", f"{' x '.join(named)} = {'x'.join(str(given[a]) for a in named)} = {mesh}, but the slice "
             f"{s.pod.topology!r} has {n} chips; valid: axes whose product is {n} (or leave data unset)")
        )
    chips = n * s.pod.slices
    chip_steps = chips * s.training.steps
    if chips > MAX_POD_CHIPS:
        problems.append(
            ("pod.slices", f"{s.pod.slices:,} slices of {n} chips = {chips:,} chips; valid: at most {MAX_POD_CHIPS:,} chips "
             f"in one run, e.g. pod.slices = {max(1, MAX_POD_CHIPS // max(n, 1)):,}")
        )
    elif chip_steps > MAX_CHIP_STEPS and s.sim.trace == "full":
        problems.append(
            ("training.steps", f"{chips} chips x {s.training.steps} steps = {chip_steps:,} chip-steps; "
             f"valid: at most {MAX_CHIP_STEPS:,} per run with a full trace (simulate fewer steps, or set "
             "sim.trace = \"sampled\" or \"summary\")")
        )
    elif s.sim.trace == "sampled" and (sampled := min(s.sampled_chip_count, chips)) * s.training.steps > MAX_CHIP_STEPS:
        problems.append(
            ("sim.sample_chips", f"{sampled:,} sampled chips x {s.training.steps:,} steps = {sampled * s.training.steps:,} "
             f"chip-steps of events; valid: at most {MAX_CHIP_STEPS:,}, i.e. at most "
             f"{max(1, MAX_CHIP_STEPS // s.training.steps):,} sampled chips over {s.training.steps:,} steps")
        )
    elif chip_steps > MAX_SUMMARY_CHIP_STEPS:
        need_gib = chip_steps * SUMMARY_BYTES_PER_CHIP_STEP / 2**30
        problems.append(
            ("training.steps", f"{chips} chips x {s.training.steps:,} steps = {chip_steps:,} chip-steps (about {need_gib:,.1f} GiB "
             f"to simulate); valid: at most {MAX_SUMMARY_CHIP_STEPS:,} chip-steps per run even with sim.trace = \"summary\" "
             "or \"sampled\", "
             f"i.e. at most {max(1, MAX_SUMMARY_CHIP_STEPS // chips):,} steps on {chips} chips")
        )
    problems += _sample_problems(s, chips)
    if not problems and chip is not None:
        try:
            resolve_mesh(shape, wraparound_for(chip, shape), s.mesh_sizes, p.mapping)
        except TopologyError as e:
            problems.append(("parallelism.mapping", str(e)))
    heads = getattr(s.model, "heads", None)
    if heads is not None and p.tensor > 1 and heads % p.tensor:
        # Tensor parallelism gives each chip whole attention heads (Megatron-LM, Shoeybi et al. 2019).
        divisors = [t for t in range(1, heads + 1) if heads % t == 0 and n % t == 0]
        problems.append(
            ("parallelism.tensor", f"{p.tensor} does not divide the model's {heads} attention heads; valid: a divisor of "
             f"{heads} that also divides the slice's {n} chips: {', '.join(map(str, divisors))}")
        )
    if chip is not None and s.training.precision == "fp8" and not chip.has_fp8:
        with_fp8 = sorted(k for k, c in catalog.items() if c.has_fp8)
        problems.append(("training.precision", f"fp8 needs a chip with an fp8 matmul rate; {chip.key} has none; valid: "
                         f"bf16, int8 or fp32 on {chip.key}, or fp8 on {', '.join(with_fp8) or 'no catalog chip'}"))  # fmt: skip
    if s.training.precision == "fp32" and s.training.weight_dtype == "bf16":
        problems.append(("training.weight_dtype", "bf16 weights under fp32 compute would be widened for every matmul; "
                         "valid: fp32 with precision fp32, or bf16 with precision bf16, int8 or fp8"))  # fmt: skip
    experts = getattr(s.model, "experts", 0)
    if p.expert > 1 and not experts:
        problems.append(("parallelism.expert", f"{p.expert} expert-parallel chips, but the model has no experts; valid: 1, "
                         "or set model.experts (a transformer with mixture-of-experts layers)"))
    elif p.expert > 1 and experts % p.expert:
        divisors = [e for e in range(1, experts + 1) if experts % e == 0 and n % e == 0]
        problems.append(("parallelism.expert", f"{p.expert} does not divide the model's {experts} experts; valid: a divisor "
                         f"of {experts} that also divides the slice's {n} chips: {', '.join(map(str, divisors))}"))
    layers = getattr(s.model, "layers", None)
    if p.pipeline > 1:
        v = p.virtual_stages
        if layers is None:
            problems.append(("parallelism.pipeline", f"pipeline stages split a transformer's layers; the {s.model.kind} "
                             "model has none to split; valid: 1"))  # fmt: skip
        elif layers % (p.pipeline * v):
            valid = [q for q in range(1, layers + 1) if layers % (q * v) == 0]
            problems.append(("parallelism.pipeline", f"{p.pipeline} stages x {v} virtual stages do not divide the "
                             f"model's {layers} layers; valid: {', '.join(map(str, valid))}"))  # fmt: skip
    seq = getattr(s.model, "seq_len", None)
    if p.context > 1 and seq is None:
        problems.append(("parallelism.context", f"context parallelism splits a transformer's sequence; the {s.model.kind} "
                         "model has none to split; valid: 1"))  # fmt: skip
    elif p.context > 1 and seq % p.context:
        valid = [c for c in range(1, min(seq, n) + 1) if seq % c == 0 and n % c == 0]
        problems.append(("parallelism.context", f"{p.context} does not divide the model's seq_len of {seq}; valid: a divisor "
                         f"of {seq} that also divides the slice's {n} chips: {', '.join(map(str, valid))}"))  # fmt: skip
    bn_group = getattr(s.model, "batch_norm_group", 1)
    if bn_group > 1 and s.data_parallel % bn_group:
        valid = [g for g in range(1, s.data_parallel + 1) if s.data_parallel % g == 0]
        problems.append(("model.batch_norm_group", f"{bn_group} chips per batch-norm group do not divide the slice's "
                         f"{s.data_parallel} data-parallel replicas; valid: {', '.join(map(str, valid[:12]))}"
                         + (", ..." if len(valid) > 12 else "")))  # fmt: skip
    if p.virtual_stages > 1 and p.pipeline_schedule != "interleaved":
        problems.append(("parallelism.virtual_stages", f"{p.virtual_stages} virtual stages need pipeline_schedule = "
                         f"\"interleaved\" (got {p.pipeline_schedule!r}); valid: 1, or the interleaved schedule"))  # fmt: skip
    if p.strategy == "parameter_server" and (p.fsdp > 1 or p.tensor > 1 or p.pipeline > 1 or p.context > 1):
        problems.append(
            ("parallelism.strategy", "parameter_server keeps the dense part data parallel: fsdp, tensor, pipeline and "
             "context must be 1")
        )
    if not problems and s.model.kind == "hlo":
        problems += module_problems(s.model.path, n * s.pod.slices, s.pod.chip, shape, s.pod.slices)
    elif not problems:
        shards = s.batch_shards
        mb = s.training.microbatches
        if s.training.global_batch % shards == 0 and (s.training.global_batch // shards) % mb:
            b = s.training.global_batch // shards
            problems.append(("training.microbatches", f"{mb} microbatches do not divide the per-chip batch of {b}; "
                             f"valid: a divisor of {b}: {', '.join(str(d) for d in range(1, b + 1) if b % d == 0)}"))  # fmt: skip
        if s.training.global_batch % shards:
            problems.append(
                ("training.global_batch", f"{s.training.global_batch} is not divisible by the {shards} batch shards "
                 f"({'data x fsdp x expert' if p.expert > 1 else 'data x fsdp'} x slices); "
                 f"valid: a multiple of {shards}, e.g. {max(1, round(s.training.global_batch / shards)) * shards}")
            )
    problems += convergence_problems(s.convergence, s.model.kind, getattr(s.model, "seq_len", None))
    # Checked last so a shape problem does not hide the batch or mesh problems above.
    if chip is not None and len(shape) <= chip.torus_dims and n <= chip.max_slice_chips:
        if not is_supported_shape(chip, shape):
            offered = ", ".join(supported_shapes(chip))
            problems.append(("pod.topology", f"{chip.key} does not offer a {s.pod.topology!r} slice; supported: {offered}"))
        else:
            ic = s.interconnect
            wrap = wraparound_for(chip, shape)
            problems += fault_problems(shape, wrap, s.pod.slices, ic.degraded_links, ic.failed_links)
    return problems


#: keys an HLO module already fixes, and the idle-time sections not yet simulated for one
_HLO_MODEL_KEYS = frozenset(HloModel.model_fields)
_HLO_FIXED_TRAINING = ("precision", "optimizer", "remat", "weight_dtype")
_HLO_UNSUPPORTED_SECTIONS = ("parallelism", "input", "compile", "stragglers", "failures", "convergence", "cost")


def _hlo_fixed_keys(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[tuple[str, str]]]:
    """For ``[model] kind = "hlo"``: the keys given that the module fixes (each a problem), and raw without them."""
    model = raw.get("model")
    if not isinstance(model, Mapping) or model.get("kind") != "hlo":
        return raw, []
    problems: list[tuple[str, str]] = []
    out = {k: v for k, v in raw.items() if k not in _HLO_UNSUPPORTED_SECTIONS}
    for key in model:
        if key not in _HLO_MODEL_KEYS:
            problems.append((f"model.{key}", "the HLO module fixes the model; remove this key (valid: kind, path, model_flops_per_step, compute_source)"))
    out["model"] = {k: v for k, v in model.items() if k in _HLO_MODEL_KEYS}
    training = raw.get("training")
    if isinstance(training, Mapping):
        for key in _HLO_FIXED_TRAINING:
            if key in training:
                problems.append((f"training.{key}", f"the HLO module fixes the {key}; remove this key"))
        out["training"] = {k: v for k, v in training.items() if k not in _HLO_FIXED_TRAINING}
    for section in _HLO_UNSUPPORTED_SECTIONS:
        value = raw.get(section)
        if section in raw and value is not None and not (isinstance(value, Mapping) and all(v is None for v in value.values())):
            why = "the HLO module fixes the mesh" if section == "parallelism" else "not simulated for an HLO model"
            problems.append((section, f"{why}; remove this section"))
    return out, problems


def scenario_from_dict(raw: Mapping[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a scenario given as a plain dict (as parsed from TOML).

    Raises
    ------
    ScenarioError
        With every problem found, each naming its dotted key.
    """
    if not isinstance(raw, Mapping):
        raise ScenarioError(source, [("", f"expected a table of sections, got {type(raw).__name__}")])
    raw, fixed = _hlo_fixed_keys(raw)
    try:
        scenario = Scenario.model_validate(dict(raw))
    except ValidationError as e:
        problems = [problem_from_error(Scenario, err) for err in e.errors()]
        raise ScenarioError(source, fixed + problems) from None
    if fixed:
        raise ScenarioError(source, fixed)
    problems = _semantic_problems(scenario)
    if problems:
        raise ScenarioError(source, problems)
    return scenario


def with_parallelism(scenario: Scenario, parallelism: Mapping[str, Any], source: str = "<scenario>") -> Scenario:
    """``scenario`` with its ``[parallelism]`` table replaced, checked as :func:`scenario_from_dict` checks a whole file.

    The other sections are ``scenario``'s, valid already, so only the new table is validated field
    by field; every cross-section rule then runs on the result. The planner uses it for the many
    meshes of one configuration.

    Raises
    ------
    ScenarioError
        With every problem found, each naming its dotted key (``parallelism.tensor``).
    """
    if scenario.model.kind == "hlo":
        raise ScenarioError(source, [("parallelism", "the HLO module fixes the mesh; remove this section")])
    try:
        par = ParallelismSection.model_validate(dict(parallelism))
    except ValidationError as e:
        problems = [problem_from_error(Scenario, {**err, "loc": ("parallelism", *err["loc"])}) for err in e.errors()]
        raise ScenarioError(source, problems) from None
    out = scenario.model_copy(update={"parallelism": par})
    problems = _semantic_problems(out)
    if problems:
        raise ScenarioError(source, problems)
    return out


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with dotted-key overrides applied.

    ``{"training.global_batch": 1024}`` sets ``raw["training"]["global_batch"]``.
    """
    out = copy.deepcopy(dict(raw))
    for dotted, value in overrides.items():
        node = out
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[leaf] = value
    return out


def load_scenario(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Load and validate a scenario TOML file.

    Parameters
    ----------
    path
        The TOML file. ``name`` defaults to the file stem.
    overrides
        Optional dotted-key overrides applied before validation.

    Raises
    ------
    ScenarioError
        If the file cannot be read, is not valid TOML, or fails validation.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:  # bounded read: a device or a huge file must not exhaust memory
            data = f.read(MAX_SCENARIO_BYTES + 1)
        if len(data) > MAX_SCENARIO_BYTES:
            raise ScenarioError(str(path), [("", f"larger than {MAX_SCENARIO_BYTES // 1024} KiB; a scenario is a few dozen lines of TOML")])
        text = data.decode("utf-8")
    except OSError as e:
        raise ScenarioError(str(path), [("", f"cannot read file: {e.strerror or e}")]) from None
    except UnicodeDecodeError as e:
        raise ScenarioError(str(path), [("", f"not UTF-8 text: {e}")]) from None
    raw = parse_toml(text, str(path))
    raw.setdefault("name", path.stem)
    if overrides:
        raw = apply_overrides(raw, overrides)
    model = raw.get("model")
    if isinstance(model, dict) and model.get("kind") == "hlo" and isinstance(model.get("path"), str) and model["path"]:
        model["path"] = str((path.parent / model["path"]).resolve())  # relative to the scenario file
    return scenario_from_dict(raw, source=str(path))
