"""Reading a Chrome Trace Event file with bounded memory and time, before anything is understood.

Reads ``.json`` or ``.json.gz`` (detected by its magic bytes, not its name) as a stream
(ijson) through a reader that counts bytes, so memory stays bounded whatever the file
holds: the file size, the decompressed size (a gzip bomb stops at the limit) and the
number of events are all capped (:class:`ImportLimits`). The same reader scans every
chunk (vectorised, before the JSON parser sees it) for the nesting depth of arrays and
objects and the length of each string, and stops when either passes its limit or when
one event takes longer than ``max_seconds_per_event`` to arrive: a 200 KB file of ``[``
or a multi-GiB string inside gzip then fails in milliseconds instead of exhausting
memory. Timestamps and durations are
checked to be finite numbers of believable size. ``B``/``E`` pairs become complete
events; metadata (``M``) events give process and thread names and Podscope's own
per-process metadata. What the events mean is :mod:`profiler.trace_import`'s business.

Any problem raises :class:`~engine.errors.TraceImportError` naming the file and, where
there is one, the event.
"""

from __future__ import annotations

import gzip
import io
import math
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import ijson
import numpy as np

from engine.errors import TraceImportError

from .xla_trace import EventHints

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_JSON_BYTES",
    "MAX_SPAN_US",
    "ImportLimits",
    "RawTrace",
    "read_raw_trace",
]

DEFAULT_MAX_FILE_BYTES = 512 * 2**20  # on disk, compressed or not
DEFAULT_MAX_JSON_BYTES = 2 * 2**30  # decompressed JSON text
DEFAULT_MAX_EVENTS = 5_000_000  # trace events of any phase
#: longest believable single event and trace span: a week, in microseconds
MAX_SPAN_US = 7 * 24 * 3600 * 1e6
#: |ts| beyond this (microseconds; ~3,000 years since the epoch) is not a timestamp
MAX_ABS_TS_US = 1e17
_READ_CHUNK_BYTES = 1 << 16
#: deepest nesting of arrays and objects (a Chrome trace nests 4-6 deep: file, traceEvents, event, args)
DEFAULT_MAX_DEPTH = 64
#: longest JSON string, in bytes as written (kernel names run to a few KB; a stack in args to tens)
DEFAULT_MAX_STRING_BYTES = 1 << 20
#: longest wait for the next event while reading (a normal event takes microseconds)
DEFAULT_MAX_SECONDS_PER_EVENT = 10.0
#: longest pid or tid kept, in characters (they name processes and threads)
MAX_ID_CHARS = 256
_OPEN = np.frombuffer(b"[{", np.uint8)
_CLOSE = np.frombuffer(b"]}", np.uint8)
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


@dataclass(frozen=True)
class ImportLimits:
    """Caps that keep an import's memory and time bounded (bytes and event counts)."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
    max_events: int = DEFAULT_MAX_EVENTS
    max_depth: int = DEFAULT_MAX_DEPTH
    max_string_bytes: int = DEFAULT_MAX_STRING_BYTES
    max_seconds_per_event: float = DEFAULT_MAX_SECONDS_PER_EVENT


@dataclass
class RawTrace:
    """A trace file's complete events as columns (one entry per event), and its metadata, as read."""

    pid: list[str] = field(default_factory=list)
    tid: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    cat: list[str] = field(default_factory=list)
    ts_us: list[float] = field(default_factory=list)
    dur_us: list[float] = field(default_factory=list)
    process_names: dict[str, str] = field(default_factory=dict)
    process_meta: dict[str, dict] = field(default_factory=dict)  # pid -> Podscope export's per-chip metadata
    thread_names: dict[tuple[str, str], str] = field(default_factory=dict)
    skipped: Counter = field(default_factory=Counter)  # events not kept, by phase (or "E without B", ...)
    total: int = 0  # trace events of any phase
    other_data: dict = field(default_factory=dict)  # the top-level otherData of a Podscope export
    # per event, what its args say (profiler/xla_trace.py): args.step_num, args.device_ordinal, args.hlo_op
    hints: EventHints = field(default_factory=EventHints)


