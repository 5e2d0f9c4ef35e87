"""The catalog's ``xla_async_all_gather``, read from libtpu's compiled module on every generation it targets: whether
XLA:TPU runs the all-gathers that a checkpointed layer's recomputation makes of its weights beside compute. Where it
does, it interleaves the weight-gradient loops of an unrolled FSDP program with the backward's chain of input
gradients; where the gathers block, it runs those loops after the chain (engine/memory/hbm.py)."""

from __future__ import annotations

import pytest

from engine import scenario_from_dict
from engine.pod.catalog import load_catalog
from profiler import xla_check
from profiler.tpu_capture import _GENERATIONS

#: each generation's slice of 8 JAX devices (TPU7x: 4 chips of 2 devices), all on the FSDP axis
SLICES = {"tpu-v4": ("2x2x2", 8), "tpu-v5e": ("2x4", 8), "tpu-v5p": ("2x2x2", 8), "tpu-v6e": ("2x4", 8),
          "tpu7x": ("2x2x1", 4)}  # fmt: skip


def _fsdp_mlp(chip: str):
    """Three hidden layers of 512 under ``full`` remat: it compiles in seconds and its backward gathers every layer's
    weights again."""
    topology, fsdp = SLICES[chip]
    return scenario_from_dict({
        "name": f"fsdp-mlp-{chip}", "pod": {"chip": chip, "topology": topology},
        "model": {"kind": "mlp", "layer_sizes": [512] * 5},
        "training": {"global_batch": 8192, "steps": 2, "remat": "full"},
        "parallelism": {"fsdp": fsdp},
    })  # fmt: skip


def test_every_generation_the_compiler_targets_is_checked():
    assert set(SLICES) == {g.chip for g in _GENERATIONS.values()}


@pytest.mark.parametrize("chip", sorted(SLICES))
def test_the_catalog_says_where_xla_overlaps_the_backwards_weight_gathers(live, chip):
    schedule = xla_check.compile_numbers(_fsdp_mlp(chip), live_range=False)["schedule"]
    overlapped = schedule["asynchronous"].get("all-gather", 0)
    blocking = schedule["synchronous"].get("all-gather", 0)
    assert overlapped + blocking > 0, schedule  # the program gathers its weights
    assert (overlapped > 0) == load_catalog()[chip].xla_async_all_gather, schedule
