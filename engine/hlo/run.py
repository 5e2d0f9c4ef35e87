"""Simulate a scenario whose model is an XLA HLO module (``[model] kind = "hlo"``).

The module is the whole train step for one device; every device runs it. A step on
the pod is laid out as the built-in families' steps are (:func:`engine.model.step.assemble`):
the module's compute (per op, from XLA:TPU's cycle estimates or Podscope's roofline,
with the calibrated per-step jitter), then the collective time its schedule leaves
exposed, which ends in the step's barrier, then the fixed per-step overhead.

HBM: a TPU bundle's peak is XLA's ``argument + output - alias + temp`` and its verdict
is XLA's (``hbm_source = "xla"``); a bare module's peak is its parameters plus the most
bytes its schedule keeps live at once, against the chip's usable HBM
(``hbm_source = "podscope"``). An out-of-memory bundle has no module: its run is stored
as out of memory with XLA's numbers in ``oom_detail`` and no steps.

``hfu`` is the module's FLOPs (as XLA counts them, every loop trip included) over the
pod's peak; ``mfu`` needs the scenario's ``model_flops_per_step``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from ..scenario.calibration import Calibration
from ..sampling import plan_sample
from ..model.step import Segment, assemble
from ..pod.topology import build_pod
from ..trace import CHIP_KIND_SCHEMA, CHIPS_SCHEMA, EVENTS_SCHEMA, STEP_KIND_SCHEMA, STEPS_SCHEMA, TABLES, RunFacts, RunResult, Trace
from .bundle import XlaBundle, XlaOom
from .module_file import HloProgram, cached_program, module_sha256
from .step import hlo_step_cost

__all__ = ["simulate_hlo"]


#: what an HLO run does not simulate reads null in the summary, as every run's unsimulated causes do (docs/cli.md)
_NOT_SIMULATED = {"input_wait_frac": None, "recompiles": None, "compile_s": None, "goodput": None, "stragglers": None}


def _xla_facts(b: XlaBundle | None) -> dict:
    if b is None:
        return {}
    return {
        "xla_topology": b.topology,
        "xla_device_kind": b.device_kind,
        "xla_jax_version": b.jax_version,
        "xla_libtpu_version": b.libtpu_version,
        "xla_memory_bytes": None if b.memory is None else {
            "argument": b.memory.argument_bytes, "output": b.memory.output_bytes, "alias": b.memory.alias_bytes,
            "temp": b.memory.temp_bytes, "generated_code": b.memory.generated_code_bytes},
        "xla_optimal_s": b.optimal_s,
        "xla_flops_per_device": b.cost.get("flops"),
        "xla_flags": dict(b.xla_flags),  # the options it was compiled with beyond libtpu's defaults
    }  # fmt: skip


def xla_oom_detail(oom: XlaOom, usable_bytes: float, suggestions: list[str]) -> dict:
    """The ``oom_detail`` of a program XLA refused: its message and sizes per device, as the message gives
    them (``usable_bytes`` where it gives no size), and ``suggestions``."""
    available = oom.available_bytes if oom.available_bytes is not None else usable_bytes
    required = oom.required_bytes
    return {
        "chip": 0,
        "term": "temporary",
        "over_bytes": (required - available) if required is not None else None,
        "peak_bytes": required,
        "usable_bytes": available,
        "phase": "compile",
        "source": "xla",
        "message": oom.message,
        "suggestions": suggestions,
    }


def _oom_result(scenario, prog: HloProgram, chip, pod, cal: Calibration) -> RunResult:
    """An out-of-memory bundle: no module to run, so the run holds XLA's verdict and no steps."""
    b = prog.bundle
    assert b is not None and b.oom is not None
    available = b.oom.available_bytes if b.oom.available_bytes is not None else chip.usable_hbm_bytes(cal.hbm_reserved_frac)
    required = b.oom.required_bytes
    detail = xla_oom_detail(b.oom, chip.usable_hbm_bytes(cal.hbm_reserved_frac), [
        "XLA refused the program on this chip: shard it over more chips (a larger slice or a larger fsdp axis), "
        "rematerialise activations (jax.checkpoint), or lower the per-chip batch, then compile again",
    ])  # fmt: skip
    facts = RunFacts(
        chip=chip.key, chips=pod.chips, hosts=pod.hosts, slices=pod.slices, topology=scenario.pod.topology, steps=0,
        params=None, samples_per_step=scenario.training.global_batch, tokens_per_step=None,
        model_flops_per_step=scenario.model.model_flops_per_step, hardware_flops_per_step=None,
        peak_flops_per_s_per_chip=chip.peak_flops_per_s("bf16"), peak_hbm_bytes=required, hbm_capacity_bytes=float(chip.hbm_bytes),
        oom=True, hbm_breakdown_bytes=None,
        extra={"oom_detail": detail, "hbm_source": "xla", "hbm_usable_bytes": available, "compute_source": None,
               "hlo_module": None, **_xla_facts(b), **_NOT_SIMULATED},
    )  # fmt: skip
    chip_table = pa.table(pod.chip_table, schema=CHIPS_SCHEMA)
    trace = Trace(events=EVENTS_SCHEMA.empty_table(), steps=STEPS_SCHEMA.empty_table(), chips=chip_table,
                  step_kind=STEP_KIND_SCHEMA.empty_table(), chip_kind=CHIP_KIND_SCHEMA.empty_table())  # fmt: skip
    return RunResult(scenario=scenario, trace=trace, facts=facts)


