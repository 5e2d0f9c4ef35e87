"""While loops of an HLO module: how many trips each runs, from its backend config or its counter.

A loop's trip count is ``known_trip_count`` when XLA recorded it; otherwise it is read off the
counter the condition compares: its start value, the constant the body adds each trip, and the limit.
"""

from __future__ import annotations

import re

from .text import Computation, Instruction

__all__ = ["MAX_TRIP_COUNT", "FLIP", "trip_count", "through", "tuple_index", "constant_int", "counter_step"]

#: most trips a while loop may declare or count (a train step's loops run layers or microbatches)
MAX_TRIP_COUNT = 10_000_000

FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "NE": "NE", "EQ": "EQ"}
PASS_THROUGH = frozenset(("copy", "convert", "bitcast", "reshape"))


def trip_count(ins: Instruction) -> int | None:
    m = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)', ins.attrs.get("backend_config", ""))
    return int(m.group(1)) if m else None


def through(names: dict[str, Instruction], name: str) -> Instruction | None:
    """The instruction ``name`` is, looking through copies, converts and bitcasts."""
    ins = names.get(name)
    for _ in range(16):
        if ins is None or ins.opcode not in PASS_THROUGH or not ins.operands:
            return ins
        ins = names.get(ins.operands[0])
    return ins


def tuple_index(names: dict[str, Instruction], name: str) -> int | None:
    """``i`` when ``name`` is element ``i`` of the computation's tuple parameter."""
    ins = through(names, name)
    if ins is None or ins.opcode != "get-tuple-element" or not ins.operands:
        return None
    src = names.get(ins.operands[0])
    if src is None or src.opcode != "parameter":
        return None
    m = re.fullmatch(r"\s*(\d+)\s*", ins.attrs.get("index", ""))
    return int(m.group(1)) if m else None


def constant_int(names: dict[str, Instruction], name: str) -> int | None:
    ins = through(names, name)
    if ins is None or ins.opcode != "constant":
        return None
    try:
        return int(ins.literal.strip())
    except ValueError:
        return None


def counter_step(body: Computation, index: int) -> int | None:
    """What the body adds to tuple element ``index`` each trip (``add(gte(param, index), constant)``)."""
    names = {i.name: i for i in body.instructions}
    root = body.root
    if root.opcode != "tuple" or index >= len(root.operands):
        return None
    nxt = through(names, root.operands[index])
    if nxt is None or nxt.opcode not in ("add", "subtract") or len(nxt.operands) != 2:
        return None
    for a, b in (nxt.operands, nxt.operands[::-1]):
        if tuple_index(names, a) == index and (k := constant_int(names, b)) is not None:
            return -k if nxt.opcode == "subtract" else k
    return None
