"""validate --json's ``xla`` block: Podscope against the TPU compiler over data/reference/xla_grid.json."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine import scenario_from_dict
from engine.errors import ReferenceFileError
from engine.model.models import model_cost
from engine.scenario.calibration import load_calibration
from profiler import xla_grid
from profiler.xla_check import compare, podscope_numbers, xla_peak_bytes
from scripts.fixtures.make_xla_grid import WIDE_FSDP_SLICES

KEYS = {"n", "generations", "hbm_median_abs_pct", "hbm_p90_abs_pct", "verdict_agreement", "false_fits", "flops_median_abs_pct"}


@pytest.fixture(scope="module")
def block():
    return xla_grid.xla_block()


def test_the_block_covers_every_configuration_of_the_committed_grid(block):
    configs = xla_grid.load_grid()
    assert configs, "data/reference/xla_grid.json is missing: run scripts/fixtures/make_xla_grid.py"
    assert KEYS <= set(block)
    assert block["n"] == len(configs) == sum(block["generations"].values())
    assert block["compiled"] == sum(1 for c in configs if c["xla"]["memory"] is not None)
    assert 0.0 <= block["verdict_agreement"] <= 1.0
    assert block["false_fits"] + block["false_ooms"] == round(block["n"] * (1 - block["verdict_agreement"]))
    assert block["hbm_p90_abs_pct"] >= block["hbm_median_abs_pct"] >= 0.0


def test_the_grid_records_only_scenarios_and_xlas_numbers():
    for c in xla_grid.load_grid():
        assert set(c) <= {"id", "scenario", "xla", "xla_hbm_only"} and {"id", "scenario", "xla"} <= set(c)
        assert c["scenario"]["model"]["kind"] in ("transformer", "mlp", "resnet50")
        x = c["xla"]
        assert (x["memory"] is None) == (x["oom"] is not None), c["id"]
        assert x["jax_version"] and x["libtpu_version"] and x["compile_s"] > 0
        # a compiled step's cycle estimate (recorded by the generator since it reads them) sums real estimates only,
        # not libtpu's INT64_MAX for an op it has none for
        cycles = x.get("estimated_cycles_per_device")
        assert cycles is None or (x["memory"] is not None and 0 < cycles < 1e15), c["id"]
        if "xla_hbm_only" in c:  # the same program with memory-space assignment off, only where XLA compiled it
            only = c["xla_hbm_only"]
            assert only["flags"] == "--xla_msa_enable=DISABLED" and only["libtpu_version"] == x["libtpu_version"]
            assert only["memory"]["peak_bytes"] > 0 and x["memory"] is not None, c["id"]


def test_every_program_under_a_gib_is_also_compiled_with_every_buffer_in_hbm():
    rows = [r for r in xla_grid.grid_rows(xla_grid.load_grid()) if r["hbm_diff_pct"] is not None]
    small = [r for r in rows if r["xla"]["peak_hbm_bytes"] < xla_grid.LARGE_PROGRAM_BYTES]
    assert small and all(r["hbm_only_diff_pct"] is not None for r in small)
    assert all(r["hbm_only_diff_pct"] is None for r in rows if r["xla"]["peak_hbm_bytes"] >= xla_grid.LARGE_PROGRAM_BYTES)


def test_small_programs_land_on_the_program_xla_holds_in_hbm(block):
    """Below 1 GiB per chip Podscope's peak is that of XLA's program with every buffer in HBM: what XLA's memory-space
    assignment then keeps in on-chip memory (or prefetches beside its HBM buffer) is what the default peak adds to the
    error, and Podscope does not model it."""
    assert block["hbm_only_n"] >= 300
    assert block["hbm_only_median_abs_pct"] <= 5.0 and block["hbm_only_p90_abs_pct"] <= 15.0
    assert block["hbm_only_median_abs_pct"] < block["hbm_only_default_median_abs_pct"]
    assert block["hbm_only_p90_abs_pct"] < block["hbm_only_default_p90_abs_pct"]


def test_false_fits_count_podscope_fits_where_xla_refuses():
    pod_fits = {"peak_hbm_bytes": 1.0, "breakdown_bytes": {}, "oom": False, "hardware_flops_per_chip": 1.0}
    refused = {"devices_per_chip": 1, "memory": None, "oom": {"message": "RESOURCE_EXHAUSTED"}, "flops_per_device": None}
    c = compare(pod_fits, refused)
    assert not c["verdicts_agree"] and c["hbm_diff_pct"] is None and c["xla"]["oom"]



def test_false_fits_beyond_the_margin_are_those_xla_refuses_by_more_than_it(block):
    rows = xla_grid.grid_rows(xla_grid.load_grid())
    false_fits = [r for r in rows if not r["podscope"]["oom"] and r["xla"]["oom"]]
    beyond = [r for r in false_fits if r["hbm_limit_ratio"] > 1.0 + xla_grid.FALSE_FIT_MARGIN]
    assert block["false_fits"] == len(false_fits) and block["false_fits_beyond_margin"] == len(beyond)
    assert all(r["hbm_limit_ratio"] is not None for r in false_fits)  # XLA states what it asked for

def test_xlas_own_peak_is_the_reference_where_it_reports_one():
    mem = {"argument_bytes": 10, "output_bytes": 10, "alias_bytes": 10, "temp_bytes": 30, "peak_bytes": 75}
    assert xla_peak_bytes(mem) == 75
    assert xla_peak_bytes({**mem, "peak_bytes": None}) == 40


def test_per_chip_numbers_double_xlas_per_tensorcore_device():
    mem = {"argument_bytes": 10, "output_bytes": 10, "alias_bytes": 10, "temp_bytes": 30}
    xla = {"devices_per_chip": 2, "memory": mem, "oom": None, "flops_per_device": 50.0}
    pod = {"peak_hbm_bytes": 100.0, "breakdown_bytes": {}, "oom": False, "hardware_flops_per_chip": 150.0}
    c = compare(pod, xla)
    assert xla_peak_bytes(mem) == 40 and c["xla"]["peak_hbm_bytes"] == 80
    assert c["hbm_diff_pct"] == pytest.approx(25.0) and c["flops_diff_pct"] == pytest.approx(50.0)


def test_a_damaged_grid_file_is_named(tmp_path):
    broken = tmp_path / "grid.json"
    broken.write_text("{")
    with pytest.raises(ReferenceFileError, match=r"grid\.json: not a TPU compiler grid file") as e:
        xla_grid.load_grid(broken)
    assert e.value.source == str(broken)
    broken.write_text(json.dumps({"format": "podscope-xla-grid"}))
    with pytest.raises(ReferenceFileError, match="configurations"):
        xla_grid.load_grid(broken)


def test_validate_json_carries_the_block(block):
    from profiler.validation import run_validation

    v = run_validation()
    assert json.loads(json.dumps(v.to_json()))["xla"] == json.loads(json.dumps(block))


def test_docs_validation_table_is_the_current_block(block):
    from scripts.docs_blocks import DOCS, read_block

    assert read_block(DOCS / "validation.md", "validation-xla") == xla_grid.xla_table(block), (
        "docs/validation.md block 'validation-xla' is stale: run `python -m scripts.plot_validation`"
    )


def test_the_grid_sits_near_the_hbm_limit_on_both_sides(block):
    rows = xla_grid.grid_rows(xla_grid.load_grid())
    lo, hi = xla_grid.NEAR_LIMIT_RATIO
    near = [r for r in rows if r["hbm_limit_ratio"] is not None and lo <= r["hbm_limit_ratio"] <= hi]
    assert block["near_limit_n"] == len(near)
    refused = [r for r in near if r["xla"]["oom"]]
    assert block["near_limit_refused"] == len(refused)
    assert len(refused) >= 10 and len(near) - len(refused) >= 10, "too few configurations near the limit"
    for r in refused:  # by XLA's own numbers, a refused configuration asked for more than it had
        assert r["hbm_limit_ratio"] > 1.0, r["id"]


def test_the_logits_gradient_over_eight_fsdp_devices_is_counted_as_xla_holds_it():
    """The realistic-width model near the limit over FSDP of 8 devices (v5e, v5p, v6e on 8 chips), where XLA holds the
    logits' gradient beside the logits, and over data 2 x FSDP 4 beside it, where it does not: Podscope's peak within
    2% of XLA's and the same verdict, on both sides of the limit."""
    rows = [r for r in xla_grid.grid_rows(xla_grid.load_grid())
            if any(r["id"].startswith(f"{chip}-{topo}-medium-") for chip, topo in WIDE_FSDP_SLICES.items())]  # fmt: skip
    assert len(rows) >= 12 and {r["chip"] for r in rows} == set(WIDE_FSDP_SLICES)
    for mesh in ("-fsdp-", "-data_fsdp-"):
        assert any(mesh in r["id"] and r["xla"]["oom"] for r in rows) and any(mesh in r["id"] and not r["xla"]["oom"] for r in rows)
    for r in rows:
        assert r["verdicts_agree"], r["id"]
        if r["hbm_diff_pct"] is not None:
            assert abs(r["hbm_diff_pct"]) <= 2.0, (r["id"], r["hbm_diff_pct"])


