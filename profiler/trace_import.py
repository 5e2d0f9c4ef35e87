"""Import real traces (Chrome Trace Event JSON) as Podscope runs: what the events mean.

Reading the file, with its size, decompression and event-count limits, is
:mod:`profiler.trace_file`'s; this module turns the events it read into Podscope's
trace tables. Formats: ``torch.profiler`` (``export_chrome_trace``), the JAX and
TensorFlow profilers (``*.trace.json.gz``, ``perfetto_trace.json.gz``, XProf's
trace-viewer JSON; ``*.xplane.pb`` through :mod:`profiler.xplane`) and Podscope's own
Perfetto export.

Devices and processes become chips
    Processes named like a device (``/device:TPU:0``, ``GPU 1``) become chips when
    there are any; other (host) processes are then kept only in the raw table.
    Else, when XLA ops name their device (``args.device_ordinal``, as JAX's CPU
    virtual devices do), those devices are the chips. Otherwise every process with
    complete events becomes a chip (a CPU ``torch.profiler`` trace is one chip). Podscope's own export carries each chip's
    id and coordinates in its ``process_name`` metadata and gets them back.
Steps
    ``ProfilerStep#N`` (torch), events on a thread named ``Steps`` (TensorBoard's
    device step line) and Podscope's ``step`` lane mark steps: step *k* spans the
    earliest start to the latest end of its markers over all processes, clipped to
    the next step's start. Without them, JAX/TF step annotations (``args.step_num``)
    mark steps, else Keras' train-function calls (:mod:`profiler.xla_trace`). Without
    markers the whole trace is one step.
Kinds (first matching rule wins, see :data:`KIND_RULES`)
    Podscope's export: the event's ``cat`` is its kind. Then the JAX/TF rules of
    :func:`profiler.xla_trace.xla_kind` (XLA ops, rendezvous waits, ``tf.data``'s
    consumer wait against its background work). Then by name: compile
    (``compile``/``compilation``, not ``Compiled``; ``autotune``), collective
    (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute,
    send/recv, ``nccl``, ``gloo``, ``c10d::``), input wait (DataLoader,
    ``Iterator::``, ``GetNext``, infeed, prefetch). Then compute: ``cat`` cpu_op,
    kernel, gpu_op, Operator, names ``aten::``/``autograd::``, or threads ``XLA
    Ops``/``XLA Modules``/``TensorFlow Ops``. Everything else is ``other``; no
    event is dropped: every complete event is stored with its original name, cat,
    process and thread in the ``extra_import_events`` table.
Exclusive time
    Real traces nest and overlap (an ``aten::linear`` holds an ``aten::addmm``; a
    collective overlaps compute on another stream). Each chip's timeline is cut at
    every event boundary and each piece is charged to the highest-priority kind
    covering it, in :data:`engine.trace.EVENT_KINDS` order (input wait, compile,
    compute, collective, sync wait, other): communication hidden under compute
    counts as compute, as XProf's step breakdown does. Time no event covers is
    ``other`` (idle). So per chip, events tile each step and breakdowns sum to 1.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from engine.errors import TraceImportError
from engine.scenario.names import derived_name
from engine.trace import CHIPS_SCHEMA, EVENT_KINDS, KIND_CODE, STEPS_SCHEMA, TABLES, RunFacts, RunResult, Trace, events_batch

from .store import Database, check_run_name, write_run
from .xla_trace import keras_step_markers, xla_kind
from .xplane import is_xplane, xplane_as_trace_json
from .trace_file import DEFAULT_MAX_EVENTS, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_JSON_BYTES, MAX_SPAN_US, ImportLimits, RawTrace, read_raw_trace

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_JSON_BYTES",
    "DEFAULT_MAX_EVENTS",
    "KIND_RULES",
    "ImportLimits",
    "classify",
    "read_trace",
    "import_trace",
]

#: ordered (kind, name regex) rules; the first match wins (case-insensitive)
KIND_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("recompile", re.compile(r"compil(e|ation)(?!d)|autotun", re.I)),
    (
        "collective",
        re.compile(
            r"all[-_ ]?reduce|all[-_ ]?gather|reduce[-_ ]?scatter|all[-_ ]?to[-_ ]?all|collective[-_ ]?permute"
            r"|\bsend\b|\brecv\b|send-done|recv-done|nccl|gloo|c10d::",
            re.I,
        ),
    ),
    ("input_wait", re.compile(r"dataloader|_next_data|iterator::|getnext|infeed|prefetch|input[-_ ]?pipeline", re.I)),
)
_COMPUTE_CATS = frozenset({"cpu_op", "kernel", "gpu_op", "operator", "xla op", "xla_op"})
_COMPUTE_NAME = re.compile(r"^(aten|autograd|xla)::", re.I)
_COMPUTE_THREADS = re.compile(r"^(xla ops|xla modules|tensorflow ops|tf ops)$", re.I)
_STEP_MARKER = re.compile(r"^ProfilerStep#(\d+)$")
_DEVICE_PROCESS = re.compile(r"/device:(TPU|GPU)[:_ ]?(\d+)|^(TPU|GPU)[:_ ]?(\d+)\b", re.I)
_IDLE_CODE = KIND_CODE["other"]
_DEFAULT_LIMITS = ImportLimits()  # frozen: one shared default


def classify(name: str, cat: str = "", thread: str = "") -> str:
    """The Podscope kind of a real trace event, by :data:`KIND_RULES` then the compute rules.

    >>> classify("gloo:all_reduce"), classify("aten::addmm", "cpu_op"), classify("python_function")
    ('collective', 'compute', 'other')
    """
    for kind, pattern in KIND_RULES:
        if pattern.search(name):
            return kind
    if cat.lower() in _COMPUTE_CATS or _COMPUTE_NAME.match(name) or _COMPUTE_THREADS.match(thread):
        return "compute"
    return "other"


def _flatten(
    chip: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, code: np.ndarray, n_chips: int, bounds_ns: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Priority-flatten overlapping events into exclusive, step-tiling pieces, all chips at once.

    Chips' timelines are laid end to end (chip ``c`` at offset ``c * T``), cut at every
    event and step boundary, and each piece takes the highest-priority covering kind
    (lowest code), or ``other`` where nothing covers it. ``bounds_ns`` holds step
    boundaries: step ``k`` is ``[bounds_ns[2k], bounds_ns[2k+1])``.

    Returns (chip, step, kind_code, start_ns, dur_ns) of the merged pieces.
    """
    span = int(bounds_ns.max()) + 1
    # Events outside the stepped range would spill into the next chip's stretch: clip them.
    start_ns, end_ns = np.clip(start_ns, bounds_ns.min(), span - 1), np.clip(end_ns, bounds_ns.min(), span - 1)
    inside = end_ns > start_ns
    chip, start_ns, end_ns, code = chip[inside], start_ns[inside], end_ns[inside], code[inside]
    offsets = np.arange(n_chips, dtype=np.int64) * span
    step_cuts = (offsets[:, None] + bounds_ns[None, :]).ravel()
    g0, g1 = chip.astype(np.int64) * span + start_ns, chip.astype(np.int64) * span + end_ns
    cuts = np.unique(np.concatenate([g0, g1, step_cuts]))
    n = len(cuts)
    covered = np.zeros((len(EVENT_KINDS), n), dtype=bool)
    for k in range(len(EVENT_KINDS)):
        sel = code == k
        if not sel.any():
            continue
        delta = np.zeros(n + 1, dtype=np.int64)
        np.add.at(delta, np.searchsorted(cuts, g0[sel]), 1)
        np.add.at(delta, np.searchsorted(cuts, g1[sel]), -1)
        covered[k] = np.cumsum(delta)[:n] > 0
    kind = np.where(covered.any(axis=0), covered.argmax(axis=0), _IDLE_CODE)[:-1].astype(np.int8)
    lo, hi = cuts[:-1], cuts[1:]
    piece_chip = lo // span
    local = lo - piece_chip * span
    starts, ends = bounds_ns[0::2], bounds_ns[1::2]
    step = np.searchsorted(starts, local, side="right") - 1
    keep = (hi // span == piece_chip) & (step >= 0)
    keep[keep] &= local[keep] < ends[step[keep]]
    piece_chip, step, kind, local, dur = piece_chip[keep], step[keep], kind[keep], local[keep], (hi - lo)[keep]
    if len(dur) == 0:
        return (np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int8), np.zeros(0, np.int64), np.zeros(0, np.int64))
    # Merge runs of adjacent pieces with the same (chip, step, kind).
    new_run = np.ones(len(dur), dtype=bool)
    new_run[1:] = (piece_chip[1:] != piece_chip[:-1]) | (step[1:] != step[:-1]) | (kind[1:] != kind[:-1])
    new_run[1:] |= local[1:] != local[:-1] + dur[:-1]
    run_id = np.cumsum(new_run) - 1
    merged_dur = np.bincount(run_id, weights=dur).astype(np.int64)
    first = np.flatnonzero(new_run)
    return piece_chip[first].astype(np.int32), step[first].astype(np.int32), kind[first], local[first], merged_dur


