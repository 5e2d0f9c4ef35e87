"""Chip and host failures and checkpoints: why wall time exceeds step time.

Failures arrive as a Poisson process whose rate is ``chips / chip_mtbf +
hosts / host_mtbf`` (exponential inter-failure times, the usual MTBF model),
evaluated per step from the step's length, plus any ``fail_at_steps``. A failure
in step ``i`` (after its compute, before its checkpoint) costs, on every chip:

* ``other``: re-provision (``restart_s``) + restore (checkpoint bytes over the
  hosts' read bandwidth);
* ``recompile``: one compile of the step program (the in-memory cache is lost);
* ``other``: re-executing every step since the last checkpoint, ``i`` included.

Checkpoints are written after every ``checkpoint_every_steps``-th step, blocking
the step (``other``), at checkpoint bytes over the hosts' write bandwidth. By
default a checkpoint holds the stored weights (in ``training.weight_dtype``) and the
optimizer state.

Goodput = (wall time - compiles - checkpoint writes - restarts - re-executed
work) / wall time: the share of wall time that advanced training (input waits
and collectives stay inside it; they are reported by the breakdown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FailureSection",
    "FailurePlan",
    "checkpoint_steps",
    "checkpoint_write_s",
    "plan_failures",
    "failure_rate_per_s",
    "young_interval_s",
    "expected_goodput",
]

_HOUR_S = 3600.0


class FailureSection(BaseModel):
    """``[failures]``: failure rates, checkpoints and restart costs."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # as engine/scenario/sections.py Section

    chip_mtbf_hours: Annotated[float, Field(gt=0)] | None = None
    host_mtbf_hours: Annotated[float, Field(gt=0)] | None = None
    fail_at_steps: list[Annotated[int, Field(ge=0)]] = []
    checkpoint_every_steps: Annotated[int, Field(ge=0)] = 0  # 0: never
    checkpoint_bytes: Annotated[float, Field(ge=0)] | None = None  # None: stored weights + optimizer state
    storage_write_bytes_per_s_per_host: Annotated[float, Field(gt=0)] = 1e9
    storage_read_bytes_per_s_per_host: Annotated[float, Field(gt=0)] = 2e9
    restart_s: Annotated[float, Field(ge=0)] = 120.0  # re-provision and re-initialise (prior)


def checkpoint_steps(section: FailureSection | None, steps: int) -> np.ndarray:
    """(steps,) bool: a checkpoint is written after this step."""
    if section is None or section.checkpoint_every_steps == 0:
        return np.zeros(steps, dtype=bool)
    return (np.arange(steps) + 1) % section.checkpoint_every_steps == 0


@dataclass(frozen=True)
class FailurePlan:
    """Extra seconds per step, by what they are spent on."""

    checkpoint_s: np.ndarray  # (steps,) checkpoint write after the step
    restart_s: np.ndarray  # (steps,) re-provision + restore
    recompile_s: np.ndarray  # (steps,) compile after the restart
    lost_s: np.ndarray  # (steps,) re-executed work since the last checkpoint
    failed_steps: np.ndarray  # step ids with a failure
    lost_steps: int


def failure_rate_per_s(section: FailureSection, chips: int, hosts: int) -> float:
    """Job failure rate: any chip or host failing stops a synchronous job (rates add)."""
    rate = 0.0
    if section.chip_mtbf_hours:
        rate += chips / (section.chip_mtbf_hours * _HOUR_S)
    if section.host_mtbf_hours:
        rate += hosts / (section.host_mtbf_hours * _HOUR_S)
    return rate


def young_interval_s(checkpoint_write_s: float, rate_per_s: float) -> float | None:
    """Optimal seconds of work between checkpoints, sqrt(2 x write time x job MTBF).

    Young 1974, "A first order approximation to the optimum checkpoint interval" (CACM 17(9)).
    None when nothing fails or checkpoints are free.
    """
    if rate_per_s <= 0 or checkpoint_write_s <= 0:
        return None
    return float(np.sqrt(2.0 * checkpoint_write_s / rate_per_s))


def expected_goodput(interval_s: float, checkpoint_write_s: float, recovery_s: float, rate_per_s: float) -> float:
    """Long-run goodput, first order: per checkpoint period of ``interval_s`` useful seconds,
    wall = interval + write + (failures in the period) x (recovery + half a period redone).
    """
    period = interval_s + checkpoint_write_s
    wall = period + rate_per_s * period * (recovery_s + period / 2.0)
    return interval_s / wall if wall > 0 else 1.0


def checkpoint_write_s(section: FailureSection, checkpoint_bytes: float, hosts: int) -> float:
    """Each host writes its share in parallel."""
    return checkpoint_bytes / (hosts * section.storage_write_bytes_per_s_per_host)


def plan_failures(
    section: FailureSection | None,
    *,
    step_s: np.ndarray,
    chips: int,
    hosts: int,
    default_checkpoint_bytes: float,
    program_compile_s: float,
    rng: np.random.Generator,
) -> FailurePlan:
    """Draw failures and cost checkpoints, restarts and lost work.

    Parameters
    ----------
    step_s
        (steps,) step lengths before failures (re-executed work is costed from them).
    default_checkpoint_bytes
        Checkpoint size when the section does not give one.
    program_compile_s
        One compile of the step program (0 without jit).
    """
    steps = len(step_s)
    zeros = np.zeros(steps)
    if section is None:
        return FailurePlan(zeros, zeros, zeros, zeros, np.zeros(0, dtype=np.int64), 0)
    ckpt_bytes = section.checkpoint_bytes if section.checkpoint_bytes is not None else default_checkpoint_bytes
    is_ckpt = checkpoint_steps(section, steps)
    checkpoint_s = np.where(is_ckpt, checkpoint_write_s(section, ckpt_bytes, hosts), 0.0)
    rate_per_s = failure_rate_per_s(section, chips, hosts)
    p_fail = -np.expm1(-rate_per_s * step_s)  # P(at least one failure during the step)
    failed = rng.random(steps) < p_fail
    failed[[s for s in section.fail_at_steps if s < steps]] = True
    failed_steps = np.flatnonzero(failed)
    # Steps since the last durable checkpoint: last checkpoint j < i, lost = j+1 .. i.
    ckpt_idx = np.concatenate([[-1], np.flatnonzero(is_ckpt)])  # -1: "before step 0" (start from scratch)
    last_ckpt = ckpt_idx[np.searchsorted(ckpt_idx, failed_steps, side="left") - 1]
    cum = np.concatenate([[0.0], np.cumsum(step_s)])
    lost_s = zeros.copy()
    lost_s[failed_steps] = cum[failed_steps + 1] - cum[last_ckpt + 1]
    restart_s = zeros.copy()
    # Restore reads the last checkpoint; a failure before the first one restarts from scratch.
    restore_s = np.where(last_ckpt >= 0, ckpt_bytes / (hosts * section.storage_read_bytes_per_s_per_host), 0.0)
    restart_s[failed_steps] = section.restart_s + restore_s
    recompile_s = zeros.copy()
    recompile_s[failed_steps] = program_compile_s
    return FailurePlan(
        checkpoint_s=checkpoint_s,
        restart_s=restart_s,
        recompile_s=recompile_s,
        lost_s=lost_s,
        failed_steps=failed_steps,
        lost_steps=int((failed_steps - last_ckpt).sum()),
    )
