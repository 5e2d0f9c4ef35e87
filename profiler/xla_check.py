"""Podscope's HBM peak and FLOPs of a built-in scenario beside the TPU compiler's, for the same program.

:func:`compile_numbers` compiles the scenario's JAX program (:mod:`profiler.xla_reference`) for its
target with libtpu and keeps XLA's side: memory analysis per device, FLOPs per device with every
loop trip counted (read from the compiled module by :func:`engine.hlo.describe_hlo`), the
out-of-memory verdict and message, the JAX and libtpu versions and the compile time. That record
is what ``data/reference/xla_grid.json`` stores per configuration. :func:`podscope_numbers` is the
engine's side (:func:`engine.model.analytic.evaluate`, the numbers a summary-mode run reports) and
:func:`compare` sets the two beside each other, per chip: XLA's per-device bytes and FLOPs times
the devices per chip it compiled for (two TensorCores on tpu7x).

Nothing here imports jax at module load; :func:`compile_numbers` needs it.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.hlo.bundle import XlaHbm, XlaMemory, XlaOom
from engine.model.analytic import evaluate
from engine.pod.catalog import ChipSpec
from engine.scenario.calibration import Calibration, load_calibration
from engine.hlo import HloModuleCost, describe_hlo, parse_hlo, read_hlo_text
from engine.hlo.live_range import SOURCES, LivePeak, PeakBuffer, peak_sources
from engine.hlo.step import hlo_step_cost
from engine.pod.topology import build_pod
from engine.scenario import Scenario
from engine.units import gradient_wire_dtype

from . import ranges, xla_reference
from .ranges import ON_CHIP_PLACEMENT_BYTES

__all__ = ["ON_CHIP_PLACEMENT_BYTES", "collective_schedule", "compile_numbers", "compiled_hbm", "cycles_beyond_hbm", "device_hbm_bytes_per_cycle", "estimated_cycles_by_kind", "podscope_numbers", "compare", "xla_peak_bytes", "xla_memory",
           "format_check"]


def _memory(record: dict[str, Any]) -> XlaMemory:
    """A record's memory analysis (per device) as the bundle reader holds it."""
    return XlaMemory(**{"generated_code_bytes": 0.0, "peak_bytes": None, **record})


def xla_peak_bytes(memory: dict[str, int]) -> int:
    """XLA's HBM peak per device (:attr:`engine.hlo.bundle.XlaMemory.peak_live_bytes`) of a record's memory analysis."""
    return int(_memory(memory).peak_live_bytes)


#: the largest buffers live at XLA's peak a record keeps
LARGEST_AT_PEAK = 8


def live_peak_record(peak: LivePeak) -> dict[str, Any]:
    """What XLA holds live in HBM at its HBM peak, per device: :func:`engine.hlo.live_range.peak_sources`' bytes by
    source, ``on_chip_bytes`` (live in the other memory spaces at that position), and ``largest``: the
    :data:`LARGEST_AT_PEAK` largest HBM buffers (``name``: an argument's path joined by ``" > "``, else the JAX op that made it, else XLA's value;
    ``bytes``)."""

    def name(b: PeakBuffer) -> str:
        return " > ".join(b.argument) if b.argument else (b.op_name or b.value)

    return {**peak_sources(peak), "on_chip_bytes": peak.live_bytes(None) - peak.live_bytes(0),
            "largest": [{"name": name(b), "bytes": b.bytes} for b in peak.largest(LARGEST_AT_PEAK)]}  # fmt: skip


