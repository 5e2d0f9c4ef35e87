"""How XLA schedules FSDP and tensor-parallel collectives with libtpu's defaults and with MaxText's options: the
compiles docs/model.md states them from (data/reference/xla_schedule.json, scripts/fixtures/make_xla_schedule.py)."""

from __future__ import annotations

import pytest

from scripts import schedule_table
from scripts.docs_blocks import read_block
from scripts.fixtures.make_xla_schedule import MAXTEXT_OPTIONS, configurations


@pytest.fixture(scope="module")
def compiled():
    return {r["id"]: r for r in schedule_table.load_schedule()}


def test_every_configuration_was_compiled_with_its_options(compiled):
    assert set(compiled) == {c["name"] for c in configurations()}
    for r in compiled.values():
        assert r["xla_flags"] == (MAXTEXT_OPTIONS if r["options"] == "maxtext" else {})


def _loops(r):
    return r["xla"]["windowed_einsum_loops"]


def test_libtpus_defaults_decompose_a_pure_fsdp_meshs_gathers_and_reductions(compiled):
    r = compiled["fsdp8-defaults"]
    assert _loops(r)["all_gather"] > 0 and _loops(r)["reduce_scatter"] > 0


def test_over_64_fsdp_devices_xla_gathers_weights_by_synchronous_all_reduce_whatever_the_options(compiled):
    for options in ("defaults", "maxtext"):
        x = compiled[f"fsdp64-{options}"]["xla"]
        assert "all-gather" not in x["synchronous"] and "all-gather" not in x["asynchronous"]
        assert x["synchronous"]["all-reduce"] > 0 and "all-reduce" not in x["asynchronous"]
    assert compiled["fsdp64-maxtext"]["xla"]["synchronous"] == compiled["fsdp64-defaults"]["xla"]["synchronous"]


@pytest.mark.parametrize("step", ["tensor8", "fsdp2-tensor4", "v4-fsdp2-tensor4"])
def test_tensor_parallel_all_gathers_block_by_default_and_continuation_fusion_moves_some_beside_compute(compiled, step):
    default, fused = compiled[f"{step}-defaults"]["xla"], compiled[f"{step}-maxtext"]["xla"]
    assert _loops(compiled[f"{step}-defaults"])["all_gather"] == 0
    assert default["synchronous"]["all-gather"] > 0 and "all-gather" not in default["asynchronous"]
    assert fused["asynchronous"].get("all-gather", 0) > 0
    gathers = lambda x: x["synchronous"].get("all-gather", 0) + x["asynchronous"].get("all-gather", 0)  # noqa: E731
    assert gathers(fused) == gathers(default)  # the same gathers, moved in the schedule


def test_the_docs_table_is_the_fixtures():
    assert read_block(schedule_table.DOCS / "model.md", "xla-schedule") == schedule_table.render(), (
        "docs/model.md xla-schedule table is stale: run `python -m scripts.schedule_table --write`"
    )
