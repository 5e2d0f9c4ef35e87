"""What XLA holds in HBM at a program's memory peak, and which part of the program made each buffer.

With ``xla_dump_to``, XLA's TPU compiler writes beside the optimized module (``*after_optimizations.txt``) its
live-range analysis (``*after_optimizations-live-range.txt``: where in the module's schedule each value is live) and
its buffer assignment (``*after_optimizations-buffer-assignment.txt``: the allocation, offset and size of every
value), also for a program it refuses for lack of HBM. :func:`read_live_peak` joins the three:

- the allocation says what a value's bytes are (a parameter of the program, a temporary, an output, a constant)
  and in which memory space (``color`` 0 is HBM; the others are on-chip memories). The program's arguments are
  held for the whole step (the analysis drops an argument after its last read; its buffer stays);
- values that share their bytes (a loop's carried state and the buffer it was given, an output written in place
  of its input) are counted once: at a position in the schedule the live bytes are the union, per allocation, of
  the live values' ``[offset, offset + size)``, each byte for the value that covers it first;
- the peak is the position where the most bytes are live in HBM. The analysis names a peak of its own (its
  "Live ranges at N (peak)"), taken over every memory space with shared bytes counted once per value: on a small
  program whose buffers sit on chip it can lie far from the HBM peak, so it is not used;
- the module's ``metadata={op_name=...}`` says which part of the JAX program made the value: an argument's path
  (``params['layers.w1']``) or the op's name stack (``jit(step)/transpose(jvp())/.../dot_general``). A loop's
  carried state takes the name of its ``while``; a value the compiler made itself (a prefetch ``copy-start.4``)
  has none.

:func:`peak_sources` sums the peak's HBM bytes by where they come from. They are close to, not the same as,
``memory_analysis()``'s peak, which counts every memory space and the heap's packing of the buffers.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from engine.errors import HloError

__all__ = ["LIVE_PEAK_FORMAT", "LivePeak", "PeakBuffer", "SOURCES", "peak_sources", "read_live_peak"]

#: the ``format`` of :meth:`LivePeak.to_json`'s object
LIVE_PEAK_FORMAT = "podscope-xla-live-peak"

_RANGES = re.compile(r"^\s*BufferLiveRange:\s*$")
_RANGE = re.compile(r"^\s+(\S+):(\d+)-(\d+)\s*$")
_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*)$")
_VALUE = re.compile(r"^\s*value: <\d+ (\S+)(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)")
_INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%([\w.\-]+) = .*?metadata=\{[^}]*?op_name="((?:[^"\\]|\\.)*)"')
_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) \(")
_NAME = re.compile(r"^\s+(?:ROOT )?%([\w.\-]+) = ")
_WHILE_COMPUTATIONS = re.compile(r"\b(?:condition|body)=%([\w.\-]+)")
_COLOR = re.compile(r"\bcolor (\d+)\b")
_ARGUMENT = re.compile(r"^(\w+)((?:\[[^\]]*\])*)$")
_KEY = re.compile(r"\[(?:'([^']*)'|(\d+))\]")

#: :func:`peak_sources`' keys, in the order they are printed
SOURCES = ("arguments", "outputs", "forward", "backward", "recomputed", "update", "copies", "collectives", "loop_state", "compiler_other")
_COLLECTIVE_OPS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all", "ragged-all-to-all")


@dataclass(frozen=True)
class PeakBuffer:
    """Bytes live at the peak that one value holds (and no value counted before it does).

    ``value``: XLA's value (instruction name, tuple index); ``op_name``: its instruction's metadata, or None;
    ``allocation``: ``parameter``, ``output``, ``temp``, ``constant`` or ``thread-local``; ``memory_space``: the
    allocation's colour (0: HBM)."""

    bytes: int
    value: str
    op_name: str | None
    allocation: str
    memory_space: int = 0

    @property
    def argument(self) -> tuple[str, ...] | None:
        """An argument's path (``("params", "layers.w1")``) where the buffer is one of the program's parameters."""
        if self.allocation != "parameter" or not self.op_name:
            return None
        m = _ARGUMENT.match(self.op_name)
        if m is None:
            return (self.op_name,)
        return (m.group(1), *(a or b for a, b in _KEY.findall(m.group(2))))


