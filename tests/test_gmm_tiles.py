"""The grouped matmul's whole tiles: what fine-grained experts cost under ``moe_dispatch = "grouped"``.

The fixture (``scripts/fixtures/make_gmm_tiles.py``, JAX 0.10.2) holds the row tiles the megablox
kernel's grid executes (``make_group_metadata``) for rows routed at random to expert groups.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine import ScenarioError, scenario_from_dict
from engine.model.analytic import evaluate
from engine.model.compute import grouped_matmul_rows, kernel_tiled

FIXTURE = Path(__file__).parent / "fixtures" / "gmm" / "gmm_tiles.json"


@pytest.mark.parametrize("case", json.loads(FIXTURE.read_text())["cases"], ids=lambda c: f"{c['rows']}x{c['groups']}/{c['tile_rows']}")
def test_row_tiles_match_the_kernels_own_metadata(case):
    rows, groups, tile = case["rows"], case["groups"], case["tile_rows"]
    visits = grouped_matmul_rows(rows, groups, tile) / min(tile, rows)
    assert visits == pytest.approx(np.mean(case["tile_visits"]), rel=0.01)
    assert visits > rows / tile  # every group boundary inside a tile costs a tile: not the plain row count


def test_a_dimension_longer_than_its_tile_runs_whole_tiles():
    assert kernel_tiled(1408, 1024) == 2048  # DeepSeek-V2's expert width: the last tile masked, not shortened
    assert kernel_tiled(2048, 1024) == 2048
    assert kernel_tiled(768, 1024) == 768  # a dimension within one tile is a tile of its own size


def _moe(d_ff_expert: int, **model) -> dict:
    return {
        "name": "gmm",
        "pod": {"chip": "tpu-v5p", "topology": "2x2x1"},
        "model": {"kind": "transformer", "layers": 4, "d_model": 2048, "heads": 16, "d_ff": 8192, "vocab": 32000,
                  "seq_len": 2048, "mlp": "swiglu", "experts": 64, "experts_per_token": 6, "capacity_factor": 0,
                  "d_ff_expert": d_ff_expert, **model},
        "training": {"global_batch": 16, "steps": 3, "remat": "full"},
        "parallelism": {"fsdp": 4},
    }  # fmt: skip


def _expert_s(raw: dict) -> float:
    return evaluate(scenario_from_dict(raw)).costs.comp.expert_fwd_bwd_s


def test_an_expert_width_off_the_tile_pays_for_the_whole_tile():
    # 1408 runs as 2048 in the gate, up and down projections; 2048 runs as itself: the same time,
    # although the 1408-wide experts have 31% fewer FLOPs. Both pay the group boundaries' extra tiles.
    assert _expert_s(_moe(1408)) == pytest.approx(_expert_s(_moe(2048)), rel=1e-9)
    # with a tile as wide as the expert, the narrow experts cost their FLOPs
    narrow = _expert_s(_moe(1408, gmm_tiling=[512, 2048, 2048]))
    assert narrow == pytest.approx(_expert_s(_moe(2048)) * 1408 / 2048, rel=0.02)


def test_dense_dispatch_ignores_the_tiling():
    dense = _moe(1408, moe_dispatch="dense", capacity_factor=1.25)
    assert _expert_s(dense) == _expert_s({**dense, "model": {**dense["model"], "gmm_tiling": [128, 128, 128]}})


def test_a_bad_tiling_is_refused_with_the_key_and_what_is_valid():
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict(_moe(1408, gmm_tiling=[512, 1024]))
    assert any(k == "model.gmm_tiling" for k, _ in e.value.problems), e.value.problems
