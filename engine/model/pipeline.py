"""Pipeline parallelism and gradient accumulation: microbatches, schedules, bubbles, in-flight activations.

``pipeline`` stages each hold ``layers / pipeline`` consecutive layers; the per-chip
batch is cut into ``microbatches`` that flow through the stages. A stage computes
``microbatches`` forward and backward passes of its layers; before its first and
after its last it waits for the pipeline to fill and drain, the **bubble**:

* GPipe (Huang et al. 2019) and 1F1B (PipeDream-Flush, Narayanan et al. 2021):
  ``(P - 1)`` microbatch-stage times out of ``M + P - 1``, i.e. a bubble fraction of
  ``(P - 1) / (M + P - 1)`` of the pipelined time;
* interleaved 1F1B (Narayanan et al. 2021, sec. 2.2): each chip holds ``V`` virtual
  stages of ``1 / V`` the layers, so the fill and drain last ``1 / V`` as long,
  ``(P - 1) / (V M + P - 1)``, at ``V`` times the stage-to-stage sends.

Stage ``s`` waits ``s`` slots while the pipeline fills and ``P - 1 - s`` while it
drains (a slot: one microbatch's forward + backward of one virtual stage), so the
Timeline shows the staircase. Activations in flight on the busiest stage (the
first): GPipe as MaxText runs it (one SPMD loop of ``M + P - 1`` iterations in which every stage
computes, layers/pipeline.py) keeps every iteration's, ``M + P - 1``; 1F1B at most ``P``;
interleaved ``P (1 + (P - 1) / (P V))`` virtual-stage microbatches
(Narayanan et al. 2021, sec. 2.2; Korthikanti et al. 2022, sec. 4.2.3).

Without a pipeline, ``microbatches > 1`` is gradient accumulation: the chip runs
``M`` forward/backward passes of ``b / M`` samples (each pays its own per-op fixed
costs and weight reads), holds one microbatch's activations plus an fp32 gradient
accumulator, and synchronises gradients once per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PipelinePlan", "plan_pipeline", "bubble_fraction", "in_flight_microbatches"]


def bubble_fraction(stages: int, microbatches: int, schedule: str, virtual_stages: int = 1) -> float:
    """Share of the pipelined time a stage sits in the bubble (known answers in the module docstring)."""
    v = virtual_stages if schedule == "interleaved" else 1
    return (stages - 1) / (v * microbatches + stages - 1)


def in_flight_microbatches(stages: int, microbatches: int, schedule: str, virtual_stages: int = 1) -> float:
    """Microbatches whose activations the first stage holds at once, in units of its whole layer share."""
    if stages <= 1:
        return 1.0
    if schedule == "gpipe":  # MaxText's loop: every stage computes and keeps all microbatches + stages - 1 iterations
        return float(microbatches + stages - 1)
    if schedule == "interleaved":
        return min(float(microbatches), stages * (1.0 + (stages - 1) / (stages * virtual_stages)))
    return float(min(microbatches, stages))


@dataclass(frozen=True)
class PipelinePlan:
    """Per-chip pipeline timing of one step (seconds)."""

    stages: int
    microbatches: int
    schedule: str
    virtual_stages: int
    fill_s: np.ndarray  # (chips,) bubble before the chip's first microbatch
    drain_s: np.ndarray  # (chips,) bubble after its last
    send_s: float  # exposed stage-to-stage sends of the step (fill and drain critical path)
    send_bytes: float  # one activation (or its gradient) sent between stages, bytes
    over_dcn: bool

    @property
    def bubble_frac(self) -> float:
        return bubble_fraction(self.stages, self.microbatches, self.schedule, self.virtual_stages)


def plan_pipeline(
    stage_of_chip: np.ndarray,
    stages: int,
    microbatches: int,
    schedule: str,
    virtual_stages: int,
    slot_s: float,
    send_bytes: float,
    send_s: float,
    over_dcn: bool,
) -> PipelinePlan:
    """The bubble around each chip's microbatches and the sends on the critical path.

    Parameters
    ----------
    stage_of_chip
        Each chip's stage, 0 .. stages-1.
    slot_s
        One microbatch's forward + backward through one stage's whole layer share, seconds
        (a virtual stage's slot is ``slot_s / V``).
    send_s
        The sends on the critical path: the first activation crosses every boundary of every
        virtual stage forward, its gradient back (``2 (P V - 1)`` sends of ``send_bytes``).
    """
    v = virtual_stages if schedule == "interleaved" else 1
    slot = slot_s / v
    stage = np.asarray(stage_of_chip, dtype=np.float64)
    return PipelinePlan(
        stages, microbatches, schedule, v, stage * slot, (stages - 1 - stage) * slot, send_s, send_bytes, over_dcn
    )
