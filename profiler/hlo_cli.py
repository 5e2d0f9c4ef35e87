"""``python -m profiler hlo FILE``: describe an XLA HLO module, per device.

Reads the module (``compiled.as_text()`` or an ``--xla_dump_to`` text file, plain
or ``.gz``) with :func:`engine.hlo.load_hlo` and prints what one device computes,
moves and communicates per call: FLOPs (counted as XLA's ``cost_analysis`` counts
them), HBM bytes, the collectives by op with their bytes, parameter and output
sizes and the largest ops. A file that is not HLO, is truncated or is over the
size limit exits 2 with a message naming the file.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine.hlo import HloModuleCost, load_hlo

__all__ = ["add_parser", "hlo_json", "format_hlo"]


def add_parser(sub: Any) -> None:
    """Register the ``hlo`` subcommand on the CLI's subparsers."""
    h = sub.add_parser("hlo", help="describe an XLA HLO module (compiled.as_text(), plain or .gz) per device")
    h.add_argument("file", help="HLO text file (.txt or .txt.gz)")
    h.add_argument("--top", type=int, default=10, help="how many of the largest ops to list (default 10)")
    h.add_argument("--json", action="store_true", help="print one JSON object")
    h.set_defaults(func=_cmd_hlo)


def hlo_json(cost: HloModuleCost, top: int = 10) -> dict[str, Any]:
    """The ``--json`` object: per-device totals of one call of the module."""
    return {
        "module": cost.name,
        "devices": cost.devices,
        "flops_per_device": cost.flops_per_device,
        "transcendentals_per_device": cost.transcendentals_per_device,
        "bytes_accessed_per_device": cost.bytes_accessed_per_device,
        "parameter_bytes_per_device": cost.parameter_bytes_per_device,
        "output_bytes_per_device": cost.output_bytes_per_device,
        "peak_live_bytes_per_device": cost.peak_live_bytes_per_device,
        "collectives": cost.collective_totals(),
        "largest_ops": [
            {
                "name": o.name,
                "opcode": o.opcode,
                "flops": o.flops * o.executions,
                "bytes": o.bytes_accessed * o.executions,
                "executions": o.executions,
            }
            for o in cost.largest_ops(top)
        ],
        "while_loops": cost.while_loops,
        "unknown_trip_counts": list(cost.unknown_trip_counts),
        "unknown_ops": cost.unknown_ops,
    }


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:,.2f} {prefix}{unit}"
    return f"{x:,.0f} {unit}"


def format_hlo(cost: HloModuleCost, top: int = 10) -> str:
    mib = 2**20
    lines = [
        f"HLO module {cost.name} ({cost.source}): {cost.devices} devices "
        f"({cost.num_partitions} partitions x {cost.replica_count} replicas); per device, per call:",
        f"  FLOPs            {_si(cost.flops_per_device, 'FLOP')}  (+ {_si(cost.transcendentals_per_device, 'transcendentals')})",
        f"  HBM bytes        {cost.bytes_accessed_per_device / mib:,.2f} MiB accessed",
        f"  parameters       {cost.parameter_bytes_per_device / mib:,.2f} MiB   outputs {cost.output_bytes_per_device / mib:,.2f} MiB"
        f"   peak live {cost.peak_live_bytes_per_device / mib:,.2f} MiB",
    ]
    totals = cost.collective_totals()
    if totals:
        lines.append("  collectives")
        lines += [f"    {op:<20} {int(t['count']):>5} x  {t['bytes'] / mib:,.3f} MiB in all" for op, t in totals.items()]
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
    cost = load_hlo(args.file)
    print(json.dumps(hlo_json(cost, args.top)) if args.json else format_hlo(cost, args.top))
    return 0