@dataclass(frozen=True)
class _Chips:
    """Which trace processes are chips, and the chip id of each."""

    fmt: str  # "podscope" | "device trace" | "torch.profiler" | "chrome trace"
    pids: list[str]  # chip processes, in chip order
    chip_of: dict[str, int]  # pid -> chip id
    ids: np.ndarray  # chip ids as found, sorted (an export of chips 1,3-4 keeps those ids)


def _find_chips(raw: RawTrace, thread: list[str], source: str) -> _Chips:
    """Podscope's export names its chips; else device processes; else every process that did real work."""
    x_pids = list(dict.fromkeys(raw.pid))
    if raw.process_meta:
        fmt = "podscope"
        chip_pids = [q for q in x_pids if q in raw.process_meta]
        bad = [q for q in chip_pids if not isinstance(raw.process_meta[q].get("chip"), int) or raw.process_meta[q]["chip"] < 0]
        if bad:
            raise TraceImportError(f"{source}: process {bad[0]} has podscope metadata without a valid 'chip' id")
        chip_of = {q: raw.process_meta[q]["chip"] for q in chip_pids}
        if len(set(chip_of.values())) != len(chip_of):
            raise TraceImportError(f"{source}: two processes claim the same podscope chip id")
    else:
        devices = {q: _DEVICE_PROCESS.search(raw.process_names.get(q, "")) for q in x_pids}
        devices = {q: m for q, m in devices.items() if m}
        if devices:
            fmt = "device trace"
            chip_pids = sorted(devices, key=lambda q: (int(devices[q].group(2) or devices[q].group(4)), q))
        elif any(d >= 0 for d in raw.hints.device):
            # CPU virtual devices share the host process; each XLA op names its device (xla_trace.py)
            return _device_ordinal_chips(raw)
        else:
            fmt = "torch.profiler" if any(_STEP_MARKER.match(n) for n in raw.name) else "chrome trace"
            # A process with only unclassified events (torch's "Spans"/"Traces" profiler
            # bookkeeping) is not a chip when another process did real work.
            working = {q for q, n, c, t in zip(raw.pid, raw.name, raw.cat, thread) if classify(n, c, t) != "other"}
            chip_pids = [q for q in x_pids if q in working] or x_pids
        chip_of = {q: i for i, q in enumerate(chip_pids)}
    ids = np.array(sorted(set(chip_of.values())), dtype=np.int64)
    if ids[-1] >= 2**31:
        raise TraceImportError(f"{source}: chip id {ids[-1]} is implausible")
    return _Chips(fmt, chip_pids, chip_of, ids)


