"""Why chips idle: the input pipeline, XLA compilation, stragglers, and failures with checkpoints.

The package exports each cause, whose scenario section the scenario room reads.
:mod:`~engine.idle.plan` combines them into a step plan; it stands on the model and memory
rooms, which stand on the scenario, so it is imported by its path.
"""

from .compilation import (
    CompileCostParams,
    CompilePlan,
    CompileSection,
    compile_time_s,
    eager_fwd_bwd_s,
    load_compile_cost,
    plan_compiles,
    step_signatures,
)
from .failures import (
    FailurePlan,
    FailureSection,
    checkpoint_steps,
    checkpoint_write_s,
    expected_goodput,
    failure_rate_per_s,
    plan_failures,
    young_interval_s,
)
from .input_pipeline import (
    AUTOTUNE_PREFETCH_BATCHES,
    InputPlan,
    InputSection,
    batch_production_s,
    run_input_queue,
    step_lengths_s,
)
from .stragglers import StragglerSection, straggler_factors

__all__ = [
    "InputSection",
    "InputPlan",
    "AUTOTUNE_PREFETCH_BATCHES",
    "batch_production_s",
    "run_input_queue",
    "step_lengths_s",
    "CompileSection",
    "CompileCostParams",
    "CompilePlan",
    "load_compile_cost",
    "compile_time_s",
    "step_signatures",
    "plan_compiles",
    "eager_fwd_bwd_s",
    "StragglerSection",
    "straggler_factors",
    "FailureSection",
    "FailurePlan",
    "checkpoint_steps",
    "checkpoint_write_s",
    "plan_failures",
    "failure_rate_per_s",
    "young_interval_s",
    "expected_goodput",
]
