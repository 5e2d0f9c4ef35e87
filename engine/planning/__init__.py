"""Planning: plan files, and the search over slices, meshes and knobs for the best configuration."""

# The room's API is its modules' own ``__all__``, declared once there.
from . import planner as _planner
from . import search as _search
from .planner import *  # noqa: F403
from .search import *  # noqa: F403

__all__ = [*_planner.__all__, *_search.__all__]