def _device_ordinal_chips(raw: RawTrace) -> _Chips:
    ordinals = np.asarray(raw.hints.device, dtype=np.int64)
    ids = np.unique(ordinals[ordinals >= 0])
    if ids[-1] >= 2**31:
        raise TraceImportError(f"device ordinal {ids[-1]} is implausible")
    return _Chips("xla devices", [], {}, ids)


def _chip_column(raw: RawTrace, chips: _Chips) -> np.ndarray:
    """Each event's chip id, or -1 for an event on no chip (a host thread)."""
    if chips.fmt == "xla devices":
        return np.asarray(raw.hints.device, dtype=np.int64).copy()
    return np.array([chips.chip_of.get(q, -1) for q in raw.pid], dtype=np.int64)


def _step_markers(raw: RawTrace, thread: list[str]) -> np.ndarray:
    """Per event, the step number it marks, or -1 (not a step marker)."""
    marker_step = np.full(len(raw.pid), -1, dtype=np.int64)
    for i, (name, cat, th, q) in enumerate(zip(raw.name, raw.cat, thread, raw.pid)):
        m = _STEP_MARKER.match(name)
        if m:
            marker_step[i] = int(m.group(1))
        elif (cat == "step" and q in raw.process_meta and name.startswith("step ")) or (th == "Steps" and name.strip().isdigit()):
            marker_step[i] = int(name.split()[-1])
    if (marker_step >= 0).any():
        return marker_step
    # JAX / TF step annotations (args.step_num); else Keras' train function, one call per step
    annotated = np.asarray(raw.hints.step_num, dtype=np.int64)
    if (annotated >= 0).any():
        return annotated
    return keras_step_markers(raw.name, thread, raw.ts_us)