def collective_schedule(module: HloModuleCost, scenario: Scenario, devices_per_chip: int,
                        calibration: Calibration | None = None) -> dict[str, Any]:  # fmt: skip
    """How XLA scheduled a compiled step's collectives, and what Podscope's interconnect model makes of that schedule.

    Returns
    -------
    dict
        ``synchronous`` and ``asynchronous``: per opcode, how many collectives a device runs per step (every loop trip
        counted) that block its core until they end, and that run between a start and a done (an asynchronous
        collective fusion, a ``-start`` / ``-done`` pair) with the compute scheduled between them; ``collective_s``:
        their time per step, each priced on the scenario's slice by Podscope's interconnect model (the run's
        calibration), and ``exposed_collective_s``: what of it the schedule leaves the core waiting for
        (:func:`engine.hlo.step.hlo_step_cost`, as ``[model] kind = "hlo"`` runs the module).
    """
    sync: dict[str, int] = {}
    overlapped: dict[str, int] = {}
    for c in module.collectives:
        counts = overlapped if c.asynchronous else sync
        counts[c.op] = counts.get(c.op, 0) + c.executions
    pod = build_pod(scenario.chip_spec(), scenario.slice_shape, scenario.pod.slices)
    step = hlo_step_cost(module, pod, calibration or load_calibration(), scenario.interconnect, "xla", devices_per_chip)
    return {"synchronous": dict(sorted(sync.items())), "asynchronous": dict(sorted(overlapped.items())),
            "collective_s": step.collective_total_s, "exposed_collective_s": step.collective_s}  # fmt: skip


def compile_numbers(scenario: Scenario, out_dir: str | Path | None = None, live_range: bool = True,
                    xla_flags: dict[str, str] | None = None, calibration: Calibration | None = None) -> dict[str, Any]:  # fmt: skip
    """Compile the scenario's program for its target and return XLA's numbers.

    Parameters
    ----------
    scenario : Scenario
        A transformer scenario :func:`profiler.xla_reference.refusal` accepts.
    out_dir : path, optional
        Where the bundle goes (default: a temporary folder, removed afterwards).
    live_range : bool
        Also read what XLA holds live at its peak (its live-range analysis, dumped for this compile).
    xla_flags : dict, optional
        XLA options to compile with beyond the compiler's defaults (:func:`profiler.tpu_capture.parse_xla_flags`).
    calibration : Calibration, optional
        Prices the compiled schedule's collectives (``schedule``; default: data/calibration.toml).

    Returns
    -------
    dict
        ``memory`` (bytes per device, or None when out of HBM), ``flops_per_device`` (every loop
        trip counted; None when out of HBM), ``estimated_cycles_per_device`` (the sum of
        :func:`estimated_cycles_by_kind`; None when out of HBM), ``estimated_cycles_by_kind_per_device`` (:func:`estimated_cycles_by_kind`; None when
        out of HBM), ``other_cycles_beyond_hbm_per_device`` (:func:`cycles_beyond_hbm` at the catalog's HBM bandwidth and clock;
        None when out of HBM or the chip has no clock on record), ``xla_cost_flops_per_device`` (``cost_analysis``, loop bodies once), ``oom`` (None, or ``message``, ``required_bytes``, ``available_bytes``),
        ``devices``, ``devices_per_chip``, ``mesh``, ``notes``, ``jax_version``, ``libtpu_version``,
        ``compile_s``, ``windowed_einsum_loops`` (:func:`windowed_einsum_loops`; None when out of HBM),
        ``collective_bytes_by_dtype`` (:func:`collective_bytes_by_dtype`; None when out of HBM), ``schedule``
        (:func:`collective_schedule`; None when out of HBM), ``xla_flags`` (the options given), ``live_peak``
        (:func:`live_peak_record`, also when out of HBM; None when not asked for or not written).

    Raises
    ------
    InputError
        The scenario is not mapped, or jax[tpu] is missing.
    """
    from .tpu_capture import capture

    program = xla_reference.build_program(scenario)
    with tempfile.TemporaryDirectory(prefix="podscope-xla-") as tmp:
        folder = Path(out_dir) if out_dir is not None else Path(tmp)
        result = capture(program.fn, *program.args, target=program.target, name="xla_check", out_dir=folder,
                         progress=False, describes=program.describes, live_range=live_range, xla_flags=xla_flags)  # fmt: skip
        side = json.loads(result.sidecar_path.read_text())
        live = None
        if result.live_peak_path is not None:
            path = result.live_peak_path
            live = live_peak_record(LivePeak.from_json(json.loads(path.read_text()), str(path)))
        text = read_hlo_text(result.module_path) if result.module_path is not None else None
        module = describe_hlo(parse_hlo(text, str(result.module_path))) if text is not None else None
        loops = windowed_einsum_loops(text) if text is not None else None
    schedule = None if module is None else collective_schedule(module, scenario, program.devices_per_chip, calibration)
    kinds = None if module is None else estimated_cycles_by_kind(module)
    hbm_per_cycle = device_hbm_bytes_per_cycle(scenario.chip_spec(), program.devices_per_chip)
    beyond = None if module is None or hbm_per_cycle is None else cycles_beyond_hbm(module, hbm_per_cycle)
    return {
        "collective_bytes_by_dtype": None if module is None else collective_bytes_by_dtype(module),
        "memory": result.memory,
        "flops_per_device": None if module is None else module.flops_per_device,
        "estimated_cycles_per_device": None if kinds is None else float(sum(kinds.values())),
        "estimated_cycles_by_kind_per_device": kinds,
        "other_cycles_beyond_hbm_per_device": beyond,
        "xla_cost_flops_per_device": None if result.cost is None else result.cost.get("flops"),
        "oom": side["oom"],
        "devices": side["devices"],
        "devices_per_chip": program.devices_per_chip,
        "mesh": program.mesh_axes,
        "notes": program.notes + ([f"what XLA holds live at its peak is not shown: {result.live_peak_error}"] if result.live_peak_error else []),
        "jax_version": side["jax_version"],
        "libtpu_version": side["libtpu_version"],
        "compile_s": side["compile_s"],
        "windowed_einsum_loops": loops,
        "schedule": schedule,
        "xla_flags": dict(xla_flags or {}),
        "live_peak": live,
    }


