"""Scenario loading: valid files load into frozen objects; every bad input names file and key."""

from __future__ import annotations

import pydantic
import pytest

from engine import ScenarioError, load_scenario
from engine.scenario import apply_overrides, parse_topology


def test_small_scenario_loads_with_derived_values(small_scenario):
    s = small_scenario
    assert s.name == "small"
    assert s.slice_shape == (2, 2, 2)
    assert s.total_chips == 8
    assert s.data_parallel == 8  # defaults to what the other axes leave
    assert s.per_chip_batch == 32
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        s.training.steps = 3  # frozen


def test_name_defaults_to_file_stem(write_toml):
    path = write_toml(
        """
        [pod]
        chip = "tpu-v3"
        topology = "4x4"
        [model]
        kind = "resnet50"
        [training]
        global_batch = 64
        steps = 2
        """,
        "my-run.toml",
    )
    assert load_scenario(path).name == "my-run"


@pytest.mark.parametrize(
    "edit, key, fragment",
    [
        ({"pod.bogus": 1}, "pod.bogus", "valid keys here: chip, topology, slices"),
        ({"training.global_batch": -4}, "training.global_batch", "greater than 0"),
        ({"training.steps": "many"}, "training.steps", "integer"),
        ({"pod.chip": "tpu-v99"}, "pod.chip", "tpu-v4"),  # lists valid chips
        ({"parallelism.data": 3}, "parallelism", "8 chips"),
        ({"pod.topology": "2by2"}, "pod.topology", "joined by 'x'"),
        ({"pod.topology": "2x2x2x2"}, "pod.topology", "1 to 3"),
        ({"model.layer_sizes": [4]}, "model.layer_sizes", "at least 2"),
        ({"training.precision": "fp8"}, "training.precision", "bf16"),
        ({"training.global_batch": 100}, "training.global_batch", "divisible"),
    ],
)
def test_bad_values_name_file_and_dotted_key(small_scenario_path, edit, key, fragment):
    with pytest.raises(ScenarioError) as err:
        load_scenario(small_scenario_path, overrides=edit)
    keys = [k for k, _ in err.value.problems]
    assert key in keys, err.value.problems
    text = str(err.value)
    assert str(small_scenario_path) in text
    assert fragment in text


def test_all_problems_reported_at_once(small_scenario_path):
    with pytest.raises(ScenarioError) as err:
        load_scenario(small_scenario_path, overrides={"pod.bogus": 1, "training.steps": 0, "sim.seed": -1})
    keys = {k for k, _ in err.value.problems}
    assert {"pod.bogus", "training.steps", "sim.seed"} <= keys


def test_malformed_toml_names_file(write_toml):
    path = write_toml("[pod\nchip = 'x'", "broken.toml")
    with pytest.raises(ScenarioError, match="broken.toml.*malformed TOML"):
        load_scenario(path)


def test_missing_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.toml")


def test_topology_with_more_axes_than_the_chip_torus(small_scenario_path):
    with pytest.raises(ScenarioError, match="2D torus"):
        load_scenario(small_scenario_path, overrides={"pod.chip": "tpu-v3"})


def test_transformer_heads_must_divide(write_toml):
    path = write_toml(
        """
        [pod]
        chip = "tpu-v4"
        topology = "2x2x1"
        [model]
        kind = "transformer"
        layers = 2
        d_model = 10
        heads = 3
        d_ff = 16
        vocab = 10
        seq_len = 4
        [training]
        global_batch = 4
        steps = 1
        """
    )
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert any(k == "model" and "divisible" in m for k, m in err.value.problems)


def test_apply_overrides_is_deep_and_does_not_mutate():
    raw = {"pod": {"chip": "tpu-v4"}, "training": {"steps": 1}}
    out = apply_overrides(raw, {"pod.topology": "4x4x4", "sim.seed": 3})
    assert out == {"pod": {"chip": "tpu-v4", "topology": "4x4x4"}, "training": {"steps": 1}, "sim": {"seed": 3}}
    assert raw == {"pod": {"chip": "tpu-v4"}, "training": {"steps": 1}}


def test_parse_topology():
    assert parse_topology("16x16") == (16, 16)
    assert parse_topology("8") == (8,)
    with pytest.raises(ValueError):
        parse_topology("0x4")
