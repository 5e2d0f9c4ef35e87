"""Simulate a scenario whose model is an XLA HLO module (``[model] kind = "hlo"``).

The module is the whole train step for one device; every chip runs it. A step on
the pod is laid out as the built-in families' steps are (:func:`engine.step.assemble`):
the module's compute (re-derived for the target chip, with the calibrated
per-step jitter), then its collectives, which end in the step's barrier, then the
fixed per-step overhead. HBM is the module's parameters plus the most bytes its
schedule keeps live at once. ``hfu`` is the module's FLOPs (as XLA counts them)
over the pod's peak; ``mfu`` needs the scenario's ``model_flops_per_step``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from ..calibration import Calibration
from ..sampling import plan_sample
from ..step import Segment, assemble
from ..topology import build_pod
from ..trace import CHIPS_SCHEMA, TABLES, RunFacts, RunResult, Trace
from .module_file import cached_module, module_sha256
from .step import hlo_step_cost

__all__ = ["simulate_hlo"]


def simulate_hlo(scenario, cal: Calibration, *, on_events: Callable[[pa.RecordBatch], None] | None = None) -> RunResult:
    """Trace tables and run facts of an HLO scenario (validated by :func:`engine.scenario.load_scenario`).

    ``on_events`` receives the events block by block, as :func:`engine.simulate.simulate` says.
    """
    chip = scenario.chip_spec()
    pod = build_pod(chip, scenario.slice_shape, scenario.pod.slices)
    cost = cached_module(scenario.model.path)
    step = hlo_step_cost(cost, pod, cal, scenario.interconnect)
    steps, chips = scenario.training.steps, pod.chips

    jitter = scenario.sim.jitter_frac if scenario.sim.jitter_frac is not None else cal.jitter_frac
    rng = np.random.default_rng([scenario.sim.seed, int.from_bytes(hashlib.sha256(b"jitter").digest()[:8], "little")])
    noise = np.exp(jitter * rng.standard_normal((steps, chips), dtype=np.float32)) if jitter > 0 else 1.0
    segments = [
        Segment("compute", step.compute_s * noise),
        Segment("collective", step.collective_s, barrier=True),
        Segment("other", cal.step_overhead_s),
    ]
    sample = plan_sample(scenario, pod, segments)
    laid = assemble(segments, steps, chips, detail=scenario.sim.trace, sample=None if sample is None else sample.chips,
                     on_events=on_events)

    usable = chip.usable_hbm_bytes(cal.hbm_reserved_frac)
    peak = cost.peak_live_bytes_per_device
    breakdown = {"params": cost.parameter_bytes_per_device, "grads": 0.0, "optimizer": 0.0, "activations": 0.0,
                 "temporary": max(peak - cost.parameter_bytes_per_device, 0.0)}  # fmt: skip
    model_flops = scenario.model.model_flops_per_step
    facts = RunFacts(
        chip=chip.key,
        chips=chips,
        hosts=pod.hosts,
        slices=pod.slices,
        topology=scenario.pod.topology,
        steps=steps,
        params=None,  # an HLO module does not say which of its parameters are weights
        samples_per_step=scenario.training.global_batch,
        tokens_per_step=None,
        model_flops_per_step=float(model_flops) if model_flops is not None else None,
        hardware_flops_per_step=step.hardware_flops * chips,
        peak_flops_per_s_per_chip=chip.peak_flops_per_s(step.precision),
        peak_hbm_bytes=peak,
        hbm_capacity_bytes=float(chip.hbm_bytes),
        oom=peak > usable,
        hbm_breakdown_bytes=breakdown,
        extra={
            "hbm_usable_bytes": usable,
            "hlo_module": cost.name,
            "hlo_sha256": module_sha256(scenario.model.path),
            "hlo_flops_per_device": cost.flops_per_device,
            "hlo_matmul_precision": step.precision,
            "hlo_compute_s": step.compute_s,
            "hlo_collective_s": step.collective_s,
            "hlo_collectives": cost.collective_totals(),
            "hlo_unknown_ops": cost.unknown_ops,
            "hlo_unknown_trip_counts": list(cost.unknown_trip_counts),
        },
    )
    chip_table = pa.table(pod.chip_table, schema=CHIPS_SCHEMA)
    chip_memory = TABLES["extra_chip_memory"].table({"chip": np.arange(chips, dtype=np.int32), "peak_bytes": np.full(chips, peak)})
    trace = Trace(
        events=laid.events, steps=laid.steps, chips=chip_table, step_kind=laid.step_kind, chip_kind=laid.chip_kind,
        extra={"hlo_collectives": step.collectives, "chip_memory": chip_memory,
               **({"sampled_chips": sample.table()} if sample is not None else {})},  # fmt: skip
    )  # fmt: skip
    return RunResult(scenario=scenario, trace=trace, facts=facts)