#: the while loops XLA's SPMD partitioner writes for a dot whose operand it gathers, or whose output it reduce-scatters,
#: over a ring of devices one shard at a time (a windowed einsum: the collective matmul of Wang et al. 2023, ASPLOS)
_WINDOWED_LOOP = re.compile(r"\bwhile\([^\n]*?body=%[\w.]*windowed_dot_general_body_(ag|rs)\b")


def windowed_einsum_loops(module_text: str) -> dict[str, int]:
    """``all_gather`` and ``reduce_scatter``: the windowed-einsum loops of a compiled module, by the collective each
    one decomposes (the ``while`` instructions whose body is a ``windowed_dot_general_body_ag`` or ``_rs``)."""
    kinds = _WINDOWED_LOOP.findall(module_text)
    return {"all_gather": kinds.count("ag"), "reduce_scatter": kinds.count("rs")}


def collective_bytes_by_dtype(module: HloModuleCost) -> dict[str, dict[str, float]]:
    """Bytes per device per call that the module's collectives take in, by opcode and element type (every loop trip
    counted). In a training step without tensor parallelism the all-reduces and reduce-scatters are its gradients'
    reductions; XLA:TPU may write a reduce-scatter (and an all-gather) as a loop of collective-permutes instead."""
    out: dict[str, dict[str, float]] = {}
    for c in module.collectives:
        by = out.setdefault(c.op, {})
        by[c.dtype] = by.get(c.dtype, 0.0) + c.bytes * c.executions
    return out


def device_hbm_bytes_per_cycle(chip: ChipSpec, devices_per_chip: int) -> float | None:
    """The catalog's HBM bandwidth of one of the chip's devices in bytes per core cycle; None without a clock on record."""
    return chip.hbm_bytes_per_s / devices_per_chip / chip.clock_hz if chip.clock_hz else None


def cycles_beyond_hbm(module: HloModuleCost, hbm_bytes_per_cycle: float) -> float:
    """Of the compiler's estimate for the ops without a dot (:func:`estimated_cycles_by_kind`'s ``other``), the cycles
    past the time their own bytes take at the device's HBM bandwidth: per op ``max(0, estimated_cycles - bytes_accessed /
    hbm_bytes_per_cycle)`` times its executions. A pass that only streams its bytes has none; the rest is what XLA's
    cost model gives the vector units (a softmax's exponentials, fp32 normalisations, casts), which a roofline over HBM
    bytes does not price."""
    if hbm_bytes_per_cycle <= 0:
        raise ValueError(f"hbm_bytes_per_cycle must be positive, got {hbm_bytes_per_cycle}")
    beyond = 0.0
    for op in module.ops:
        if op.estimated_cycles is None or op.collective or op.asynchronous or op.dots:
            continue
        beyond += max(0.0, op.estimated_cycles - op.bytes_accessed / hbm_bytes_per_cycle) * op.executions
    return beyond


