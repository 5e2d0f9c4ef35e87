"""The interconnect: what collectives cost on the torus (ICI) and across slices (DCN).

Layered one way, each module on the ones before it:

* :mod:`~engine.comm.collectives`: alpha-beta ring formulas, multi-axis ring
  schedules of one collective, DCN across slices (no links, no faults).
* :mod:`~engine.comm.fabric`: every directed link of a slice, the bytes a schedule
  puts on each, degraded and failed links with their detours, one collective on a pod.
* :mod:`~engine.comm.mesh_comm`: the per-layer FSDP / tensor-parallel / parameter-server
  collectives of a step over the device mesh, and what faulty links add to them.
* :mod:`~engine.comm.gradient_sync`: the data-parallel gradient all-reduce on the links,
  its bucketed overlap with the backward pass, and its link load.
"""

from .collectives import (
    OPS,
    SCHEDULES,
    AxisPhase,
    CollectiveResult,
    RingSchedule,
    all_reduce_time_s,
    busbw_factor,
    collective_time,
    dcn_all_reduce_time_s,
    dcn_time_s,
    p2p_time_s,
    ring_phase,
    ring_schedule,
    stage_times_s,
)
from .fabric import Fabric, RingPhase, collective_on_pod, dcn_link_table, mesh_ring_phases, slice_fabrics
from .gradient_sync import GradientSync, MeshGradientSync, gradient_sync, mesh_gradient_sync, overlap_exposed_s, overlap_table
from .mesh_comm import LinkPenalty, StepComm, mesh_all_to_all_s, mesh_collective_s, mesh_link_penalties, plan_step_comm

__all__ = [
    "OPS",
    "SCHEDULES",
    "AxisPhase",
    "CollectiveResult",
    "RingSchedule",
    "all_reduce_time_s",
    "busbw_factor",
    "collective_time",
    "dcn_all_reduce_time_s",
    "dcn_time_s",
    "p2p_time_s",
    "ring_phase",
    "ring_schedule",
    "stage_times_s",
    "Fabric",
    "RingPhase",
    "collective_on_pod",
    "dcn_link_table",
    "mesh_ring_phases",
    "slice_fabrics",
    "GradientSync",
    "MeshGradientSync",
    "gradient_sync",
    "mesh_gradient_sync",
    "overlap_exposed_s",
    "overlap_table",
    "LinkPenalty",
    "StepComm",
    "mesh_all_to_all_s",
    "mesh_collective_s",
    "mesh_link_penalties",
    "plan_step_comm",
]
