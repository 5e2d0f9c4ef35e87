"""validate --json's ``xla_compute`` block: Podscope's compute per transformer layer against the TPU compiler's estimate
over data/reference/xla_compute.json."""

from __future__ import annotations

import json

import pytest

from engine import scenario_from_dict
from engine.errors import ReferenceFileError
from engine.model.analytic import evaluate
from engine.pod.catalog import load_catalog
from engine.scenario.calibration import load_calibration
from profiler import xla_compute
from scripts.fixtures.make_xla_compute import DEPTHS, LAYERS, PUBLISHED_LAYERS, SLICES, configurations


@pytest.fixture(scope="module")
def block():
    return xla_compute.compute_block()


def test_the_committed_file_is_the_generators_configurations_compiled():
    records = xla_compute.load_layers()
    assert records, "data/reference/xla_compute.json is missing: run scripts/fixtures/make_xla_compute.py"
    by_id = {r["id"]: r for r in records}
    for raw in configurations():
        assert raw["name"] in by_id, f"{raw['name']} not compiled: run scripts/fixtures/make_xla_compute.py"
        rec = by_id[raw["name"]]
        assert rec["scenario"] == raw, raw["name"]
        x = rec["xla"]
        assert x["jax_version"] and x["libtpu_version"] and x["compile_s"] > 0
        assert x["oom"] is None and x["flops_per_device"] > 0 and x["estimated_cycles_per_device"] > 0, raw["name"]


def test_one_row_per_layer_shape_of_every_generation_libtpu_targets(block):
    rows = xla_compute.layer_rows(xla_compute.load_layers())
    assert len(rows) == len(SLICES) * len(LAYERS) + len(PUBLISHED_LAYERS) == block["n"]
    assert set(block["generations"]) == set(SLICES)
    assert sum(g["n"] for g in block["generations"].values()) == block["n"]
    for r in rows:  # a layer's forward and backward: more FLOPs and more cycles than none, below the chip's peak
        assert r["flops_per_layer"] > 0 and r["xla_s_per_layer"] > 0 and r["podscope_s_per_layer"] > 0, r["layer"]
        assert 0.0 < r["xla_efficiency"] < 1.0, r
    assert block["p90_abs_pct"] >= block["median_abs_pct"] >= 0.0


def _record(raw: dict, flops: float, cycles: float, devices_per_chip: int = 1, oom: str | None = None) -> dict:
    xla = {"flops_per_device": flops, "estimated_cycles_per_device": cycles, "devices": 4, "devices_per_chip": devices_per_chip,
           "jax_version": "0.10.2", "libtpu_version": "0.0.42.1", "compile_s": 1.0, "oom": oom}  # fmt: skip
    return {"id": raw["name"], "scenario": raw, "xla": xla}


def test_a_layer_is_the_difference_between_the_two_depths():
    """Seconds = cycles at the catalog clock; efficiency = the layer's FLOPs per second over the device's peak (half the
    chip's where a chip is two devices); Podscope's side is the difference of its compute at the same depths."""
    two, three = [c for c in configurations() if c["name"].startswith("tpu7x-d4096-fsdp4-full-")]
    chip = load_catalog()["tpu7x"]
    recs = [_record(two, 1.0e12, 3.0e8, devices_per_chip=2), _record(three, 1.5e12, 4.0e8, devices_per_chip=2)]
    (row,) = xla_compute.layer_rows(recs)
    seconds = 1.0e8 / chip.clock_hz
    assert row["chip"] == "tpu7x" and row["layer"] == "d4096-fsdp4-full" and row["remat"] == "full"
    assert row["flops_per_layer"] == pytest.approx(0.5e12) and row["xla_s_per_layer"] == pytest.approx(seconds)
    assert row["xla_efficiency"] == pytest.approx(0.5e12 / seconds / (chip.peak_flops_per_s("bf16") / 2))
    pod = [evaluate(scenario_from_dict(r, source="t")).costs.comp.fwd_bwd_s for r in (two, three)]
    # the compiled step updates the layer's weights too: Adam reads the fp32 weight and gradient and writes the weight
    # (3 x 4 bytes), and reads and writes both fp32 moments (2 x 8), for the chip's quarter of the layer's parameters
    layer_params = 4 * 4096**2 + 3 * 4096 * 14336 + 2 * 2 * 4096  # attention, SwiGLU MLP, two norms
    update_s = layer_params / 4 * (3 * 4 + 2 * 8) / (chip.hbm_bytes_per_s * load_calibration().hbm_efficiency)
    assert row["podscope_s_per_layer"] == pytest.approx(pod[1] - pod[0] + update_s)
    assert row["diff_pct"] == pytest.approx(100.0 * ((pod[1] - pod[0] + update_s) / seconds - 1.0))


def test_with_the_flash_kernel_both_sides_leave_it_out():
    """The kernel is a custom call without a cycle estimate: Podscope's side drops its attention core too."""
    two, three = [c for c in configurations() if c["name"].startswith("tpu-v5e-d8192-fsdp2-tp4-minimal-flash-")]
    assert two["model"]["attention"] == "flash"
    (row,) = xla_compute.layer_rows([_record(two, 1.0e12, 3.0e8), _record(three, 1.5e12, 4.0e8)])
    comps = [evaluate(scenario_from_dict(r, source="t")).costs.comp for r in (two, three)]
    assert comps[1].attention_fwd_bwd_s > comps[0].attention_fwd_bwd_s > 0
    without = [c.fwd_bwd_s - c.attention_fwd_bwd_s for c in comps]
    updates = [evaluate(scenario_from_dict(r, source="t")).costs.update_s for r in (two, three)]
    assert row["attention"] == "flash"
    assert row["podscope_s_per_layer"] == pytest.approx(without[1] - without[0] + updates[1] - updates[0])


def test_a_shape_refused_or_compiled_at_one_depth_is_left_out():
    two, three = [c for c in configurations() if c["name"].startswith("tpu-v5e-d4096-fsdp4-full-")]
    assert xla_compute.layer_rows([_record(two, 1e12, 3e8)]) == []
    assert xla_compute.layer_rows([_record(two, 1e12, 3e8), _record(three, 0, 0, oom="RESOURCE_EXHAUSTED")]) == []
    assert DEPTHS == (2, 3)


def test_bad_files_are_named(tmp_path):
    assert xla_compute.load_layers(tmp_path / "absent.json") == [] and xla_compute.compute_block(tmp_path / "absent.json") is None
    wrong = tmp_path / "grid.json"
    wrong.write_text(json.dumps({"format": "podscope-xla-grid", "configurations": []}))
    with pytest.raises(ReferenceFileError, match=r"grid\.json: format: 'podscope-xla-grid': not a TPU compiler compute file") as e:
        xla_compute.load_layers(wrong)
    assert [k for k, _ in e.value.problems] == ["format"] and "make_xla_compute.py" in str(e.value)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ReferenceFileError, match="broken.json: not a TPU compiler compute file"):
        xla_compute.load_layers(broken)


def test_validate_json_carries_the_block(block):
    from profiler.validation import format_report, run_validation

    v = run_validation()
    assert json.loads(json.dumps(v.to_json()))["xla_compute"] == json.loads(json.dumps(block))
    assert "TPU compiler compute" in format_report(v)


def test_docs_validation_table_is_the_current_block(block):
    from scripts.docs_blocks import DOCS, read_block

    assert read_block(DOCS / "validation.md", "validation-xla-compute") == xla_compute.compute_table(block), (
        "docs/validation.md block 'validation-xla-compute' is stale: run `python -m scripts.plot_validation`"
    )
