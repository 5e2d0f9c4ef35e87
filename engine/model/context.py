"""Context parallelism: ring attention over the ``context`` mesh axis.

With ``[parallelism] context = N`` each chip holds ``seq_len / N`` of every sequence
(the activations, and the rows of every GEMM: engine/model/compute.py, engine/memory/hbm.py) and
the weights are replicated over the axis. Attention needs every key and value, so the
chips of a context group pass their K/V blocks around a ring (Liu et al. 2023, "Ring
Attention with Blockwise Transformers", arXiv:2310.01889, Algorithm 1; MaxText's context
parallelism over its ``context`` mesh axis):

* **forward**, per attention layer: ``N - 1`` sends of this chip's K and V block to the
  next chip on the ring. Each send runs while the chip computes attention against the
  block it holds (its own first), so a send is hidden when one block's attention compute
  (the layer's attention core / N) lasts at least as long: exposed ``(N - 1) max(0,
  send - block)``. The last block's compute has no send beside it.
* **backward**: the K/V blocks go round again with their gradient accumulators dK, dV
  (twice the bytes per send, ``N - 1`` sends, each beside one block's backward attention
  compute), and a last send returns the finished dK, dV to their owner: that one is
  exposed. A remat policy that reruns the attention core's forward to its output ``O = P V`` in
  the backward (``full``, ``minimal``, the named saves, ``selective`` without the flash kernel; a
  rematerialised pipeline stage once more) passes the ring again for each rerun, before the
  backward's: ``O`` needs every K/V block, and the output projection's weight gradient and the
  attention backward's ``rowsum(dO * O)`` read it (Dao et al. 2022, "FlashAttention", Algorithm 4).
  The flash kernel's own backward recomputes only the scores, block by block as the K/V blocks
  pass in the backward ring (``ComputeCost.attention_forward_passes``, engine/model/compute.py).

A send goes to the chip's ring neighbour over the torus axes the context axis maps to
(:func:`engine.comm.collectives.p2p_time_s`): one link on a whole wraparound ring or a
multi-axis sub-torus (a Hamiltonian cycle of neighbours; a grid with an even side has
one), two link hops on a line (the ring runs out and back, so each directed link still
carries one block at a time). A strided context axis shares its links with ``stride``
groups (``link / stride``), as the mesh model prices every axis.

Two blocks are in flight per chip (the one being computed on and the one arriving):
``2 x`` the K/V block in the forward pass, ``2 x`` the K/V/dK/dV blocks in the backward
pass, temporary HBM (engine/memory/hbm.py). K/V and their gradients travel in the activation
precision (bf16 under the int8 / fp8 recipes, whose attention einsums run in bf16).

The weights' gradients are all-reduced over ``context`` as over ``data``
(engine/comm/mesh_comm.py): reduce-scatter over ``context``, the data-parallel
all-reduce of the ``1 / context`` shard, all-gather back (ASTRA-sim's hierarchical
schedule).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ..comm.collectives import p2p_time_s
from ..pod.mesh import MeshAxis
from ..trace import TABLES
from ..units import BYTES_PER_ELEMENT, seconds_to_ns

__all__ = ["RingAttention", "ring_hop_s", "kv_block_bytes", "plan_ring_attention"]

LAYER_COLLECTIVES = TABLES["extra_layer_collectives"]


@dataclass(frozen=True)
class RingAttention:
    """Ring attention of one pass (one microbatch) of a chip through every layer, in seconds and bytes."""

    degree: int
    layers: int
    block_bytes: float  # this chip's K and V block of one layer
    hop_s: float  # one forward send of the K/V block to the next chip
    forward_exposed_s: float  # all layers, forward pass
    backward_exposed_s: float  # all layers, backward pass (and the recomputes' forward passes)
    bytes_sent: float  # per chip, forward + backward, all layers
    send_s: float  # every send's time, hidden or not
    buffer_bytes: tuple[float, float]  # blocks in flight during the forward and the backward pass
    per_layer: pa.Table  # rows of TABLES["extra_layer_collectives"] (op collective-permute, axis context)

    @property
    def exposed_s(self) -> float:
        return self.forward_exposed_s + self.backward_exposed_s


def ring_hop_s(nbytes: float, axis: MeshAxis, link_bytes_per_s: float, hop_latency_s: float) -> float:
    """One send of ``nbytes`` to the next chip of a ring laid over a mesh axis (seconds); see the module docstring."""
    if axis.size <= 1 or nbytes <= 0:
        return 0.0
    segs = axis.segments
    stride = max(seg.stride for seg in segs)
    one_link = (segs[0].wrap if len(segs) == 1 else any(seg.chips % 2 == 0 for seg in segs))
    return p2p_time_s(nbytes, [1 if one_link else 2], link_bytes_per_s / stride, hop_latency_s)


def kv_block_bytes(model, micro_batch: float, precision: str, tensor: int, context: int) -> float:
    """Bytes of one chip's K and V block of one layer: ``2 b (s / N) kv q`` elements.

    Tensor parallelism splits the KV heads (a chip keeps at least one: grouped-query heads
    fewer than ``tensor`` are replicated).
    """
    kv = max(model.kv_heads_eff / tensor, 1.0)
    elem = BYTES_PER_ELEMENT["bf16" if precision in ("int8", "fp8") else precision]
    return 2.0 * micro_batch * model.seq_len / context * kv * model.head_dim_eff * elem


def plan_ring_attention(
    model,
    axis: MeshAxis,
    *,
    micro_batch: float,
    precision: str,
    tensor: int,
    forward_passes: int,
    attention_forward_s: float,
    attention_fwd_bwd_s: float,
    link_bytes_per_s: float,
    hop_latency_s: float,
    tables: bool = True,
) -> RingAttention:
    """Ring attention's sends and what of them is exposed, for one pass of a chip.

    Parameters
    ----------
    model
        The :class:`~engine.scenario.TransformerModel`.
    axis
        The ``context`` mesh axis (its size is the ring's length ``N``).
    micro_batch
        Samples per chip in the pass.
    forward_passes
        Times the step runs the attention core's forward to its output: 1, plus the backward's reruns
        (``ComputeCost.attention_forward_passes``).
    attention_forward_s, attention_fwd_bwd_s
        The chip's attention-core compute of the pass, all layers (forward; forward + backward
        with recomputation), from :func:`engine.model.compute.step_compute` at ``context = N``.
    """
    n, layers = axis.size, model.layers
    block = kv_block_bytes(model, micro_batch, precision, tensor, n)
    if n <= 1:
        return RingAttention(1, layers, block, 0.0, 0.0, 0.0, 0.0, 0.0, (0.0, 0.0), LAYER_COLLECTIVES.empty())
    hop = ring_hop_s(block, axis, link_bytes_per_s, hop_latency_s)
    grad_hop = ring_hop_s(2.0 * block, axis, link_bytes_per_s, hop_latency_s)  # K, V, dK, dV
    home_hop = hop  # dK, dV back to their owner
    reruns = max(forward_passes - 1, 0)
    fwd_block_s = attention_forward_s / layers / n
    bwd_core_s = attention_fwd_bwd_s - attention_forward_s * (1 + reruns)
    bwd_block_s = max(bwd_core_s, 0.0) / layers / n
    fwd_layer = (n - 1) * max(0.0, hop - fwd_block_s)
    bwd_layer = (n - 1) * max(0.0, grad_hop - bwd_block_s) + home_hop + reruns * fwd_layer
    bytes_layer = (1 + reruns) * (n - 1) * block + (n - 1) * 2.0 * block + block
    send_layer = (1 + reruns) * (n - 1) * hop + (n - 1) * grad_hop + home_hop
    table = LAYER_COLLECTIVES.empty()
    if tables:
        rows = [("forward", (n - 1) * block, (n - 1) * hop), ("backward", (n - 1) * 2.0 * block + block, (n - 1) * grad_hop + home_hop)]
        rows += [("recompute", (n - 1) * block, (n - 1) * hop)] * reruns
        table = LAYER_COLLECTIVES.table(
            {
                "unit": pa.array([i + 1 for i in range(layers) for _ in rows], pa.int32()),
                "layer": pa.array([f"layer{i}" for i in range(layers) for _ in rows], pa.string()),
                "phase": pa.array([r[0] for _ in range(layers) for r in rows], pa.string()),
                "op": pa.array(["collective-permute"] * (layers * len(rows)), pa.string()),
                "mesh_axis": pa.array(["context"] * (layers * len(rows)), pa.string()),
                "bytes": pa.array([r[1] for _ in range(layers) for r in rows], pa.float64()),
                "time_ns": pa.array(seconds_to_ns("ring attention", [r[2] for _ in range(layers) for r in rows]), pa.int64()),
            }
        )
    return RingAttention(
        degree=n,
        layers=layers,
        block_bytes=block,
        hop_s=hop,
        forward_exposed_s=fwd_layer * layers,
        backward_exposed_s=bwd_layer * layers,
        bytes_sent=bytes_layer * layers,
        send_s=send_layer * layers,
        buffer_bytes=(2.0 * block, 4.0 * block),
        per_layer=table,
    )