def test_gradient_accumulation_holds_the_accumulator_beside_each_microbatchs_gradients_as_xla_does():
    """The accumulated programs (MaxText's gradient_accumulation_steps, no pipeline) of every family on every chip:
    Podscope's peak within 5% of XLA's at the median (counting the accumulator alone, not the microbatch's gradients
    beside it, put the 128-layer data-parallel model 20% under; leaving out the input batch and its copy in microbatch
    order, the narrow MLP 35% under). No false fit; where XLA compiles what Podscope calls out of memory, it is XLA's
    rematerialization recomputing what does not fit (more FLOPs than the program's own)."""
    configs = xla_grid.load_grid()
    rows = [r for r, c in zip(xla_grid.grid_rows(configs), configs)
            if c["scenario"]["training"].get("microbatches", 1) > 1 and c["scenario"]["parallelism"].get("pipeline", 1) == 1]  # fmt: skip
    assert [r["id"] for r in rows] == [r["id"] for r in xla_grid.grid_rows(configs) if r["accumulation"]]
    assert xla_grid.xla_block()["accumulation"]["n"] == len(rows)
    assert len(rows) >= 40 and {r["family"] for r in rows} == {"transformer", "mlp", "resnet50"}
    assert len({r["chip"] for r in rows}) == 5
    assert any(r["xla"]["oom"] and r["verdicts_agree"] for r in rows)
    assert not [r["id"] for r in rows if r["xla"]["oom"] and not r["podscope"]["oom"]]  # no false fit
    for r in rows:
        if r["podscope"]["oom"] and not r["xla"]["oom"]:
            assert r["flops_diff_pct"] < -5.0, r["id"]
    diffs = [abs(r["hbm_diff_pct"]) for r in rows if r["hbm_diff_pct"] is not None]
    assert float(np.median(diffs)) <= 5.0


