"""What fills HBM: model states, activations and temporaries through one training step."""

from .hbm import (
    CATEGORIES,
    OPTIMIZER_STATE_BYTES_PER_ELEMENT,
    OPTIMIZER_STATE_BYTES_PER_PARAM,
    BytesPerParam,
    MemoryPlan,
    bytes_per_param,
    hbm_plan,
    oom_detail,
    optimizer_state_bytes_per_param,
    transformer_layer_activation_bytes,
    zero_shards,
)

__all__ = [
    "BytesPerParam",
    "bytes_per_param",
    "transformer_layer_activation_bytes",
    "MemoryPlan",
    "hbm_plan",
    "oom_detail",
    "CATEGORIES",
    "OPTIMIZER_STATE_BYTES_PER_PARAM",
    "OPTIMIZER_STATE_BYTES_PER_ELEMENT",
    "optimizer_state_bytes_per_param",
    "zero_shards",
]