def _step_bounds(
    ts_ns: np.ndarray, dur_ns: np.ndarray, marker_step: np.ndarray, on_chip: np.ndarray, source: str
) -> tuple[np.ndarray, np.ndarray, int]:
    """Step starts and ends in ns from the first step's start (zero-length steps dropped), and that start.

    Step *k* spans its markers' earliest start to latest end, clipped to the next step's start;
    without markers the chips' whole span is one step.
    """
    is_marker = marker_step >= 0
    if is_marker.any():
        labels = np.unique(marker_step[is_marker])
        idx = np.searchsorted(labels, marker_step[is_marker])
        s_start = np.full(len(labels), np.iinfo(np.int64).max)
        s_end = np.full(len(labels), np.iinfo(np.int64).min)
        np.minimum.at(s_start, idx, ts_ns[is_marker])
        np.maximum.at(s_end, idx, ts_ns[is_marker] + dur_ns[is_marker])
        order = np.argsort(s_start, kind="stable")
        s_start, s_end = s_start[order], s_end[order]
        s_end[:-1] = np.minimum(s_end[:-1], s_start[1:])
    else:
        s_start = np.array([ts_ns[on_chip].min()])
        s_end = np.array([(ts_ns + dur_ns)[on_chip].max()])
    t0 = int(s_start[0])
    if (s_end.max() - t0) > MAX_SPAN_US * 1000:
        raise TraceImportError(f"{source}: trace spans more than a week; not a training-step trace")
    keep_step = s_end > s_start
    s_start, s_end = s_start[keep_step] - t0, s_end[keep_step] - t0
    if len(s_start) == 0:
        raise TraceImportError(f"{source}: every step marker has zero length")
    return s_start, s_end, t0


def _kinds(raw: RawTrace, thread: list[str], is_marker: np.ndarray) -> list[str]:
    """Each event's kind: ``step`` for markers, the export's own ``cat``, the JAX/TF rules
    (:func:`profiler.xla_trace.xla_kind`), else :func:`classify`.

    Cached per distinct (name, cat, thread, XLA op or not): real traces repeat a few hundred names.
    """
    cache: dict[tuple[str, str, str, bool], str] = {}
    kinds = []
    for i, (name, cat, th, q, hlo) in enumerate(zip(raw.name, raw.cat, thread, raw.pid, raw.hints.hlo_op)):
        if is_marker[i]:
            kinds.append("step")
        elif q in raw.process_meta and cat in KIND_CODE:
            kinds.append(cat)
        else:
            key = (name, cat, th, hlo)
            k = cache.get(key)
            if k is None:
                k = cache[key] = xla_kind(name, th, hlo) or classify(name, cat, th)
            kinds.append(k)
    return kinds


