"""Planning: plan files, and the search over slices, meshes and knobs for the best configuration."""

from .planner import MESH_MODES, OBJECTIVES, Plan, is_scenario_key, load_plan, plan_from_dict, scenario_to_toml
from .search import REASONS, SEARCH_AXES, Candidate, PlanResult, mesh_factorisations, search, search_axes

__all__ = [
    "OBJECTIVES",
    "MESH_MODES",
    "Plan",
    "load_plan",
    "plan_from_dict",
    "is_scenario_key",
    "scenario_to_toml",
    "SEARCH_AXES",
    "search_axes",
    "REASONS",
    "Candidate",
    "PlanResult",
    "mesh_factorisations",
    "search",
]
