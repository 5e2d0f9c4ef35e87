"""``python -m profiler hlo FILE``: describe an XLA HLO module, per device.

Reads the module (``compiled.as_text()`` or an ``--xla_dump_to`` text file, plain
or ``.gz``), or a TPU bundle by its ``NAME.xla.json`` (a module with its sidecar beside
it is read with it), and prints what one device computes, moves and communicates per
call: FLOPs (counted as XLA's ``cost_analysis`` counts them, every loop trip included),
HBM bytes in the layout's tiles, the collectives by op with their bytes and whether
they run asynchronously, parameter and output sizes, the compiler's own cycle
estimates and the largest ops; with a sidecar, what XLA concluded (its memory
analysis and verdict). A file that is not HLO, is truncated or is over the size limit
exits 2; an out-of-memory bundle prints XLA's refusal and exits 3.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine.hlo import HloModuleCost
from engine.hlo.bundle import XlaBundle
from engine.hlo.module_file import cached_program

__all__ = ["add_parser", "hlo_json", "format_hlo", "bundle_json"]

_EXIT_OOM = 3


def add_parser(sub: Any) -> None:
    """Register the ``hlo`` subcommand on the CLI's subparsers."""
    h = sub.add_parser("hlo", help="describe an XLA HLO module (compiled.as_text(), plain or .gz, or a bundle's .xla.json) per device")
    h.add_argument("file", help="HLO text file (.txt or .txt.gz), or a TPU bundle's NAME.xla.json")
    h.add_argument("--top", type=int, default=10, help="how many of the largest ops to list (default 10)")
    h.add_argument("--json", action="store_true", help="print one JSON object")
    h.set_defaults(func=_cmd_hlo)


def bundle_json(b: XlaBundle) -> dict[str, Any]:
    """What the sidecar says the compiler concluded."""
    mem = b.memory
    return {
        "topology": b.topology,
        "chip": b.chip,
        "slices": b.slices,
        "devices": b.devices,
        "devices_per_chip": b.devices_per_chip,
        "device_kind": b.device_kind,
        "jax_version": b.jax_version,
        "libtpu_version": b.libtpu_version,
        "memory": None if mem is None else {
            "argument_bytes": mem.argument_bytes, "output_bytes": mem.output_bytes, "alias_bytes": mem.alias_bytes,
            "temp_bytes": mem.temp_bytes, "generated_code_bytes": mem.generated_code_bytes},
        "hbm_peak_bytes": None if mem is None else mem.total_bytes,
        "flops_per_device": b.cost.get("flops"),
        "optimal_s": b.optimal_s,
        "oom": None if b.oom is None else {"message": b.oom.message, "required_bytes": b.oom.required_bytes,
                                           "available_bytes": b.oom.available_bytes},
    }  # fmt: skip


def hlo_json(cost: HloModuleCost, top: int = 10, bundle: XlaBundle | None = None) -> dict[str, Any]:
    """The ``--json`` object: per-device totals of one call of the module."""
    cycles = [o.estimated_cycles * o.executions for o in cost.ops if o.estimated_cycles is not None]
    algorithms: dict[str, list[str]] = {}
    for c in cost.collectives:
        if c.algorithm and c.algorithm not in algorithms.setdefault(c.op, []):
            algorithms[c.op].append(c.algorithm)
    return {
        "module": cost.name,
        "devices": cost.devices,
        "flops_per_device": cost.flops_per_device,
        "transcendentals_per_device": cost.transcendentals_per_device,
        "bytes_accessed_per_device": cost.bytes_accessed_per_device,
        "parameter_bytes_per_device": cost.parameter_bytes_per_device,
        "output_bytes_per_device": cost.output_bytes_per_device,
        "peak_live_bytes_per_device": cost.peak_live_bytes_per_device,
        "tile_padding_bytes_per_device": (cost.padded_parameter_bytes_per_device - cost.parameter_bytes_per_device)
        + (cost.padded_output_bytes_per_device - cost.output_bytes_per_device),
        "collectives": cost.collective_totals(),
        "async_collectives": sum(c.executions for c in cost.collectives if c.asynchronous),
        "collective_algorithms": algorithms,
        "estimated_cycles_per_device": sum(cycles) if cycles else None,
        "largest_ops": [
            {
                "name": o.name,
                "opcode": o.opcode,
                "flops": o.flops * o.executions,
                "bytes": o.bytes_accessed * o.executions,
                "executions": o.executions,
                "estimated_cycles": o.estimated_cycles,
            }
            for o in cost.largest_ops(top)
        ],
        "while_loops": cost.while_loops,
        "unknown_trip_counts": list(cost.unknown_trip_counts),
        "unknown_ops": cost.unknown_ops,
        "xla": bundle_json(bundle) if bundle is not None else None,
    }


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:,.2f} {prefix}{unit}"
    return f"{x:,.0f} {unit}"


