"""One rule for the idle-cause keys of every run summary: null when not simulated, the true value when simulated.

docs/cli.md states it; this holds it for every bundled scenario (each simulated briefly, in summary mode).
"""

from __future__ import annotations

import tomllib

import pytest

from profiler import api
from profiler.store import Database

SCENARIOS = api.bundled_scenarios()


def _simulated_causes(raw: dict) -> set[str]:
    if raw.get("model", {}).get("kind") == "hlo":
        return set()
    return {"input_wait_frac", "recompiles", "compile_s", "stragglers", "goodput"}


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_idle_keys_are_null_exactly_when_not_simulated(path, tmp_path):
    raw = tomllib.loads(path.read_text())
    overrides = {"training.steps": 4}
    if raw.get("sim", {}).get("trace") != "sampled":  # a sampled run keeps its sampling: it stores few events already
        overrides["sim.trace"] = "summary"
    summary = api.run_file(path, Database(tmp_path / "runs.duckdb"), overrides=overrides)
    simulated = _simulated_causes(raw)
    for key in ("input_wait_frac", "recompiles", "compile_s", "goodput", "stragglers"):
        if key in simulated:
            assert summary[key] is not None, f"{path.stem}: {key} is simulated but null"
        else:
            assert summary[key] is None, f"{path.stem}: {key} is not simulated but reads {summary[key]!r}"
    if "stragglers" in simulated:
        assert isinstance(summary["stragglers"], list)


def test_every_bundled_scenario_is_covered():
    assert len(SCENARIOS) >= 14 and any(p.stem == "jax-transformer-tpu-v5p-8" for p in SCENARIOS)