class _JsonShape:
    """Nesting depth and string length of JSON text fed chunk by chunk (numpy over each chunk).

    A quote is a string delimiter unless an odd run of backslashes precedes it; brackets
    count only outside strings. State carried between chunks: depth, inside-a-string, the
    bytes of the open string so far and the backslash run at the chunk's end.
    """

    def __init__(self, max_depth: int, max_string_bytes: int, source: str):
        self.max_depth, self.max_string_bytes, self.source = max_depth, max_string_bytes, source
        self.depth = 0
        self.in_string = False
        self.string_run = 0  # bytes of the string still open at the end of the last chunk
        self.backslashes = 0  # backslash run at the end of the last chunk

    def feed(self, data: bytes) -> None:
        b = np.frombuffer(data, np.uint8)
        n = len(b)
        if n == 0:
            return
        idx = np.arange(n)
        bs = b == _BACKSLASH
        q = np.flatnonzero(b == _QUOTE)
        if len(q):
            last_other = np.maximum.accumulate(np.where(bs, -1, idx))  # last non-backslash at or before i
            prev = q - 1
            run = np.where(prev >= 0, prev - np.where(prev >= 0, last_other[np.maximum(prev, 0)], -1), 0)
            run = run + np.where((prev < 0) | (last_other[np.maximum(prev, 0)] < 0), self.backslashes, 0)
            q = q[run % 2 == 0]  # unescaped quotes
        toggles = np.zeros(n, np.int64)
        toggles[q] = 1
        inside = ((np.cumsum(toggles) + int(self.in_string)) % 2).astype(bool)  # inside a string after byte i
        structural = ~inside
        structural[q] = False
        delta = np.isin(b, _OPEN).astype(np.int64) - np.isin(b, _CLOSE).astype(np.int64)
        depth = self.depth + np.cumsum(np.where(structural, delta, 0))
        if depth.max() > self.max_depth:
            raise TraceImportError(
                f"{self.source}: arrays or objects nested more than {self.max_depth} deep (limit max_depth); "
                "a Chrome trace nests a few levels: file, traceEvents, event, args"
            )
        # string lengths: from each opening quote to its closing one (or the chunk's end)
        opens = q[inside[q]]
        closes = q[~inside[q]]
        longest = 0
        start_run = self.string_run if self.in_string else None
        if start_run is not None:
            first_close = closes[0] if len(closes) else n
            longest = start_run + first_close
            closes = closes[1:] if len(closes) else closes
        m = min(len(opens), len(closes))
        if m:
            longest = max(longest, int((closes[:m] - opens[:m]).max()))
        end_inside = bool(inside[-1])
        if end_inside:
            tail = (n - opens[-1]) if len(opens) else (self.string_run + n)
            longest = max(longest, int(tail))
            self.string_run = int(tail)
        else:
            self.string_run = 0
        if longest > self.max_string_bytes:
            raise TraceImportError(
                f"{self.source}: a JSON string longer than {self.max_string_bytes:,} bytes (limit max_string_bytes); "
                "names, ids and arguments in a trace are short"
            )
        self.in_string = end_inside
        self.depth = int(depth[-1])
        tail_bs = n - 1 - int(np.flatnonzero(~bs)[-1]) if (~bs).any() else n + self.backslashes
        self.backslashes = tail_bs


class _BoundedReader(io.RawIOBase):
    """A binary reader that fails once more than ``limit`` bytes have come through, or bad JSON shape or pace."""

    def __init__(self, inner: BinaryIO, limits: "ImportLimits", source: str, owned: tuple[BinaryIO, ...] = ()):
        self._inner = inner
        self._owned = owned  # closed with this reader (GzipFile leaves the file it wraps open)
        self._limit = limits.max_json_bytes
        self._seen = 0
        self._source = source
        self._shape = _JsonShape(limits.max_depth, limits.max_string_bytes, source)
        self._max_wait_s = limits.max_seconds_per_event
        self._last_event = time.monotonic()

    def event_read(self) -> None:
        """The parser delivered an event: the time limit for the next one starts now."""
        self._last_event = time.monotonic()

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        want = min(len(buf), _READ_CHUNK_BYTES)
        data = self._inner.read(want)
        self._seen += len(data)
        if self._seen > self._limit:
            raise TraceImportError(
                f"{self._source}: more than {self._limit:,} bytes of JSON after decompression "
                "(a gzip bomb or a trace too large to import); raise max_json_bytes to allow it"
            )
        self._shape.feed(data)
        if time.monotonic() - self._last_event > self._max_wait_s:
            raise TraceImportError(
                f"{self._source}: no complete event in {self._max_wait_s:g} s of reading (limit max_seconds_per_event); "
                "one event is absurdly large"
            )
        buf[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()
        for f in self._owned:
            f.close()
        super().close()


def _open(path: Path, limits: ImportLimits) -> io.BufferedReader:
    raw = open(path, "rb")
    magic = raw.read(2)
    raw.seek(0)
    inner: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw  # type: ignore[assignment]
    reader = _BoundedReader(inner, limits, str(path), owned=(raw,))
    return io.BufferedReader(reader, buffer_size=_READ_CHUNK_BYTES)


def _first_char(path: Path, limits: ImportLimits) -> str:
    with _open(path, limits) as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1].decode("latin-1")


def _num(ev: dict, key: str, index: int, source: str) -> float:
    v = ev.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TraceImportError(f"{source}: event #{index} ({ev.get('name')!r}, ph {ev.get('ph')!r}) has no numeric {key!r}: {v!r}")
    return float(v)


def _ident(ev: dict, key: str, index: int, source: str) -> str:
    """A pid or tid as text: a number or a short string (Chrome writes either)."""
    v = ev.get(key, "")
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TraceImportError(f"{source}: event #{index} has a {type(v).__name__} as {key!r}; valid: a number or a string")
    text = str(v)
    if len(text) > MAX_ID_CHARS:
        raise TraceImportError(f"{source}: event #{index} has a {key!r} of {len(text):,} characters; valid: at most {MAX_ID_CHARS}")
    return text


