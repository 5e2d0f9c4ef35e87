"""Model states per parameter: what the weights, their gradients and the optimizer keep, and what a ZeRO stage shards.

Rajbhandari et al. 2020, "ZeRO", sec. 3.1; mixed precision after Micikevicius et al. 2018: every parameter keeps an
fp32 master copy (4 bytes) and an fp32 gradient (4 bytes, JAX gradients take the parameters' dtype), or 2 and 2 when
the weights are stored in bf16 (``training.weight_dtype``), plus the optimizer's fp32 state: Adam m and v (8),
momentum (4), SGD (0), Adafactor (factored second moments, O(rows + cols), taken as 0 per parameter; Shazeer & Stern
2018). Adam therefore costs 16 bytes per parameter, ZeRO's "16 Psi".
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import WEIGHT_BYTES_PER_ELEMENT

__all__ = [
    "BytesPerParam",
    "bytes_per_param",
    "OPTIMIZER_STATE_BYTES_PER_PARAM",
    "OPTIMIZER_STATE_BYTES_PER_ELEMENT",
    "optimizer_state_bytes_per_param",
    "zero_shards",
]

#: the optimizer's state per parameter in fp32 (``training.optimizer_state = "fp32"``)
OPTIMIZER_STATE_BYTES_PER_PARAM = {"sgd": 0.0, "momentum": 4.0, "adam": 8.0, "adafactor": 0.0}
#: bytes per element of the optimizer's moments by ``training.optimizer_state``. "bf16": DeepSeek-V3
#: (arXiv:2412.19437, sec. 3.3.3) tracks AdamW's first and second moments in BF16 and keeps the master
#: weights and gradients in FP32; optax offers it per moment (``adam(mu_dtype=...)``,
#: ``sgd(accumulator_dtype=...)``).
OPTIMIZER_STATE_BYTES_PER_ELEMENT = {"fp32": 4.0, "bf16": 2.0}
#: bytes of the per-layer compute copy of a weight (cast from the stored weight before the matmul;
#: none where the stored weight is already no wider than the compute dtype)
COMPUTE_COPY_BYTES_PER_PARAM = {"fp32": 0.0, "bf16": 2.0, "int8": 2.0, "fp8": 1.0}


@dataclass(frozen=True)
class BytesPerParam:
    params: float
    grads: float
    optimizer: float
    compute_copy: float  # transient, for the layer in use

    @property
    def model_states(self) -> float:
        return self.params + self.grads + self.optimizer


def optimizer_state_bytes_per_param(optimizer: str, optimizer_state: str = "fp32") -> float:
    """Bytes per parameter of the optimizer's state: Adam's two moments are 8 in fp32, 4 in bf16."""
    return OPTIMIZER_STATE_BYTES_PER_PARAM[optimizer] * OPTIMIZER_STATE_BYTES_PER_ELEMENT[optimizer_state] / 4.0


def bytes_per_param(optimizer: str, precision: str, optimizer_state: str = "fp32", weight_dtype: str = "fp32") -> BytesPerParam:
    """Bytes per parameter of the model states (weights and gradients in ``weight_dtype``, optimizer) and
    of a weight's compute copy (a cast only where the compute dtype is narrower than the stored weight)."""
    stored = WEIGHT_BYTES_PER_ELEMENT[weight_dtype]
    copy = COMPUTE_COPY_BYTES_PER_PARAM[precision]
    return BytesPerParam(stored, stored, optimizer_state_bytes_per_param(optimizer, optimizer_state), copy if copy < stored else 0.0)


def zero_shards(fsdp_shard: str) -> tuple[bool, bool]:
    """(weights sharded over fsdp, gradients sharded over fsdp) of a ZeRO stage; optimizer state always is.

    ``"all"`` is ZeRO-3 (Rajbhandari et al. 2020, Figure 1: ``(2 + 2 + K) Psi / Nd``), ``"grads+optimizer"``
    ZeRO-2 (``2 Psi + (2 + K) Psi / Nd``), ``"optimizer"`` ZeRO-1 (``4 Psi + K Psi / Nd``).
    """
    return fsdp_shard == "all", fsdp_shard in ("all", "grads+optimizer")
