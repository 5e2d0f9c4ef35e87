"""What fills HBM: model states, activations and temporaries through one training step."""

# The room's API is its modules' own ``__all__``, declared once there.
from . import hbm as _hbm
from .hbm import *  # noqa: F403

__all__ = [*_hbm.__all__]
