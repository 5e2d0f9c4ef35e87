"""What fills HBM: model states, activations and temporaries through one training step."""

# The room's API is its modules' own ``__all__``, declared once there.
from . import activations as _activations
from . import hbm as _hbm
from . import layout as _layout
from . import oom as _oom
from . import states as _states
from .activations import *  # noqa: F403
from .hbm import *  # noqa: F403
from .layout import *  # noqa: F403
from .oom import *  # noqa: F403
from .states import *  # noqa: F403

__all__ = [*_activations.__all__, *_hbm.__all__, *_layout.__all__, *_oom.__all__, *_states.__all__]