def test_an_mlp_over_eight_fsdp_devices_without_remat_holds_every_input_and_output_gradient_as_xla_does():
    """Below the limit, the narrow MLP over FSDP of 8 devices without remat, whose weight gradients' loops XLA runs after
    the chain of input gradients, within 6% of XLA's peak where XLA recomputes nothing (v5e and v6e 8-chip slices),
    and within 7% where its rematerialization recomputes hidden inputs (more FLOPs than the program's own)."""
    rows = [r for r in xla_grid.grid_rows(xla_grid.load_grid())
            if any(r["id"].startswith(f"{chip}-{topo}-mlp-narrow-none-fsdp-") for chip, topo in WIDE_FSDP_SLICES.items())
            and r["hbm_diff_pct"] is not None and not r["podscope"]["oom"]]  # fmt: skip
    own = max(r["flops_diff_pct"] for r in rows)
    as_written = [r for r in rows if r["flops_diff_pct"] >= own - 1.0]
    assert len(as_written) >= 2 and len(rows) > len(as_written)
    for r in rows:
        assert abs(r["hbm_diff_pct"]) <= (6.0 if r in as_written else 7.0), (r["id"], r["hbm_diff_pct"])


#: the slices of 8 FSDP devices: 8-chip v5e, v5p and v6e slices, and TPU7x's 4 chips (a device per TensorCore)
EIGHT_FSDP_DEVICES = {**WIDE_FSDP_SLICES, "tpu7x": "2x2x1"}


def test_past_the_limit_xla_recomputes_more_of_an_fsdp_mlp_than_podscope_counts_on():
    """The narrow MLP without remat over FSDP of 8 devices at the batches Podscope puts at 110% of the usable HBM,
    counting on XLA's rematerialization: XLA compiles every one, at 88-96% of the usable HBM, with 7-11% more FLOPs
    than the step's own (docs/validation.md). Podscope's out-of-memory verdict there is the conservative error."""
    rows = [r for r in xla_grid.grid_rows(xla_grid.load_grid())
            if any(r["id"].startswith(f"{chip}-{topo}-mlp-narrow-none-fsdp-") for chip, topo in EIGHT_FSDP_DEVICES.items())
            and r["podscope"]["oom"]]  # fmt: skip
    assert {r["chip"] for r in rows} == set(EIGHT_FSDP_DEVICES)
    for r in rows:
        usable = r["podscope"]["usable_hbm_bytes"]
        assert r["podscope"]["peak_hbm_bytes"] == pytest.approx(1.10 * usable, rel=0.01), r["id"]
        assert not r["xla"]["oom"] and 0.87 < r["xla_hbm_bytes"] / usable < 0.96, r["id"]
        assert -11.0 < r["flops_diff_pct"] < -7.0, r["id"]