def simulate_hlo(scenario, cal: Calibration, *, on_events: Callable[[pa.RecordBatch], None] | None = None) -> RunResult:
    """Trace tables and run facts of an HLO scenario (validated by :func:`engine.scenario.load_scenario`).

    ``on_events`` receives the events block by block, as :func:`engine.simulate.simulate` says.
    """
    chip = scenario.chip_spec()
    pod = build_pod(chip, scenario.slice_shape, scenario.pod.slices)
    prog = cached_program(scenario.model.path)
    if prog.cost is None:
        return _oom_result(scenario, prog, chip, pod, cal)
    cost, bundle = prog.cost, prog.bundle
    k = prog.devices_per_chip
    step = hlo_step_cost(cost, pod, cal, scenario.interconnect, scenario.model.compute_source, k)
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

    if bundle is not None and bundle.memory is not None:
        mem = bundle.memory
        peak, hbm_source = mem.total_bytes * k, "xla"  # a chip holds each of its TensorCores' programs
        usable = chip.usable_hbm_bytes(cal.hbm_reserved_frac)
        oom = False  # XLA compiled it: the program fits the chip it was compiled for
        breakdown = {"params": mem.argument_bytes * k, "grads": 0.0, "optimizer": 0.0, "activations": 0.0,
                     "temporary": (mem.output_bytes - mem.alias_bytes + mem.temp_bytes) * k}  # fmt: skip
    else:
        usable = chip.usable_hbm_bytes(cal.hbm_reserved_frac)
        peak, hbm_source = cost.peak_live_bytes_per_device, "podscope"
        oom = peak > usable
        breakdown = {"params": cost.parameter_bytes_per_device, "grads": 0.0, "optimizer": 0.0, "activations": 0.0,
                     "temporary": max(peak - cost.parameter_bytes_per_device, 0.0)}  # fmt: skip
    model_flops = scenario.model.model_flops_per_step
    module_path = prog.module_path
    assert module_path is not None
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
        hardware_flops_per_step=step.hardware_flops * chips * k,
        peak_flops_per_s_per_chip=chip.peak_flops_per_s(step.precision),
        peak_hbm_bytes=peak,
        hbm_capacity_bytes=float(chip.hbm_bytes),
        oom=oom,
        hbm_breakdown_bytes=breakdown,
        extra={
            "oom_detail": None,
            "hbm_source": hbm_source,
            "compute_source": step.compute_source,
            "hbm_usable_bytes": usable,
            "hlo_module": cost.name,
            "hlo_sha256": module_sha256(module_path),
            "hlo_flops_per_device": cost.flops_per_device,
            "hlo_devices_per_chip": k,
            "hlo_matmul_precision": step.precision,
            "hlo_compute_s": step.compute_s,
            "hlo_podscope_compute_s": step.podscope_compute_s,
            "hlo_xla_compute_s": step.xla_compute_s,
            "hlo_collective_s": step.collective_s,
            "hlo_collective_total_s": step.collective_total_s,
            "hlo_collective_hidden_s": step.collective_hidden_s,
            "hlo_collectives": cost.collective_totals(),
            "hlo_unknown_ops": cost.unknown_ops,
            "hlo_unknown_trip_counts": list(cost.unknown_trip_counts),
            **_xla_facts(bundle),
            **_NOT_SIMULATED,
        },
    )
    chip_table = pa.table(pod.chip_table, schema=CHIPS_SCHEMA)
    chip_memory = TABLES["extra_chip_memory"].table({"chip": np.arange(chips, dtype=np.int32), "peak_bytes": np.full(chips, peak)})
    trace = Trace(
        events=laid.events, steps=laid.steps, chips=chip_table, step_kind=laid.step_kind, chip_kind=laid.chip_kind,
        extra={"hlo_collectives": step.collectives, "hlo_ops": step.ops, "chip_memory": chip_memory,
               **({"sampled_chips": sample.table()} if sample is not None else {})},  # fmt: skip
    )  # fmt: skip
    return RunResult(scenario=scenario, trace=trace, facts=facts)
