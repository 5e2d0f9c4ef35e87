"""The catalog's ``xla_async_all_gather``, read from libtpu's compiled module on every generation it targets: whether
XLA:TPU runs the all-gathers that a checkpointed layer's recomputation makes of its weights beside compute. Where it
does, it interleaves the weight-gradient loops of an unrolled FSDP program with the backward's chain of input
gradients; where the gathers block, it runs those loops after the chain (engine/memory/hbm.py)."""

from __future__ import annotations

import numpy as np
import pytest

from engine import scenario_from_dict
from engine.pod.catalog import load_catalog
from profiler import xla_check
from scripts.fixtures.make_xla_grid import RECOMPUTE_ORDER_SLICES


def _fsdp_mlp(chip: str):
    """Three hidden layers of 512 under ``full`` remat, FSDP over every chip of the generation's 8-device slice (TPU7x:
    4 chips of 2 devices): it compiles in seconds and its backward gathers every layer's weights again."""
    topology = RECOMPUTE_ORDER_SLICES[chip][0]
    fsdp = int(np.prod([int(n) for n in topology.split("x")]))
    return scenario_from_dict({
        "name": f"fsdp-mlp-{chip}", "pod": {"chip": chip, "topology": topology},
        "model": {"kind": "mlp", "layer_sizes": [512] * 5},
        "training": {"global_batch": 8192, "steps": 2, "remat": "full"},
        "parallelism": {"fsdp": fsdp},
    })  # fmt: skip


@pytest.mark.parametrize("chip", sorted(RECOMPUTE_ORDER_SLICES))
def test_the_catalog_says_where_xla_overlaps_the_backwards_weight_gathers(live, chip):
    schedule = xla_check.compile_numbers(_fsdp_mlp(chip), live_range=False)["schedule"]
    overlapped = schedule["asynchronous"].get("all-gather", 0)
    blocking = schedule["synchronous"].get("all-gather", 0)
    assert overlapped + blocking > 0, schedule  # the program gathers its weights
    assert (overlapped > 0) == load_catalog()[chip].xla_async_all_gather, schedule