def test_an_fsdp_mlps_weight_gradient_loops_follow_its_chips_gathers_and_what_xla_refuses_is_out_of_memory():
    """The narrow MLP under ``full`` over 8 and 16 FSDP devices at the batches the interleaved count puts at 30% and 45%
    of the usable HBM: where the recomputation's weight gathers block (v4, v5p, v6e) Podscope counts the weight-gradient
    loops after the chain of input gradients and XLA holds 0.75-1.1 times that (two layers' loops inside the chain at
    the smaller batch); where they overlap (v5e, TPU7x) it counts the interleaved order, within 10%. Every program of
    that regime XLA refuses, Podscope calls out of memory, and the range those programs give spans what is left."""
    from engine.pod.catalog import load_catalog
    from profiler import ranges
    from scripts.fixtures.make_xla_grid import RECOMPUTE_ORDER_SLICES

    catalog = load_catalog()
    rows = xla_grid.grid_rows(xla_grid.load_grid())
    regime = [r for r in rows if any(r["id"].startswith(f"{chip}-{topo}-mlp-narrow-full-fsdp-") for chip, slices
                                     in RECOMPUTE_ORDER_SLICES.items() for topo in slices)]  # fmt: skip
    assert all(r["hbm_regime"] == ranges.RECOMPUTE_ORDER_REGIME for r in regime)
    below = [r for r in regime if not r["xla"]["oom"] and r["xla_hbm_bytes"] < 0.9 * r["podscope"]["usable_hbm_bytes"]]
    assert len(below) == 20 and {r["chip"] for r in below} == set(RECOMPUTE_ORDER_SLICES)
    for r in below:
        ratio = r["xla_hbm_bytes"] / r["podscope"]["peak_hbm_bytes"]
        if catalog[r["chip"]].xla_async_all_gather:
            assert 1.0 <= ratio < 1.1, (r["id"], ratio)
        else:
            assert 0.75 < ratio < 1.1, (r["id"], ratio)
    refused = [r for r in regime if r["xla"]["oom"]]
    assert {r["chip"] for r in refused} >= {"tpu-v5p", "tpu-v6e"} and all(r["podscope"]["oom"] for r in refused)
    table = xla_grid.hbm_range_table(rows)["mlp/full-windowed"]
    ratios = [r["xla_hbm_bytes"] / r["podscope"]["peak_hbm_bytes"] for r in regime if r["xla_hbm_bytes"]]
    assert table["low_factor"] <= np.quantile(ratios, 0.2) and np.quantile(ratios, 0.8) <= table["high_factor"]
    assert xla_grid.block_of(rows)["false_fits_beyond_margin"] == 0


def test_past_the_target_standard_attention_is_ranged_with_programs_xla_compiles_and_refuses():
    """A recomputed transformer with standard attention that Podscope puts past 95% of the usable HBM: XLA compiles
    BERT-Large at 91-95% where Podscope puts it at 110%, and refuses the 2,048-token model at 105-111% where Podscope puts
    it at 109-113%. Each of them, ranged without its own generation, reads ``may not fit`` or ``out of memory``: never
    ``fits``, and BERT never ``out of memory``."""
    from profiler import ranges

    all_rows = xla_grid.grid_rows(xla_grid.load_grid())
    rows = [r for r in all_rows if r["hbm_regime"] == ranges.PAST_TARGET_REGIME]
    bert = [r for r in rows if "-bert-large-" in r["id"]]
    assert len(bert) == 3 and all(not r["xla"]["oom"] and 0.9 < r["hbm_limit_ratio"] < 0.95 for r in bert)
    assert sum(1 for r in rows if "-medium-full-fsdp-standard-" in r["id"] and r["xla"]["oom"]) >= 6
    ratios, keys, fold_of = xla_grid._hbm_range_inputs(all_rows)
    held = ranges.held_out_ranges(ratios, keys, fold_of)
    for r in rows:
        h, peak = held[r["id"]], r["podscope"]["peak_hbm_bytes"]
        verdict = ranges.hbm_verdict((peak * h["low_factor"], peak * h["high_factor"]), r["podscope"]["usable_hbm_bytes"])
        assert verdict != "fits" and (verdict == "may not fit" if r in bert else True), (r["id"], verdict)


