"""The scenario's sections of the pod, training, parallelism, simulation and interconnect.

Each is a strict pydantic model: unknown keys are rejected, and TOML's real booleans, integers
and strings are not coerced into one another. The model sections are in
:mod:`~engine.scenario.model_sections`; each idle cause's section is beside its model in the idle
room (:class:`~engine.idle.input_pipeline.InputSection`, ...), convergence's in
:mod:`engine.convergence.section`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Section",
    "PositiveInt",
    "PodSection",
    "TrainingSection",
    "ParameterServerSection",
    "MeshAxisName",
    "ParallelismSection",
    "SimSection",
    "DEFAULT_SAMPLE_CHIPS",
    "LinkRef",
    "DegradedLink",
    "InterconnectSection",
    "parse_topology",
]

class Section(BaseModel):
    # strict: TOML has real booleans, integers and strings, so `steps = true` or `steps = "100"`
    # is a mistake, not a 1 or a 100 (pydantic's lax mode would coerce both); ints still fill
    # float fields, which strict mode allows.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


PositiveInt = Annotated[int, Field(gt=0)]


class PodSection(Section):
    chip: str
    topology: str
    slices: PositiveInt = 1


class TrainingSection(Section):
    global_batch: PositiveInt
    steps: PositiveInt
    precision: Literal["bf16", "int8", "fp32", "fp8"] = "bf16"  # fp8: only on chips whose catalog entry has an fp8 peak
    optimizer: Literal["sgd", "momentum", "adam", "adafactor"] = "adam"
    # "save_qkv_proj", "save_dot_except_mlp", "save_dot_except_mlpwi": MaxText's policies that keep named projections of
    # each dense transformer layer and recompute the rest of it (engine/model/compute.py SAVED_OPS_BY_REMAT)
    remat: Literal["none", "full", "selective", "minimal", "save_qkv_proj", "save_dot_except_mlp", "save_dot_except_mlpwi"] = "none"
    # with parallelism.pipeline > 1: pipeline microbatches; otherwise gradient accumulation steps
    microbatches: PositiveInt = 1
    # dtype of the optimizer's moments (Adam m and v, momentum), whatever the weights' dtype.
    # "bf16": DeepSeek-V3 (arXiv:2412.19437, sec. 3.3.3) tracks AdamW's moments in BF16; optax exposes
    # it as adam(mu_dtype=...) and sgd(accumulator_dtype=...) (engine/memory/hbm.py).
    optimizer_state: Literal["fp32", "bf16"] = "fp32"
    # dtype the weights are stored and updated in; their gradients take it too (engine/units.py
    # WEIGHT_BYTES_PER_ELEMENT). "fp32": mixed precision's master copy; "bf16": no master copy
    # (MaxText's weight_dtype: bfloat16), half the model-state HBM.
    weight_dtype: Literal["fp32", "bf16"] = "fp32"
    # dtype the gradients are reduced in over data, fsdp and the DCN (engine/units.py gradient_reduce_bytes).
    # "compute": the weight-gradient matmul's output dtype (bf16 unless precision is fp32), as XLA's SPMD
    # partitioner reduces a jit program's gradients; "weights": weight_dtype, for a program that reduces
    # them itself after autodiff (pmap's psum, TF's CrossShardOptimizer / TPUStrategy)
    gradient_reduce_dtype: Literal["compute", "weights"] = "compute"


class ParameterServerSection(Section):
    """TF ParameterServerStrategy: embedding tables live on CPU parameter-server hosts over DCN."""

    hosts: PositiveInt = 1  # parameter-server hosts holding the sparse (embedding) parameters
    dcn_gbps_per_host: Annotated[float, Field(gt=0)] = 25.0  # each PS host's NIC, GB/s (same class as a TPU host's)


MeshAxisName = Literal["data", "fsdp", "tensor", "expert", "pipeline", "context"]  # engine.pod.mesh.MESH_AXES


class ParallelismSection(Section):
    data: PositiveInt | None = None  # default: whatever the other axes leave
    fsdp: PositiveInt = 1
    tensor: PositiveInt = 1
    # XLA's collective matmul (Wang et al. 2023): tensor-parallel collectives decomposed and overlapped
    # with the matmuls beside them, as a compile tuned for it schedules them (MaxText's XLA options; libtpu's
    # defaults leave many synchronous); false prices them blocking (engine/comm/mesh_comm.py)
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


class SimSection(Section):
    seed: Annotated[int, Field(ge=0)] = 0
    jitter_frac: Annotated[float, Field(ge=0, le=1)] | None = None  # None: the calibrated default
    # summary: per-step/per-chip aggregates only, no event rows; sampled: those aggregates of every
    # chip plus every event of sample_chips chips chosen to be worth looking at (engine/sampling.py)
    trace: Literal["full", "summary", "sampled"] = "full"
    sample_chips: PositiveInt | None = None  # sampled only; None: DEFAULT_SAMPLE_CHIPS, or every chip of a smaller pod


NonNegInt = Annotated[int, Field(ge=0)]
Coordinate = Annotated[list[NonNegInt], Field(min_length=1, max_length=3)]


class LinkRef(Section):
    """One ICI link: the slice-local coordinates of its two end chips (neighbours)."""

    a: Coordinate
    b: Coordinate
    slice: NonNegInt = 0


class DegradedLink(LinkRef):
    bandwidth_frac: Annotated[float, Field(gt=0, le=1)]


class InterconnectSection(Section):
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


#: chips a ``sim.trace = "sampled"`` run keeps every event of, unless ``sim.sample_chips`` says:
#: one 16x16 slice's worth, which the Timeline draws at once (profiler.queries.TIMELINE_MAX_CHIPS)
DEFAULT_SAMPLE_CHIPS = 256