def _check_size(path: Path, limits: ImportLimits) -> None:
    source = str(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise TraceImportError(f"{source}: cannot read file: {e.strerror or e}") from None
    if size > limits.max_file_bytes:
        raise TraceImportError(f"{source}: {size:,} bytes is over the import limit of {limits.max_file_bytes:,} bytes")
    if size == 0:
        raise TraceImportError(f"{source}: empty file")


def _read_metadata(out: RawTrace, ev: dict, pid: str, tid: str) -> None:
    """A metadata (``M``) event: process and thread names, Podscope's per-process metadata."""
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    if ev.get("name") == "process_name":
        out.process_names[pid] = str(args.get("name", ""))
        if isinstance(args.get("podscope"), dict):
            out.process_meta[pid] = args["podscope"]
    elif ev.get("name") == "thread_name":
        out.thread_names[(pid, tid)] = str(args.get("name", ""))


def _read_event(out: RawTrace, open_b: dict[tuple[str, str], list[tuple[str, str, float, Any]]], ev: Any, index: int, source: str) -> None:
    """One trace event into ``out``: ``X`` kept, ``B`` opened, ``E`` closing the latest open ``B``, others counted."""
    if not isinstance(ev, dict):
        raise TraceImportError(f"{source}: event #{index} is a {type(ev).__name__}, not an object")
    ph = ev.get("ph")
    pid, tid = _ident(ev, "pid", index, source), _ident(ev, "tid", index, source)
    if ph == "M":
        _read_metadata(out, ev, pid, tid)
        return
    if ph not in ("X", "B", "E"):
        out.skipped[str(ph)] += 1
        return
    if "pid" not in ev:
        raise TraceImportError(f"{source}: event #{index} ({ev.get('name')!r}) has no 'pid'")
    ts = _num(ev, "ts", index, source)
    if abs(ts) > MAX_ABS_TS_US:
        raise TraceImportError(f"{source}: event #{index} has an absurd timestamp ts={ts!r} us")
    if ph == "B":
        open_b.setdefault((pid, tid), []).append((str(ev.get("name", "")), str(ev.get("cat", "")), ts, ev.get("args")))
        return
    if ph == "E":
        stack = open_b.get((pid, tid))
        if not stack:
            out.skipped["E without B"] += 1
            return
        name, cat, t0, args = stack.pop()
        dur = ts - t0
        ts = t0
    else:
        name, cat, args = str(ev.get("name", "")), str(ev.get("cat", "")), ev.get("args")
        dur = _num(ev, "dur", index, source)
    if dur < 0 or dur > MAX_SPAN_US:
        raise TraceImportError(f"{source}: event #{index} ({name!r}) has an absurd duration dur={dur!r} us")
    out.pid.append(pid)
    out.tid.append(tid)
    out.name.append(name)
    out.cat.append(cat)
    out.ts_us.append(ts)
    out.dur_us.append(dur)
    out.hints.add(args)


def read_raw_trace(path: Path, limits: ImportLimits) -> RawTrace:
    """Every complete event of a Chrome Trace Event file (object or array form), within ``limits``.

    Raises
    ------
    TraceImportError
        Unreadable, empty, oversize, not JSON, malformed or truncated JSON or gzip, an
        implausible timestamp or duration, or no complete event at all.
    """
    source = str(path)
    _check_size(path, limits)
    out = RawTrace()
    open_b: dict[tuple[str, str], list[tuple[str, str, float, Any]]] = {}
    try:
        first = _first_char(path, limits)
        if first not in ("{", "["):
            raise TraceImportError(f"{source}: not Chrome Trace Event JSON (expected '{{' or '[' first, found {first!r})")
        prefix = "traceEvents.item" if first == "{" else "item"
        with _open(path, limits) as f:
            for index, ev in enumerate(ijson.items(f, prefix, use_float=True)):
                f.raw.event_read()
                out.total = index + 1
                if out.total > limits.max_events:
                    raise TraceImportError(f"{source}: more than {limits.max_events:,} events; raise max_events to import it")
                _read_event(out, open_b, ev, index, source)
        if first == "{" and out.process_meta:  # only Podscope's export has otherData we read (written first)
            with _open(path, limits) as f:
                for key, value in ijson.kvitems(f, "", use_float=True):
                    if key == "otherData" and isinstance(value, dict):
                        out.other_data = value
                        break
    except TraceImportError:
        raise
    except ijson.JSONError as e:
        raise TraceImportError(f"{source}: malformed or truncated JSON: {e}") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TraceImportError(f"{source}: corrupt or truncated gzip data: {e}") from None
    except OSError as e:
        raise TraceImportError(f"{source}: cannot read file: {e.strerror or e}") from None
    unclosed = sum(len(v) for v in open_b.values())
    if unclosed:
        out.skipped["B without E"] += unclosed
    if not out.ts_us:
        raise TraceImportError(f"{source}: no complete ('X') or begin/end ('B'/'E') events found")
    return out