def test_a_data_parallel_mlp_without_remat_writes_each_input_gradient_in_place_as_xla_does():
    """The narrow data-parallel MLP without remat (with and without gradient accumulation), whose input gradients XLA
    writes over the ReLU outputs they mask: wherever XLA recomputes nothing (its FLOPs per step the program's own, the
    same on every chip), within 1% of XLA's peak on every chip compiled (counting a buffer of their own for them: +6%
    to +10%). Nearer the limit XLA's rematerialization recomputes hidden activations (more FLOPs), as many as bring
    its count, which does hold that buffer, under 95% of the usable HBM: Podscope drops the same and lands within 1%
    of XLA's peak there too. One point sits between 95% of the catalog's v5e limit (15.48 GiB, from run logs) and 95%
    of the one libtpu 0.0.42.1 compiles against (15.75 GiB): there Podscope recomputes an activation XLA keeps."""
    rows = [r for r in xla_grid.grid_rows(xla_grid.load_grid()) if "-mlp-narrow-none-data-" in r["id"] and r["hbm_diff_pct"] is not None]
    own = max(r["flops_diff_pct"] for r in rows)
    as_written = [r for r in rows if r["flops_diff_pct"] >= own - 1.0]
    assert len(as_written) >= 8 and len({r["chip"] for r in as_written}) >= 2 and any(r["accumulation"] for r in as_written)
    recomputed = [r for r in rows if r not in as_written]
    assert len(recomputed) >= 8 and len({r["chip"] for r in recomputed}) == 3 and any(r["accumulation"] for r in recomputed)
    off = [r for r in rows if abs(r["hbm_diff_pct"]) > 1.0]
    assert [r["chip"] for r in off] == ["tpu-v5e"], [(r["id"], r["hbm_diff_pct"]) for r in off]
    (r,) = off
    assert r in as_written and -7.0 < r["hbm_diff_pct"] < 0.0
    xla_count = r["xla"]["peak_hbm_bytes"]  # what XLA holds there is the full count: above 95% of 15.48, not of 15.75
    assert 0.95 * r["podscope"]["usable_hbm_bytes"] < xla_count * 1.06 < 0.95 * 15.75 * 2**30


def test_the_flash_kernels_backward_statistics_bring_the_wide_model_closer_to_xla(monkeypatch):
    """The wide model (24 layers of 2,048, flash attention, full and minimal remat) peaks inside a layer's backward,
    where the flash kernel's backward broadcasts its row statistics: every verdict is XLA's, and counting the
    statistics brings every compiled point at least as close to XLA's peak as leaving them out, the median by more
    than a point."""
    import engine.memory.activations as activations

    configs = [c for c in xla_grid.load_grid() if "-wide-" in c["id"] and "-mlp-" not in c["id"]]
    assert len(configs) >= 30 and len({c["scenario"]["pod"]["chip"] for c in configs}) == 5
    with_stats = {r["id"]: r for r in xla_grid.grid_rows(configs)}
    monkeypatch.setattr(activations, "flash_backward_stat_bytes_per_token", lambda model: 0.0)
    without = {r["id"]: r for r in xla_grid.grid_rows(configs)}
    assert all(r["verdicts_agree"] for r in with_stats.values())
    compiled = [k for k, r in with_stats.items() if r["hbm_diff_pct"] is not None]
    assert len(compiled) >= 12
    for k in compiled:
        assert abs(with_stats[k]["hbm_diff_pct"]) <= abs(without[k]["hbm_diff_pct"]) + 1e-9, k
    median = lambda rows: float(np.median([abs(rows[k]["hbm_diff_pct"]) for k in compiled]))  # noqa: E731
    assert median(with_stats) < median(without) - 1.0


def test_standard_attention_near_the_limit_counts_the_probabilities_gradient_as_xla_holds_it():
    """The realistic-width model with standard attention under full remat near the limit, whose layers' backward holds
    the probabilities' gradient beside the probabilities: every verdict XLA's, the compiled peaks within 4% on v5e and
    v6e (v6e -1.4%, v5e -3.9%; without that gradient, -20%). v4, one megacore device per chip, holds less than
    Podscope counts there: Podscope's peak is over XLA's, by 6.9%."""
    rows = [r for r in xla_grid.grid_rows(xla_grid.load_grid()) if "-medium-full-fsdp-standard-" in r["id"]]
    assert len(rows) >= 8 and any(r["hbm_diff_pct"] is not None for r in rows)
    for r in rows:
        assert r["verdicts_agree"], r["id"]
        if r["hbm_diff_pct"] is not None and r["chip"] == "tpu-v4":
            assert 0.0 < r["hbm_diff_pct"] <= 7.0, (r["id"], r["hbm_diff_pct"])
        elif r["hbm_diff_pct"] is not None:
            assert abs(r["hbm_diff_pct"]) <= 4.0, (r["id"], r["hbm_diff_pct"])


