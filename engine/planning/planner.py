"""Plan files: which configurations of a job to search, and what "best" means.

A plan names a base scenario (a file relative to the plan, or an inline ``[base]``
table) and a ``[search]`` table::

    base = "my-job.toml"
    [search]
    objective = "tokens_per_s_per_chip"   # see OBJECTIVES
    mesh = "auto"                         # "auto": every factorisation of each slice; "fixed": the base's
    max_chips = 512                       # optional chip budget (min_chips too)
    hbm_fit = "range"                     # optional: "peak" (default) or the compiler range's top within HBM
    "pod.topology" = ["4x4x4", "4x4x8"]   # any dotted scenario key -> a non-empty list of values
    "training.remat" = ["none", "full"]

Everything is checked at load, every problem collected with its key and reported
through one :class:`~engine.errors.PlanError` naming the file, before any candidate
is costed. The search itself is :mod:`engine.planning.search`.
"""

from __future__ import annotations

import copy
import json
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import PlanError, ScenarioError
from ..model.models import model_cost
from ..pod.mesh import MESH_AXES
from ..scenario import MAX_SCENARIO_BYTES, Scenario, load_scenario, scenario_from_dict

__all__ = ["OBJECTIVES", "MESH_MODES", "HBM_FITS", "Plan", "load_plan", "plan_from_dict", "is_scenario_key", "scenario_to_toml"]

#: objective -> (summary quantity, per chip, maximised)
OBJECTIVES: dict[str, tuple[str, bool, bool]] = {
    "tokens_per_s": ("tokens_per_s", False, True),
    "tokens_per_s_per_chip": ("tokens_per_s", True, True),
    "samples_per_s": ("samples_per_s", False, True),
    "samples_per_s_per_chip": ("samples_per_s", True, True),
    "step_time_s": ("step_time_s", False, False),
    # to the base's [convergence] target (engine/convergence): the wall time, or the chip-hours
    # (priced at [cost] usd_per_chip_hour when given: the same order, since the price is one number)
    "time_to_train": ("time_to_train_s", False, False),
    "cost_to_train": ("chip_hours", False, False),
}
#: objectives and limits that need the base's [convergence] section
_NEEDS_CONVERGENCE = ("time_to_train", "cost_to_train")
MESH_MODES = ("auto", "fixed")
_SEARCH_KEYS = {"objective", "mesh", "max_chips", "min_chips", "max_time_to_train_s", "max_cost_usd", "hbm_fit"}
#: what fits in HBM: Podscope's peak within the usable HBM ("peak"), or the top of the 80% range of the TPU
#: compiler's peak around it ("range": the search is given that range's factor, profiler.plan.run_plan)
HBM_FITS = ("peak", "range")
#: values a knob list may hold (TOML scalars; a knob sets one scenario value)
_SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class Plan:
    """A validated plan: the base scenario, the knobs to vary and the objective."""

    source: str
    base: Scenario
    base_raw: dict[str, Any]  # the base scenario as a plain dict (what knobs are applied to)
    objective: str = "tokens_per_s_per_chip"
    mesh: str = "auto"
    knobs: dict[str, list[Any]] = field(default_factory=dict)
    max_chips: int | None = None
    min_chips: int | None = None
    max_time_to_train_s: float | None = None  # a deadline: slower candidates are infeasible
    max_cost_usd: float | None = None  # a budget: dearer candidates are infeasible
    hbm_fit: str = "peak"  # one of HBM_FITS

    @property
    def space_size(self) -> int:
        """Knob combinations (each is searched over every mesh when ``mesh = "auto"``)."""
        n = 1
        for values in self.knobs.values():
            n *= len(values)
        return n


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types an annotation allows (Optional, Union, Annotated unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _unwrap(a)]
    return [annotation]


def is_scenario_key(dotted: str) -> bool:
    """Whether ``dotted`` (``"pod.topology"``, ``"model.layers"``) names a scenario field."""
    models: list[Any] = [Scenario]
    for part in dotted.split("."):
        nxt: list[Any] = []
        for m in models:
            if isinstance(m, type) and issubclass(m, BaseModel) and part in m.model_fields:
                nxt += _unwrap(m.model_fields[part].annotation)
        if not nxt:
            return False
        models = nxt
    return True


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SCENARIO_BYTES + 1)
    except OSError as e:
        raise PlanError(str(path), [("", f"cannot read file: {e.strerror or e}")]) from None
    if len(data) > MAX_SCENARIO_BYTES:
        raise PlanError(str(path), [("", f"larger than {MAX_SCENARIO_BYTES // 1024} KiB; a plan is a few lines of TOML")])
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise PlanError(str(path), [("", f"malformed TOML: {e}")]) from None


def load_plan(path: str | Path) -> Plan:
    """Load and validate a plan file (the base scenario file is relative to it).

    Raises
    ------
    PlanError
        Naming the file and every bad key: unknown keys, empty or non-list knob values,
        dotted keys that are not scenario keys, a base that does not load.
    """
    path = Path(path)
    return plan_from_dict(_read_toml(path), source=str(path), base_dir=path.parent)


def _load_base(raw: Mapping[str, Any], source: str, base_dir: Path) -> tuple[Scenario, dict[str, Any]]:
    base = raw.get("base")
    if isinstance(base, str):
        path = base_dir / base  # an absolute base stays absolute
        try:
            scenario = load_scenario(path)
        except ScenarioError as e:
            raise PlanError(source, [("base", f"the base scenario {base!r} does not load: {e}")]) from None
        return scenario, scenario.to_dict()
    if isinstance(base, Mapping):
        data = copy.deepcopy(dict(base))
        data.setdefault("name", Path(source).stem)
        try:
            scenario = scenario_from_dict(data, source=f"{source} [base]")
        except ScenarioError as e:
            raise PlanError(source, [("base", f"the inline base scenario is invalid: {e}")]) from None
        return scenario, scenario.to_dict()
    if base is None:
        raise PlanError(source, [("base", "missing; give a scenario file (base = \"my-job.toml\") or an inline [base] table")])
    raise PlanError(source, [("base", f"expected a file name or a table, got {type(base).__name__}")])


