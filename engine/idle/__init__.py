"""Why chips idle: the input pipeline, XLA compilation, stragglers, and failures with checkpoints.

The package exports each cause, whose scenario section the scenario room reads.
:mod:`~engine.idle.plan` combines them into a step plan; it stands on the model and memory
rooms, which stand on the scenario, so it is imported by its path.
"""

# The room's API is its modules' own ``__all__``, declared once there.
from . import input_pipeline as _input_pipeline
from . import compilation as _compilation
from . import stragglers as _stragglers
from . import failures as _failures
from .input_pipeline import *  # noqa: F403
from .compilation import *  # noqa: F403
from .stragglers import *  # noqa: F403
from .failures import *  # noqa: F403

__all__ = [*_input_pipeline.__all__, *_compilation.__all__, *_stragglers.__all__, *_failures.__all__]