def test_a_resnet_sample_costs_more_at_a_small_per_chip_batch_for_the_compiler_and_for_podscope():
    """The TPU compiler's own estimate of a ResNet-50 step (its estimated cycles per op) makes a sample dearer at 32
    images per chip than at 256 on the chips whose two TensorCores share the step (v4, v5p, TPU7x), and within 10% of
    it on the one-TensorCore chips (v5e, v6e); Podscope's compute makes it dearer on every chip."""
    from engine import scenario_from_dict
    from engine.model.analytic import evaluate
    from engine.pod.catalog import load_catalog

    catalog = load_catalog()
    by_id = {c["id"]: c for c in xla_grid.load_grid()}
    pairs = [(c["scenario"]["pod"]["chip"], c["id"].removesuffix("-b32")) for c in by_id.values()
             if c["id"].endswith("resnet50-none-data-b32") and c["id"].removesuffix("32") + "256" in by_id]  # fmt: skip
    assert {chip for chip, _ in pairs} >= {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"}

    def per_sample(cid: str, batch: int) -> tuple[float, float]:
        rec = by_id[f"{cid}-b{batch}"]
        scenario = scenario_from_dict(rec["scenario"])
        return rec["xla"]["estimated_cycles_per_device"] / batch, evaluate(scenario).costs.comp.fwd_bwd_s / batch

    for chip, cid in pairs:
        (xla_small, pod_small), (xla_large, pod_large) = per_sample(cid, 32), per_sample(cid, 256)
        if catalog[chip].tensorcores_per_chip == 2:
            assert xla_small > 1.05 * xla_large, cid
        else:
            assert abs(xla_small / xla_large - 1.0) < 0.10, cid
        assert pod_small > pod_large, cid


def test_each_family_is_reported_on_its_own(block):
    from engine import scenario_from_dict

    configs = xla_grid.load_grid()
    families = [xla_grid.family_of(scenario_from_dict(c["scenario"])) for c in configs]
    assert set(families) == {"transformer", "moe", "pipeline", "mlp", "resnet50"} == set(block["families"])
    for kind, g in block["families"].items():
        assert g["n"] == families.count(kind)
        assert g["compiled"] <= g["n"] and g["hbm_p90_abs_pct"] >= g["hbm_median_abs_pct"]
    assert sum(g["false_fits"] for g in block["families"].values()) == block["false_fits"]


def test_flash_attention_flops_are_compared_outside_the_pallas_kernels():
    """The compiled module counts no FLOPs inside a custom call: the flash configurations' attention core runs in
    Pallas kernels, so Podscope's FLOPs outside them are what XLA's count is compared with."""
    rows = [r for r in xla_grid.grid_rows(xla_grid.load_grid()) if "-flash-" in r["id"] and r["flops_diff_pct"] is not None
            and r["hbm_limit_ratio"] < 0.9]  # near the limit XLA's rematerialization adds FLOPs (below)
    assert len(rows) >= 10
    for r in rows:
        p, x = r["podscope"], r["xla"]
        assert p["kernel_flops_per_chip"] > 0.0, r["id"]
        assert p["flops_per_chip"] == pytest.approx(p["hardware_flops_per_chip"] - p["kernel_flops_per_chip"])
        # the kernels' FLOPs are not in XLA's count
        assert p["hardware_flops_per_chip"] - x["flops_per_chip"] > 0.4 * p["kernel_flops_per_chip"], r["id"]
        assert abs(r["flops_diff_pct"]) < 5.0, r["id"]


def test_transformer_flops_agree_with_xlas_count_at_every_depth_and_capacity():
    """Against XLA's count with every loop trip: ``full`` remat reruns the layers, not the unembedding outside their
    checkpoints (so a 2-layer model is no further off than a 128-layer one), and dense dispatch's experts compute every
    capacity slot while its mask takes no gradient (so capacity factors 1.25 and 2 agree alike). Programs whose peak XLA
    holds within 10% of the usable HBM are left out: there XLA's own rematerialization recomputes what does not fit,
    which Podscope does not model. Microbatches of fewer samples than the slice has devices (a 2-stage TPU7x
    pipeline's 4 samples over its 8 devices) are in: each device computes a whole sample, as in XLA's program."""
    from engine import scenario_from_dict

    def fewer_samples_than_devices(rec: dict) -> bool:
        s = scenario_from_dict(rec["scenario"])
        return s.per_chip_batch // s.training.microbatches < rec["xla"]["devices_per_chip"]  # devices per chip compiled

    configs = xla_grid.load_grid()
    pairs = [(r, c) for r, c in zip(xla_grid.grid_rows(configs), configs) if r["family"] in ("transformer", "moe", "pipeline")
             and r["flops_diff_pct"] is not None and r["hbm_limit_ratio"] < 0.9]  # fmt: skip
    rows = [r for r, _ in pairs]
    assert sum(fewer_samples_than_devices(c) for _, c in pairs) >= 4
    assert len(rows) >= 300 and {r["family"] for r in rows} >= {"transformer", "moe"}
    off = {r["id"]: round(r["flops_diff_pct"], 1) for r in rows if abs(r["flops_diff_pct"]) > 6.0}
    assert not off, off
    shallow = [r["flops_diff_pct"] for r in rows if r["remat"] == "full" and r["family"] == "transformer" and "-L2-" in r["id"]]
    deep = [r["flops_diff_pct"] for r in rows if r["remat"] == "full" and r["family"] == "transformer" and "-L128-" in r["id"]]
    assert shallow and deep and abs(float(np.median(shallow)) - float(np.median(deep))) < 2.0
    cf2 = [r["flops_diff_pct"] for r in rows if "-cf2-" in r["id"]]
    assert cf2 and max(abs(x) for x in cf2) < 4.0


@pytest.mark.parametrize("peak_gib, noted", [(0.5, True), (2.0, False)])
def test_xla_check_says_when_on_chip_placement_weighs_on_the_peak(peak_gib, noted):
    from profiler.xla_check import format_check

    gib = 2**30
    pod = {"peak_hbm_bytes": 1.1 * peak_gib * gib, "breakdown_bytes": {"params": 0.1 * gib}, "peak_phase": "backward",
           "usable_hbm_bytes": 15 * gib, "oom": False, "flops_per_chip": 0.0}  # fmt: skip
    xla = {"peak_hbm_bytes": peak_gib * gib, "argument_bytes": 0.1 * gib, "output_bytes": 0.1 * gib, "alias_bytes": 0.1 * gib,
           "temp_bytes": peak_gib * gib, "oom": False, "flops_per_chip": 0.0}  # fmt: skip
    cmp = {"podscope": pod, "xla": xla, "hbm_diff_pct": 10.0, "verdicts_agree": True, "flops_diff_pct": None}
    text = format_check("s", cmp, {"devices_per_chip": 1, "mesh": {"fsdp": 4}, "devices": 4, "compile_s": 1.0, "notes": []})
    assert ("memory-space assignment" in text) is noted


#: a 4-layer transformer over FSDP on 4 v5p chips, Adam, ``full`` remat
_SMALL_V5P = {"name": "small", "pod": {"chip": "tpu-v5p", "topology": "2x2x1"},
              "model": {"kind": "transformer", "layers": 4, "d_model": 1024, "heads": 8, "d_ff": 4096, "vocab": 32000,
                        "seq_len": 1024},
              "training": {"global_batch": 8, "steps": 2, "optimizer": "adam", "remat": "full"}, "parallelism": {"fsdp": 4}}  # fmt: skip


def test_the_compute_set_beside_the_compilers_cycles_is_the_whole_steps():
    """The compiled step runs every microbatch's forward and backward and then the optimizer update, and its cycle
    estimates cover all of them: with 4 microbatches of the same shape Podscope's compute is 4 passes and one update.
    The update, hand-worked: Adam reads the fp32 weight and gradient and writes the weight (3 x 4 bytes) and reads and
    writes its two fp32 moments (2 x 8) for the chip's quarter of the parameters, at the HBM bandwidth."""
    one = {**_SMALL_V5P, "model": {**_SMALL_V5P["model"], "attention": "standard"}}
    four = {**one, "training": {**one["training"], "global_batch": 32, "microbatches": 4}}
    scenario = scenario_from_dict(one)
    chip = scenario.chip_spec()
    update_s = model_cost(scenario.model).params / 4 * (3 * 4 + 2 * 8) / (chip.hbm_bytes_per_s * load_calibration().hbm_efficiency)
    (single, terms), (accumulated, four_terms) = ((n["compute_s"], n["compute_terms_s"]) for n in
                                                  (podscope_numbers(scenario_from_dict(s)) for s in (one, four)))  # fmt: skip
    assert single > update_s > 0.0
    assert accumulated - update_s == pytest.approx(4 * (single - update_s))
    # by term: the update once per step, each pass's terms once per microbatch; they add up to the compute
    assert terms["update"] == pytest.approx(update_s) and four_terms["update"] == pytest.approx(update_s)
    for term in ("mxu_bound", "memory_bound", "op_overhead"):
        assert four_terms[term] == pytest.approx(4 * terms[term]) and terms[term] > 0.0, term
    assert sum(terms.values()) == pytest.approx(single) and "attention_kernel" not in terms  # standard attention


def test_with_the_flash_kernel_the_compute_terms_take_the_attention_core_off():
    flash = {**_SMALL_V5P, "model": {**_SMALL_V5P["model"], "attention": "flash"}}
    numbers = podscope_numbers(scenario_from_dict(flash))
    terms = numbers["compute_terms_s"]
    assert terms["attention_kernel"] < 0.0 and sum(terms.values()) == pytest.approx(numbers["compute_s"])
    assert numbers["compute_s"] < sum(v for k, v in terms.items() if k != "attention_kernel")


def test_xla_check_sets_the_compilers_compute_by_kind_beside_podscopes_terms():
    from profiler.xla_check import format_check

    pod = {"peak_hbm_bytes": 2**30, "breakdown_bytes": {"params": 2**28}, "peak_phase": "backward", "usable_hbm_bytes": 15 * 2**30,
           "oom": False, "flops_per_chip": 0.0, "compute_s": 0.009,
           "compute_terms_s": {"mxu_bound": 0.007, "memory_bound": 0.001, "op_overhead": 0.0005, "update": 0.0005}}  # fmt: skip
    raw = {"memory": {"argument_bytes": 2**28, "output_bytes": 2**28, "alias_bytes": 2**28, "temp_bytes": 2**29,
                      "generated_code_bytes": 0, "peak_bytes": 2**30},
           "oom": None, "devices_per_chip": 1, "flops_per_device": None, "estimated_cycles_per_device": 1.5e7,
           "estimated_cycles_by_kind_per_device": {"dot": 1.2e7, "other": 3.0e6}, "other_cycles_beyond_hbm_per_device": 1.5e6,
           "mesh": {"fsdp": 4}, "devices": 4,
           "compile_s": 1.0, "notes": []}  # fmt: skip
    cmp = compare({**pod, "clock_hz": 1.5e9, "hardware_flops_per_chip": 0.0}, raw)
    assert cmp["xla"]["compute_s"] == pytest.approx(0.01) and cmp["compute_diff_pct"] == pytest.approx(-10.0)
    assert cmp["xla"]["compute_by_kind_s"] == pytest.approx({"dot": 0.008, "other": 0.002})
    text = format_check("s", cmp, raw)
    assert cmp["xla"]["compute_beyond_hbm_s"] == pytest.approx(0.001)
    assert "XLA: 0.008 s in fusions with a dot, 0.002 s in the rest (20%), 0.001 s of it (50%) past what its bytes" in text
    assert ("Podscope: 0.007 s in MXU-bound ops, 0.001 s in memory-bound ops and passes, 0.0005 s fixed per-op cost, "
            "0.0005 s optimizer update") in text  # fmt: skip
    # a record compiled before XLA's cycles were kept by kind: the total alone
    old = compare({**pod, "clock_hz": 1.5e9, "hardware_flops_per_chip": 0.0}, {**raw, "estimated_cycles_by_kind_per_device": None})
    assert old["xla"]["compute_by_kind_s"] is None and "fusions with a dot" not in format_check("s", old, raw)
    # nor the part past the HBM's bandwidth
    unsplit = {k: v for k, v in raw.items() if k != "other_cycles_beyond_hbm_per_device"}
    older = compare({**pod, "clock_hz": 1.5e9, "hardware_flops_per_chip": 0.0}, unsplit)
    assert older["xla"]["compute_beyond_hbm_s"] is None and "past what its bytes" not in format_check("s", older, unsplit)


def test_the_cycles_past_the_hbm_bandwidth_are_what_each_op_without_a_dot_takes_beyond_its_bytes():
    from types import SimpleNamespace

    from engine.hlo.module_cost import DotShape, HloOp
    from profiler.xla_check import cycles_beyond_hbm

    def op(cycles, bytes_, runs=1, **kw):
        return HloOp("f", "fusion", 0.0, 0.0, bytes_, runs, estimated_cycles=cycles, **kw)

    module = SimpleNamespace(ops=(
        op(1_000.0, 2_000.0 * 100),  # a streaming pass: 100 cycles of bytes at 2,000 B/cycle priced at 1,000
        op(300.0, 2_000.0 * 100, runs=3),  # 300 cycles for 100 cycles of bytes, three loop trips
        op(50.0, 2_000.0 * 100),  # priced below its bytes' time: nothing past it
        op(None, 1.0),  # no estimate
        op(9_999.0, 1.0, dots=(DotShape(1, 1, 1, 1, "bf16"),)),  # a dot's fusion: not in the rest
        op(9_999.0, 1.0, collective=True),  # the interconnect's
        op(9_999.0, 1.0, asynchronous=True),  # the DMA engines'
    ))  # fmt: skip
    assert cycles_beyond_hbm(module, 2_000.0) == pytest.approx(900.0 + 3 * 200.0)
    with pytest.raises(ValueError, match="positive"):
        cycles_beyond_hbm(module, 0.0)


def test_the_named_saves_are_xlas_verdicts_and_flop_counts():
    """MaxText's named-save remat policies on the wide flash model: every verdict is XLA's, and where XLA does not
    recompute to fit (its FLOPs within 1% of the program's own) Podscope's FLOPs are XLA's within 0.5%."""
    rows = [r for r in xla_grid.grid_rows(xla_grid.load_grid()) if "-save_" in r["id"]]
    assert len(rows) == 45 and all(r["verdicts_agree"] for r in rows)
    unrecomputed = [r for r in rows if r["flops_diff_pct"] is not None and abs(r["flops_diff_pct"]) < 1.0]
    assert len(unrecomputed) >= 15 and all(abs(r["flops_diff_pct"]) < 0.5 for r in unrecomputed)
