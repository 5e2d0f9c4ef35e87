"""Per-step collectives of each parallelism strategy over the device mesh (:mod:`engine.mesh`).

Per-step collectives by strategy (one representative chip, steady state):

* data parallel: gradients (fp32, :data:`GRADIENT_WIRE_BYTES_PER_ELEMENT`) all-reduced over ``data``
  after the backward pass, then across slices over DCN (TPUStrategy / pjit replicated params).
* FSDP / ZeRO-3 (Rajbhandari et al. 2020): each layer's parameters all-gathered
  over ``fsdp`` before its forward and again before its backward, its gradients
  reduce-scattered after its backward. The next layer's gather is prefetched
  during the current layer's compute (XLA's async collectives, MaxText's
  scan-over-layers; PyTorch FSDP's forward/backward prefetch), so only the part
  of each collective longer than its neighbour's compute is exposed; the first
  gather and the last reduce-scatter of a pass cannot hide.
* tensor parallel (Megatron-LM, Shoeybi et al. 2019): two all-reduces of the
  layer's activations forward and two backward per transformer layer over
  ``tensor`` (two more in the backward pass under full remat, for the recomputed
  forward). They sit on the critical path (the next matmul needs the result), so without help they are fully exposed; XLA's collective-matmul decomposition
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

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..calibration import Calibration
from ..mesh import Mesh, MeshAxis
from ..models import ModelCost, layer_units
from ..scenario import InterconnectSection
from ..topology import Pod
from ..trace import TABLES
from ..units import BYTES_PER_ELEMENT, seconds_to_ns
from .collectives import dcn_all_reduce_time_s, ring_phase
from .fabric import mesh_ring_phases, slice_fabrics

__all__ = [
    "GRADIENT_WIRE_BYTES_PER_ELEMENT",
    "LinkPenalty",
    "mesh_collective_s",
    "mesh_link_penalties",
    "StepComm",
    "plan_step_comm",
]

#: Gradients are reduced in fp32 whatever the compute precision: under the mixed-precision recipe
#: the parameters are fp32, so their gradients are fp32 (the bf16 cast's transpose converts back)
#: and the data-parallel all-reduce / FSDP reduce-scatter moves 4 bytes per element, as TF's
#: TPUStrategy with mixed_bfloat16 and PyTorch DDP with AMP do. memory.py keeps them as fp32 too.
GRADIENT_WIRE_BYTES_PER_ELEMENT = 4.0


@dataclass(frozen=True)
class LinkPenalty:
    """What degraded or failed links add to one reduce-scatter or all-gather over a mesh axis.

    The mesh axis' rings on the actual links (:func:`mesh_link_penalties`)
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


def mesh_link_penalties(pod: Pod, cal: Calibration, section: InterconnectSection, mesh: Mesh) -> dict[str, LinkPenalty]:
    """What the scenario's degraded/failed links add to the per-layer FSDP and TP collectives.

    Each mesh axis' rings (:func:`~engine.comm.fabric.mesh_ring_phases`, as the mesh model prices them) are laid
    on every slice's links for a 1-byte array: per phase, the slowest ring of the worst
    slice sets the pace of a synchronous SPMD collective, and its bandwidth time minus
    the healthy one is the extra seconds per byte (bandwidth time is linear in the
    array). A failed link a phase's rings cross adds its detour's extra hops to that
    phase. ``unidirectional`` is not applied here (the mesh model prices these
    collectives on two-way links), so the reference and the faulty rings are both two-way.

    Returns
    -------
    dict
        ``{"fsdp" | "tensor": LinkPenalty}`` for mesh axes larger than 1; empty without faults,
        so a healthy run's per-layer collectives are untouched.
    """
    if not section.degraded_links and not section.failed_links:
        return {}
    link = pod.chip.ici_link_bytes_per_s * cal.ici_efficiency
    fabrics = slice_fabrics(pod, link, section.degraded_links, section.failed_links)
    out = {}
    for name in ("fsdp", "tensor"):
        axis = mesh[name]
        phases = mesh_ring_phases(axis.segments, 1.0, unidirectional=False)
        if axis.size <= 1 or not phases:
            continue
        healthy = np.asarray(fabrics[-1].stage_bw_time_s(None, fabrics[-1].ring_loads(phases)))
        worst = np.max([f.stage_bw_time_s(None, f.ring_loads(phases)) for f in fabrics.values()], axis=0)
        hops = np.max([f.detour_hops(f.ring_loads(phases, reroute=False)) for f in fabrics.values()], axis=0)
        out[name] = LinkPenalty(float(np.sum(worst - healthy)), float(hops.sum()) * cal.ici_hop_latency_s)
    return out