def plan_from_dict(raw: Mapping[str, Any], source: str = "<plan>", base_dir: Path | str = ".") -> Plan:
    """Validate a plan given as a dict (as parsed from TOML); see :func:`load_plan`."""
    problems: list[tuple[str, str]] = []
    for key in raw:
        if key not in ("base", "search"):
            problems.append((key, "unknown key; a plan has `base` and a [search] table"))
    search = raw.get("search", {})
    if not isinstance(search, Mapping):
        problems.append(("search", f"expected a table, got {type(search).__name__}"))
        search = {}
    try:
        base, base_raw = _load_base(raw, source, Path(base_dir))
    except PlanError as e:  # report it with the plan's own problems below
        problems += e.problems
        base, base_raw = None, {}

    if base is not None and base.model.kind == "hlo":
        problems.append(("base", "an HLO module fixes its model and mesh; the planner searches the built-in model families "
                         "(transformer, resnet50, mlp)"))
        base = None
    objective = search.get("objective", "tokens_per_s_per_chip")
    if objective not in OBJECTIVES:
        problems.append(("search.objective", f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}"))
    elif base is not None and OBJECTIVES[objective][0] == "tokens_per_s" and not model_cost(base.model).tokens_per_sample:
        problems.append(("search.objective", f"{objective} needs a model with tokens (a transformer); "
                         f"the base is a {base.model.kind} model; valid: samples_per_s, samples_per_s_per_chip, step_time_s"))
    trained = base is not None and base.convergence is not None
    if objective in _NEEDS_CONVERGENCE and base is not None and not trained:
        problems.append(("search.objective", f"{objective} needs a target: add a [convergence] section to the base "
                         "(docs/scenarios.md); valid without one: " + ", ".join(k for k in OBJECTIVES if k not in _NEEDS_CONVERGENCE)))
    bounds: dict[str, float | None] = {}
    for key in ("max_time_to_train_s", "max_cost_usd"):
        value = search.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            problems.append((f"search.{key}", f"expected a number > 0, got {value!r}"))
            value = None
        elif value is not None and base is not None and not trained:
            problems.append((f"search.{key}", "a limit on the time or cost to train needs a [convergence] section in the base"))
        elif value is not None and key == "max_cost_usd" and base is not None and base.cost is None:
            problems.append((f"search.{key}", "a cost limit needs a price: add [cost] usd_per_chip_hour to the base"))
        bounds[key] = float(value) if value is not None else None
    hbm_fit = search.get("hbm_fit", "peak")
    if hbm_fit not in HBM_FITS:
        problems.append(("search.hbm_fit", f"unknown value {hbm_fit!r}; valid: {', '.join(HBM_FITS)}"))
    mesh = search.get("mesh", "auto")
    if mesh not in MESH_MODES:
        problems.append(("search.mesh", f"unknown mesh mode {mesh!r}; valid: {', '.join(MESH_MODES)}"))
    limits: dict[str, int | None] = {}
    for key in ("max_chips", "min_chips"):
        value = search.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append((f"search.{key}", f"expected a positive integer, got {value!r}"))
            value = None
        limits[key] = value
    knobs: dict[str, list[Any]] = {}
    for key, values in search.items():
        if key in _SEARCH_KEYS:
            continue
        where = f"search.{key}" if "." not in key else f'search."{key}"'
        if "." not in key:
            problems.append((where, f"unknown key; valid: {', '.join(sorted(_SEARCH_KEYS))}, or a dotted scenario key "
                             "such as \"pod.topology\" with a list of values"))
        elif not is_scenario_key(key):
            problems.append((where, "not a scenario key (see docs/scenarios.md); e.g. \"pod.topology\", \"training.remat\""))
        elif mesh == "auto" and key.split(".")[0] == "parallelism" and key.split(".")[1] in (*MESH_AXES, "mapping"):
            problems.append((where, "the mesh is searched (mesh = \"auto\"); set mesh = \"fixed\" to vary mesh axes by hand"))
        elif not isinstance(values, list):
            problems.append((where, f"expected a list of values, got {type(values).__name__}"))
        elif not values:
            problems.append((where, "empty list; give at least one value"))
        elif not all(isinstance(v, _SCALARS) for v in values):
            problems.append((where, "values must be strings, numbers or booleans"))
        elif len(set(map(repr, values))) != len(values):
            problems.append((where, "repeated values; give each value once"))
        else:
            knobs[key] = list(values)
    if problems or base is None:
        raise PlanError(source, problems)
    return Plan(source, base, base_raw, objective, mesh, knobs, limits["max_chips"], limits["min_chips"],
                bounds["max_time_to_train_s"], bounds["max_cost_usd"], hbm_fit)  # fmt: skip


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items() if x is not None) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def scenario_to_toml(scenario: Mapping[str, Any]) -> str:
    """A scenario dict (``Scenario.to_dict()``) as TOML text that ``load_scenario`` reads back to the same scenario.

    Top-level scalars first, then one table per section; unset (None) values are left out.
    """
    lines = [f"{k} = {_toml_value(v)}" for k, v in scenario.items() if not isinstance(v, Mapping) and v is not None]
    for section, table in scenario.items():
        if isinstance(table, Mapping):
            lines += ["", f"[{section}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"