@dataclass(frozen=True)
class LivePeak:
    """The buffers live at a module's HBM peak, per device: ``position`` in its schedule, and ``buffers`` (each byte
    counted once, in every memory space)."""

    position: int
    buffers: tuple[PeakBuffer, ...]

    def live_bytes(self, memory_space: int | None = 0) -> int:
        """Bytes live at the peak in one memory space (0: HBM), or in all of them (None)."""
        return sum(b.bytes for b in self.buffers if memory_space is None or b.memory_space == memory_space)

    def largest(self, n: int, memory_space: int | None = 0) -> list[PeakBuffer]:
        """The ``n`` largest buffers of a memory space (or all), largest first."""
        return sorted((b for b in self.buffers if memory_space is None or b.memory_space == memory_space), key=lambda b: -b.bytes)[:n]

    def to_json(self) -> dict[str, Any]:
        return {"format": LIVE_PEAK_FORMAT, "position": self.position, "buffers": [asdict(b) for b in self.buffers]}

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = "live peak") -> LivePeak:
        """Raises :class:`~engine.errors.HloError` when ``doc`` is not :meth:`to_json`'s object."""
        try:
            if doc["format"] != LIVE_PEAK_FORMAT:
                raise ValueError(f"format {doc['format']!r}, expected {LIVE_PEAK_FORMAT!r}")
            return cls(int(doc["position"]), tuple(PeakBuffer(**b) for b in doc["buffers"]))
        except (KeyError, TypeError, ValueError) as e:
            raise HloError(f"{source}: not a live peak written by Podscope ({e})") from None


