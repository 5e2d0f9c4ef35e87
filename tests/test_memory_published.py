"""The HBM model against published memory figures (../shared/reference/published.json), errors printed.

Validation only: nothing here was used to set the model. Run with ``-s`` to see the table.
"""

from __future__ import annotations

import pytest

from profiler.memory_checks import deepseek_hbm_after_init_bytes, llama3_70b_memory, maxtext_dense_plans, maxtext_dense_runs

# The checks read the reference file the repository ships (data/reference/published.json),
# so they always run: a missing file is a failure, not a skip.
GIB = 2**30


def _report(what: str, predicted: float, published: float) -> float:
    err = predicted / published - 1.0
    print(f"{what:58s} predicted {predicted:12.4g}  published {published:12.4g}  error {100 * err:+6.1f}%")
    return err


def test_llama3_70b_book_memory_arithmetic():
    m = llama3_70b_memory()
    assert abs(_report("LLaMA-3 70B parameters", m.params, m.params_published)) < 0.03
    assert abs(_report("LLaMA-3 70B Adam state bytes", m.optimizer_bytes, m.optimizer_published_bytes)) < 0.03
    # The book keeps 3 d-sized bf16 tensors per layer; Podscope's `full` keeps 1 (the layer input). Per
    # checkpoint the arithmetic must agree with the book's formula (2 x d x tokens x layers) exactly; its
    # printed total (~20.9 TB) disagrees with its own formula (15.7 TB), so that error is only printed.
    assert abs(_report("LLaMA-3 70B one checkpoint/layer vs book formula", m.checkpoint_bytes, m.checkpoint_formula_bytes)) < 1e-9
    _report("LLaMA-3 70B one checkpoint/layer vs book's printed total / 3", m.checkpoint_bytes, m.checkpoint_printed_bytes)


def test_maxtext_deepseek_hbm_after_init():
    predicted, published = deepseek_hbm_after_init_bytes()
    assert abs(_report("MaxText deepseek2-16b v5p-8 HBM after init (GiB)", predicted / GIB, published / GIB)) < 0.03


_PLANS = maxtext_dense_plans()


@pytest.mark.parametrize("run_id", sorted(_PLANS))
def test_maxtext_runs_that_ran_are_predicted_to_fit(run_id):
    plan = _PLANS[run_id]
    print(f"{run_id:40s} peak {plan.peak_bytes / GIB:6.1f} GiB of {plan.usable_bytes / GIB:5.1f} usable ({plan.peak_phase})")
    assert not plan.oom


def test_the_checks_cover_the_published_dense_runs():
    assert len(maxtext_dense_runs()) == 10  # v5p 32B-1024B (8) and v4 22B / 52B