def estimated_cycles_by_kind(module: HloModuleCost) -> dict[str, float]:
    """The compiler's own estimate of one device's compute per call, in its core's cycles, by kind of op: ``dot``
    (fusions that hold a dot or a convolution) and ``other`` (the rest). Each is the ``estimated_cycles`` XLA:TPU writes
    on an op times the op's executions (every loop trip), over the ops that run on the core (collectives and
    asynchronous copies are the interconnect's and the DMA engines'; ops without an estimate are left out)."""
    out = {"dot": 0.0, "other": 0.0}
    for op in module.ops:
        if op.estimated_cycles is None or op.collective or op.asynchronous:
            continue
        out["dot" if op.dots else "other"] += op.estimated_cycles * op.executions
    return out


def xla_memory(xla: dict[str, Any]) -> XlaHbm:
    """:class:`~engine.hlo.bundle.XlaHbm` from :func:`compile_numbers`'s record (``run --xla``)."""
    mem, oom = xla["memory"], xla["oom"]
    return XlaHbm(
        memory=None if mem is None else _memory(mem),
        oom=None if oom is None else XlaOom(oom["message"].splitlines()[0][:400], oom.get("required_bytes"), oom.get("available_bytes")),
        devices_per_chip=xla["devices_per_chip"],
        xla_flags=dict(xla.get("xla_flags") or {}),
    )


def compiled_hbm(scenario: Scenario, xla_flags: Mapping[str, str] | None = None) -> XlaHbm:
    """Compile the scenario's program (with ``xla_flags`` beyond libtpu's defaults) and return what XLA said of its
    HBM, for a run to take (``run --xla``, ``sweep --xla``)."""
    return xla_memory(compile_numbers(scenario, live_range=False, xla_flags=dict(xla_flags or {})))


def podscope_numbers(scenario: Scenario, calibration: Calibration | None = None) -> dict[str, Any]:
    """The engine's HBM peak per chip (and its breakdown by term), usable HBM, verdict, the 80% range of XLA's peak around
    it with the verdict that range gives, and hardware FLOPs per chip per step, for the chip's devices as the catalog has
    them (the devices :func:`compile_numbers` compiles for)."""
    est = evaluate(scenario, calibration)
    c = est.costs
    band, basis, verdict = ranges.scenario_hbm_range(scenario, est.peak_hbm_bytes, est.usable_hbm_bytes)
    kernel = xla_reference.kernel_attention(scenario)
    kernel_flops = c.attention_flops_per_chip if kernel else 0.0
    tr = scenario.training
    all_reduce_b = c.comm.grad_shard_bytes if c.mesh["data"].size > 1 or scenario.pod.slices > 1 else 0.0
    return {
        "peak_hbm_bytes": est.peak_hbm_bytes,
        "breakdown_bytes": dict(c.mem.breakdown_bytes),
        "peak_phase": c.mem.peak_phase,
        "recomputed_bytes": c.mem.recomputed_bytes,
        "usable_hbm_bytes": est.usable_hbm_bytes,
        "oom": est.oom,
        # the 80% range of XLA's peak around Podscope's, from the compiler grid (profiler.ranges.peak_hbm_range)
        "hbm_range_bytes": band,
        "hbm_range_basis": basis,
        "hbm_verdict": verdict,
        "hardware_flops_per_chip": c.hardware_flops_per_chip,
        "kernel_flops_per_chip": kernel_flops,
        # the step's compute outside the Pallas kernels, whose cycles the module does not carry: every microbatch's
        # forward and backward, and the optimizer update, as the compiled step runs them
        "compute_s": c.core_compute_s(without_attention=kernel),
        "compute_terms_s": c.core_compute_terms_s(without_attention=kernel),
        # collective time no compute hides, as the engine lays the step out (its overlap assumptions: FSDP gathers
        # prefetched, tensor-parallel collectives decomposed with their matmuls where collective_matmul is on)
        "exposed_collective_s": c.exposed_collective_s,
        "clock_hz": scenario.chip_spec().clock_hz,
        "gradient_reduce_dtype": gradient_wire_dtype(tr.precision, tr.weight_dtype, tr.gradient_reduce_dtype),
        # per chip per step: the data-parallel all-reduce and every pass's reduce-scatters
        "gradient_reduction_bytes": all_reduce_b + c.comm.grad_reduce_scatter_bytes * c.work,
    }