LAYER_COLLECTIVES = TABLES["extra_layer_collectives"]


@dataclass(frozen=True)
class StepComm:
    """Exposed communication of one step on a representative chip, by where it sits in the step."""

    forward_s: float  # exposed inside the forward pass (FSDP gathers, TP all-reduces, PS pulls)
    backward_s: float  # exposed inside the backward pass
    gradient_sync_s: float  # after the backward pass, behind a barrier (data-parallel all-reduce, PS push)
    total_comm_s: float  # all communication time, hidden or not
    per_layer: pa.Table  # TABLES["extra_layer_collectives"]
    data_sync_s: float = 0.0  # the data-parallel part of gradient_sync_s (ICI over `data`, then DCN)
    ps_push_s: float = 0.0  # the parameter-server part of gradient_sync_s
    grad_shard_bytes: float = 0.0  # gradient bytes each chip all-reduces over `data` (and DCN)


def plan_step_comm(
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
    tables: bool = True,
) -> StepComm:
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
    data-parallel all-reduce is priced on the links by :mod:`engine.comm.gradient_sync` instead.
    ``tables=False`` leaves ``per_layer`` empty (the times are the same; for fast evaluation).
    """
    units = layer_units(cost)
    tensor, fsdp, data = mesh["tensor"], mesh["fsdp"], mesh["data"]
    pen = link_penalties or {}
    wire = BYTES_PER_ELEMENT[precision]
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
    memo: dict[tuple[str, float], float] = {}  # identical layers pay identical collectives: price each size once

    def priced(op: str, nbytes: float, axis: MeshAxis) -> float:
        key = (op + axis.name, nbytes)
        if key not in memo:
            memo[key] = mesh_collective_s(op, nbytes, axis, link, lat, pen.get(axis.name))
        return memo[key]

    p_unit = np.array([u.params for u in units], dtype=np.float64)
    if n:
        p_unit[0] = p_unit[0] - sparse  # PS keeps the embedding off the chips
    act = np.array([u.act_out_elems for u in units], dtype=np.float64)

    def each(op: str, nbytes: np.ndarray, axis: MeshAxis) -> np.ndarray:
        values, inverse = np.unique(nbytes, return_inverse=True)
        return np.array([priced(op, float(v), axis) for v in values])[inverse]

    fsdp_on = (p_unit > 0) & (fsdp.size > 1)
    g_bytes = p_unit / tensor.size * wire
    r_bytes = p_unit / tensor.size * GRADIENT_WIRE_BYTES_PER_ELEMENT
    if fsdp_on.any():
        ag[fsdp_on] = each("all-gather", g_bytes[fsdp_on], fsdp)
        rs[fsdp_on] = each("reduce-scatter", r_bytes[fsdp_on], fsdp)
    # Megatron: attention and MLP blocks each end in an all-reduce (transformers: 2 per layer
    # per pass); for other models one per GEMM output.
    per_layer = 2 if cost.kind == "transformer" else 1
    tp_on = (act > 0) & (tensor.size > 1)
    a_bytes = per_chip_batch * act * wire
    if tp_on.any():
        tp_f[tp_on] = per_layer * each("all-reduce", a_bytes[tp_on], tensor)
        tp_b[tp_on] = tp_f[tp_on]
        if remat == "full":
            tp_b[tp_on] += tp_f[tp_on]
    for i, u in enumerate(units if tables else ()):
        if fsdp_on[i]:
            rows += [
                (i, u.name, "forward", "all-gather", "fsdp", g_bytes[i], ag[i]),
                (i, u.name, "backward", "all-gather", "fsdp", g_bytes[i], ag[i]),
                (i, u.name, "backward", "reduce-scatter", "fsdp", r_bytes[i], rs[i]),
            ]
        if tp_on[i]:
            rows += [
                (i, u.name, "forward", "all-reduce", "tensor", per_layer * a_bytes[i], tp_f[i]),
                (i, u.name, "backward", "all-reduce", "tensor", per_layer * a_bytes[i], tp_f[i]),
            ]
            if remat == "full":
                rows.append((i, u.name, "recompute", "all-reduce", "tensor", per_layer * a_bytes[i], tp_f[i]))
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
    if rows and tables:
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
    return StepComm(
        forward_s=forward_s + ps_pull,
        backward_s=backward_s,
        gradient_sync_s=grad_s + ps_push,
        total_comm_s=total,
        per_layer=table,
        data_sync_s=grad_s,
        ps_push_s=ps_push,
        grad_shard_bytes=shard_bytes,
    )


