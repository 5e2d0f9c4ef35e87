"""Scenario files: TOML in, frozen validated objects out; and the calibrated parameters read beside them.

:mod:`~engine.scenario.sections` and :mod:`~engine.scenario.model_sections` declare the tables,
:mod:`~engine.scenario.scenario` assembles them into the :class:`Scenario`,
:mod:`~engine.scenario.validation` checks what needs more than one field, and
:mod:`~engine.scenario.loading` reads files, applies overrides and raises one ``ScenarioError``.
"""

from .calibration import DEFAULT_CALIBRATION_PATH, Calibration, load_calibration
from .loading import (
    MAX_SCENARIO_BYTES,
    MAX_TOML_DEPTH,
    apply_overrides,
    load_scenario,
    parse_toml,
    scenario_from_dict,
    with_parallelism,
)
from .model_sections import HloModel, MlpModel, ResNet50Model, TransformerModel
from .scenario import Scenario
from .sections import (
    DEFAULT_SAMPLE_CHIPS,
    DegradedLink,
    InterconnectSection,
    LinkRef,
    MeshAxisName,
    ParallelismSection,
    ParameterServerSection,
    PodSection,
    SimSection,
    TrainingSection,
    parse_topology,
)
from .validation import MAX_CHIP_STEPS, MAX_POD_CHIPS, MAX_SUMMARY_CHIP_STEPS

__all__ = [
    "Scenario",
    "with_parallelism",
    "PodSection",
    "MlpModel",
    "ResNet50Model",
    "TransformerModel",
    "HloModel",
    "TrainingSection",
    "ParallelismSection",
    "ParameterServerSection",
    "SimSection",
    "InterconnectSection",
    "LinkRef",
    "DegradedLink",
    "MeshAxisName",
    "DEFAULT_SAMPLE_CHIPS",
    "MAX_CHIP_STEPS",
    "MAX_POD_CHIPS",
    "MAX_SCENARIO_BYTES",
    "MAX_SUMMARY_CHIP_STEPS",
    "MAX_TOML_DEPTH",
    "load_scenario",
    "scenario_from_dict",
    "apply_overrides",
    "parse_toml",
    "parse_topology",
    "Calibration",
    "load_calibration",
    "DEFAULT_CALIBRATION_PATH",
]