def compare(pod: dict[str, Any], xla: dict[str, Any]) -> dict[str, Any]:
    """Podscope's and XLA's numbers per chip, and Podscope's error against XLA in percent.

    Returns
    -------
    dict
        ``podscope`` and ``xla`` (``peak_hbm_bytes`` per chip, XLA's ``argument/output/alias/temp``
        per chip, ``oom``, ``flops_per_chip``, ``compute_s``: the step's compute outside Pallas kernels, XLA's by its
        cycle estimates at the catalog clock (XLA's ``compute_by_kind_s``: ``dot`` and ``other``, None for a record
        without them, and ``compute_beyond_hbm_s``, the part of ``other`` :func:`cycles_beyond_hbm` gives, None likewise; Podscope's ``compute_terms_s``, :meth:`~engine.model.analytic.StepCosts.core_compute_terms_s`); ``exposed_collective_s``: the collective time no compute hides, XLA's
        that of its compiled schedule (:func:`collective_schedule`; XLA's ``collective_s`` all of it); XLA's
        ``live_peak``, :func:`live_peak_record` per chip, or None), ``hbm_diff_pct``, ``flops_diff_pct`` and
        ``compute_diff_pct`` (None where XLA refused the program), ``verdicts_agree``.
    """
    k = xla["devices_per_chip"]
    mem = xla["memory"]
    xla_side: dict[str, Any] = {"oom": xla["oom"] is not None, "oom_message": (xla["oom"] or {}).get("message")}
    if mem is not None:
        xla_side |= {f"{key}": mem[key] * k for key in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes")}
        xla_side["peak_hbm_bytes"] = xla_peak_bytes(mem) * k
    else:
        xla_side["peak_hbm_bytes"] = None
    xla_side["flops_per_chip"] = None if xla["flops_per_device"] is None else xla["flops_per_device"] * k
    live = xla.get("live_peak")
    xla_side["live_peak"] = None if live is None else _per_chip(live, k)
    cycles, clock = xla.get("estimated_cycles_per_device"), pod.get("clock_hz")
    # a chip's devices run side by side: one device's estimate is the chip's time
    xla_side["compute_s"] = cycles / clock if cycles and clock else None
    by_kind = xla.get("estimated_cycles_by_kind_per_device")
    xla_side["compute_by_kind_s"] = {kind: c / clock for kind, c in by_kind.items()} if by_kind and clock else None
    beyond = xla.get("other_cycles_beyond_hbm_per_device")
    xla_side["compute_beyond_hbm_s"] = beyond / clock if beyond is not None and clock else None
    sched = xla.get("schedule")
    # the schedule's collective times, priced per device, are the chip's: its devices run side by side
    xla_side["exposed_collective_s"] = None if not sched else sched["exposed_collective_s"]
    xla_side["collective_s"] = None if not sched else sched["collective_s"]
    hbm_pct = None if xla_side["peak_hbm_bytes"] is None else 100.0 * (pod["peak_hbm_bytes"] / xla_side["peak_hbm_bytes"] - 1.0)
    flops = xla_side["flops_per_chip"]
    # the module counts no FLOPs inside a Pallas kernel (a custom call): compare the FLOPs outside them
    pod_flops = pod["hardware_flops_per_chip"] - pod.get("kernel_flops_per_chip", 0.0)
    flops_pct = None if not flops else 100.0 * (pod_flops / flops - 1.0)
    compute_pct = None if not (xla_side["compute_s"] and pod.get("compute_s")) else 100.0 * (pod["compute_s"] / xla_side["compute_s"] - 1.0)
    return {
        "podscope": {**pod, "flops_per_chip": pod_flops},
        "xla": xla_side,
        "hbm_diff_pct": hbm_pct,
        "flops_diff_pct": flops_pct,
        "compute_diff_pct": compute_pct,
        "verdicts_agree": bool(pod["oom"]) == xla_side["oom"],
    }


def _per_chip(live: dict[str, Any], k: int) -> dict[str, Any]:
    """A :func:`live_peak_record` per device, its bytes by source times the chip's ``k`` devices (``largest`` stays
    per device)."""
    return {
        **{key: live[key] * k for key in ("live_bytes", "on_chip_bytes", *SOURCES)},
        "by_argument": {name: b * k for name, b in live["by_argument"].items()},
        "largest": live["largest"],  # buffers: each of a chip's devices holds its own
    }




def _range_lines(p: dict[str, Any], x: dict[str, Any], xla: dict[str, Any]) -> list[str]:
    """Where XLA's peak (or, refused, the HBM it asks for) lies against Podscope's 80% range of it."""
    band, basis = p.get("hbm_range_bytes"), p.get("hbm_range_basis")
    if not band or not basis:
        return []
    gib = 2**30
    need = (xla.get("oom") or {}).get("required_bytes")
    seen = x["peak_hbm_bytes"] if x["peak_hbm_bytes"] is not None else (need * xla["devices_per_chip"] if need else None)
    where = ""
    if seen is not None:
        what = "XLA's peak" if x["peak_hbm_bytes"] is not None else "what XLA asks for"
        if seen > band[1]:
            where = f": {what} {100 * (seen / band[1] - 1):.1f}% above it"
        elif seen < band[0]:
            where = f": {what} {100 * (1 - seen / band[0]):.1f}% below it"
        else:
            where = f": {what} inside it"
    return [f"  range     80% range of XLA's peak {band[0] / gib:.3f} to {band[1] / gib:.3f} GiB (its spread around Podscope's "
            f"over {basis['programs']:,} compiled '{basis['group']}' programs; verdict {p['hbm_verdict']}){where}"]  # fmt: skip


def _by_dtype_text(by_op: dict[str, dict[str, float]], ops: tuple[str, ...]) -> str:
    """``all-reduce 0.039 GiB (bf16 100%)``-style text of :func:`collective_bytes_by_dtype`'s ``ops``."""
    parts = []
    for op in ops:
        by = by_op.get(op) or {}
        total = sum(by.values())
        shares = ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])) if total else ""
        parts.append(f"{op} {total / 2**30:.3f} GiB" + (f" ({shares})" if shares else ""))
    return "; ".join(parts)


