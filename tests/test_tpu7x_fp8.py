"""TPU7x (Ironwood) in the catalog from its published spec, and fp8 training where a chip has an fp8 peak."""

from __future__ import annotations

import json

import pytest

from engine import ScenarioError, scenario_from_dict, simulate
from engine.pod.catalog import DATA_DIR, load_catalog
from engine.units import GB_BYTES, GIB_BYTES, TERA


def test_tpu7x_matches_the_published_spec():
    spec = next(e for e in json.loads((DATA_DIR / "reference" / "published.json").read_text())
                if e["id"] == "spec_tpu7x_ironwood_clouddocs")["expected"]  # fmt: skip
    chip = load_catalog()["tpu7x"]
    assert chip.peak_bf16_flops_per_s == spec["peak_bf16_tflops_per_chip"] * TERA
    assert chip.peak_fp8_flops_per_s == spec["peak_fp8_tflops_per_chip"] * TERA
    assert chip.hbm_bytes == spec["hbm_capacity_gib"] * GIB_BYTES
    assert chip.hbm_bytes_per_s == spec["hbm_bw_GBps"] * GB_BYTES
    assert chip.tensorcores_per_chip == spec["tensorcores_per_chip"]
    # bidirectional ICI per chip = links x 2 directions x one link one way
    assert chip.ici_links_per_chip * 2 * chip.ici_link_bytes_per_s == spec["ici_bidi_bw_per_chip_GBps"] * GB_BYTES
    assert chip.dcn_bytes_per_s_per_host == spec["dcn_bw_per_chip_Gbps"] / 8 * GB_BYTES * chip.chips_per_host
    assert [k for k, c in load_catalog().items() if c.has_fp8] == ["tpu7x"]


def _llm(chip: str, precision: str) -> dict:
    return {"name": "fp8", "pod": {"chip": chip, "topology": "4x4x4"},
            "model": {"kind": "transformer", "layers": 4, "d_model": 4096, "heads": 32, "d_ff": 16384, "vocab": 32000,
                      "seq_len": 2048, "mlp": "swiglu"},
            "training": {"global_batch": 128, "steps": 3, "precision": precision}, "parallelism": {"fsdp": 64}}  # fmt: skip


def test_fp8_runs_weight_matmuls_at_the_fp8_peak_and_halves_their_bytes():
    bf16 = simulate(scenario_from_dict(_llm("tpu7x", "bf16")))
    fp8 = simulate(scenario_from_dict(_llm("tpu7x", "fp8")))
    assert fp8.facts.peak_flops_per_s_per_chip == 2 * bf16.facts.peak_flops_per_s_per_chip
    step = lambda r: float(r.trace.steps.column("step_ns").to_numpy()[-1])  # noqa: E731
    assert step(fp8) < step(bf16)
    # one byte per saved activation, but the norms' fp32 values and the masks keep their width. In bf16 the logits make
    # the loss the peak; in fp8 the first layer's backward is, beside the flash kernel's fp32 row statistics (whose
    # width fp8 does not change)
    from engine.memory.activations import flash_backward_stat_bytes_per_token, layer_residual_bytes_per_token

    model = scenario_from_dict(_llm("tpu7x", "fp8")).model
    assert model.attention_kernel == "flash"
    tokens = 128 // 64 * 2048
    stats = tokens * flash_backward_stat_bytes_per_token(model)
    for run, precision, e, at_peak in ((bf16, "bf16", 2, 0.0), (fp8, "fp8", 1, stats)):
        saved = tokens * (4 * layer_residual_bytes_per_token(model, precision, "none") + 2 * 4096 * e + 2 * 4)  # int32 tokens, labels
        assert run.facts.hbm_breakdown_bytes["activations"] == pytest.approx(saved + at_peak)
    assert fp8.facts.hbm_breakdown_bytes["activations"] < 0.7 * bf16.facts.hbm_breakdown_bytes["activations"]
    assert fp8.facts.hbm_breakdown_bytes["params"] == bf16.facts.hbm_breakdown_bytes["params"]  # fp32 master weights


def test_fp8_on_a_chip_without_it_names_the_key_and_the_chips_that_have_it():
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict(_llm("tpu-v5p", "fp8"))
    (key, msg), = e.value.problems
    assert key == "training.precision" and "valid: bf16, int8 or fp32 on tpu-v5p, or fp8 on tpu7x" in msg


def test_every_precision_a_scenario_accepts_has_a_stated_recipe():
    import typing

    from engine.model.assumptions import PRECISION_RECIPES
    from engine.scenario import TrainingSection

    accepted = set(typing.get_args(TrainingSection.model_fields["precision"].annotation))
    assert accepted == set(PRECISION_RECIPES)


def test_one_sample_per_chip_is_computed_on_both_tensorcores():
    """TPU7x's two TensorCores are two JAX devices: GSPMD cannot split one sample between them, so each computes it
    (a replicated shard), and a chip computes and holds as much at one sample as at two."""
    from engine.model.analytic import evaluate

    def costs(per_chip: int):
        raw = _llm("tpu7x", "bf16")
        raw["training"]["global_batch"] = 64 * per_chip
        return evaluate(scenario_from_dict(raw)).costs

    one, two, four = costs(1), costs(2), costs(4)
    assert one.hardware_flops_per_chip == pytest.approx(two.hardware_flops_per_chip)
    assert one.mem.breakdown_bytes["activations"] == pytest.approx(two.mem.breakdown_bytes["activations"])
    assert four.hardware_flops_per_chip == pytest.approx(2 * two.hardware_flops_per_chip, rel=0.05)
