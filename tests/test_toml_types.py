"""TOML's types are kept: a boolean or a quoted number is never a number, an integer still fills a float.

pydantic's lax mode would turn ``steps = true`` into 1 and ``steps = "100"`` into 100.
Every numeric key of every scenario section is walked from the model classes, so a
section added later is covered without editing this file.
"""

from __future__ import annotations

import copy
import tomllib
import typing
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from engine import ScenarioError, load_scenario, scenario_from_dict
from engine.planning.planner import _unwrap  # the concrete types inside Optional / Union / Annotated
from engine.pod.catalog import load_catalog
from engine.scenario import Scenario
from tests.conftest import SMALL_TOML

BASE = tomllib.loads(SMALL_TOML)
#: a valid model table per kind, so every model variant's keys can be edited
MODELS = {
    "mlp": BASE["model"],
    "resnet50": {"kind": "resnet50"},
    "transformer": {"kind": "transformer", "layers": 2, "d_model": 64, "heads": 4, "d_ff": 256, "vocab": 128, "seq_len": 32},
    "hlo": {"kind": "hlo", "path": str(Path(__file__).parent / "fixtures" / "hlo" / "mlp_dp8.hlo.txt.gz")},
}
#: a valid item for each list of tables, to which the edited key is added
LIST_ITEMS = {
    ("interconnect", "degraded_links"): {"a": [0, 0, 0], "b": [1, 0, 0], "bandwidth_frac": 0.5},
    ("interconnect", "failed_links"): {"a": [0, 0, 0], "b": [1, 0, 0]},
}


def numeric_keys(cls: type[BaseModel] = Scenario, path: tuple = ()) -> list[tuple[tuple, str]]:
    """Every (path, "int" | "float") leaf under a model; list items get index 0."""
    out = []
    for name, field in cls.model_fields.items():
        for t in _unwrap(field.annotation):
            here = (*path, name)
            if t is int or t is float:
                out.append((here, t.__name__))
            elif isinstance(t, type) and issubclass(t, BaseModel):
                out += numeric_keys(t, here)
            elif typing.get_origin(t) is list:
                (item,) = typing.get_args(t)
                for it in _unwrap(item):
                    if it is int or it is float:
                        out.append(((*here, 0), it.__name__))
                    elif isinstance(it, type) and issubclass(it, BaseModel):
                        out += numeric_keys(it, (*here, 0))
    return sorted(set(out))


NUMERIC = numeric_keys()


def with_value(path: tuple, value) -> dict:
    """BASE with ``value`` at ``path`` (the model swapped to the path's kind; lists made valid)."""
    raw = copy.deepcopy(BASE)
    if path[0] == "model":
        kind = next(k for k, m in MODELS.items() if path[1] in _model_cls(k).model_fields)
        raw["model"] = copy.deepcopy(MODELS[kind])
    _put(raw, path, value, ())
    return raw


def _put(node: dict, path: tuple, value, done: tuple) -> None:
    part, rest = path[0], path[1:]
    if not rest:
        node[part] = value
    elif isinstance(rest[0], int):  # a list: keep (or make) a valid first item and edit it
        items = copy.deepcopy(node.get(part) or [LIST_ITEMS.get((*done, part), {})])
        if len(rest) == 1:
            items[0] = value
        else:
            _put(items[0], rest[1:], value, (*done, part, 0))
        node[part] = items
    else:
        _put(node.setdefault(part, {}), rest, value, (*done, part))


def _model_cls(kind: str) -> type[BaseModel]:
    from engine.scenario import HloModel, MlpModel, ResNet50Model, TransformerModel

    return {"mlp": MlpModel, "resnet50": ResNet50Model, "transformer": TransformerModel, "hlo": HloModel}[kind]


def test_the_walk_finds_every_section():
    sections = {p[0] for p, _ in NUMERIC}
    expected = {"pod", "model", "training", "parallelism", "sim", "interconnect", "input", "compile", "stragglers", "failures"}
    assert expected <= sections
    assert (("training", "steps"), "int") in NUMERIC
    assert (("interconnect", "degraded_links", 0, "bandwidth_frac"), "float") in NUMERIC