#: how the xla-check text names :data:`engine.hlo.live_range.SOURCES`
_SOURCE_WORDS = {"outputs": "outputs", "forward": "forward pass", "backward": "backward pass", "recomputed": "recomputed by the backward", "update": "update",
                 "copies": "copies", "collectives": "collective outputs", "loop_state": "loop state", "compiler_other": "other"}  # fmt: skip


def _op_name(name: str, parts: int = 2) -> str:
    """A JAX op's name stack cut to its first and last ``parts`` components: ``jit(step)/transpose(jvp())/.../dot_general``."""
    steps = name.split("/")
    return name if len(steps) <= 2 * parts else "/".join(steps[:parts] + ["..."] + steps[-parts:])


def _live_lines(live: dict[str, Any], devices_per_chip: int) -> list[str]:
    """The xla-check lines of what XLA holds live at its peak."""
    gib = 2**30

    def shown(v: float) -> bool:  # what rounds to 0.000 GiB is left out
        return v >= gib / 2000

    args = ", ".join(f"{k} {v / gib:.3f}" for k, v in sorted(live["by_argument"].items(), key=lambda kv: -kv[1]) if shown(v))
    program = [f"arguments {live['arguments'] / gib:.3f}" + (f" ({args})" if args else "")]
    program += [f"{_SOURCE_WORDS[k]} {live[k] / gib:.3f}" for k in ("outputs", "forward", "backward", "recomputed", "update")
                if shown(live[k])]  # fmt: skip
    compiler = [f"{_SOURCE_WORDS[k]} {live[k] / gib:.3f}" for k in ("copies", "collectives", "loop_state", "compiler_other")
                if shown(live[k])]  # fmt: skip
    chip = f" (and {live['on_chip_bytes'] / gib:.3f} on chip)" if shown(live["on_chip_bytes"]) else ""
    lines = [f"  at XLA's peak {live['live_bytes'] / gib:.3f} GiB per chip live in HBM{chip} (its live ranges and buffer assignment), "
             f"by what made it: {', '.join(program)}" + (f"; the compiler's own: {', '.join(compiler)}" if compiler else "")]  # fmt: skip
    per = " per device" if devices_per_chip > 1 else ""

    def named(b: dict[str, Any]) -> str:
        recomputed = " (recomputed)" if "rematted_computation" in b["name"] else ""
        return f"{b['bytes'] / gib:.3f} GiB{per} {_op_name(b['name'])}{recomputed}"

    lines.append(f"  largest   {'; '.join(named(b) for b in live['largest'][:3])}")
    return lines


