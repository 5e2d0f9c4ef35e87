"""HBM footprint per chip: parameters, gradients, optimizer state, activations.

Bytes per parameter follow the mixed-precision training recipe (Micikevicius et
al. 2018, "Mixed Precision Training"; Rajbhandari et al. 2020, "ZeRO", sec. 3.1):
fp32 master weights and fp32 gradients, plus the optimizer's fp32 state (Adam: m
and v, 8 bytes; momentum: 4; SGD: 0; Adafactor: factored second moments whose
size is O(rows + cols), taken as 0 per parameter, Shazeer & Stern 2018).
FSDP and tensor parallelism shard all three by their axis sizes.

Activations saved for the backward pass: each GEMM's input (the weight gradient
needs it) plus, for attention, both activation operands, plus half the
elementwise traffic (one saved tensor per fused elementwise chain). Full
rematerialisation keeps only each block's input and recomputes one block's
activations at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .models import ModelCost
from .units import BYTES_PER_ELEMENT

__all__ = ["MemoryFootprint", "hbm_footprint", "OPTIMIZER_STATE_BYTES_PER_PARAM"]

MASTER_WEIGHT_BYTES_PER_PARAM = 4.0
GRADIENT_BYTES_PER_PARAM = 4.0
OPTIMIZER_STATE_BYTES_PER_PARAM = {"sgd": 0.0, "momentum": 4.0, "adam": 8.0, "adafactor": 0.0}


@dataclass(frozen=True)
class MemoryFootprint:
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    capacity_bytes: float

    @property
    def breakdown_bytes(self) -> dict[str, float]:
        return {
            "params": self.params_bytes,
            "grads": self.grads_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
        }

    @property
    def peak_bytes(self) -> float:
        return sum(self.breakdown_bytes.values())

    @property
    def oom(self) -> bool:
        return self.peak_bytes > self.capacity_bytes


def _saved_elems_per_sample(cost: ModelCost) -> float:
    ops = cost.ops
    gemm_inputs = ops.m * ops.k * ops.count
    act_operands = np.where(ops.w_is_activation, ops.k * ops.n * ops.count, 0.0)
    return float(gemm_inputs.sum() + act_operands.sum() + 0.5 * ops.elementwise_elems_total.sum())


def hbm_footprint(
    cost: ModelCost,
    *,
    per_chip_batch: int,
    precision: str,
    optimizer: str,
    remat: str,
    fsdp: int,
    tensor: int,
    capacity_bytes: float,
) -> MemoryFootprint:
    """Peak HBM use of one chip during a training step."""
    shard = float(fsdp * tensor)
    saved = _saved_elems_per_sample(cost)
    if remat == "full":
        blocks = max(cost.layers, 1)
        boundary = float(cost.ops.m[0] * cost.ops.k[0]) * blocks
        saved = boundary + saved / blocks
    act_bytes = saved * per_chip_batch * BYTES_PER_ELEMENT[precision] / tensor
    return MemoryFootprint(
        params_bytes=cost.params * MASTER_WEIGHT_BYTES_PER_PARAM / shard,
        grads_bytes=cost.params * GRADIENT_BYTES_PER_PARAM / shard,
        optimizer_bytes=cost.params * OPTIMIZER_STATE_BYTES_PER_PARAM[optimizer] / shard,
        activations_bytes=act_bytes,
        capacity_bytes=capacity_bytes,
    )
