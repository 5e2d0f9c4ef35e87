"""The catalog's ``xla_async_all_gather`` and ``xla_async_all_reduce``, read from libtpu's compiled module on every
generation it targets: whether XLA:TPU runs beside compute the all-gathers a checkpointed layer's recomputation makes
of its weights, and the all-reduces of replicated gradients. Where the gathers overlap, XLA interleaves the
weight-gradient loops of an unrolled FSDP program with the backward's chain of input gradients, and where they block it
runs those loops after the chain; where the all-reduces overlap, an unrolled program holds the gradients they reduce
until the update (engine/memory/hbm.py)."""

from __future__ import annotations

import numpy as np
import pytest

from engine import scenario_from_dict
from engine.pod.catalog import load_catalog
from profiler import xla_check
from scripts.fixtures.make_xla_grid import RECOMPUTE_ORDER_SLICES


def _mlp(chip: str, remat: str, axis: str):
    """Three hidden layers of 512 with one mesh axis over every chip of the generation's 8-device slice (TPU7x: 4 chips
    of 2 devices): it compiles in seconds."""
    topology = RECOMPUTE_ORDER_SLICES[chip][0]
    chips = int(np.prod([int(n) for n in topology.split("x")]))
    return scenario_from_dict({
        "name": f"{axis}-mlp-{chip}", "pod": {"chip": chip, "topology": topology},
        "model": {"kind": "mlp", "layer_sizes": [512] * 5},
        "training": {"global_batch": 8192, "steps": 2, "remat": remat},
        "parallelism": {axis: chips},
    })  # fmt: skip


@pytest.mark.parametrize("chip", sorted(RECOMPUTE_ORDER_SLICES))
def test_the_catalog_says_where_xla_overlaps_the_backwards_weight_gathers(live, chip):
    """Under ``full`` over FSDP the backward gathers every layer's weights again."""
    schedule = xla_check.compile_numbers(_mlp(chip, "full", "fsdp"), live_range=False)["schedule"]
    overlapped = schedule["asynchronous"].get("all-gather", 0)
    blocking = schedule["synchronous"].get("all-gather", 0)
    assert overlapped + blocking > 0, schedule  # the program gathers its weights
    assert (overlapped > 0) == load_catalog()[chip].xla_async_all_gather, schedule


@pytest.mark.parametrize("chip", sorted(RECOMPUTE_ORDER_SLICES))
def test_the_catalog_says_where_xla_overlaps_the_gradient_all_reduces(live, chip):
    """Data parallel, the gradients are all-reduced over every device."""
    schedule = xla_check.compile_numbers(_mlp(chip, "none", "data"), live_range=False)["schedule"]
    overlapped = schedule["asynchronous"].get("all-reduce", 0)
    assert overlapped + schedule["synchronous"].get("all-reduce", 0) > 0, schedule
    assert (overlapped > 0) == load_catalog()[chip].xla_async_all_reduce, schedule
