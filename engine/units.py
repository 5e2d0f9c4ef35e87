"""Unit aliases and the conversion constants used at the input boundary.

Internally Podscope uses one unit per quantity: seconds as float for model
arithmetic (``_s``), integer nanoseconds in trace tables (``_ns``), bytes
(``_bytes``), bytes per second (``_bytes_per_s``) and FLOP/s (``_flops_per_s``).
Input files name their unit in the key and are converted once, at load.
"""

from __future__ import annotations

import numpy as np

from .errors import SimulationError

__all__ = ["NS_PER_S", "GIB_BYTES", "MIB_BYTES", "GB_BYTES", "TERA", "BYTES_PER_ELEMENT", "WEIGHT_BYTES_PER_ELEMENT", "GRADIENT_COMPUTE_DTYPE", "gradient_wire_dtype", "gradient_reduce_bytes", "MAX_RUN_NS", "longest_ns", "seconds_to_ns"]

NS_PER_S = 1_000_000_000
GIB_BYTES = 1024**3
MIB_BYTES = 1024**2
GB_BYTES = 1_000_000_000
TERA = 1e12

#: Bytes per element of weights and activations in HBM and on the wire, by training precision:
#: the one table every module reads. int8 is AQT-style quantised training: tensors stay bf16 in
#: HBM and on the wire and are quantised on the fly inside the matmul (Lew et al., AQT), so int8
#: moves bf16's 2 bytes. Gradients are stored in the weights' dtype (:data:`WEIGHT_BYTES_PER_ELEMENT`)
#: and reduced in the dtype ``training.gradient_reduce_dtype`` names (:func:`gradient_reduce_bytes`).
#: fp8 training (scaled fp8 matmul operands, fp32 master weights and accumulation, as MaxText's fp8
#: recipe and NVIDIA Transformer Engine do) keeps weights and activations in fp8: 1 byte.
BYTES_PER_ELEMENT = {"fp32": 4.0, "bf16": 2.0, "int8": 2.0, "fp8": 1.0}

#: Bytes per element of the stored weights and of their gradients by ``training.weight_dtype``.
#: "fp32": the mixed-precision recipe's master copy (Micikevicius et al. 2018, "Mixed Precision
#: Training", sec. 3.1); JAX gradients take the parameters' dtype (the bf16 cast's transpose converts
#: back). "bf16": weights stored and updated in bf16, no master copy (MaxText's
#: ``weight_dtype: bfloat16``, MaxText/configs/base.yml).
WEIGHT_BYTES_PER_ELEMENT = {"fp32": 4.0, "bf16": 2.0}

#: The dtype a weight gradient's matmul writes, by ``training.precision``: bf16 for bf16, int8 and fp8 training
#: (their weight-gradient matmuls write bf16), fp32 for fp32.
GRADIENT_COMPUTE_DTYPE = {"fp32": "fp32", "bf16": "bf16", "int8": "bf16", "fp8": "bf16"}


def gradient_wire_dtype(precision: str, weight_dtype: str, gradient_reduce_dtype: str) -> str:
    """The dtype of the gradients on the wire (the data-parallel all-reduce and the FSDP reduce-scatter): "bf16" or "fp32".

    ``"compute"``: the dtype the weight-gradient matmul writes (:data:`GRADIENT_COMPUTE_DTYPE`). Under a
    jit program sharded by XLA's SPMD partitioner the reduction is part of that matmul: each device's partial sum
    over its batch shard is reduced before the cast back to the weights' dtype. libtpu 0.0.42.1's compiled modules
    all-reduce BERT-Large's data-parallel gradients as ``bf16[30522,1024]``, a v5p FSDP transformer's as
    ``bf16[4096,1024]``, and v4's FSDP reduce-scatter loops pass bf16 shards, over fp32 weights (``podscope
    xla-check`` reports the dtypes of a scenario's compiled program). ``"weights"``: the stored weights' dtype
    (:data:`WEIGHT_BYTES_PER_ELEMENT`), where the program reduces the gradients itself after autodiff: a ``psum`` of
    the gradients under ``pmap``, TF's ``CrossShardOptimizer`` and ``TPUStrategy``.
    """
    return weight_dtype if gradient_reduce_dtype == "weights" else GRADIENT_COMPUTE_DTYPE[precision]


def gradient_reduce_bytes(precision: str, weight_dtype: str, gradient_reduce_dtype: str) -> float:
    """Bytes per element of the gradients on the wire: :func:`gradient_wire_dtype`'s dtype."""
    return WEIGHT_BYTES_PER_ELEMENT[gradient_wire_dtype(precision, weight_dtype, gradient_reduce_dtype)]

#: largest run the int64 nanosecond clock holds, with headroom for sums inside a step (~146 years)
MAX_RUN_NS = 2**62


def seconds_to_ns(what: str, dur_s: np.ndarray | float) -> np.ndarray:
    """Seconds to int64 nanoseconds, refusing times the trace cannot hold.

    Absurd sizes validate field by field but overflow int64 nanoseconds; a bare cast
    would wrap silently into negative times.

    Raises
    ------
    SimulationError
        If a time is not finite, negative, or at least ``MAX_RUN_NS``.
    """
    longest_ns(what, dur_s)
    return np.rint(np.asarray(dur_s, dtype=np.float64) * NS_PER_S).astype(np.int64)


def longest_ns(what: str, dur_s: np.ndarray | float) -> float:
    """The longest of these durations in (rounded) nanoseconds, after the checks of :func:`seconds_to_ns`.

    Scaling and rounding keep order, so the bounds are taken on the seconds, without
    converting every element (a full trace converts its durations block by block).

    Raises
    ------
    SimulationError
        If a time is not finite, negative, or at least ``MAX_RUN_NS``.
    """
    s = np.asarray(dur_s, dtype=np.float64)
    if s.size == 0:
        return 0.0
    lo, hi = s.min() * NS_PER_S, s.max() * NS_PER_S  # NaN propagates and fails both tests below
    if not (lo >= 0 and hi < MAX_RUN_NS):
        ns = s * NS_PER_S
        worst = float(np.nanmax(np.abs(ns))) / NS_PER_S if np.any(~np.isnan(ns)) else float("nan")
        raise SimulationError(
            f"a {what!r} phase lasts {worst:.3g} s (or is not a finite non-negative time); trace times must stay below "
            f"{MAX_RUN_NS / NS_PER_S:.3g} s per run: the model, batch or steps are implausibly large"
        )
    return float(np.rint(hi))