@pytest.mark.parametrize("path, kind", NUMERIC, ids=[".".join(map(str, p)) for p, _ in NUMERIC])
@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_never_a_number(path, kind, value):
    dotted = ".".join(map(str, path))
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(with_value(path, value), "bools.toml")
    problems = dict(err.value.problems)
    assert dotted in problems, err.value.problems
    word = "an integer" if kind == "int" else "a number"
    example = "8" if kind == "int" else "0.5 or 2"
    assert problems[dotted] == f"expected {word}, e.g. {example}; got {str(value).lower()} (a boolean)"
    assert "bools.toml" in str(err.value)


@pytest.mark.parametrize("path, kind", NUMERIC, ids=[".".join(map(str, p)) for p, _ in NUMERIC])
def test_a_quoted_number_is_a_string(path, kind):
    dotted = ".".join(map(str, path))
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(with_value(path, "2"), "strings.toml")
    assert dict(err.value.problems)[dotted].endswith('got "2" (a string; write the number without quotes)')


def test_integers_still_fill_float_fields_and_floats_do_not_fill_integers(write_toml):
    s = load_scenario(write_toml(SMALL_TOML + "jitter_frac = 0\n[input]\nsample_bytes = 100000\n"))
    assert s.sim.jitter_frac == 0.0 and isinstance(s.sim.jitter_frac, float)
    assert s.input.sample_bytes == 100000.0
    with pytest.raises(ScenarioError, match=r"training\.steps: expected an integer, e\.g\. 8; got 20\.0 \(a float\)"):
        load_scenario(write_toml(SMALL_TOML.replace("steps = 20", "steps = 20.0")))


def test_a_toml_file_with_true_for_steps_names_file_and_key(write_toml):
    path = write_toml(SMALL_TOML.replace("steps = 20", "steps = true"))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(path) in str(err.value) and "training.steps: expected an integer, e.g. 8; got true (a boolean)" in str(err.value)


def test_booleans_and_numbers_are_not_each_other():
    with pytest.raises(ScenarioError, match=r"interconnect\.overlap: expected true or false; got 1"):
        scenario_from_dict({**BASE, "interconnect": {"overlap": 1}}, "b.toml")
    with pytest.raises(ScenarioError, match=r"pod\.chip: expected a string in quotes; got 4"):
        scenario_from_dict({**BASE, "pod": {**BASE["pod"], "chip": 4}}, "b.toml")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(NUMERIC), st.one_of(st.booleans(), st.text(max_size=6)))
def test_no_bool_or_string_loads_as_a_number(leaf, value):
    path, _ = leaf
    with pytest.raises(ScenarioError):
        scenario_from_dict(with_value(path, value), "fuzz.toml")


@pytest.mark.parametrize("name, value", [("ici_links_per_chip", True), ("torus_dims", True), ("host_shape", [True, 2])])
def test_catalog_rejects_booleans_for_counts(tmp_path, name, value):
    from tests.test_bad_input import _toml_value
    from engine.pod.catalog import DEFAULT_CATALOG_PATH

    raw = tomllib.loads(DEFAULT_CATALOG_PATH.read_text())
    raw["tpu-v4"][name] = value
    lines = []
    for chip, table in raw.items():
        lines += [f"[{chip}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    path = tmp_path / "chips.toml"
    path.write_text("\n".join(lines))
    with pytest.raises(ScenarioError) as err:
        load_catalog(path)
    assert f"tpu-v4.{name}" in dict(err.value.problems)


def test_sweep_files_reject_booleans_for_counts(tmp_path):
    from profiler.sweep import load_sweep

    (tmp_path / "base.toml").write_text(SMALL_TOML)
    (tmp_path / "s.toml").write_text('name = "s"\nbase = "base.toml"\n[random]\nsamples = true\n')
    with pytest.raises(ScenarioError, match=r"random\.samples"):
        load_sweep(tmp_path / "s.toml")
