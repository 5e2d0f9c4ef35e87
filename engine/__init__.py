"""Podscope engine: scenario -> simulated per-chip trace tables (numpy, networkx, pyarrow); it reads only its data files."""

from .errors import (
    InputError,
    PathNotAllowedError,
    PlanError,
    PodscopeError,
    ProfilerError,
    ReferenceFileError,
    RunNotFoundError,
    ScenarioError,
    SimulationError,
    TopologyError,
    TraceImportError,
)
from .model.models import ModelCost, model_cost
from .model.step import Segment
from .pod.catalog import ChipSpec, load_catalog
from .pod.topology import Pod, build_pod
from .scenario import Scenario, apply_overrides, load_scenario, scenario_from_dict
from .scenario.calibration import Calibration, load_calibration
from .simulate import simulate
from .trace import EVENT_KINDS, RunFacts, RunResult, Trace

__all__ = [
    "Calibration",
    "ChipSpec",
    "EVENT_KINDS",
    "InputError",
    "ModelCost",
    "PathNotAllowedError",
    "PlanError",
    "Pod",
    "PodscopeError",
    "ProfilerError",
    "RunFacts",
    "RunNotFoundError",
    "ReferenceFileError",
    "RunResult",
    "Scenario",
    "ScenarioError",
    "Segment",
    "SimulationError",
    "TopologyError",
    "Trace",
    "TraceImportError",
    "apply_overrides",
    "build_pod",
    "load_calibration",
    "load_catalog",
    "load_scenario",
    "model_cost",
    "scenario_from_dict",
    "simulate",
]