def _chips_table(raw: RawTrace, chips: _Chips) -> pa.Table:
    """Chips and their places: Podscope's export carries them; otherwise laid along x."""
    ids, n_chips = chips.ids, len(chips.ids)
    cols = {"chip": ids.astype(np.int32), "host": np.zeros(n_chips, np.int32), "slice": np.zeros(n_chips, np.int32),
            "x": ids.astype(np.int32), "y": np.zeros(n_chips, np.int32), "z": np.zeros(n_chips, np.int32)}  # fmt: skip
    for q, meta in raw.process_meta.items():
        c = chips.chip_of.get(q)
        if c is not None:
            row = int(np.searchsorted(ids, c))
            for col in ("host", "slice", "x", "y", "z"):
                if isinstance(meta.get(col), int):
                    cols[col][row] = meta[col]
    return pa.table(cols, schema=CHIPS_SCHEMA)


def _facts(path: Path, raw: RawTrace, chips: _Chips, chips_table: pa.Table, steps: int, kinds: list[str],
           is_marker: np.ndarray, chip_col: np.ndarray) -> RunFacts:  # fmt: skip
    """What an import knows of the run: its shape and what was read; every model figure unknown."""
    n_chips = len(chips.ids)
    other_kind = Counter(n for n, k, m in zip(raw.name, kinds, is_marker) if k == "other" and not m)
    pod_meta = raw.other_data.get("podscope") if isinstance(raw.other_data.get("podscope"), dict) else {}
    device_kind = {"podscope": str(pod_meta.get("chip") or "imported"), "device trace": "device"}.get(chips.fmt, "cpu")
    if chips.fmt == "device trace":
        m = _DEVICE_PROCESS.search(raw.process_names.get(chips.pids[0], ""))
        device_kind = (m.group(1) or m.group(3)).lower()
    return RunFacts(
        chip=device_kind,
        chips=n_chips,
        hosts=int(len(np.unique(chips_table["host"].to_numpy()))),
        slices=int(len(np.unique(chips_table["slice"].to_numpy()))),
        topology=str(pod_meta.get("topology") or f"{n_chips} imported"),
        steps=steps,
        params=None,
        samples_per_step=None,
        tokens_per_step=None,
        model_flops_per_step=None,
        hardware_flops_per_step=None,
        peak_flops_per_s_per_chip=None,
        peak_hbm_bytes=None,
        hbm_capacity_bytes=None,
        oom=False,
        hbm_breakdown_bytes=None,
        extra={
            "import": {
                "file": path.name,
                "format": chips.fmt,
                "trace_events": raw.total,
                "complete_events": len(raw.name),
                "step_markers": int(is_marker.sum()),
                "host_events": int((chip_col < 0).sum()),
                "skipped_by_phase": dict(raw.skipped),
                "events_by_kind": dict(Counter(k for k in kinds if k != "step")),
                "top_unclassified": [n for n, _ in other_kind.most_common(10)],
            }
        },
    )