def _live_ranges(text: str, source: str) -> dict[str, tuple[int, int]]:
    """value -> (first, last) position in the schedule where it is live, from a live-range dump."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _RANGES.match(line)), None)
    if start is None:
        raise HloError(f"{source}: no 'BufferLiveRange:' section (XLA's *after_optimizations-live-range.txt has one)")
    ranges = {}
    for line in lines[start + 1 :]:
        m = _RANGE.match(line)
        if m is None:
            break
        ranges[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    if not ranges:
        raise HloError(f"{source}: its 'BufferLiveRange:' section lists no value")
    return ranges


class _Place(NamedTuple):
    """Where the buffer assignment puts one value."""

    allocation: int
    offset_bytes: int
    size_bytes: int
    kind: str  # the allocation's: parameter, output, temp, constant, thread-local, other
    memory_space: int  # the allocation's colour (0: HBM)


class _Live(NamedTuple):
    """A value other than an argument: its place, name, op_name and the positions where it is live."""

    place: _Place
    value: str
    op_name: str | None
    first: int
    last: int


def _value_places(text: str, source: str) -> dict[str, _Place]:
    """value -> its place in a buffer-assignment dump (a value of tuple shape keeps its ``{}``)."""
    places: dict[str, _Place] = {}
    allocation: tuple[int, str, int] | None = None
    for line in text.splitlines():
        a = _ALLOCATION.match(line)
        if a is not None:
            rest = a.group(3)
            kind = next((k for k in ("parameter", "output", "preallocated-temp", "constant", "thread-local") if k in rest), "other")
            color = _COLOR.search(rest)
            allocation = (int(a.group(1)), "temp" if kind == "preallocated-temp" else kind, int(color.group(1)) if color else 0)
            continue
        v = _VALUE.match(line)
        if v is not None and allocation is not None:
            places[v.group(1)] = _Place(allocation[0], int(v.group(3)), int(v.group(2)), allocation[1], allocation[2])
    if not places:
        raise HloError(f"{source}: no 'allocation N: ...' with 'value: <...>' lines (XLA's *after_optimizations-buffer-assignment.txt)")
    return places


def _op_names(module_text: str) -> dict[str, str]:
    """instruction -> its metadata op_name (unescaped) in a module's text. An instruction without one inside a
    loop's condition or body (their parameter: the loop's carried state) takes the op_name of the ``while``."""
    out: dict[str, str] = {}
    computation_of: dict[str, str] = {}
    loop_names: dict[str, str] = {}  # a while's condition and body computations -> its op_name
    computation = ""
    for line in module_text.splitlines():
        c = _COMPUTATION.match(line)
        if c is not None:
            computation = c.group(1)
            continue
        i = _NAME.match(line)
        if i is None:
            continue
        computation_of[i.group(1)] = computation
        m = _INSTRUCTION.match(line)
        if m is not None:
            out[m.group(1)] = m.group(2).replace("\\'", "'").replace('\\"', '"')
            if " while(" in line:
                for called in _WHILE_COMPUTATIONS.findall(line):
                    loop_names[called] = out[m.group(1)]
    for name, comp in computation_of.items():
        if name not in out and comp in loop_names:
            out[name] = loop_names[comp]
    return out


def read_live_peak(live_range_text: str, buffer_assignment_text: str, module_text: str, source: str = "XLA dump") -> LivePeak:
    """The buffers live at the HBM peak of a compiled module, from XLA's live-range, buffer-assignment and module
    dumps of one compile.

    Raises
    ------
    HloError
        A dump lacks the section this reads.
    """
    ranges = _live_ranges(live_range_text, source)
    places = _value_places(buffer_assignment_text, source)
    names = _op_names(module_text)
    # The program's arguments, whole, named by their parameter instruction (a prefetch of one shares its allocation).
    argument_places: dict[int, tuple[str, _Place]] = {}
    argument_names: dict[int, str] = {}
    for value, place in places.items():
        if place.kind == "parameter":
            argument_places.setdefault(place.allocation, (value, place))
            name = names.get(value.split("{", 1)[0])
            if name and "jit(" not in name:
                argument_names.setdefault(place.allocation, name)
    # every other value with its place and live range (a tuple's own value keeps its "{}" in the assignment)
    values = []
    for value, (first, last) in ranges.items():
        key = value if value in places else value.removesuffix("{}")
        if key in places and places[key].kind != "parameter":
            values.append(_Live(places[key], key, names.get(key.split("{", 1)[0]), first, last))
    # the HBM peak: per position, the bytes of the live values, those sharing a place counted once
    end = max(v.last for v in values) + 2 if values else 1
    by_place: dict[_Place, list[tuple[int, int]]] = {}
    for v in values:
        if v.place.memory_space == 0:
            by_place.setdefault(v.place, []).append((v.first, v.last))
    change = np.zeros(end + 1)  # bytes that start (+) and stop (-) being live at each position
    for place, spans in by_place.items():
        spans.sort()
        first, last = spans[0]
        for a, b in spans[1:] + [(end + 1, end + 1)]:
            if a > last + 1:  # a gap: the merged span ends
                change[first] += place.size_bytes
                change[last + 1] -= place.size_bytes
                first, last = a, b
            else:
                last = max(last, b)
    position = int(np.argmax(np.cumsum(change)[:end]))
    # each byte once: per allocation the values in offset order, the larger (then the one a JAX op names) first
    at_peak = sorted((v for v in values if v.first <= position <= v.last),
                     key=lambda v: (v.place.allocation, v.place.offset_bytes, -v.place.size_bytes,
                                    0 if v.op_name and "jit(" in v.op_name else 1))  # fmt: skip
    buffers = [PeakBuffer(p.size_bytes, value, argument_names.get(alloc), "parameter", p.memory_space)
               for alloc, (value, p) in argument_places.items()]  # fmt: skip
    covered_to: dict[int, int] = {}
    for v in at_peak:
        p = v.place
        start = max(p.offset_bytes, covered_to.get(p.allocation, 0))
        if p.offset_bytes + p.size_bytes <= start:
            continue  # its bytes are a value's already counted
        covered_to[p.allocation] = p.offset_bytes + p.size_bytes
        buffers.append(PeakBuffer(p.offset_bytes + p.size_bytes - start, v.value, v.op_name, p.kind, p.memory_space))
    return LivePeak(position, tuple(buffers))


def _source(b: PeakBuffer) -> str:
    """Where one buffer comes from (a key of :data:`SOURCES`)."""
    if b.allocation == "parameter":
        return "arguments"
    if b.allocation == "output":
        return "outputs"
    name = b.op_name or ""
    if "jit(" in name:  # an op of the JAX program: its name stack says which pass made it
        if "transpose(" in name:
            return "recomputed" if "rematted_computation" in name else "backward"
        return "forward" if "jvp(" in name else "update"
    op = b.value.split("{", 1)[0].split(".", 1)[0]
    if op.startswith("copy"):
        return "copies"
    if op.startswith(_COLLECTIVE_OPS):
        return "collectives"
    if op in ("param", "wide"):  # a loop body's parameter (``wide.param.1{4}``: one element of its carried tuple)
        return "loop_state"
    return "compiler_other"


def peak_sources(peak: LivePeak, memory_space: int = 0) -> dict[str, Any]:
    """The peak's bytes in one memory space (0: HBM) by where each buffer comes from.

    Returns
    -------
    dict
        ``live_bytes``; one entry per :data:`SOURCES` key, in bytes: ``arguments`` (the program's parameters),
        ``outputs`` (outputs not written over a parameter), ``forward`` (made by the forward pass and still live:
        what it keeps for the backward), ``backward`` (made by the backward pass: gradients and its temporaries),
        ``recomputed`` (the forward the backward runs again under ``jax.checkpoint``), ``update`` (ops outside
        differentiation: the optimizer, the loss's scaling), and the compiler's own buffers: ``copies`` (prefetches,
        layout copies), ``collectives`` (their outputs), ``loop_state`` (a loop's carried values), ``compiler_other``;
        ``by_argument``: the ``arguments`` bytes by the argument's name (the first part of its path).
    """
    out: dict[str, Any] = {"live_bytes": 0, **{k: 0 for k in SOURCES}, "by_argument": {}}
    for b in peak.buffers:
        if b.memory_space != memory_space:
            continue
        kind = _source(b)
        out[kind] += b.bytes
        out["live_bytes"] += b.bytes
        if kind == "arguments":
            name = (b.argument or (b.value,))[0]
            out["by_argument"][name] = out["by_argument"].get(name, 0) + b.bytes
    return out
