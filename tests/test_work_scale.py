"""MFU and throughput count the work of the shapes steps actually execute."""

from __future__ import annotations

import numpy as np
import pytest

from engine import load_scenario, simulate
from engine.model.models import model_cost
from profiler.api import BUNDLED_SCENARIOS_DIR

VARIABLE = BUNDLED_SCENARIOS_DIR / "llm-350m-v5p-variable-seq.toml"


def test_fixed_shapes_report_nominal_work():
    s = load_scenario(VARIABLE, overrides={"compile.shapes": "fixed"})
    r = simulate(s)
    assert r.facts.tokens_per_step == s.training.global_batch * s.model.seq_len
    assert r.facts.model_flops_per_step == pytest.approx(model_cost(s.model).train_flops_per_sample * s.training.global_batch)


def test_variable_lengths_count_executed_tokens_and_flops():
    s = load_scenario(VARIABLE)
    r = simulate(s)
    nominal_tokens = s.training.global_batch * s.model.seq_len
    lo = s.compile.seq_len_min
    # uniform lengths in [lo, seq_len]: near the midpoint (steady steps are the cache hits, a small sample)
    assert r.facts.tokens_per_step == pytest.approx(s.training.global_batch * (lo + s.model.seq_len) / 2, rel=0.15)
    assert r.facts.tokens_per_step < nominal_tokens
    # attention makes FLOPs per token grow with length, so shorter sequences shrink FLOPs more than tokens
    flops_ratio = r.facts.model_flops_per_step / (model_cost(s.model).train_flops_per_sample * s.training.global_batch)
    assert 0 < flops_ratio < r.facts.tokens_per_step / nominal_tokens
    step_s = np.median(r.trace.steps.column("step_ns").to_numpy()) / 1e9
    assert r.facts.model_flops_per_step / step_s / (r.facts.chips * r.facts.peak_flops_per_s_per_chip) < 0.8