def _counts_text(counts: dict[str, int]) -> str:
    """``25 (all-gather 12, all-reduce 13)``-style text of per-opcode collective counts."""
    total = sum(counts.values())
    return f"{total:,}" + (f" ({', '.join(f'{op} {n:,}' for op, n in counts.items())})" if total else "")


def _schedule_lines(p: dict[str, Any], x: dict[str, Any], xla: dict[str, Any]) -> list[str]:
    """The xla-check lines of how XLA scheduled the step's collectives against what the engine assumes."""
    sched = xla.get("schedule")
    if not sched or p.get("exposed_collective_s") is None:
        return []
    flags = xla.get("xla_flags") or {}
    how = f"with {len(flags)} XLA option(s) given" if flags else "with the compiler's default options"
    ms = 1e3
    lines = [f"  collectives Podscope leaves {p['exposed_collective_s'] * ms:.3f} ms per step exposed; XLA's schedule "
             f"({how}), priced on the same links, {x['exposed_collective_s'] * ms:.3f} ms of {x['collective_s'] * ms:.3f} ms: "
             f"per step {_counts_text(sched['synchronous'])} collective(s) blocking the core, "
             f"{_counts_text(sched['asynchronous'])} overlapping the compute scheduled beside them"]  # fmt: skip
    if x["exposed_collective_s"] > p["exposed_collective_s"] + 0.05 * (p.get("compute_s") or 0.0):
        lines.append("  note      the engine counts on FSDP gathers prefetched behind the previous layer and tensor-parallel "
                     "collectives decomposed with their matmuls (collective_matmul); XLA overlaps them only as its options "
                     "allow: check with the options the job compiles with (--xla-flag, docs/cli.md)")  # fmt: skip
    return lines


def _compute_term_lines(p: dict[str, Any], x: dict[str, Any]) -> list[str]:
    """The compute line's parts: XLA's estimate in fusions with a dot and in the rest, Podscope's by term."""
    lines = []
    kinds = x.get("compute_by_kind_s")
    if kinds and sum(kinds.values()) > 0:
        share = kinds["other"] / sum(kinds.values())
        line = f"            XLA: {kinds['dot']:.4g} s in fusions with a dot, {kinds['other']:.4g} s in the rest ({share:.0%})"
        beyond = x.get("compute_beyond_hbm_s")
        if beyond is not None and kinds["other"] > 0:
            line += (f", {beyond:.4g} s of it ({beyond / kinds['other']:.0%}) past what its bytes take at the HBM's "
                     "bandwidth (vector-unit work the roofline does not price)")
        lines.append(line)
    terms = p.get("compute_terms_s")
    if terms:
        parts = [f"{terms['mxu_bound']:.4g} s in MXU-bound ops", f"{terms['memory_bound']:.4g} s in memory-bound ops and passes",
                 f"{terms['op_overhead']:.4g} s fixed per-op cost", f"{terms['update']:.4g} s optimizer update"]  # fmt: skip
        if "attention_kernel" in terms:
            parts.append(f"less {-terms['attention_kernel']:.4g} s in the attention kernel")
        lines.append(f"            Podscope: {', '.join(parts)}")
    return lines


