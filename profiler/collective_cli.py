"""``python -m profiler collective``: the collective calculator.

Prices one collective on a torus slice (and across slices over the DCN) with the
engine's ring model and prints the time, NCCL-style algorithm and bus bandwidths
and the per-axis phases. With ``--chip`` the link bandwidth, hop latency and DCN
come from the catalog and calibration (as a simulated run would see them);
without it, from ``--link-bytes-per-s`` and ``--hop-latency-ns``.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from engine.comm import OPS, SCHEDULES, CollectiveResult, collective_time, ring_schedule
from engine.errors import ScenarioError, TopologyError
from engine.pod.catalog import load_catalog
from engine.pod.topology import AXIS_NAMES, build_pod
from engine.scenario import parse_topology
from engine.scenario.calibration import load_calibration

__all__ = ["add_parser", "collective_json"]


def add_parser(sub: Any) -> None:
    """Register the ``collective`` subcommand on the CLI's subparsers."""
    c = sub.add_parser("collective", help="price one collective on a torus (the collective calculator)")
    c.add_argument("--op", required=True, choices=OPS)
    c.add_argument("--bytes", required=True, type=float, help="the whole, unsharded array in bytes")
    c.add_argument("--chip", help="catalog chip (e.g. tpu-v4): link bandwidth, latency and wraparound from the catalog")
    c.add_argument("--topology", required=True, help="slice shape: N (a ring), AxB or AxBxC")
    c.add_argument("--link-bytes-per-s", type=float, help="one link's one-way bandwidth (overrides the chip's)")
    c.add_argument("--hop-latency-ns", type=float, help="per-hop latency in ns (overrides the calibration's)")
    c.add_argument("--axes", help="torus axes to span, e.g. x,y (default: all)")
    c.add_argument("--slices", type=int, default=1, help="slices joined over the DCN")
    c.add_argument("--dcn-bytes-per-s-per-host", type=float, help="host NIC bandwidth (default: the chip's)")
    c.add_argument("--chips-per-host", type=int, help="chips sharing one host NIC (default: the chip's)")
    c.add_argument("--dcn-latency-ns", type=float, help="per DCN ring step latency (default: calibration)")
    c.add_argument("--unidirectional", action="store_true", help="links carry data one way only")
    c.add_argument("--no-wraparound", action="store_true", help="no axis wraps around (a mesh)")
    c.add_argument("--schedule", choices=SCHEDULES, default="simultaneous", help="multi-axis schedule (default: simultaneous)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=_cmd_collective)


def _bad(key: str, msg: str) -> ScenarioError:
    return ScenarioError("collective", [(key, msg)])


def collective_json(args: argparse.Namespace) -> dict[str, Any]:
    """Compute the collective described by parsed arguments; returns the JSON-ready dict.

    Raises
    ------
    ScenarioError
        On bad or missing arguments (exit status 2).
    """
    try:
        shape = parse_topology(args.topology)
    except ValueError as e:
        raise _bad("--topology", str(e)) from None
    if args.bytes < 0 or not math.isfinite(args.bytes):
        raise _bad("--bytes", "must be a finite number >= 0")
    if args.slices < 1:
        raise _bad("--slices", "must be >= 1")
    cal = load_calibration()
    link = args.link_bytes_per_s
    hop_s = None if args.hop_latency_ns is None else args.hop_latency_ns * 1e-9
    dcn_bw, cph, dcn_lat = args.dcn_bytes_per_s_per_host, args.chips_per_host, None
    if args.dcn_latency_ns is not None:
        dcn_lat = args.dcn_latency_ns * 1e-9
    if args.chip:
        catalog = load_catalog()
        if args.chip not in catalog:
            raise _bad("--chip", f"unknown chip {args.chip!r}; valid: {', '.join(sorted(catalog))}")
        chip = catalog[args.chip]
        try:
            pod = build_pod(chip, shape, args.slices)
        except TopologyError as e:
            raise _bad("--topology", str(e)) from None
        wrap = pod.slice.wrap
        link = link if link is not None else chip.ici_link_bytes_per_s * cal.ici_efficiency
        hop_s = hop_s if hop_s is not None else cal.ici_hop_latency_s
        dcn_bw = dcn_bw if dcn_bw is not None else chip.dcn_bytes_per_s_per_host * cal.dcn_efficiency
        cph = cph if cph is not None else pod.chips_per_host
        dcn_lat = dcn_lat if dcn_lat is not None else cal.dcn_latency_s
    else:
        if link is None or hop_s is None:
            raise _bad("--link-bytes-per-s", "without --chip, give --link-bytes-per-s and --hop-latency-ns")
        wrap = tuple(n > 1 for n in shape)
        if args.slices > 1 and (dcn_bw is None or cph is None):
            raise _bad("--slices", "without --chip, --slices needs --dcn-bytes-per-s-per-host and --chips-per-host")
        dcn_lat = dcn_lat if dcn_lat is not None else 0.0
    if args.no_wraparound:
        wrap = tuple(False for _ in shape)
    if link <= 0 or hop_s < 0:
        raise _bad("--link-bytes-per-s", "bandwidth must be > 0 and latency >= 0")
    names = AXIS_NAMES[: len(shape)]
    axes = None
    if args.axes:
        wanted = [a.strip() for a in args.axes.split(",") if a.strip()]
        unknown = [a for a in wanted if a not in names]
        if unknown or len(set(wanted)) != len(wanted) or not wanted:
            raise _bad("--axes", f"{args.axes!r}: name distinct axes among {', '.join(names)}")
        axes = tuple(names.index(a) for a in wanted)
    plan = ring_schedule(args.op, args.bytes, shape, wrap, axes, args.schedule, args.unidirectional)
    res = collective_time(
        plan, link, hop_s, slices=args.slices, chips_per_host=cph or 1,
        dcn_host_bytes_per_s=dcn_bw or math.inf, dcn_latency_s=dcn_lat or 0.0,
    )  # fmt: skip
    return _to_json(res, args, shape, wrap, link, hop_s)


def _to_json(res: CollectiveResult, args: argparse.Namespace, shape, wrap, link: float, hop_s: float) -> dict[str, Any]:
    def axis_name(a: int) -> str:
        return "dcn" if a < 0 else AXIS_NAMES[a]

    return {
        "op": res.op,
        "bytes": res.bytes_total,
        "topology": "x".join(map(str, shape)),
        "wraparound": {AXIS_NAMES[i]: w for i, w in enumerate(wrap)},
        "axes": [AXIS_NAMES[a] for a in res.rings.axes],
        "slices": args.slices,
        "schedule": args.schedule,
        "unidirectional": args.unidirectional,
        "participants": res.participants,
        "link_bytes_per_s": link,
        "hop_latency_s": hop_s,
        "time_s": res.time_s,
        "ici_time_s": res.ici_time_s,
        "dcn_time_s": res.dcn_time_s,
        "algbw_bytes_per_s": res.algbw_bytes_per_s if res.time_s > 0 else None,
        "busbw_bytes_per_s": res.busbw_bytes_per_s if res.time_s > 0 else None,
        "phases": [
            {
                "stage": p.stage,
                "piece": p.piece,
                "op": p.op,
                "axis": axis_name(p.axis),
                "chips": p.chips,
                "bytes_in": p.bytes_in,
                "link_bytes": p.link_bytes,
                "hops": p.hops,
                "time_s": p.time_s,
            }
            for p in sorted(res.phases, key=lambda p: (p.stage, p.piece))
        ],
    }


def _fmt(out: dict[str, Any]) -> str:
    def gbps(x: float | None) -> str:
        return "n/a" if x is None else f"{x / 1e9:,.1f} GB/s"

    lines = [
        f"{out['op']} of {out['bytes']:,.0f} bytes on {out['topology']} x {out['slices']} slice(s), "
        f"axes {','.join(out['axes'])}, {out['schedule']}{', unidirectional' if out['unidirectional'] else ''}",
        f"  time    {out['time_s'] * 1e6:,.2f} us (ICI {out['ici_time_s'] * 1e6:,.2f} us, DCN {out['dcn_time_s'] * 1e6:,.2f} us)",
        f"  algbw   {gbps(out['algbw_bytes_per_s'])}   busbw {gbps(out['busbw_bytes_per_s'])}",
    ]
    for p in out["phases"]:
        lines.append(f"  stage {p['stage']} piece {p['piece']}: {p['op']:<15} axis {p['axis']:<3} n={p['chips']:<4} "
                     f"{p['time_s'] * 1e6:10.2f} us  ({p['link_bytes']:,.0f} B on the busiest link)")  # fmt: skip
    return "\n".join(lines)


def _cmd_collective(args: argparse.Namespace) -> int:
    out = collective_json(args)
    print(json.dumps(out) if args.json else _fmt(out))
    return 0
