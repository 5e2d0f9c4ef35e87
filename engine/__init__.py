"""Podscope engine: scenario -> simulated per-chip trace tables (numpy, networkx, pyarrow); it reads only its data files."""

from .calibration import Calibration, load_calibration
from .catalog import ChipSpec, load_catalog
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
from .models import ModelCost, model_cost
from .scenario import Scenario, apply_overrides, load_scenario, scenario_from_dict
from .simulate import simulate
from .step import Segment
from .topology import Pod, build_pod
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
