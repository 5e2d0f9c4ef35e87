"""Scenario files: TOML in, frozen validated objects out.

A scenario is parsed into pydantic models that reject unknown keys, then checked
against the hardware catalog (chip exists, topology fits, mesh product matches
chips). Every problem is collected with its dotted key path and reported at once
through a single :class:`~engine.errors.ScenarioError` naming the file.

New scenario sections (input pipeline, compilation, faults, ...) slot in as extra
optional fields on :class:`~engine.scenario.scenario.Scenario` with defaults, so older
files stay valid.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ScenarioError
from .model_sections import HLO_FIXED_TRAINING, HLO_MODEL_KEYS, HLO_UNSUPPORTED_SECTIONS
from .scenario import Scenario
from .sections import ParallelismSection
from .validation import semantic_problems
from .validation_messages import problem_from_error

__all__ = [
    "MAX_SCENARIO_BYTES",
    "MAX_TOML_DEPTH",
    "parse_toml",
    "scenario_from_dict",
    "with_parallelism",
    "apply_overrides",
    "load_scenario",
]


#: largest scenario file read; real ones are under 2 KiB
MAX_SCENARIO_BYTES = 1024 * 1024

#: deepest nesting of arrays and tables in a scenario or sweep file (real ones nest 3 deep)
MAX_TOML_DEPTH = 32


def _depth(value: Any) -> int:
    """Nesting depth of parsed TOML (tables and arrays), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, d + 1)
        if deepest > MAX_TOML_DEPTH:
            return deepest
        stack.extend((c, d + 1) for c in children)
    return deepest


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """Parse a scenario or sweep file's TOML, refusing nesting deeper than :data:`MAX_TOML_DEPTH`.

    Raises
    ------
    ScenarioError
        Malformed TOML, or nested too deep (the parser recurses per level: a 2 KB file of
        brackets would otherwise exhaust Python's stack).
    """
    too_deep = ScenarioError(source, [("", f"arrays or tables nested more than {MAX_TOML_DEPTH} deep; "
                                           "valid: a scenario nests sections a few levels deep")])  # fmt: skip
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(source, [("", f"malformed TOML: {e}")]) from None
    except RecursionError:
        raise too_deep from None
    if _depth(raw) > MAX_TOML_DEPTH:
        raise too_deep
    return raw


def _hlo_fixed_keys(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[tuple[str, str]]]:
    """For ``[model] kind = "hlo"``: the keys given that the module fixes (each a problem), and raw without them."""
    model = raw.get("model")
    if not isinstance(model, Mapping) or model.get("kind") != "hlo":
        return raw, []
    problems: list[tuple[str, str]] = []
    out = {k: v for k, v in raw.items() if k not in HLO_UNSUPPORTED_SECTIONS}
    for key in model:
        if key not in HLO_MODEL_KEYS:
            problems.append((f"model.{key}", "the HLO module fixes the model; remove this key (valid: kind, path, model_flops_per_step, compute_source)"))
    out["model"] = {k: v for k, v in model.items() if k in HLO_MODEL_KEYS}
    training = raw.get("training")
    if isinstance(training, Mapping):
        for key in HLO_FIXED_TRAINING:
            if key in training:
                problems.append((f"training.{key}", f"the HLO module fixes the {key}; remove this key"))
        out["training"] = {k: v for k, v in training.items() if k not in HLO_FIXED_TRAINING}
    for section in HLO_UNSUPPORTED_SECTIONS:
        value = raw.get(section)
        if section in raw and value is not None and not (isinstance(value, Mapping) and all(v is None for v in value.values())):
            why = "the HLO module fixes the mesh" if section == "parallelism" else "not simulated for an HLO model"
            problems.append((section, f"{why}; remove this section"))
    return out, problems


def scenario_from_dict(raw: Mapping[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a scenario given as a plain dict (as parsed from TOML).

    Raises
    ------
    ScenarioError
        With every problem found, each naming its dotted key.
    """
    if not isinstance(raw, Mapping):
        raise ScenarioError(source, [("", f"expected a table of sections, got {type(raw).__name__}")])
    raw, fixed = _hlo_fixed_keys(raw)
    try:
        scenario = Scenario.model_validate(dict(raw))
    except ValidationError as e:
        problems = [problem_from_error(Scenario, err) for err in e.errors()]
        raise ScenarioError(source, fixed + problems) from None
    if fixed:
        raise ScenarioError(source, fixed)
    problems = semantic_problems(scenario)
    if problems:
        raise ScenarioError(source, problems)
    return scenario


def with_parallelism(scenario: Scenario, parallelism: Mapping[str, Any], source: str = "<scenario>") -> Scenario:
    """``scenario`` with its ``[parallelism]`` table replaced, checked as :func:`scenario_from_dict` checks a whole file.

    The other sections are ``scenario``'s, valid already, so only the new table is validated field
    by field; every cross-section rule then runs on the result. The planner uses it for the many
    meshes of one configuration.

    Raises
    ------
    ScenarioError
        With every problem found, each naming its dotted key (``parallelism.tensor``).
    """
    if scenario.model.kind == "hlo":
        raise ScenarioError(source, [("parallelism", "the HLO module fixes the mesh; remove this section")])
    try:
        par = ParallelismSection.model_validate(dict(parallelism))
    except ValidationError as e:
        problems = [problem_from_error(Scenario, {**err, "loc": ("parallelism", *err["loc"])}) for err in e.errors()]
        raise ScenarioError(source, problems) from None
    out = scenario.model_copy(update={"parallelism": par})
    problems = semantic_problems(out)
    if problems:
        raise ScenarioError(source, problems)
    return out


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with dotted-key overrides applied.

    ``{"training.global_batch": 1024}`` sets ``raw["training"]["global_batch"]``.
    """
    out = copy.deepcopy(dict(raw))
    for dotted, value in overrides.items():
        node = out
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[leaf] = value
    return out


def load_scenario(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Load and validate a scenario TOML file.

    Parameters
    ----------
    path
        The TOML file. ``name`` defaults to the file stem.
    overrides
        Optional dotted-key overrides applied before validation.

    Raises
    ------
    ScenarioError
        If the file cannot be read, is not valid TOML, or fails validation.
    """
    path = Path(path)
    try:
        with path.open("rb") as f:  # bounded read: a device or a huge file must not exhaust memory
            data = f.read(MAX_SCENARIO_BYTES + 1)
        if len(data) > MAX_SCENARIO_BYTES:
            raise ScenarioError(str(path), [("", f"larger than {MAX_SCENARIO_BYTES // 1024} KiB; a scenario is a few dozen lines of TOML")])
        text = data.decode("utf-8")
    except OSError as e:
        raise ScenarioError(str(path), [("", f"cannot read file: {e.strerror or e}")]) from None
    except UnicodeDecodeError as e:
        raise ScenarioError(str(path), [("", f"not UTF-8 text: {e}")]) from None
    raw = parse_toml(text, str(path))
    raw.setdefault("name", path.stem)
    if overrides:
        raw = apply_overrides(raw, overrides)
    model = raw.get("model")
    if isinstance(model, dict) and model.get("kind") == "hlo" and isinstance(model.get("path"), str) and model["path"]:
        model["path"] = str((path.parent / model["path"]).resolve())  # relative to the scenario file
    return scenario_from_dict(raw, source=str(path))
