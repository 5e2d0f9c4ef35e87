"""Parallelism strategies: the device mesh on the torus and the collectives each strategy needs.

Inside a slice the chips form a logical mesh ``data x fsdp x tensor`` (GSPMD,
Xu et al. 2021; the MaxText/pjit convention); across slices the job is data
parallel over the DCN. Each mesh axis is laid onto torus axes:

* A scenario may name the mapping (``[parallelism] mapping = {tensor = ["z"],
  fsdp = ["x", "y"]}``); ``"y:2"`` takes a 2-chip part of axis ``y``.
* Otherwise the default fills torus axes from the innermost (``z``, then ``y``,
  then ``x``) with ``tensor`` first, then ``fsdp``, then ``data``: the axis with the
  most traffic per step gets the shortest, contiguous rings (as
  ``jax.experimental.mesh_utils.create_device_mesh`` orders the physical mesh).
* A torus axis split between mesh axes is no longer a ring for either part: the
  inner (first-assigned) part is a contiguous line; the outer part strides over
  it, so its rings share each link with ``inner`` other groups and see
  ``1 / inner`` of the link bandwidth (an approximation; documented in README).
  A mesh axis that cannot be factored onto the torus is a :class:`TopologyError`.

Per-step collectives by strategy (one representative chip, steady state):

* data parallel: gradients (bf16, as ZeRO's fp16 gradients) all-reduced over ``data`` after the backward
  pass, then across slices over DCN (TPUStrategy / pjit replicated params).
* FSDP / ZeRO-3 (Rajbhandari et al. 2020): each layer's parameters all-gathered
  over ``fsdp`` before its forward and again before its backward, its gradients
  reduce-scattered after its backward. The next layer's gather is prefetched
  during the current layer's compute (XLA's async collectives, MaxText's
  scan-over-layers; PyTorch FSDP's forward/backward prefetch), so only the part
  of each collective longer than its neighbour's compute is exposed; the first
  gather and the last reduce-scatter of a pass cannot hide.
* tensor parallel (Megatron-LM, Shoeybi et al. 2019): two all-reduces of the
  layer's activations forward and two backward per transformer layer over
  ``tensor`` (two more in the backward pass under full remat, for the recomputed forward). They sit on the critical path (the next matmul needs the result),
  so without help they are fully exposed; XLA's collective-matmul decomposition
  (Wang et al. 2023) hides a calibrated fraction ``tp_overlap_frac`` of each
  behind the layer's own matmuls.
* parameter server (TF ``ParameterServerStrategy``): the sparse parameters
  (embedding tables) live on CPU parameter-server hosts; each step every worker
  pulls the rows its batch looks up and pushes their gradients over DCN, limited
  by the worker host's NIC or the parameter servers' NICs, whichever is slower.
  The dense part is data parallel as above.

Per-layer detail goes to a table (one row per layer, phase and collective, for
the representative chip) instead of per-layer events, so a 4,096-chip x
1,000-step run adds only a few aggregated ``collective`` events per chip-step.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .collectives import dcn_all_reduce_time_s, ring_phase
from .errors import TopologyError
from .models import ModelCost
from .trace import TABLES
from .units import seconds_to_ns

__all__ = [
    "MESH_AXES",
    "Segment1D",
    "MeshAxis",
    "Mesh",
    "resolve_mesh",
    "LinkPenalty",
    "mesh_collective_s",
    "LayerUnit",
    "layer_units",
    "CollectivePlan",
    "plan_collectives",
]

MESH_AXES = ("data", "fsdp", "tensor")
TORUS_AXES = ("x", "y", "z")
#: bytes per element of gathered weights and of activations on the wire, by training precision.
#: AQT int8 quantises on the fly inside the matmul, so weights are gathered and activations
#: stored in bf16 (Lew et al., AQT).
WIRE_BYTES_PER_ELEMENT = {"fp32": 4.0, "bf16": 2.0, "int8": 2.0}
#: Gradients are reduced in fp32 whatever the compute precision: under the mixed-precision recipe
#: the parameters are fp32, so their gradients are fp32 (the bf16 cast's transpose converts back)
#: and the data-parallel all-reduce / FSDP reduce-scatter moves 4 bytes per element, as TF's
#: TPUStrategy with mixed_bfloat16 and PyTorch DDP with AMP do. memory.py keeps them as fp32 too.
GRADIENT_WIRE_BYTES_PER_ELEMENT = 4.0


@dataclass(frozen=True)
class Segment1D:
    """A run of chips along one torus axis that a mesh axis spans."""

    torus_axis: int
    chips: int
    wrap: bool
    stride: int  # chips of the same torus axis owned by inner mesh axes (1 = contiguous)


@dataclass(frozen=True)
class MeshAxis:
    name: str
    size: int
    segments: tuple[Segment1D, ...]

    def describe(self) -> str:
        parts = [f"{TORUS_AXES[s.torus_axis]}:{s.chips}" for s in self.segments]
        return f"{self.name}={self.size}" + (f" on {'*'.join(parts)}" if parts else "")


@dataclass(frozen=True)
class Mesh:
    axes: tuple[MeshAxis, ...]  # in MESH_AXES order

    def __getitem__(self, name: str) -> MeshAxis:
        return self.axes[MESH_AXES.index(name)]

    def describe(self) -> str:
        return ", ".join(a.describe() for a in self.axes)


def _parse_part(text: str, shape: Sequence[int]) -> tuple[int, int]:
    name, _, count = text.strip().lower().partition(":")
    if name not in TORUS_AXES[: len(shape)]:
        raise TopologyError(f"mapping names torus axis {text!r}; this slice has axes {', '.join(TORUS_AXES[: len(shape)])}")
    axis = TORUS_AXES.index(name)
    if not count:
        return axis, shape[axis]
    if not count.isdigit() or int(count) < 1 or shape[axis] % int(count):
        raise TopologyError(f"mapping part {text!r}: the count must divide the axis length {shape[axis]}")
    return axis, int(count)


def resolve_mesh(
    shape: Sequence[int],
    wrap: Sequence[bool],
    sizes: Mapping[str, int],
    mapping: Mapping[str, Sequence[str]] | None = None,
) -> Mesh:
    """Lay the mesh ``data x fsdp x tensor`` onto the slice's torus axes.

    Parameters
    ----------
    shape, wrap
        The slice's axis lengths (chips) and which axes wrap around.
    sizes
        Mesh axis sizes by name; their product must equal the slice's chips.
    mapping
        Optional explicit mapping: mesh axis -> torus axis parts (``"z"``, ``"y:2"``).
        Every mesh axis larger than 1 must then be listed.

    Raises
    ------
    TopologyError
        If the mesh does not factor onto the torus (or the mapping is inconsistent).
    """
    shape = tuple(int(n) for n in shape)
    if math.prod(sizes[a] for a in MESH_AXES) != math.prod(shape):
        raise TopologyError(
            f"mesh {'x'.join(str(sizes[a]) for a in MESH_AXES)} (data x fsdp x tensor) does not cover "
            f"the {math.prod(shape)} chips of the slice"
        )
    parts: dict[str, list[tuple[int, int]]] = {a: [] for a in MESH_AXES}
    order = ("tensor", "fsdp", "data")  # inner to outer
    if mapping:
        for name in order:
            listed = [_parse_part(t, shape) for t in mapping.get(name, [])]
            got = math.prod(c for _, c in listed)
            if got != sizes[name]:
                raise TopologyError(
                    f"mapping gives mesh axis {name!r} {got} chips ({', '.join(mapping.get(name, [])) or 'none'}), "
                    f"but its size is {sizes[name]}"
                )
            parts[name] = listed
        for axis, n in enumerate(shape):
            total = math.prod(c for name in order for a, c in parts[name] if a == axis)
            if total != n:
                raise TopologyError(f"mapping uses {total} chips of torus axis {TORUS_AXES[axis]!r}, which has {n}")
    else:
        # Default: inner mesh axes take the innermost torus axes (z, then y, then x). If the sizes
        # do not divide that way (PaLM's 12-way tensor axis on a 12x16x16 slice), try the other
        # torus-axis orders and keep the first that fits; only if none does is the mesh an error.
        orders = [tuple(reversed(range(len(shape))))]
        orders += [o for o in itertools.permutations(range(len(shape))) if o != orders[0]]
        first_error: TopologyError | None = None
        for visit in orders:
            try:
                parts = _greedy_layout(shape, sizes, order, visit)
                break
            except TopologyError as e:
                first_error = first_error or e
        else:
            assert first_error is not None
            raise first_error
    axes = []
    for name in MESH_AXES:
        segs = []
        for axis, count in parts[name]:
            # the stride is what inner mesh axes took of the same torus axis first
            stride = math.prod(c for inner in order[: order.index(name)] for a, c in parts[inner] if a == axis)
            whole = count == shape[axis]
            segs.append(Segment1D(axis, count, bool(wrap[axis]) and whole, stride))
        axes.append(MeshAxis(name, sizes[name], tuple(segs)))
    return Mesh(tuple(axes))


def _greedy_layout(
    shape: tuple[int, ...], sizes: Mapping[str, int], order: Sequence[str], visit: Sequence[int]
) -> dict[str, list[tuple[int, int]]]:
    """Place mesh axes (inner to outer) onto torus axes taken in ``visit`` order, greedily."""
    used = [1] * len(shape)
    parts: dict[str, list[tuple[int, int]]] = {a: [] for a in MESH_AXES}
    pos = 0
    for name in order:
        need = sizes[name]
        while need > 1:
            while pos < len(visit) and shape[visit[pos]] // used[visit[pos]] == 1:
                pos += 1
            if pos == len(visit):
                raise TopologyError(f"mesh axis {name!r} ({sizes[name]}) does not fit on the torus {shape}")
            axis = visit[pos]
            g = math.gcd(need, shape[axis] // used[axis])
            if g == 1:
                raise TopologyError(
                    f"mesh axis {name!r} of size {sizes[name]} cannot be laid onto torus {'x'.join(map(str, shape))}: "
                    f"{need} chips left to place do not divide axis {TORUS_AXES[axis]!r}'s "
                    f"remaining {shape[axis] // used[axis]}"
                )
            parts[name].append((axis, g))
            used[axis] *= g
            need //= g
    return parts


@dataclass(frozen=True)
class LinkPenalty:
    """What degraded or failed links add to one reduce-scatter or all-gather over a mesh axis.

    The mesh axis' rings on the actual links (:func:`engine.interconnect.mesh_link_penalties`)
    against the same rings on healthy links: per phase, the slowest ring's bandwidth time
    grows linearly with the array, so the bandwidth part is a rate; a failed link a phase's
    rings cross lengthens them by its detour's extra hops, independent of the array.
    """

    s_per_byte: float  # extra bandwidth seconds per byte of the full (unsharded) array
    latency_s: float  # extra hop latency (s) of the detours

    def added_s(self, bytes_total: float) -> float:
        """Seconds added to one reduce-scatter or all-gather of ``bytes_total`` bytes."""
        return self.s_per_byte * bytes_total + self.latency_s if bytes_total > 0 else 0.0


def mesh_collective_s(
    op: str,
    bytes_total: float,
    axis: MeshAxis,
    link_bytes_per_s: float,
    hop_latency_s: float,
    penalty: LinkPenalty | None = None,
) -> float:
    """Time of a collective over one mesh axis, as per-segment rings in sequence.

    ``op`` is ``"all-gather"``, ``"reduce-scatter"`` or ``"all-reduce"`` (= both);
    ``bytes_total`` is the full (unsharded) array. A strided segment shares its
    links with ``stride`` rings, so it sees ``link / stride``. ``penalty`` adds what
    the axis' faulty links cost (None: healthy links).
    """
    t = 0.0
    shard = float(bytes_total)
    for seg in axis.segments:
        t += ring_phase(shard, seg.chips, seg.wrap, link_bytes_per_s / seg.stride, hop_latency_s)
        shard /= seg.chips
    if penalty is not None and t > 0:
        t += penalty.added_s(bytes_total)
    if op == "all-reduce":
        return 2.0 * t
    if op not in ("all-gather", "reduce-scatter"):
        raise ValueError(f"unknown collective {op!r}")
    return t


@dataclass(frozen=True)
class LayerUnit:
    """A unit FSDP gathers at once (a transformer layer, or one GEMM of other models)."""

    name: str
    params: float  # parameters gathered (whole model replica, before any sharding)
    flops_frac: float  # share of the forward FLOPs
    act_out_elems: float  # elements per sample of the output a tensor-parallel all-reduce carries


def layer_units(cost: ModelCost) -> list[LayerUnit]:
    """Split the model into the units FSDP gathers and TP synchronises, in forward order.

    Transformers: the embedding, ``layers`` identical layers, the unembedding.
    Other models: one unit per GEMM row. Parameters not in any GEMM (embeddings,
    norms, biases) go to the first unit.
    """
    ops = cost.ops
    w = np.where(ops.w_is_activation, 0.0, ops.k * ops.n * ops.count)
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
        units += [LayerUnit(f"layer{i}", layer_p, layer_f, tokens * d_model) for i in range(L)]
        units.append(LayerUnit("unembed", head_p, float(flops[~is_layer].sum()) / total_flops, 0.0))
        return units
    units = [
        LayerUnit(n, float(p), float(f) / total_flops, float(o)) for n, p, f, o in zip(ops.names, w, flops, ops.out_elems_per_sample)
    ]
    extra = cost.params - float(w.sum())
    first = units[0]
    units[0] = LayerUnit(first.name, first.params + extra, first.flops_frac, first.act_out_elems)
    return units


LAYER_COLLECTIVES = TABLES["extra_layer_collectives"]


@dataclass(frozen=True)
class CollectivePlan:
    """Exposed communication of one step on a representative chip, by where it sits in the step."""

    forward_s: float  # exposed inside the forward pass (FSDP gathers, TP all-reduces, PS pulls)
    backward_s: float  # exposed inside the backward pass
    gradient_sync_s: float  # after the backward pass, behind a barrier (data-parallel all-reduce, PS push)
    total_comm_s: float  # all communication time, hidden or not
    per_layer: pa.Table  # TABLES["extra_layer_collectives"]
    data_sync_s: float = 0.0  # the data-parallel part of gradient_sync_s (ICI over `data`, then DCN)
    ps_push_s: float = 0.0  # the parameter-server part of gradient_sync_s
    grad_shard_bytes: float = 0.0  # gradient bytes each chip all-reduces over `data` (and DCN)


def plan_collectives(
    cost: ModelCost,
    mesh: Mesh,
    *,
    fwd_compute_s: float,
    bwd_compute_s: float,
    per_chip_batch: int,
    precision: str,
    slices: int,
    chips_per_host: int,
    link_bytes_per_s: float,
    hop_latency_s: float,
    dcn_bytes_per_s_per_host: float,
    dcn_latency_s: float,
    ps_hosts: int = 0,
    ps_bytes_per_s_per_host: float = 0.0,
    remat: str = "none",
    tp_overlap_frac: float = 0.0,
    link_penalties: Mapping[str, LinkPenalty] | None = None,
) -> CollectivePlan:
    """Per-step collectives of the chosen strategy and how much of each is exposed.

    ``fwd_compute_s``/``bwd_compute_s`` are the chip's compute time of each pass
    (backward includes any recomputation); they are spread over layer units by
    FLOP share to decide what each unit's communication can hide behind.
    ``ps_hosts > 0`` selects the parameter-server strategy for ``cost.sparse_params``.
    Under ``remat = "full"`` the recomputed forward repeats each layer's tensor-parallel
    all-reduces inside the backward pass (Korthikanti et al. 2022, sec. 5); the other
    policies recompute only work inside a head shard, which needs no communication.
    ``tp_overlap_frac`` of each tensor-parallel all-reduce hides behind the same unit's compute
    in that pass (never more than that compute): the collective-matmul decomposition.
    ``link_penalties`` (``{"fsdp" | "tensor": LinkPenalty}``) slows the per-layer collectives
    of those mesh axes by what the scenario's degraded/failed links cost them; the
    data-parallel all-reduce is priced on the links by :mod:`engine.interconnect` instead.
    """
    units = layer_units(cost)
    tensor, fsdp, data = mesh["tensor"], mesh["fsdp"], mesh["data"]
    pen = link_penalties or {}
    wire = WIRE_BYTES_PER_ELEMENT[precision]
    link, lat = link_bytes_per_s, hop_latency_s
    sparse = float(cost.sparse_params) if ps_hosts else 0.0
    rows: list[tuple[int, str, str, str, str, float, float]] = []
    n = len(units)
    ag = np.zeros(n)
    rs = np.zeros(n)
    tp_f = np.zeros(n)
    tp_b = np.zeros(n)
    cf = np.array([u.flops_frac for u in units]) * fwd_compute_s
    cb = np.array([u.flops_frac for u in units]) * bwd_compute_s
    for i, u in enumerate(units):
        p = u.params - (sparse if i == 0 else 0.0)  # PS keeps the embedding off the chips
        if fsdp.size > 1 and p > 0:
            g_bytes = p / tensor.size * wire
            r_bytes = p / tensor.size * GRADIENT_WIRE_BYTES_PER_ELEMENT
            ag[i] = mesh_collective_s("all-gather", g_bytes, fsdp, link, lat, pen.get("fsdp"))
            rs[i] = mesh_collective_s("reduce-scatter", r_bytes, fsdp, link, lat, pen.get("fsdp"))
            rows += [
                (i, u.name, "forward", "all-gather", "fsdp", g_bytes, ag[i]),
                (i, u.name, "backward", "all-gather", "fsdp", g_bytes, ag[i]),
                (i, u.name, "backward", "reduce-scatter", "fsdp", r_bytes, rs[i]),
            ]
        if tensor.size > 1 and u.act_out_elems > 0:
            # Megatron: attention and MLP blocks each end in an all-reduce (transformers: 2 per layer
            # per pass); for other models one per GEMM output.
            per_layer = 2 if cost.kind == "transformer" else 1
            a_bytes = per_chip_batch * u.act_out_elems * wire
            t = per_layer * mesh_collective_s("all-reduce", a_bytes, tensor, link, lat, pen.get("tensor"))
            tp_f[i] = tp_b[i] = t
            rows += [
                (i, u.name, "forward", "all-reduce", "tensor", per_layer * a_bytes, t),
                (i, u.name, "backward", "all-reduce", "tensor", per_layer * a_bytes, t),
            ]
            if remat == "full":
                tp_b[i] += t
                rows.append((i, u.name, "recompute", "all-reduce", "tensor", per_layer * a_bytes, t))
    # Forward: gather of unit i prefetched during compute of unit i-1; the first is exposed.
    fwd_fsdp = ag[0] + float(np.maximum(0.0, ag[1:] - cf[:-1]).sum()) if n else 0.0
    # Backward runs units in reverse: gather of i hides behind backward of i+1, together with the
    # reduce-scatter of i+1; the first gather (last unit) and the last reduce-scatter (unit 0) are exposed.
    bwd_fsdp = ag[-1] + rs[0] + float(np.maximum(0.0, ag[:-1] + rs[1:] - cb[1:]).sum()) if n else 0.0
    # Collective matmul (Wang et al. 2023) splits the layer's matmuls into chunks and overlaps each
    # chunk's partial all-reduce with the next chunk's compute; the calibrated fraction says how much
    # of that the compiler achieves. TP runs on its own torus axes, so it does not compete with the
    # FSDP gathers above for links.
    tp_f_exposed = tp_f - tp_overlap_frac * np.minimum(tp_f, cf)
    tp_b_exposed = tp_b - tp_overlap_frac * np.minimum(tp_b, cb)
    forward_s = fwd_fsdp + float(tp_f_exposed.sum())
    backward_s = bwd_fsdp + float(tp_b_exposed.sum())

    # Data-parallel gradient sync of this chip's dense shard: over `data` in the slice, then DCN.
    dense = cost.params - sparse
    shard_bytes = dense / (fsdp.size * tensor.size) * GRADIENT_WIRE_BYTES_PER_ELEMENT
    ici_s = mesh_collective_s("all-reduce", shard_bytes, data, link, lat)
    dcn_s = dcn_all_reduce_time_s(shard_bytes / data.size, slices, chips_per_host, dcn_bytes_per_s_per_host, dcn_latency_s)
    grad_s = ici_s + dcn_s
    if ici_s + dcn_s > 0:
        rows.append((-1, "model", "gradient_sync", "all-reduce", "data+dcn", shard_bytes, grad_s))

    ps_pull = ps_push = 0.0
    if ps_hosts and cost.sparse_params:
        # Rows looked up by this chip's batch travel as fp32 both ways (pull values, push gradients).
        chip_bytes = per_chip_batch * cost.sparse_elems_per_sample * 4.0
        workers = mesh["data"].size * fsdp.size * tensor.size * slices
        worker_nic_s = chip_bytes * chips_per_host / dcn_bytes_per_s_per_host
        server_nic_s = chip_bytes * workers / (ps_hosts * ps_bytes_per_s_per_host)
        ps_pull = max(worker_nic_s, server_nic_s)
        ps_push = ps_pull
        ps_pull += dcn_latency_s
        ps_push += dcn_latency_s
        rows += [
            (0, "embed", "forward", "ps-pull", "dcn", chip_bytes, ps_pull),
            (0, "embed", "gradient_sync", "ps-push", "dcn", chip_bytes, ps_push),
        ]
    total = float(ag.sum() * 2 + rs.sum() + tp_f.sum() + tp_b.sum()) + grad_s + ps_pull + ps_push
    if rows:
        unit, layer, phase, op, axis, nbytes, t = zip(*rows)
        table = LAYER_COLLECTIVES.table(
            {
                "unit": pa.array(unit, pa.int32()),
                "layer": pa.array(layer, pa.string()),
                "phase": pa.array(phase, pa.string()),
                "op": pa.array(op, pa.string()),
                "mesh_axis": pa.array(axis, pa.string()),
                "bytes": pa.array(nbytes, pa.float64()),
                "time_ns": pa.array(seconds_to_ns("layer collective", t), pa.int64()),
            }
        )
    else:
        table = LAYER_COLLECTIVES.empty()
    return CollectivePlan(
        forward_s=forward_s + ps_pull,
        backward_s=backward_s,
        gradient_sync_s=grad_s + ps_push,
        total_comm_s=total,
        per_layer=table,
        data_sync_s=grad_s,
        ps_push_s=ps_push,
        grad_shard_bytes=shard_bytes,
    )


def whole_torus_axes(axis: MeshAxis, shape: Sequence[int]) -> list[int] | None:
    """The torus axes a mesh axis occupies entirely and contiguously, or None if it splits one.

    A mesh axis on whole torus axes can use the interconnect model's full machinery
    (schedules, overlap, link faults, per-link load); a split axis cannot.
    """
    if all(seg.stride == 1 and seg.chips == shape[seg.torus_axis] for seg in axis.segments):
        return [seg.torus_axis for seg in axis.segments]
    return None