def format_check(name: str, cmp: dict[str, Any], xla: dict[str, Any]) -> str:
    """The ``xla-check`` text: Podscope's peak and its terms beside XLA's, FLOPs, verdicts."""
    gib = 2**30
    p, x = cmp["podscope"], cmp["xla"]
    per = f"x {xla['devices_per_chip']} devices per chip" if xla["devices_per_chip"] > 1 else "1 device per chip"
    lines = [f"{name}: mesh {xla['mesh']} over {xla['devices']} devices ({per}), compiled in {xla['compile_s']:.1f} s"]
    terms = ", ".join(f"{k} {v / gib:.3f}" for k, v in p["breakdown_bytes"].items())
    lines.append(f"  Podscope  peak {p['peak_hbm_bytes'] / gib:8.3f} GiB per chip ({p['peak_phase']}): {terms}")
    if p.get("recomputed_bytes"):
        lines.append(f"            counting on XLA's rematerialization to recompute {p['recomputed_bytes'] / gib:.3f} GiB it would "
                     "keep")  # fmt: skip
    if x["peak_hbm_bytes"] is not None:
        lines.append(
            f"  XLA       peak {x['peak_hbm_bytes'] / gib:8.3f} GiB per chip (its buffers live at once): arguments "
            f"{x['argument_bytes'] / gib:.3f}, outputs {x['output_bytes'] / gib:.3f} (aliased {x['alias_bytes'] / gib:.3f}), "
            f"temporaries {x['temp_bytes'] / gib:.3f}"
        )
        lines.append(f"  difference {cmp['hbm_diff_pct']:+.1f}% (Podscope against XLA)")
        if x["peak_hbm_bytes"] < ON_CHIP_PLACEMENT_BYTES:
            lines.append(f"  note      under {ON_CHIP_PLACEMENT_BYTES // 2**30} GiB per chip XLA's memory-space assignment "
                         "(buffers kept in on-chip memory, prefetches) moves the peak by tens of percent either way; "
                         "Podscope counts the program with every buffer in HBM")  # fmt: skip
    else:
        lines.append(f"  XLA       OUT OF MEMORY: {(x['oom_message'] or '').splitlines()[0][:300]}")
    lines += _range_lines(p, x, xla)
    if x.get("live_peak"):
        lines += _live_lines(x["live_peak"], xla["devices_per_chip"])
    usable = p["usable_hbm_bytes"] / gib
    lines.append(f"  verdict   Podscope {'OUT OF MEMORY' if p['oom'] else 'fits'} ({usable:.2f} GiB usable), "
                 f"XLA {'OUT OF MEMORY' if x['oom'] else 'fits'}: {'agree' if cmp['verdicts_agree'] else 'DISAGREE'}")  # fmt: skip
    if x["flops_per_chip"]:
        outside = " outside the Pallas attention kernels" if p.get("kernel_flops_per_chip") else ""
        lines.append(f"  FLOPs     Podscope {p['flops_per_chip']:.4g} per chip per step{outside}, XLA {x['flops_per_chip']:.4g} "
                     f"(every loop trip): {cmp['flops_diff_pct']:+.1f}%")  # fmt: skip
    if cmp.get("compute_diff_pct") is not None:
        outside = " outside the Pallas attention kernels" if p.get("kernel_flops_per_chip") else ""
        lines.append(f"  compute   Podscope {p['compute_s']:.4g} s per chip per step{outside}, XLA's cycle estimates "
                     f"{x['compute_s']:.4g} s at the catalog clock (its cost model, collectives aside): "
                     f"{cmp['compute_diff_pct']:+.1f}%")  # fmt: skip
        lines += _compute_term_lines(p, x)
    by_op = xla.get("collective_bytes_by_dtype")
    if by_op and xla["mesh"].get("tensor", 1) == 1 and p["gradient_reduction_bytes"] > 0:
        lines.append(f"  gradients Podscope reduces {p['gradient_reduction_bytes'] / gib:.3f} GiB per chip per step in "
                     f"{p['gradient_reduce_dtype']}; XLA, per device: {_by_dtype_text(by_op, ('all-reduce', 'reduce-scatter'))}")  # fmt: skip
        if "collective-permute" in by_op:
            lines.append(f"  note      XLA wrote some gathers and reductions as collective-permutes: "
                         f"{_by_dtype_text(by_op, ('collective-permute',))}")  # fmt: skip
    lines += _schedule_lines(p, x, xla)
    loops = xla.get("windowed_einsum_loops") or {}
    if any(loops.values()):
        lines.append(f"  note      XLA wrote {loops['all_gather']} all-gather(s) and {loops['reduce_scatter']} reduce-scatter(s) as "
                     "windowed-einsum loops (collective matmuls); its schedule of those loops can keep each layer's output "
                     "gradient until its loop runs (docs/validation.md)")  # fmt: skip
    for note in xla["notes"]:
        lines.append(f"  note      {note}")
    return "\n".join(lines)