def read_trace(path: str | Path, *, limits: ImportLimits = _DEFAULT_LIMITS) -> tuple[Trace, RunFacts]:
    """Parse and convert a trace file into Podscope's trace tables and run facts (writes nothing).

    Raises
    ------
    TraceImportError
        Unreadable, malformed, truncated, oversize or implausible input.
    """
    path = Path(path)
    source = str(path)
    raw = read_raw_trace(path, limits)
    ts_ns = np.rint(np.array(raw.ts_us) * 1000.0).astype(np.int64)
    dur_ns = np.rint(np.array(raw.dur_us) * 1000.0).astype(np.int64)
    thread = [raw.thread_names.get(key, "") for key in zip(raw.pid, raw.tid)]

    chips = _find_chips(raw, thread, source)
    marker_step = _step_markers(raw, thread)
    is_marker = marker_step >= 0
    chip_col = _chip_column(raw, chips)
    on_chip = (chip_col >= 0) & ~is_marker
    if not on_chip.any():
        raise TraceImportError(f"{source}: no events on any device or process to attribute")
    s_start, s_end, t0 = _step_bounds(ts_ns, dur_ns, marker_step, on_chip, source)
    kinds = _kinds(raw, thread, is_marker)
    code = np.array([KIND_CODE.get(k, _IDLE_CODE) for k in kinds], dtype=np.int8)

    # Chip events clipped to the stepped range, flattened into exclusive pieces.
    lo_ns, hi_ns = ts_ns - t0, ts_ns + dur_ns - t0
    c0, c1 = np.clip(lo_ns, 0, s_end[-1]), np.clip(hi_ns, 0, s_end[-1])
    use = on_chip & (c1 > c0)
    bounds = np.empty(2 * len(s_start), dtype=np.int64)
    bounds[0::2], bounds[1::2] = s_start, s_end
    dense = np.searchsorted(chips.ids, chip_col[use])
    e_dense, e_step, e_code, e_start, e_dur = _flatten(dense, c0[use], c1[use], code[use], len(chips.ids), bounds)
    events = pa.Table.from_batches([events_batch(chips.ids[e_dense], e_step, e_code, e_start, e_dur)])
    steps_table = pa.table(
        {"step": np.arange(len(s_start), dtype=np.int32), "start_ns": s_start, "step_ns": s_end - s_start}, schema=STEPS_SCHEMA
    )
    chips_table = _chips_table(raw, chips)
    as_read = TABLES["extra_import_events"].table(
        {
            "chip": pa.array(np.where(chip_col >= 0, chip_col, 0).astype(np.int32), mask=chip_col < 0),
            "pid": pa.array(raw.pid, pa.string()),
            "tid": pa.array(raw.tid, pa.string()),
            "name": pa.array(raw.name, pa.string()),
            "cat": pa.array(raw.cat, pa.string()),
            "kind": pa.array(kinds, pa.string()),
            "start_ns": pa.array(lo_ns, pa.int64()),
            "dur_ns": pa.array(dur_ns, pa.int64()),
        }
    )
    facts = _facts(path, raw, chips, chips_table, len(s_start), kinds, is_marker, chip_col)
    return Trace(events=events, steps=steps_table, chips=chips_table, extra={"import_events": as_read}), facts


def import_trace(db: Database, path: str | Path, *, name: str | None = None, limits: ImportLimits = _DEFAULT_LIMITS) -> int:
    """Import a trace file into the database as a run with ``source='imported'``; returns its run_id.

    The file is fully parsed and checked before the database is opened, so a bad
    file writes nothing.

    Raises
    ------
    TraceImportError
        Bad input (nothing written).
    ProfilerError
        Storage failure (nothing written: the run is one transaction).
    """
    if name is not None:
        check_run_name(name)  # before the file is read
    if is_xplane(path):  # XProf's own profile: converted to trace-viewer JSON by the optional xprof package
        with xplane_as_trace_json(path, limits.max_file_bytes) as converted:
            trace, facts = read_trace(converted, limits=limits)
        info = {**facts.extra["import"], "file": Path(path).name, "format": f"xplane via xprof ({facts.extra['import']['format']})"}
        facts = replace(facts, extra={**facts.extra, "import": info})
    else:
        trace, facts = read_trace(path, limits=limits)
    stem = derived_name(Path(path).name.removesuffix(".gz").removesuffix(".json").removesuffix(".trace").removesuffix(".pb").removesuffix(".xplane"))
    return write_run(db, RunResult(scenario=None, trace=trace, facts=facts), name=name or stem, source="imported")