def _bundle_lines(b: XlaBundle) -> list[str]:
    gib = 2**30
    lines = [f"  compiled for     {b.topology} x {b.slices} slice(s), {b.devices} devices ({b.device_kind}); "
             f"jax {b.jax_version}, libtpu {b.libtpu_version or '?'}"]  # fmt: skip
    if b.memory is not None:
        m = b.memory
        lines.append(f"  XLA HBM          {m.total_bytes / gib:,.2f} GiB per device = argument {m.argument_bytes / gib:,.2f} "
                     f"+ output {m.output_bytes / gib:,.2f} - alias {m.alias_bytes / gib:,.2f} + temp {m.temp_bytes / gib:,.2f}")  # fmt: skip
    if "flops" in b.cost:
        opt = f", optimal {b.optimal_s * 1e3:,.3f} ms" if b.optimal_s else ""
        lines.append(f"  XLA cost         {_si(b.cost['flops'], 'FLOP')} (loop bodies once){opt}")
    return lines


def format_hlo(cost: HloModuleCost, top: int = 10, bundle: XlaBundle | None = None) -> str:
    mib = 2**20
    pad = cost.padded_parameter_bytes_per_device - cost.parameter_bytes_per_device
    lines = [
        f"HLO module {cost.name} ({cost.source}): {cost.devices} devices "
        f"({cost.num_partitions} partitions x {cost.replica_count} replicas); per device, per call:",
        f"  FLOPs            {_si(cost.flops_per_device, 'FLOP')}  (+ {_si(cost.transcendentals_per_device, 'transcendentals')})",
        f"  HBM bytes        {cost.bytes_accessed_per_device / mib:,.2f} MiB accessed",
        f"  parameters       {cost.parameter_bytes_per_device / mib:,.2f} MiB   outputs {cost.output_bytes_per_device / mib:,.2f} MiB"
        f"   peak live {cost.peak_live_bytes_per_device / mib:,.2f} MiB" + (f"   tile padding {pad / mib:,.2f} MiB" if pad else ""),
    ]
    if bundle is not None:
        lines += _bundle_lines(bundle)
    cycles = sum(o.estimated_cycles * o.executions for o in cost.ops if o.estimated_cycles is not None)
    if cycles:
        lines.append(f"  XLA estimates    {cycles:,.0f} cycles over the ops that carry one")
    totals = cost.collective_totals()
    if totals:
        lines.append("  collectives")
        asyncs = {op: sum(c.executions for c in cost.collectives if c.op == op and c.asynchronous) for op in totals}
        lines += [f"    {op:<20} {int(t['count']):>5} x  {t['bytes'] / mib:,.3f} MiB in all"
                  + (f"  ({asyncs[op]} asynchronous)" if asyncs[op] else "") for op, t in totals.items()]  # fmt: skip
    else:
        lines.append("  collectives      none")
    for name, trips in cost.while_loops.items():
        note = " (trip count unknown: body counted once)" if name in cost.unknown_trip_counts else ""
        lines.append(f"  while loop       {name}: {trips} trips{note}")
    if cost.unknown_ops:
        listed = ", ".join(f"{k} x{v}" for k, v in cost.unknown_ops.items())
        lines.append(f"  unknown ops      {listed} (costed as elementwise on their bytes)")
    lines.append(f"  largest ops (of {len(cost.ops)})")
    for o in cost.largest_ops(top):
        runs = f" x{o.executions}" if o.executions > 1 else ""
        lines.append(
            f"    {o.name:<40} {o.opcode:<14} {_si(o.flops * o.executions, 'FLOP'):>14}  {o.bytes_accessed * o.executions / mib:>10,.3f} MiB{runs}"
        )
    return "\n".join(lines)


def _cmd_hlo(args: argparse.Namespace) -> int:
    prog = cached_program(args.file)
    b = prog.bundle
    if prog.cost is None:  # an out-of-memory bundle: XLA left no module
        assert b is not None and b.oom is not None
        if args.json:
            print(json.dumps({"module": None, "devices": b.devices, "xla": bundle_json(b)}))
        else:
            print(f"{b.path}: no module: XLA refused to compile for {b.topology} x {b.slices} slice(s) "
                  f"({b.devices} devices):\n  {b.oom.message}")  # fmt: skip
        return _EXIT_OOM
    print(json.dumps(hlo_json(prog.cost, args.top, b)) if args.json else format_hlo(prog.cost, args.top, b))
    return 0
