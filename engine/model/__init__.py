"""Model cost and compute: what one training step computes, how long the chips take, and how it is laid out.

The package exports what the interconnect and memory rooms stand on (model cost, compute,
MoE routing, pipeline schedules, step segments). The modules that stand on those rooms in turn
are imported by their path: :mod:`~engine.model.analytic` (the cost of a whole step),
:mod:`~engine.model.batch_norm` and :mod:`~engine.model.context` (their collectives), and
:mod:`~engine.model.assumptions` (what a run assumed).
"""

from .compute import ComputeCost, grouped_matmul_rows, kernel_tiled, pad_to_mxu, roofline_terms_s, step_compute
from .models import TRAIN_FLOPS_MULTIPLIER, GemmOps, LayerUnit, ModelCost, layer_units, model_cost
from .moe import ROUTER_CONCENTRATION, RoutingPlan, plan_routing
from .pipeline import PipelinePlan, bubble_fraction, in_flight_microbatches, plan_pipeline
from .step import STEP_BLOCK, SUMMARY_STEP_BLOCK, Assembled, Segment, SimContext, StepCursor, assemble, seeded_rng

__all__ = [
    "GemmOps",
    "ModelCost",
    "model_cost",
    "TRAIN_FLOPS_MULTIPLIER",
    "LayerUnit",
    "layer_units",
    "ComputeCost",
    "grouped_matmul_rows",
    "kernel_tiled",
    "pad_to_mxu",
    "roofline_terms_s",
    "step_compute",
    "ROUTER_CONCENTRATION",
    "RoutingPlan",
    "plan_routing",
    "PipelinePlan",
    "plan_pipeline",
    "bubble_fraction",
    "in_flight_microbatches",
    "Segment",
    "StepCursor",
    "SimContext",
    "seeded_rng",
    "Assembled",
    "assemble",
    "STEP_BLOCK",
    "SUMMARY_STEP_BLOCK",
]
