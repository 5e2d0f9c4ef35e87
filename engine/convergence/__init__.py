"""Convergence: how many steps a job needs to reach its target, and what that costs in time and money.

The step simulator answers "how long is one step"; this package answers "how many steps".
:mod:`.critical_batch` holds McCandlish et al.'s (2018) critical-batch model and its fit,
:mod:`.tasks` the bundled tasks fitted to MLPerf reference convergence points
(``data/convergence.toml``), :mod:`.section` the scenario's ``[convergence]`` and ``[cost]``
tables, and :mod:`.time_to_train` the sum that turns steps into wall time, chip-hours and dollars.
"""

from .critical_batch import CriticalBatch, conformal_q, fit_critical_batch, leave_one_out
from .section import ConvergenceSection, CostSection, convergence_problems
from .tasks import Task, load_tasks, tokens_per_param_default
from .time_to_train import ConvergencePlan, TimeToTrain, plan_convergence, time_to_train

__all__ = [
    "CriticalBatch",
    "ConvergencePlan",
    "ConvergenceSection",
    "CostSection",
    "Task",
    "TimeToTrain",
    "conformal_q",
    "convergence_problems",
    "fit_critical_batch",
    "leave_one_out",
    "load_tasks",
    "plan_convergence",
    "time_to_train",
    "tokens_per_param_default",
]
