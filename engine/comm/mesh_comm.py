"""Per-step collectives of each parallelism strategy over the device mesh (:mod:`engine.pod.mesh`).

Per-step collectives by strategy (one representative chip, steady state):

* data parallel: gradients (in ``training.gradient_reduce_dtype``, :func:`~engine.units.gradient_reduce_bytes`) all-reduced over ``data``
  after the backward pass, then across slices over DCN (TPUStrategy / pjit replicated params).
* FSDP / ZeRO-3 (Rajbhandari et al. 2020): each layer's parameters all-gathered
  over ``fsdp`` before its forward and again before its backward, its gradients
  reduce-scattered after its backward. The next layer's gather is prefetched
  during the current layer's compute (XLA's async collectives, MaxText's
  scan-over-layers; PyTorch FSDP's forward/backward prefetch), so only the part
  of each collective longer than its neighbour's compute is exposed; the first
  gather and the last reduce-scatter of a pass cannot hide.
* tensor parallel (Megatron-LM, Shoeybi et al. 2019): two all-reduces of the
  layer's activations forward and two backward per transformer layer (one each
  with a parallel attention/MLP block) over
  ``tensor`` (under full remat the recomputed forward repeats the attention block's; the
  MLP's down-projection, and a parallel block's whole output, is not recomputed:
  engine/model/compute.py ``passes_per_op``). They sit on the critical path (the next matmul needs
  the result). XLA can decompose them with the matmuls next to them into a loop of
  collective-permutes, each overlapped with a partial matmul (collective matmul, Wang et
  al. 2023; MaxText's XLA flag library turns it off with
  ``--xla_jf_spmd_threshold_for_windowed_einsum_mib=1000000``), and with continuation fusion
  (MaxText's ``LIBTPU_INIT_ARGS``) run its all-gathers beside compute; with
  ``collective_matmul`` only the part of a layer's tensor-parallel communication longer than
  its own compute is exposed, the overlap such a compile aims at. With libtpu's default options XLA
  decomposes some and runs the rest synchronously (``xla-check`` counts both);
  ``parallelism.collective_matmul = false`` prices them blocking, fully exposed.
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

from ..model.compute import SAVED_OPS_BY_REMAT, recomputes_layer
from ..model.models import ModelCost, layer_units
from ..pod.mesh import Mesh, MeshAxis
from ..pod.topology import Pod
from ..scenario import InterconnectSection
from ..scenario.calibration import Calibration
from ..trace import TABLES
from ..units import BYTES_PER_ELEMENT, WEIGHT_BYTES_PER_ELEMENT, gradient_reduce_bytes, seconds_to_ns
from .collectives import dcn_all_reduce_time_s, ring_phase
from .fabric import mesh_ring_phases, slice_fabrics

__all__ = [
    "LinkPenalty",
    "mesh_all_to_all_s",
    "mesh_collective_s",
    "mesh_link_penalties",
    "StepComm",
    "plan_step_comm",
]

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


def mesh_all_to_all_s(bytes_per_chip: float, axis: MeshAxis, link_bytes_per_s: float, hop_latency_s: float) -> float:
    """Time of one all-to-all over a mesh axis: every chip sends ``bytes_per_chip`` spread evenly over its peers.

    Dimension-ordered routing over the axis' segments, all at once (one stage), as
    :func:`~engine.comm.collectives._all_to_all_phases` prices it: on a wraparound ring of
    n chips the busiest directed link carries ``V * D / (2 n N)`` where ``V = bytes_per_chip * N``
    is the whole exchanged array, ``N`` the axis' chips and ``D`` the sum of ring distances from
    one chip; on a line (no wraparound) the middle link carries ``floor(n/2) ceil(n/2) V / (n N)``
    each way. For one even ring this is ``V / (8 W)``, a quarter of an all-gather of the same
    array ("How to Scale Your Model", sharding.md, AllToAll). A strided segment shares its links
    with ``stride`` groups. Plus ``n/2`` (ring) or ``n - 1`` (line) hop latencies.
    """
    if axis.size <= 1 or bytes_per_chip <= 0:
        return 0.0
    total = float(bytes_per_chip) * axis.size
    worst = 0.0
    for seg in axis.segments:
        n = seg.chips
        if seg.wrap:
            dist_sum = sum(min(j, n - j) for j in range(1, n))
            link_bytes, hops = total * dist_sum / (2 * n * axis.size), n // 2
        else:
            link_bytes, hops = total * (n // 2) * (n - n // 2) / (n * axis.size), n - 1
        worst = max(worst, link_bytes / (link_bytes_per_s / seg.stride) + hops * hop_latency_s)
    return worst


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
    # gradient bytes each chip reduce-scatters per pass through its layers (the buffers: each layer's whole
    # gradient over fsdp, the dense weights' over expert)
    grad_reduce_scatter_bytes: float = 0.0
    all_to_all_s: float = 0.0  # the expert dispatch/combine all-to-alls of one step, forward + backward
    # weights replicated over `context`: their gradients reduce-scattered and all-gathered over it around
    # the data-parallel all-reduce (which moves the 1 / context shard)
    context_sync_s: float = 0.0
    # ZeRO-1 (fsdp_shard = "optimizer"): the full gradients reduce-scattered over `fsdp` once per step
    fsdp_grad_sync_s: float = 0.0
    # ZeRO-1 and -2: the updated weights all-gathered over `fsdp` once per step, after the update
    weight_gather_s: float = 0.0


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
    collective_matmul: bool = True,
    link_penalties: Mapping[str, LinkPenalty] | None = None,
    tables: bool = True,
    moe_layer_interval: int = 1,
    dispatch_bytes: float = 0.0,
    pipeline: int = 1,
    fsdp_shard: str = "all",
    weight_dtype: str = "fp32",
    gradient_reduce_dtype: str = "compute",
) -> StepComm:
    """Per-step collectives of the chosen strategy and how much of each is exposed.

    ``fwd_compute_s``/``bwd_compute_s`` are the chip's compute time of each pass
    (backward includes any recomputation); they are spread over layer units by
    FLOP share to decide what each unit's communication can hide behind.
    ``ps_hosts > 0`` selects the parameter-server strategy for ``cost.sparse_params``.
    Under ``remat = "full"`` the recomputed forward repeats, inside the backward pass, the
    tensor-parallel all-reduces after the GEMMs it reruns (Korthikanti et al. 2022, sec. 5;
    ``ModelCost.tp_all_reduces_recomputed_per_layer``); the other
    policies recompute only work inside a head shard, which needs no communication.
    With ``collective_matmul`` each tensor-parallel all-reduce hides behind the same unit's
    compute in that pass, and only what exceeds that compute is exposed (the decomposed loop
    waits for a chunk only when its transfer outlasts the partial matmul); without it they are
    blocking.
    ``link_penalties`` (``{"fsdp" | "tensor": LinkPenalty}``) slows the per-layer collectives
    of those mesh axes by what the scenario's degraded/failed links cost them; the
    data-parallel all-reduce is priced on the links by :mod:`engine.comm.gradient_sync` instead.
    ``tables=False`` leaves ``per_layer`` empty (the times are the same; for fast evaluation).

    Mixture of experts (``cost.moe_layers``): each MoE layer dispatches its tokens to the
    experts' chips and combines the results back, one all-to-all each over ``expert``
    (``dispatch_bytes`` per chip: its tokens x top-k x d_model), and the transposes of both in
    the backward pass (GShard, Lepikhin et al. 2020). They sit on the critical path (the
    experts need the tokens; the next layer needs the combine), so they are exposed. The weights
    shard as MaxText shards them (configs/base.yml ``logical_axis_rules``, since 6ebe4cf8 of
    2024-09-06): a routed expert's weights over ``expert`` (each chip holds ``1 / expert`` of the
    experts) and their model dimension over ``fsdp``; a dense weight's model dimension over
    ``fsdp`` and ``expert`` both (``embed``). So a layer gathers its dense weights over ``expert``
    (then over ``fsdp``), its experts over ``fsdp`` alone, and reduce-scatters their gradients the
    same way; the data-parallel sync moves ``1 / (fsdp x expert x tensor)`` of every weight. Each of ``pipeline`` stages holds ``1 / pipeline`` of the
    parameters, so its gradient sync moves that share. Under ``remat = "full"`` the recomputed
    forward repeats each MoE layer's dispatch and combine inside the backward pass.

    ``fsdp_shard`` picks the ZeRO stage (Rajbhandari et al. 2020, sec. 5 and 7): ``"all"``
    (ZeRO-3) as above; ``"grads+optimizer"`` (ZeRO-2) keeps the weights replicated over ``fsdp``
    (no per-layer gathers), reduce-scatters each layer's gradients and all-gathers the updated
    stored weights once per step; ``"optimizer"`` (ZeRO-1) keeps every layer's gradients whole until
    the backward ends, reduce-scatters them over ``fsdp`` once per step (each chip updates only its
    optimizer partition, so it needs only that partition's reduced gradients: ZeRO's sec. 7.2.1,
    the same volume as data parallelism), then gathers the weights the same way. A ``context`` axis replicates the weights: the gradients reduce-scatter over it, the
    data-parallel all-reduce moves ``1 / context`` of them, and they gather back.
    Gradients travel in ``gradient_reduce_dtype`` (:func:`~engine.units.gradient_reduce_bytes`): as their matmul
    writes them (``"compute"``, XLA's SPMD partitioner) or in ``weight_dtype`` (``"weights"``, a program that reduces
    them after autodiff). ZeRO's gather of the updated weights moves them in ``weight_dtype``.
    """
    units = layer_units(cost)
    tensor, fsdp, data = mesh["tensor"], mesh["fsdp"], mesh["data"]
    ep = mesh["expert"]
    pen = link_penalties or {}
    wire = BYTES_PER_ELEMENT[precision]
    grad_wire = gradient_reduce_bytes(precision, weight_dtype, gradient_reduce_dtype)
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
    e_unit = np.array([u.expert_params for u in units], dtype=np.float64) if cost.expert_params else np.zeros(n)
    d_unit = p_unit - e_unit  # dense weights: their model dimension shards over fsdp and expert
    p_unit = d_unit + e_unit / ep.size  # what a chip holds replicated over fsdp: its experts and every dense weight
    act = np.array([u.act_out_elems for u in units], dtype=np.float64)

    def each(op: str, nbytes: np.ndarray, axis: MeshAxis) -> np.ndarray:
        values = nbytes.tolist()
        prices = {v: priced(op, v, axis) for v in set(values)}
        return np.array([prices[v] for v in values])

    fsdp_on = (p_unit > 0) & (fsdp.size > 1)
    gather_on, scatter_on = fsdp_on & (fsdp_shard == "all"), fsdp_on & (fsdp_shard != "optimizer")
    g_bytes = p_unit / tensor.size * wire
    r_bytes = p_unit / tensor.size * grad_wire
    if gather_on.any():
        ag[gather_on] = each("all-gather", g_bytes[gather_on], fsdp)
    if scatter_on.any():
        rs[scatter_on] = each("reduce-scatter", r_bytes[scatter_on], fsdp)
    # the dense weights' expert stage: gathered over expert to their fsdp shard before the fsdp gather, their
    # gradients reduce-scattered over expert after the fsdp reduce-scatter
    ep_on = (d_unit > 0) & (ep.size > 1)
    ge_bytes = d_unit / (fsdp.size * tensor.size) * wire
    re_bytes = d_unit / (fsdp.size * tensor.size) * grad_wire
    age, rse = np.zeros(n), np.zeros(n)
    if ep_on.any():
        age[ep_on] = each("all-gather", ge_bytes[ep_on], ep)
        rse[ep_on] = each("reduce-scatter", re_bytes[ep_on], ep)
        ag += age
        rs += rse
    # Megatron: attention and MLP blocks each end in an all-reduce (transformers: 2 per layer
    # per pass, 1 with a parallel block); for other models one per GEMM output.
    per_layer = cost.tp_all_reduces_per_layer
    # a full-remat recompute reruns only the all-reduces after GEMMs it reruns (engine/model/models.py); a named save
    # that keeps the attention's output projection keeps its reduced output, so its all-reduce does not rerun either
    recomputed = per_layer if cost.tp_all_reduces_recomputed_per_layer is None else cost.tp_all_reduces_recomputed_per_layer
    if "layer.out" in SAVED_OPS_BY_REMAT.get(remat, ()):
        recomputed = 0
    tp_on = (act > 0) & (tensor.size > 1)
    a_bytes = per_chip_batch * act * wire
    tp_r = np.zeros_like(tp_f)
    if tp_on.any():
        tp_f[tp_on] = per_layer * each("all-reduce", a_bytes[tp_on], tensor)
        tp_b[tp_on] = tp_f[tp_on]
        if recomputes_layer(remat) and recomputed:
            tp_r[tp_on] = tp_f[tp_on] * recomputed / per_layer
            tp_b[tp_on] += tp_r[tp_on]
    for i, u in enumerate(units if tables else ()):
        if gather_on[i]:
            rows += [
                (i, u.name, "forward", "all-gather", "fsdp", g_bytes[i], ag[i] - age[i]),
                (i, u.name, "backward", "all-gather", "fsdp", g_bytes[i], ag[i] - age[i]),
            ]
        if scatter_on[i]:
            rows.append((i, u.name, "backward", "reduce-scatter", "fsdp", r_bytes[i], rs[i] - rse[i]))
        if ep_on[i]:
            rows += [
                (i, u.name, "forward", "all-gather", "expert", ge_bytes[i], age[i]),
                (i, u.name, "backward", "all-gather", "expert", ge_bytes[i], age[i]),
                (i, u.name, "backward", "reduce-scatter", "expert", re_bytes[i], rse[i]),
            ]
        if tp_on[i]:
            rows += [
                (i, u.name, "forward", "all-reduce", "tensor", per_layer * a_bytes[i], tp_f[i]),
                (i, u.name, "backward", "all-reduce", "tensor", per_layer * a_bytes[i], tp_f[i]),
            ]
            if recomputes_layer(remat) and recomputed:
                rows.append((i, u.name, "recompute", "all-reduce", "tensor", recomputed * a_bytes[i], tp_r[i]))
    # Forward: gather of unit i prefetched during compute of unit i-1; the first is exposed.
    fwd_fsdp = ag[0] + float(np.maximum(0.0, ag[1:] - cf[:-1]).sum()) if n else 0.0
    # Backward runs units in reverse: gather of i hides behind backward of i+1, together with the
    # reduce-scatter of i+1; the first gather (last unit) and the last reduce-scatter (unit 0) are exposed.
    bwd_fsdp = ag[-1] + rs[0] + float(np.maximum(0.0, ag[:-1] + rs[1:] - cb[1:]).sum()) if n else 0.0
    # Collective matmul (Wang et al. 2023) splits the layer's matmuls into one chunk per
    # tensor-parallel shard and passes the chunks around the ring while the previous chunk's
    # partial matmul runs: the loop waits only for transfers longer than the matmuls beside them.
    # TP runs on its own torus axes, so it does not compete with the FSDP gathers above for links.
    if collective_matmul:
        tp_f_exposed, tp_b_exposed = np.maximum(0.0, tp_f - cf), np.maximum(0.0, tp_b - cb)
    else:
        tp_f_exposed, tp_b_exposed = tp_f, tp_b
    forward_s = fwd_fsdp + float(tp_f_exposed.sum())
    backward_s = bwd_fsdp + float(tp_b_exposed.sum())
    a2a_s = 0.0
    if cost.moe_layers and ep.size > 1 and dispatch_bytes > 0:
        one = mesh_all_to_all_s(dispatch_bytes, ep, link, lat)
        phases = ("forward", "backward", "recompute") if remat == "full" else ("forward", "backward")
        moe_units = [(i, u) for i, u in enumerate(units) if u.name.startswith("layer") and (int(u.name[5:]) + 1) % moe_layer_interval == 0]
        for i, u in moe_units:
            rows += [(i, u.name, ph, "all-to-all", "expert", 2 * dispatch_bytes, 2 * one) for ph in phases]
            a2a_s += 4 * one
        forward_s += a2a_s / 2
        backward_s += a2a_s / 2
        if remat == "full":  # the recomputed forward dispatches and combines again
            backward_s += 2 * one * len(moe_units)
            a2a_s += 2 * one * len(moe_units)

    # Data-parallel gradient sync of this chip's dense shard: over `data` in the slice, then DCN.
    dense = (cost.params - sparse) / ep.size
    shard_bytes = dense / (fsdp.size * tensor.size) * grad_wire / pipeline
    fsdp_grad_s = weight_gather_s = 0.0
    if fsdp.size > 1 and fsdp_shard != "all":
        full_bytes = shard_bytes * fsdp.size  # this chip's replicated (tensor) shard of the gradients
        weights_bytes = dense / tensor.size * WEIGHT_BYTES_PER_ELEMENT[weight_dtype] / pipeline  # of the stored weights
        weight_gather_s = mesh_collective_s("all-gather", weights_bytes, fsdp, link, lat, pen.get("fsdp"))
        rows.append((-1, "model", "update", "all-gather", "fsdp", weights_bytes, weight_gather_s))
        if fsdp_shard == "optimizer":
            fsdp_grad_s = mesh_collective_s("reduce-scatter", full_bytes, fsdp, link, lat, pen.get("fsdp"))
            rows.append((-1, "model", "gradient_sync", "reduce-scatter", "fsdp", full_bytes, fsdp_grad_s))
    cp = mesh["context"]
    context_sync_s = 0.0
    if cp.size > 1 and shard_bytes > 0:
        context_sync_s = mesh_collective_s("all-reduce", shard_bytes, cp, link, lat)
        rows.append((-1, "model", "gradient_sync", "all-reduce", "context", shard_bytes, context_sync_s))
        shard_bytes /= cp.size  # the data-parallel all-reduce moves this chip's 1 / context share
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
    total = float(ag.sum() * 2 + rs.sum() + tp_f.sum() + tp_b.sum()) + grad_s + ps_pull + ps_push + a2a_s
    total += fsdp_grad_s + weight_gather_s + context_sync_s
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
        grad_reduce_scatter_bytes=float(r_bytes[scatter_on].sum() + re_bytes[ep_on].sum()),
        all_to_all_s=a2a_s,
        context_sync_s=context_sync_s,
        fsdp_grad_sync_s=fsdp_grad_s,
        weight_gather_s=weight_gather_s,
    )


