"""The TPU compiler's cycles in fusions with and without a dot, beside the passes Podscope runs after an op's matmul:
the compiles docs/model.md states them from (data/reference/xla_fusions.json, scripts/fixtures/make_xla_fusions.py)."""

from __future__ import annotations

import pytest

from scripts import fusion_table
from scripts.docs_blocks import read_block
from scripts.fixtures.make_xla_fusions import configurations


@pytest.fixture(scope="module")
def rows():
    return fusion_table.rows()


def test_every_configuration_was_compiled():
    assert [r["id"] for r in fusion_table.load_fusions()] == [c["name"] for c in configurations()]


def test_fusions_without_a_dot_take_core_time_of_their_own(rows):
    """Normalisations, softmaxes, batch-norm statistics and the update run as fusions of their own: a fifth or more of
    what the compiler puts on the core, on every chip."""
    assert {r["chip"] for r in rows} == {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"}
    for r in rows:
        assert r["other_share"] > 0.15, r


def test_the_compiler_prices_much_of_a_layers_work_without_a_dot_past_its_hbm_time(rows):
    """The standard-attention layer's softmax fusions (exponentials over every score, in fp32) and its fp32 norms: the
    compiler gives a third or more of its fusions without a dot more cycles than their bytes take at the HBM's
    bandwidth, vector-unit work a roofline over HBM bytes does not price."""
    for r in rows:
        assert 0.0 < r["beyond_hbm_s"] < r["other_s"], r
        if r["what"] == "one layer":
            assert r["beyond_hbm_s"] > r["other_s"] / 3, r


def test_podscope_runs_after_the_matmul_no_more_than_the_compiler_runs_outside_dots(rows):
    for r in rows:
        assert 0.0 < r["passes_s"] < r["other_s"], r


def test_the_passes_bring_podscope_nearer_the_compilers_estimate(rows):
    for r in rows:
        assert r["inside_diff_pct"] < r["diff_pct"] < 0.0, r  # Podscope is below the compiler either way, less so with them


def test_the_docs_table_is_the_fixtures():
    assert read_block(fusion_table.DOCS / "model.md", "xla-fusions") == fusion_table.render(), (
        "docs/model.md xla-fusions table is stale: run `python -m scripts.fusion_table --write`"
    )
