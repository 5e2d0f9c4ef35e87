"""Chip compute time: a per-op roofline over the model's GEMMs.

For each op, time = max(FLOPs / achievable FLOP/s, bytes / achievable HBM B/s) +
a fixed per-op overhead (Williams et al. 2009, "Roofline"). FLOPs are counted on
MXU-padded shapes: every GEMM dimension is rounded up to the chip's systolic
array edge (``mxu_dim``), which is why small or oddly shaped layers run far below
peak on TPUs. Backward is twice the forward (same roofline, 2x work); full
rematerialisation adds one more forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .calibration import Calibration
from .catalog import ChipSpec
from .models import ModelCost
from .units import BYTES_PER_ELEMENT

__all__ = ["ComputeCost", "step_compute"]

#: forward passes executed per training step by remat policy (forward + backward = 1 + 2)
PASSES_BY_REMAT = {"none": 3.0, "full": 4.0}


def _pad(x: np.ndarray, to: int) -> np.ndarray:
    return np.ceil(x / to) * to


@dataclass(frozen=True)
class ComputeCost:
    """Compute of one chip for one training step (before jitter), in seconds and FLOPs."""

    fwd_bwd_s: float
    model_flops: float  # useful FLOPs per chip per step (forward + backward, no remat)
    hardware_flops: float  # FLOPs the chip executes (padding excluded, remat included)
    matmul_s: float  # part of fwd_bwd_s bound by FLOPs
    memory_s: float  # part bound by HBM bandwidth
    overhead_s: float


def step_compute(
    cost: ModelCost,
    chip: ChipSpec,
    cal: Calibration,
    per_chip_batch: int,
    precision: str,
    remat: str,
    tensor: int = 1,
) -> ComputeCost:
    """Roofline compute time of forward + backward for one chip.

    Parameters
    ----------
    per_chip_batch
        Samples processed by this chip per step.
    tensor
        Tensor-parallel degree: each op's output dimension is split this many ways.
    """
    ops = cost.ops
    b = float(per_chip_batch)
    elem = BYTES_PER_ELEMENT[precision]
    n_shard = ops.n / tensor
    m_rows = b * ops.m
    flops_useful = 2.0 * m_rows * ops.k * n_shard * ops.count
    d = chip.mxu_dim
    flops_padded = 2.0 * _pad(m_rows, d) * _pad(ops.k, d) * _pad(n_shard, d) * ops.count
    w_elems = np.where(ops.w_is_activation, b * ops.k * n_shard, ops.k * n_shard) * ops.count
    bytes_ = (b * ops.in_elems_per_repeat * ops.count + w_elems + m_rows * n_shard * ops.count) * elem
    bytes_ += b * ops.elementwise_elems_total / tensor * elem
    flop_rate = chip.peak_flops_per_s(precision) * cal.mxu_efficiency
    byte_rate = chip.hbm_bytes_per_s * cal.hbm_efficiency
    t_flops = flops_padded / flop_rate
    t_bytes = bytes_ / byte_rate
    per_pass = np.maximum(t_flops, t_bytes)
    passes = PASSES_BY_REMAT[remat]
    overhead = float(ops.launches.sum()) * cal.op_overhead_s * passes
    flop_bound = t_flops >= t_bytes
    return ComputeCost(
        fwd_bwd_s=float(per_pass.sum()) * passes + overhead,
        model_flops=float(flops_useful.sum()) * 3.0,
        hardware_flops=float(flops_useful.sum()) * passes,
        matmul_s=float(per_pass[flop_bound].sum()) * passes,
        memory_s=float(per_pass[~flop_bound].sum()) * passes,
        overhead_s=overhead,
    )
