"""Distributed batch normalization: batch statistics pooled over a group of replicas.

Batch normalization (Ioffe & Szegedy 2015, arXiv:1502.03167) normalises each channel by
the mean and variance of the batch. With few images per chip those statistics get noisy,
so large-batch TPU training pools them over a group of neighbouring data-parallel replicas
(Ying et al. 2018, "Image Classification at Supercomputer Scale", arXiv:1811.06992,
"distributed batch normalization"; the Google MLPerf ResNet-50 code's
``distributed_group_size``, which its logs record as ``model_bn_span`` = group x images
per replica). ``[model] batch_norm_group = G`` says how many chips pool their statistics.

Per batch-norm layer, with ``C`` channels, each pass adds one all-reduce among the ``G``
chips of the group:

* **forward**: the per-channel sum and sum of squares (``2 C`` fp32) before the layer can
  normalise;
* **backward**: the two per-channel gradient sums (``sum dy`` and ``sum dy x_hat``,
  ``2 C`` fp32) before the layer's input gradient;
* a ``remat = "full"`` recompute runs the forward all-reduces again.

Each one sits between two dependent ops, so no compute hides it: it is exposed. Its
payload is a few kilobytes, so it is bound by latency: a ring all-reduce over a line of
``G`` chips of the ``data`` axis (:func:`engine.comm.collectives.all_reduce_time_s`, the
group being consecutive replicas) plus the per-op overhead every op of the engine pays
(``[compute] op_overhead_us``): a cross-replica sum is one more op of the layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..comm.collectives import all_reduce_time_s
from ..trace import TABLES
from ..units import seconds_to_ns

__all__ = ["BatchNormSync", "STAT_BYTES_PER_CHANNEL", "POOLED_SPAN_IMAGES", "plan_batch_norm_sync"]

LAYER_COLLECTIVES = TABLES["extra_layer_collectives"]

#: batch-norm statistics are kept in fp32 whatever the training precision (two per channel)
STAT_BYTES_PER_CHANNEL = 2 * 4

#: images whose statistics large-batch TPU ResNet training pools at least: the Google MLPerf ResNet-50
#: logs record ``model_bn_span`` 64 wherever a replica holds fewer images (training_results_v0.7
#: Google/results/tpu-v4-512-TF: 64 at 32 per chip; tpu-v3-8192-TF: 64 at 8 per core;
#: training_results_v2.0 cloud-tpu-v4-8192-TF: 64 at 8 per chip) and the replica's own batch otherwise
#: (v0.6 tpu-v3-256: 128; v0.7 tpu-v4-128-TF: 128)
POOLED_SPAN_IMAGES = 64


@dataclass(frozen=True)
class BatchNormSync:
    """A step's distributed batch-norm all-reduces on one chip, per pass through the model (seconds)."""

    group: int
    layers: int  # batch-norm layers
    forward_s: float  # every layer's forward all-reduce, exposed
    backward_s: float  # every layer's backward all-reduce (and a full-remat recompute's), exposed
    bytes_per_pass: float  # payload per chip of all layers' all-reduces in one pass
    per_layer: pa.Table  # rows of TABLES["extra_layer_collectives"] (op all-reduce, axis data)

    @property
    def exposed_s(self) -> float:
        return self.forward_s + self.backward_s


def plan_batch_norm_sync(
    channels: np.ndarray,
    names: tuple[str, ...],
    group: int,
    *,
    remat: str,
    link_bytes_per_s: float,
    hop_latency_s: float,
    collective_fixed_s: float,
    tables: bool = True,
) -> BatchNormSync:
    """The all-reduces of batch-norm layers with ``channels`` pooled over ``group`` chips (module docstring).

    Each is latency-bound: its ring's hops plus a collective's fixed cost (``collective_fixed_s``).
    """
    channels = np.asarray(channels, dtype=np.float64)
    nbytes = STAT_BYTES_PER_CHANNEL * channels
    if group <= 1 or channels.size == 0:
        return BatchNormSync(1, int(channels.size), 0.0, 0.0, 0.0, LAYER_COLLECTIVES.empty())
    one = np.array([all_reduce_time_s(b, [group], [False], link_bytes_per_s, hop_latency_s)[0] for b in nbytes]) + collective_fixed_s
    passes_fwd = 2 if remat == "full" else 1
    forward_s = float(one.sum())
    table = LAYER_COLLECTIVES.empty()
    if tables:
        phases = ["forward", "backward"] + (["recompute"] if passes_fwd == 2 else [])
        n, k = channels.size, len(phases)
        table = LAYER_COLLECTIVES.table(
            {
                "unit": pa.array(np.repeat(np.arange(1, n + 1, dtype=np.int32), k)),
                "layer": pa.array(np.repeat([f"{name}.bn" for name in names], k), pa.string()),
                "phase": pa.array(phases * n, pa.string()),
                "op": pa.array(["all-reduce"] * (n * k), pa.string()),
                "mesh_axis": pa.array(["data"] * (n * k), pa.string()),
                "bytes": pa.array(np.repeat(nbytes, k)),
                "time_ns": pa.array(seconds_to_ns("batch-norm all-reduce", np.repeat(one, k))),
            }
        )
    return BatchNormSync(
        group=group,
        layers=int(channels.size),
        forward_s=forward_s,
        backward_s=forward_s * passes_fwd,
        bytes_per_pass=float(nbytes.sum()),
        per_layer=table,
    )
