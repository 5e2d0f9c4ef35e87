"""What the planner's search reuses across candidates gives the numbers a fresh evaluation gives.

The search swaps only a candidate's ``[parallelism]`` table into an already valid scenario
(:func:`engine.scenario.with_parallelism`) and shares one memo of compute and gradient-sync
costs over all its evaluations (:func:`engine.model.analytic.evaluate`'s ``memo``). Both must be
indistinguishable from validating the whole file and evaluating each scenario on its own.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from engine import ScenarioError, load_scenario, scenario_from_dict
from engine.model.analytic import evaluate
from engine.model.models import model_cost
from engine.pod.topology import build_pod
from engine.scenario import with_parallelism
from engine.scenario.calibration import load_calibration

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "data" / "scenarios"
#: a transformer (context axis), a mixture of experts (expert axis), a multi-slice pipeline, a ResNet
CASES = ["llm-1b-v5p-64.toml", "moe-8x-top2-v5p-64.toml", "llm-8b-pipeline-2-slices-v5p.toml", "resnet50-v4-128.toml"]


def _meshes(chips: int) -> list[dict[str, int]]:
    """A few data x fsdp x tensor meshes of ``chips`` chips (each axis a power of two)."""
    out = []
    for tensor in (1, 2, 4):
        for fsdp in (1, 2, 8):
            if chips % (tensor * fsdp) == 0:
                out.append({"data": chips // (tensor * fsdp), "fsdp": fsdp, "tensor": tensor})
    return out


@pytest.mark.parametrize("name", CASES)
def test_with_parallelism_equals_validating_the_whole_file(name):
    base = load_scenario(SCENARIOS / name)
    raw = tomllib.loads((SCENARIOS / name).read_text())
    per_slice = base.chips_per_slice // math.prod(v for k, v in base.mesh_sizes.items() if k not in ("data", "fsdp", "tensor"))
    checked = 0
    for mesh in _meshes(per_slice):
        par = {**raw.get("parallelism", {}), **mesh}
        par.pop("mapping", None)
        try:
            whole = scenario_from_dict({**raw, "parallelism": par})
        except ScenarioError as e:
            with pytest.raises(ScenarioError) as got:
                with_parallelism(base, par)
            assert got.value.problems == e.problems
            continue
        swapped = with_parallelism(base, par)
        assert swapped.to_dict() == whole.to_dict()
        assert swapped.mesh_sizes == whole.mesh_sizes
        checked += 1
    assert checked >= 2


def test_with_parallelism_names_the_dotted_key_of_a_bad_value():
    base = load_scenario(SCENARIOS / "llm-1b-v5p-64.toml")
    with pytest.raises(ScenarioError) as e:
        with_parallelism(base, {"tensor": 0})
    keys = [k for k, _ in e.value.problems]
    assert keys == ["parallelism.tensor"]
    with pytest.raises(ScenarioError) as e:
        with_parallelism(base, {"tensor": 3})  # 3 does not divide the 64 chips
    assert e.value.problems and all(k.startswith("parallelism") for k, _ in e.value.problems)


@pytest.mark.parametrize("name", CASES)
def test_a_shared_memo_gives_the_numbers_of_fresh_evaluations(name):
    cal = load_calibration()
    base = load_scenario(SCENARIOS / name)
    raw = tomllib.loads((SCENARIOS / name).read_text())
    per_slice = base.chips_per_slice // math.prod(v for k, v in base.mesh_sizes.items() if k not in ("data", "fsdp", "tensor"))
    memo: dict = {}
    scenarios = []
    for mesh in _meshes(per_slice):
        par = {**raw.get("parallelism", {}), **mesh}
        par.pop("mapping", None)
        try:
            scenarios.append(scenario_from_dict({**raw, "parallelism": par}))
        except ScenarioError:
            continue
    assert len(scenarios) >= 2
    pod = build_pod(base.chip_spec(), base.slice_shape, base.pod.slices)
    cost = model_cost(base.model)
    for _ in range(2):  # the second pass reads everything back from the memo
        for s in scenarios:
            shared = evaluate(s, cal, pod=pod, cost=cost, memo=memo)
            fresh = evaluate(s, cal)
            assert shared.step_time_s == fresh.step_time_s
            assert shared.peak_hbm_bytes == fresh.peak_hbm_bytes
            assert shared.oom_term == fresh.oom_term
    assert memo
