"""XLA HLO modules in: what a compiled SPMD program computes and communicates per device.

:mod:`.text` reads bounded HLO text into computations and instructions,
:mod:`.groups` decodes replica groups, :mod:`.cost` counts FLOPs, bytes and
collectives into one frozen :class:`~engine.hlo.cost.HloModuleCost`.
"""

from .cost import CollectiveOp, HloModuleCost, HloOp, describe_hlo, load_hlo
from .groups import parse_replica_groups, parse_source_target_pairs
from .text import DEFAULT_MAX_HLO_BYTES, parse_hlo, read_hlo_text

__all__ = [
    "DEFAULT_MAX_HLO_BYTES",
    "CollectiveOp",
    "HloModuleCost",
    "HloOp",
    "describe_hlo",
    "load_hlo",
    "parse_hlo",
    "parse_replica_groups",
    "parse_source_target_pairs",
    "read_hlo_text",
]
