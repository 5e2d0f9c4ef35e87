"""Reading HLO text: bounded input in, computations of instructions out.

HLO text is what XLA prints for a module (``compiled.as_text()``, ``--xla_dump_to``):
a ``HloModule`` header, optional source-location tables, then computations, one
instruction a line::

    %dot.3 = f32[128,512]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}

This module only splits that text into :class:`Computation` and
:class:`Instruction` records (name, shape, opcode, operand names, attributes as
raw strings); what the numbers mean is :mod:`engine.hlo.cost`'s business. The file
is read through a byte budget (plain or gzip, the decompressed text capped at
:data:`DEFAULT_MAX_HLO_BYTES`), so a huge or hostile file stops with an
:class:`~engine.errors.HloError` before it fills memory.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from ..errors import HloError

__all__ = [
    "DEFAULT_MAX_HLO_BYTES",
    "DTYPE_BYTES",
    "Layout",
    "Shape",
    "padded_elements",
    "Instruction",
    "Computation",
    "HloText",
    "read_hlo_text",
    "parse_hlo",
    "parse_shape",
    "split_top_level",
    "MAX_ARRAY_BYTES",
    "MAX_RANK",
]

#: largest HLO text accepted (decompressed); a 256-chip LLM train step prints a few tens of MB
DEFAULT_MAX_HLO_BYTES = 256 * 2**20

#: bytes per element of each HLO primitive type (xla/xla_data.proto PrimitiveType)
DTYPE_BYTES: dict[str, float] = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4, "s64": 8, "u64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16,
    "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3b11fnuz": 1, "f8e3m4": 1,
    "f8e8m0fnu": 1, "f4e2m1fn": 0.5, "s4": 0.5, "u4": 0.5, "s2": 0.25, "u2": 0.25, "s1": 0.125, "u1": 0.125,
    "token": 0, "opaque": 0,
}  # fmt: skip

#: largest array one device may hold: 1 TiB, over five times the HBM of any TPU (tpu7x: 192 GiB)
MAX_ARRAY_BYTES = 2**40
#: most dimensions an array may have (XLA's own shapes stay far below)
MAX_RANK = 64

_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:\{([^}]*)\})?")
_TILE = re.compile(r"\(([^()]*)\)")
_MEMORY_SPACE = re.compile(r"S\((\d+)\)")
_ELEMENT_BITS = re.compile(r"E\((\d+)\)")
#: "[ENTRY] %name (params) -> shape {", or with the signature left out: "name {"
_HEADER = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\)\s*->.*|,.*)?\{\s*$")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_COMMENT = re.compile(r"/\*.*?\*/")
_OPCODE = re.compile(r"([a-z][a-z0-9\-]*)\(")
#: ops whose parentheses hold a literal (a constant's value, a parameter's number), not operands
_LITERAL_OPS = frozenset(("constant", "parameter", "iota", "partition-id", "replica-id", "rng-get-and-update-state"))
_OPERAND = re.compile(r"%([\w.\-]+)")
#: "[ROOT] %name = SHAPE opcode(%a, %b), attrs": an array shape or a tuple of them, operands all "%name"
#: (no comments, quotes or nested parentheses in the operand list)
_FAST_INSTR = re.compile(
    r"(ROOT\s+)?%([\w.\-]+)\s*=\s*"
    r"([a-z][a-z0-9]*\[[^\]]*\](?:\{[^ ]*\})?|\((?:[^()/]|\((?:[^()/]|\((?:[^()/]|\([^()/]*\))*\))*\))*\))"
    r"\s+([a-z][a-z0-9\-]*)\(((?:\s*%[\w.\-]+\s*(?:,\s*%[\w.\-]+\s*)*)?|[^()%\"'/]*)\)(.*)$"
)
_LEADING_SHAPE = re.compile(r"[a-z][a-z0-9]*\[[^\]]*\](\{[^ ]*\})?")
#: a tuple shape whose parentheses nest at most three deep (layout tiles inside nested tuples): one C regex
_TUPLE_SHAPE = re.compile(r"\((?:[^()]|\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\))*\)")
#: ", metadata={op_name="..." ...}": no nested braces, quoted strings may hold anything
_METADATA = re.compile(r',\s*metadata=(\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\})')
_JSON = json.JSONDecoder()
_SECTION_NAMES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


@dataclass(frozen=True)
class Layout:
    """An array's layout as XLA prints it after ``{``: ``2,1,0:T(8,128)(2,1)S(1)``.

    ``minor_to_major`` orders the logical dimensions from fastest- to slowest-varying;
    ``tiles`` are the tiling levels (``T(8,128)(2,1)``: 8 x 128 tiles over the two most
    minor physical dimensions, each holding 2 x 1 sub-tiles); ``memory_space`` is 0 for
    HBM (``S(1)`` is a TPU core's on-chip vector memory); ``element_bits`` overrides the
    element size (``E(32)``) when given.
    """

    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    memory_space: int = 0
    element_bits: int | None = None


@dataclass(frozen=True)
class Shape:
    """An array shape (``dtype``, ``dims``, optional TPU ``layout``) or a tuple of shapes (``dtype == "tuple"``)."""

    dtype: str
    dims: tuple[int, ...] = ()
    elements: tuple["Shape", ...] = ()
    layout: Layout | None = None

    @property
    def is_tuple(self) -> bool:
        return self.dtype == "tuple"

    @cached_property
    def num_elements(self) -> int:
        return math.prod(self.dims) if not self.is_tuple else sum(e.num_elements for e in self.elements)

    @cached_property
    def bytes(self) -> float:
        """Bytes of the elements themselves (no layout padding)."""
        if self.is_tuple:
            return sum(e.bytes for e in self.elements)
        return math.prod(self.dims) * DTYPE_BYTES.get(self.dtype, 4)

    @cached_property
    def padded_bytes(self) -> float:
        """Bytes the array occupies in its layout: the minor dimensions rounded up to whole tiles.

        XLA:TPU stores an array in tiles (``T(8,128)``: 8 x 128 elements over the two
        most minor physical dimensions), so ``f32[3,5]{1,0:T(8,128)}`` takes a whole
        8 x 128 tile, 4 KiB for 60 bytes of data. A shape without tiling is its
        :attr:`bytes`.
        """
        if self.is_tuple:
            return sum(e.padded_bytes for e in self.elements)
        lay = self.layout
        if lay is None or not lay.tiles:
            return self.bytes
        per = lay.element_bits / 8 if lay.element_bits else DTYPE_BYTES.get(self.dtype, 4)
        return padded_elements(self.dims, lay.minor_to_major, lay.tiles[0]) * per

    def leaves(self) -> list["Shape"]:
        return [self] if not self.is_tuple else [leaf for e in self.elements for leaf in e.leaves()]


def padded_elements(dims: tuple[int, ...], minor_to_major: tuple[int, ...], tile: tuple[int, ...]) -> int:
    """Elements of ``dims`` once its most minor physical dimensions are rounded up to ``tile``.

    The tile covers the last ``len(tile)`` physical dimensions (physical order is
    ``minor_to_major`` reversed); a shape of lower rank than the tile is padded with
    leading 1s, as XLA's ``ShapeUtil`` tiles a scalar ``s32[]{:T(128)}`` into 128 words.

    >>> padded_elements((3, 5), (1, 0), (8, 128))
    1024
    """
    order = minor_to_major if len(minor_to_major) == len(dims) else tuple(range(len(dims) - 1, -1, -1))
    physical = [dims[d] for d in reversed(order)]
    if len(physical) < len(tile):
        physical = [1] * (len(tile) - len(physical)) + physical
    head, tail = physical[: len(physical) - len(tile)], physical[len(physical) - len(tile) :]
    return math.prod(head) * math.prod(-(-p // t) * t if t > 0 else p for p, t in zip(tail, tile))


@dataclass(frozen=True)
class Instruction:
    """One instruction; its attributes (``attr=value`` after the operands) are split on first use.

    Most instructions of a large module sit inside fused computations, and only a few of them
    (dots, convolutions, reductions) are ever asked for an attribute, so the long
    ``backend_config`` and ``metadata`` texts of the rest are never split.
    """

    name: str
    shape: Shape
    opcode: str
    operands: tuple[str, ...]
    tail: str  # the text after the operand list: ", attr=value, ..."
    is_root: bool
    line: int  # 1-based line in the file
    literal: str = ""  # a constant's or parameter's text inside the parentheses

    @cached_property
    def attrs(self) -> dict[str, str]:
        return _parse_attrs(self.tail)


@dataclass(frozen=True)
class Computation:
    name: str
    instructions: tuple[Instruction, ...]
    is_entry: bool

    @property
    def root(self) -> Instruction:
        roots = [i for i in self.instructions if i.is_root]
        return roots[-1] if roots else self.instructions[-1]


@dataclass(frozen=True)
class HloText:
    """A parsed module: its header attributes and computations by name."""

    name: str
    source: str
    header: dict[str, str]
    computations: dict[str, Computation]
    entry: str

    @property
    def num_partitions(self) -> int:
        return int(self.header.get("num_partitions", "1"))

    @property
    def replica_count(self) -> int:
        return int(self.header.get("replica_count", "1"))


def read_hlo_text(path: str | Path, max_bytes: int = DEFAULT_MAX_HLO_BYTES) -> str:
    """Read an HLO text file (plain, or gzip by its magic bytes) of at most ``max_bytes`` of text.

    Raises
    ------
    HloError
        Missing or unreadable file, a broken or truncated gzip stream, text over the
        limit, or bytes that are not UTF-8 text.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=f) as gz:
                    data = gz.read(max_bytes + 1)
            else:
                data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise HloError(f"{p}: no such HLO file") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise HloError(f"{p}: not a readable gzip file ({e}); expected HLO text, plain or .gz") from None
    except OSError as e:
        raise HloError(f"{p}: cannot read: {e}") from None
    if len(data) > max_bytes:
        raise HloError(
            f"{p}: HLO text is larger than the limit of {max_bytes / 2**20:.0f} MiB; "
            "dump one module (the train step) rather than the whole compilation"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HloError(f"{p}: not HLO text (byte {e.start} is not UTF-8); expected compiled.as_text() output") from None


_DELIMS = re.compile(r"[()\[\]{}\"',\\]")
_OPEN, _CLOSE = "([{", ")]}"


def _unquoted(text: str, start: int = 0):
    """The brackets and separators of ``text`` from ``start`` that stand outside quoted strings: (character, index)."""
    quote, escaped_at = "", -1
    for m in _DELIMS.finditer(text, start):
        c, i = m.group(), m.start()
        if quote:
            if i == escaped_at:  # the character after a backslash
                continue
            if c == "\\":
                escaped_at = i + 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c != "\\":
            yield c, i


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` (a comma) outside (), [], {} and quotes."""
    parts, depth, start = [], 0, 0
    for c, i in _unquoted(text):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [s.strip() for s in parts if s.strip()]


_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _matching(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start`` (quotes respected); -1 when unclosed."""
    stack: list[str] = []
    for c, i in _unquoted(text, start):
        if c in _PAIRS:
            stack.append(_PAIRS[c])
        elif c in _CLOSE:
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return i
    return -1


@lru_cache(maxsize=65536)
def parse_shape(text: str) -> Shape:
    """``f32[128,512]{1,0}``, ``(f32[2], /*index=1*/s32[])`` or ``bf16[<=8,4]`` -> :class:`Shape`.

    A tuple's elements are its array leaves in order (nested tuples are flattened: only
    their sizes matter here).
    """
    text = text.strip()
    leaves = _ARRAY_SHAPE.findall(text)
    if text.startswith("("):
        return Shape("tuple", (), tuple(_array(*leaf) for leaf in leaves))
    if not leaves or not _ARRAY_SHAPE.match(text):
        raise ValueError(f"not an HLO shape: {text[:60]!r}")
    return _array(*leaves[0])


def _layout(text: str) -> Layout | None:
    """``2,1,0:T(8,128)(2,1)S(1)`` -> :class:`Layout`; None for an empty or unreadable layout."""
    order, _, rest = text.partition(":")
    try:
        minor_to_major = tuple(int(d) for d in order.split(",") if d.strip())
    except ValueError:
        return None
    tiles: tuple[tuple[int, ...], ...] = ()
    if rest.startswith("T"):
        levels = []
        pos = 1
        while (m := _TILE.match(rest, pos)) is not None:
            levels.append(tuple(int(t) if t.strip().isdigit() else 1 for t in m.group(1).split(",") if t.strip()))
            pos = m.end()
        tiles, rest = tuple(levels), rest[pos:]
    space = _MEMORY_SPACE.search(rest)
    bits = _ELEMENT_BITS.search(rest)
    return Layout(minor_to_major, tiles, int(space.group(1)) if space else 0, int(bits.group(1)) if bits else None)


def _array(dtype: str, dims: str, layout: str = "") -> Shape:
    sizes = tuple(int(d.strip().lstrip("<=")) for d in dims.split(",") if d.strip())
    if len(sizes) > MAX_RANK:
        raise ValueError(f"{dtype}[...] has {len(sizes)} dimensions, more than the limit of {MAX_RANK}")
    shape = Shape(dtype, sizes, (), _layout(layout) if layout else None)
    if shape.bytes > MAX_ARRAY_BYTES:
        raise ValueError(
            f"{dtype}[{dims}] holds {shape.bytes:.3g} bytes, more than the limit of {MAX_ARRAY_BYTES / 2**40:.0f} TiB "
            "for one device's array (over five times the HBM of any TPU)"
        )
    return shape


def _parse_instruction(body: str, is_root: bool, name: str, line: int) -> Instruction:
    """``SHAPE opcode(operands), attr=value, ...`` (the text after ``name =``)."""
    body = _COMMENT.sub("", body).strip() if "/*" in body else body.strip()
    if body.startswith("("):
        tm = _TUPLE_SHAPE.match(body)
        end = tm.end() - 1 if tm else _matching(body, 0)
        if end < 0:
            raise ValueError("unclosed tuple shape")
        shape_text, rest = body[: end + 1], body[end + 1 :].lstrip()
    else:
        m = _LEADING_SHAPE.match(body)
        if not m:
            raise ValueError(f"no shape at {body[:40]!r}")
        shape_text, rest = m.group(0), body[m.end() :].lstrip()
    om = _OPCODE.match(rest)
    if not om:
        raise ValueError(f"no opcode at {rest[:40]!r}")
    opcode = om.group(1)
    close = rest.find(")", om.end())
    inner = rest[om.end() : close] if close >= 0 else ""
    if close < 0 or any(c in inner for c in "(\"'"):  # nested parentheses or quotes: the careful scan
        close = _matching(rest, om.end() - 1)
        if close < 0:
            raise ValueError("unclosed operand list")
        inner = rest[om.end() : close]
    literal = ""
    operands: tuple[str, ...] = ()
    if opcode in _LITERAL_OPS:
        literal = inner
    elif inner.strip():
        # an operand is "%name" or, in older dumps, "f32[2]{0} %name": its last word is the name
        parts = inner.split(",") if not any(c in inner for c in "[{") else split_top_level(inner)
        operands = tuple(o.split()[-1].lstrip("%") for o in parts if o.strip())
    return Instruction(name, parse_shape(shape_text), opcode, operands, rest[close + 1 :].lstrip(), is_root, line, literal)


def _cut(tail: str, key: str, attrs: dict[str, str]) -> str:
    """Take ``key={...}`` out of ``tail`` into ``attrs`` when its value is a JSON object (XLA's backend configs).

    The decoder is C, where scanning the long JSON delimiter by delimiter in Python would
    cost more than the rest of the module's parse.
    """
    i = tail.find(f", {key}={{")
    if i < 0:
        return tail
    j = i + len(key) + 3
    try:
        _, end = _JSON.raw_decode(tail, j)
    except ValueError:
        return tail
    attrs[key] = tail[j:end]
    return tail[:i] + tail[end:]


def _parse_attrs(tail: str) -> dict[str, str]:
    """``, attr=value, ...`` -> ``{attr: value}`` (values as raw text)."""
    attrs: dict[str, str] = {}
    if not tail.startswith(","):
        return attrs
    tail = _cut(tail, "backend_config", attrs)
    m = _METADATA.search(tail)
    if m is not None:
        attrs["metadata"] = m.group(1)
        tail = tail[: m.start()] + tail[m.end() :]
    if not tail.startswith(","):
        return attrs
    key_prev = ""
    for item in split_top_level(tail[1:]):
        key, sep, value = item.partition("=")
        if not sep:
            continue
        key = key.strip()
        # the mesh form of replica groups has a top-level ", device_ids=(...)" inside its value
        if key == "device_ids" and key_prev == "replica_groups":
            attrs["replica_groups"] += f", {item}"
            continue
        attrs[key] = value.strip()
        key_prev = key
    return attrs


def parse_hlo(text: str, source: str = "<hlo>") -> HloText:
    """Split HLO text into computations and instructions.

    Raises
    ------
    HloError
        The text is not HLO (no ``HloModule`` header), is truncated (a computation
        never closes, no ENTRY computation) or has a line that is not an instruction.
    """
    lines = text.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        raise HloError(f"{source}: empty file; expected HLO text starting with 'HloModule'")
    head = lines[first].strip()
    if not head.startswith("HloModule "):
        raise HloError(
            f"{source}: not HLO text: line {first + 1} starts with {head[:40]!r}, expected 'HloModule NAME, ...' "
            "(the output of compiled.as_text() or an --xla_dump_to *.txt file)"
        )
    header_items = split_top_level(head[len("HloModule ") :])
    module_name = header_items[0] if header_items else "module"
    header = {k.strip(): v.strip() for k, _, v in (h.partition("=") for h in header_items[1:])}
    comps: dict[str, Computation] = {}
    entry = ""
    current: tuple[str, bool] | None = None
    instrs: list[Instruction] = []
    pending = ""  # an instruction continued on the next line (rare: long literals)
    in_section = False
    for lineno, raw in enumerate(lines[first + 1 :], start=first + 2):
        ln = raw.strip()
        if current is None:
            if not ln or ln.startswith("//"):
                continue
            if ln in _SECTION_NAMES:
                in_section = True
                continue
            hm = _HEADER.match(ln)
            if hm:
                in_section = False
                current = (hm.group(2), bool(hm.group(1)))
                instrs = []
                continue
            if in_section:
                continue
            raise HloError(f"{source}: line {lineno}: expected a computation ('%name (...) -> ... {{'), got {ln[:60]!r}")
        if ln == "}" or ln.startswith("},"):  # "}, execution_thread=..." closes a computation run elsewhere (a SparseCore)
            if pending:
                raise HloError(f"{source}: line {lineno}: instruction never finished: {pending[:60]!r}")
            name, is_entry = current
            if not instrs:
                raise HloError(f"{source}: line {lineno}: computation {name!r} has no instructions")
            comps[name] = Computation(name, tuple(instrs), is_entry)
            if is_entry:
                entry = name
            current = None
            continue
        if not ln or ln.startswith("//"):
            continue
        ln = f"{pending} {ln}" if pending else ln
        fm = _FAST_INSTR.match(ln) if not pending else None
        if fm is not None:  # the common line, split by one C regex; anything unusual takes the careful path below
            root, name, shape_text, opcode, inner, tail = fm.groups()
            if opcode in _LITERAL_OPS:
                operands, literal = (), inner
            else:
                operands, literal = tuple(_OPERAND.findall(inner)), ""
            try:
                instrs.append(Instruction(name, parse_shape(shape_text), opcode, operands, tail.lstrip(), bool(root), lineno, literal))
            except ValueError as e:
                raise HloError(f"{source}: line {lineno}: cannot read instruction {name!r}: {e}") from None
            continue
        im = _INSTR.match(ln)
        if not im:
            raise HloError(f"{source}: line {lineno}: not an HLO instruction: {ln[:80]!r}")
        try:
            instrs.append(_parse_instruction(im.group(3), bool(im.group(1)), im.group(2), lineno))
            pending = ""
        except ValueError as e:
            if "unclosed" in str(e) and len(ln) < 1_000_000:
                pending = ln
                continue
            raise HloError(f"{source}: line {lineno}: cannot read instruction {im.group(2)!r}: {e}") from None
    if current is not None:
        raise HloError(f"{source}: truncated: computation {current[0]!r} never closes (no final '}}')")
    if not entry:
        raise HloError(f"{source}: no ENTRY computation; the module is incomplete")
    return HloText(module_name, source, header, comps, entry)
