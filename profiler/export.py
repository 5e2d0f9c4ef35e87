"""Export a stored run: Perfetto / chrome://tracing JSON, or its tables as Parquet or CSV.

Perfetto export writes the Chrome Trace Event Format (JSON object form,
gzipped when the path ends in ``.gz``): one process per chip, named with its
host, slice and torus coordinates and ordered by coordinate through
``process_sort_index`` metadata; one thread per lane (steps, compute,
collectives, input, compile, waits & other); ``X`` events with ``ts``/``dur`` in
microseconds; HBM use as ``C`` counter events. Trace viewers slow down past
about a million events, so by default only a window of steps (and, for very
large pods, chips) is written, and the report says what was cut and the flags
that widen it.

Parquet and CSV go through DuckDB's own writers (``COPY ... TO``), one file per
table, into a directory. Every output is written under a temporary name and
renamed into place, so a failed export leaves nothing half-written.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from engine.errors import InputError, ProfilerError

from .format import chip_ranges as format_chips
from .sampled import describe_sample, reason_counts, sampled_chips
from .schema import quote_ident
from .store import Database, resolve_run

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "LANES",
    "ExportReport",
    "export_run",
    "parse_steps",
    "parse_chips",
]

#: events written by default; Perfetto UI and chrome://tracing degrade past ~1M events
DEFAULT_MAX_EVENTS = 400_000

#: HBM counter points per step and chip at most (a long memory timeline is thinned to these)
MAX_COUNTER_POINTS = 16

#: lane (thread) of each event kind: (tid, thread name); tid 1 is the steps lane
STEPS_TID = 1
LANES: dict[str, tuple[int, str]] = {
    "compute": (2, "compute"),
    "collective": (3, "collectives"),
    "input_wait": (4, "input"),
    "recompile": (5, "compile"),
    "sync_wait": (6, "waits & other"),
    "bubble": (6, "waits & other"),
    "other": (6, "waits & other"),
}
_THREADS = {STEPS_TID: "steps", **{tid: name for tid, name in LANES.values()}}
_NS_PER_US = 1000.0

_CHIPS_SQL = "SELECT chip, host, slice, x, y, z FROM chips WHERE run_id = $id ORDER BY slice, x, y, z, chip"
_STEPS_SQL = "SELECT step, start_ns, step_ns FROM steps WHERE run_id = $id ORDER BY step"
_STEP_COUNTS_SQL = "SELECT step, count(*) AS n FROM events WHERE run_id = $id GROUP BY step ORDER BY step"
# Trace events are formatted by DuckDB (vectorised), exact to the nanosecond: ts = us.nnn.
_LANE_CASE = "CASE kind " + " ".join(f"WHEN '{k}' THEN {tid}" for k, (tid, _) in LANES.items()) + f" ELSE {LANES['other'][0]} END"
_WINDOW_EVENTS_SQL = f"""
SELECT printf('{{"ph":"X","pid":%d,"tid":%d,"ts":%d.%03d,"dur":%d.%03d,"name":"%s","cat":"%s","args":{{"step":%d}}}}',
              chip + 1, {_LANE_CASE}, start_ns // 1000, start_ns % 1000, dur_ns // 1000, dur_ns % 1000, kind, kind, step) AS line
FROM events
WHERE run_id = $id AND step >= $s0 AND step < $s1 AND chip = ANY($chips)
ORDER BY chip, start_ns
"""
_STEP_LANE_SQL = f"""
SELECT printf('{{"ph":"X","pid":%d,"tid":{STEPS_TID},"ts":%d.%03d,"dur":%d.%03d,"name":"step %d","cat":"step","args":{{"step":%d}}}}',
              c.chip + 1, s.start_ns // 1000, s.start_ns % 1000, s.step_ns // 1000, s.step_ns % 1000, s.step, s.step) AS line
FROM steps s, (SELECT unnest($chips) AS chip) c
WHERE s.run_id = $id AND s.step >= $s0 AND s.step < $s1
ORDER BY c.chip, s.step
"""
_SUMMARY_SQL = "SELECT name, summary FROM runs WHERE run_id = $id"
_HAS_TABLE_SQL = "SELECT count(*) FROM information_schema.tables WHERE table_name = $t"
_MEMORY_SQL = """
SELECT point, category, bytes FROM extra_memory_timeline WHERE run_id = $id ORDER BY point, category
"""
_EXTRA_TABLES_SQL = "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'extra_%' ORDER BY table_name"

#: per-run tables exported as Parquet/CSV; events and step-level tables honour the window
_TABLE_QUERIES: dict[str, str] = {
    "runs": "SELECT * FROM runs WHERE run_id = $id",
    "chips": "SELECT * FROM chips WHERE run_id = $id AND chip = ANY($chips) ORDER BY chip",
    "steps": "SELECT * FROM steps WHERE run_id = $id AND step >= $s0 AND step < $s1 ORDER BY step",
    "events": """SELECT * FROM events WHERE run_id = $id AND step >= $s0 AND step < $s1 AND chip = ANY($chips)
                 ORDER BY chip, start_ns""",
    "step_kind": "SELECT * FROM step_kind WHERE run_id = $id AND step >= $s0 AND step < $s1 ORDER BY step, kind",
    "chip_kind": "SELECT * FROM chip_kind WHERE run_id = $id AND chip = ANY($chips) ORDER BY chip, kind",
}


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote, and what it left out.

    ``steps`` is the half-open step window written; ``chips`` the chip ids written.
    """

    run_id: int
    path: Path
    format: str
    events: int
    steps: tuple[int, int]
    total_steps: int
    chips: tuple[int, ...]
    total_chips: int
    files: tuple[str, ...] = ()
    summary_mode: bool = False
    #: a sampled run: the sentence of profiler.sampled.describe_sample, and the chips that have events
    sample_text: str | None = None
    sampled_chips: tuple[int, ...] = ()

    @property
    def event_chips(self) -> int:
        """Chips the run holds events of: the sampled ones, or all."""
        return len(self.sampled_chips) if self.sample_text else self.total_chips

    @property
    def cut(self) -> bool:
        return self.steps != (0, self.total_steps) or len(self.chips) < self.event_chips

    def message(self) -> str:
        """A human sentence: what was written, what was cut and how to widen it."""
        s0, s1 = self.steps
        head = f"wrote {self.events:,} events of run {self.run_id} to {self.path}"
        if self.summary_mode:
            head += " (the run was simulated with sim.trace = \"summary\": it has step times but no per-chip events)"
        if self.sample_text:
            head += f' (the run was simulated with sim.trace = "sampled": it holds the {self.sample_text}; the other chips have totals only)'
        if not self.cut:
            every = f"all {self.total_chips} chips" if not self.sample_text else f"all {self.event_chips} sampled chips"
            return f"{head} (all {self.total_steps} steps, {every})"
        parts = []
        if (s0, s1) != (0, self.total_steps):
            parts.append(f"steps {s0}:{s1} of 0:{self.total_steps}")
        if len(self.chips) < self.event_chips:
            of = f"{self.event_chips} sampled" if self.sample_text else f"{self.total_chips}"
            parts.append(f"{len(self.chips)} of {of} chips ({format_chips(self.chips)})")
        return (
            f"{head}; window: {', '.join(parts)}. "
            f"Widen with --steps 0:{self.total_steps} --chips 0-{self.total_chips - 1} "
            f"(viewers slow down past ~1M events; --max-events raises the default cap of {DEFAULT_MAX_EVENTS:,})"
        )


def parse_steps(text: str | None, total_steps: int) -> tuple[int, int] | None:
    """Parse ``A:B`` (half-open; either side may be omitted) into a clamped step window.

    Raises
    ------
    InputError
        If the text is not ``A:B`` with integers, or selects no step.
    """
    if text is None:
        return None
    a, sep, b = text.partition(":")
    try:
        s0 = int(a) if a.strip() else 0
        s1 = int(b) if sep and b.strip() else (total_steps if sep else s0 + 1)
    except ValueError:
        raise InputError(f"--steps {text!r}: expected A:B with integer steps, e.g. 0:20") from None
    s0, s1 = max(0, s0), min(total_steps, s1)
    if s0 >= s1:
        raise InputError(f"--steps {text!r} selects no step; the run has steps 0:{total_steps}")
    return s0, s1


def parse_chips(text: str | None, valid: np.ndarray) -> tuple[int, ...] | None:
    """Parse ``0-7,12,16-31`` into sorted chip ids, each checked against ``valid``.

    Raises
    ------
    InputError
        On bad syntax or a chip the run does not have.
    """
    if text is None:
        return None
    out: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise InputError(f"--chips {text!r}: expected a list like 0-7,12,16-31") from None
        if b < a:
            raise InputError(f"--chips {text!r}: range {part!r} is empty")
        out.update(range(a, b + 1))
    missing = sorted(out.difference(valid.tolist()))
    if missing:
        raise InputError(f"--chips {text!r}: the run has chips 0-{int(valid.max())}; no chip {missing[0]}")
    return tuple(sorted(out))


def _choose_window(
    step_counts: np.ndarray,
    chips_sorted: np.ndarray,
    steps: tuple[int, int] | None,
    chips: tuple[int, ...] | None,
    max_events: int,
    per_chip_step: int = 1,
) -> tuple[tuple[int, int], tuple[int, ...]]:
    """Pick the default window: as many leading steps (and chips in coordinate order) as fit ``max_events``.

    Event counts are estimated per chip from each step's count, plus ``per_chip_step``
    records every chip writes in every step (its steps-lane event and HBM counter points).
    """
    total_steps, total_chips = len(step_counts), len(chips_sorted)
    per_chip = step_counts / max(total_chips, 1) + per_chip_step  # records per chip in each step
    if chips is None:
        s0, s1 = steps if steps is not None else (0, 1)
        worst = float(per_chip[s0:s1].sum()) if steps is not None else float(per_chip.max(initial=1.0))
        k = total_chips if worst * total_chips <= max_events else max(1, int(max_events // max(worst, 1.0)))
        chips = tuple(sorted(int(c) for c in chips_sorted[:k]))
    if steps is None:
        cum = np.cumsum(per_chip * len(chips))
        n = int(np.searchsorted(cum, max_events, side="right"))
        steps = (0, max(1, min(total_steps, n)))
    return steps, chips


def _open_text_out(path: Path) -> io.TextIOBase:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "wb", compresslevel=6), encoding="utf-8")
    return open(path, "w", encoding="utf-8")


def _write_perfetto(
    con: Any, run_id: int, out: Path, window: tuple[int, int], chips: tuple[int, ...], summary: dict,
    counter_points: list[tuple[float, str]], sample: Any = None,
) -> int:  # fmt: skip
    chip_rows = con.execute(_CHIPS_SQL, {"id": run_id}).fetchall()
    steps_rows = con.execute(_STEPS_SQL, {"id": run_id}).fetchall()
    s0, s1 = window
    chip_set = set(chips)
    reason_of = {} if sample is None else dict(zip(sample["chip"].tolist(), sample["reason"].tolist()))
    n = 0
    with _open_text_out(out) as f:
        f.write('{"displayTimeUnit":"ns","otherData":')
        about = {"run_id": run_id, "name": summary.get("name"), "chip": summary.get("chip"), "topology": summary.get("topology"),
                 "steps": [s0, s1]}  # fmt: skip
        if sample is not None:  # which chips have events, and why (profiler/sampled.py)
            about["sampled"] = {"chips": len(sample), "of_chips": len(chip_rows), "reasons": reason_counts(sample),
                                "description": describe_sample(sample, len(chip_rows))}  # fmt: skip
        f.write(json.dumps({"podscope": about}))
        f.write(',"traceEvents":[\n')
        first = True

        def emit(obj: str) -> None:
            nonlocal first, n
            f.write(obj if first else ",\n" + obj)
            first = False
            n += 1

        for rank, (chip, host, slc, x, y, z) in enumerate(chip_rows):
            if chip not in chip_set:
                continue
            pid = chip + 1
            name = f"chip {chip} host {host} slice {slc} ({x},{y},{z})"
            meta = {"name": name, "podscope": {"chip": chip, "host": host, "slice": slc, "x": x, "y": y, "z": z}}
            if chip in reason_of:
                meta["name"] = f"{name} [sampled: {reason_of[chip]}]"
                meta["podscope"]["sampled_reason"] = reason_of[chip]
            emit(json.dumps({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": meta}))
            emit(json.dumps({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": rank}}))
            for tid, tname in _THREADS.items():
                emit(json.dumps({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": tname}}))
                emit(json.dumps({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}))
        window_steps = [r for r in steps_rows if s0 <= r[0] < s1]
        _write_counters(emit, chips, window_steps, counter_points, summary.get("peak_hbm_bytes"))
        params = {"id": run_id, "s0": s0, "s1": s1, "chips": list(chips)}
        for sql in (_STEP_LANE_SQL, _WINDOW_EVENTS_SQL):
            for rb in con.cursor().sql(sql, params=params).to_arrow_reader(65536):
                lines = rb.column(0).to_pylist()
                if lines:
                    f.write(("" if first else ",\n") + ",\n".join(lines))
                    first = False
                    n += len(lines)
        f.write("\n]}\n")
    return n


def _memory_points(con: Any, run_id: int) -> list[tuple[float, str]]:
    """The memory timeline as (fraction of the step, args JSON) counter points, at most MAX_COUNTER_POINTS.

    The memory mechanism's ``extra_memory_timeline`` describes a representative chip over
    one step; long timelines are thinned to evenly spaced points plus the peak, so HBM
    counters cannot crowd out the events within the export's budget.
    """
    if con.execute(_HAS_TABLE_SQL, {"t": "extra_memory_timeline"}).fetchone()[0] == 0:
        return []
    points: dict[int, dict[str, float]] = {}
    for point, category, nbytes in con.execute(_MEMORY_SQL, {"id": run_id}).fetchall():
        points.setdefault(int(point), {})[str(category)] = float(nbytes)
    order = sorted(points)
    keep = list(range(len(order)))
    if len(order) > MAX_COUNTER_POINTS:
        peak = max(keep, key=lambda i: sum(points[order[i]].values()))
        keep = sorted({*np.linspace(0, len(order) - 1, MAX_COUNTER_POINTS - 1).round().astype(int).tolist(), peak})
    return [(i / len(order), json.dumps(points[order[i]])) for i in keep]


def _write_counters(emit: Any, chips: tuple[int, ...], window_steps: list, points: list[tuple[float, str]], peak: float | None) -> None:
    """HBM use as counter events on every exported chip.

    With a memory timeline, its points are placed at their position within each exported
    step; without one, the summary's ``peak_hbm_bytes`` is a flat line over the window.
    """
    if not window_steps:
        return
    if points:
        for chip in chips:
            for _step, start_ns, step_ns in window_steps:
                for frac, args in points:
                    ts_ns = start_ns + int(step_ns * frac)
                    emit(f'{{"ph":"C","pid":{chip + 1},"name":"HBM bytes","ts":{ts_ns // 1000}.{ts_ns % 1000:03d},"args":{args}}}')
        return
    if peak is None:
        return
    t0 = window_steps[0][1] / _NS_PER_US
    t1 = (window_steps[-1][1] + window_steps[-1][2]) / _NS_PER_US
    for chip in chips:
        for ts in (t0, t1):
            emit(json.dumps({"ph": "C", "pid": chip + 1, "name": "HBM bytes", "ts": round(ts, 3), "args": {"peak": float(peak)}}))


def _write_tables(con: Any, run_id: int, out_dir: Path, fmt: str, window: tuple[int, int], chips: tuple[int, ...]) -> tuple[list[str], int]:
    params = {"id": run_id, "s0": window[0], "s1": window[1], "chips": list(chips)}
    files = []
    events = 0
    queries = dict(_TABLE_QUERIES)
    for (table,) in con.execute(_EXTRA_TABLES_SQL).fetchall():
        queries[table] = f"SELECT * FROM {quote_ident(table)} WHERE run_id = $id"
    for table, sql in queries.items():
        used = {k: v for k, v in params.items() if f"${k}" in sql}
        rel = con.cursor().sql(sql, params=used)  # a cursor: relations refuse a connection with a pending result
        target = out_dir / f"{table}.{fmt}"
        if fmt == "parquet":
            rel.write_parquet(str(target))
        else:
            rel.write_csv(str(target))
        files.append(target.name)
        if table == "events":
            events = con.cursor().sql(sql, params=used).aggregate("count(*)").fetchall()[0][0]
    return files, int(events)


def _check_perfetto_target(out: Path, force: bool) -> None:
    """Refuse to replace what exists at ``out`` unless ``force`` and it is a plain regular file."""
    try:
        st = out.lstat()
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot check export path {out}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file (a device, pipe or socket)"
        raise InputError(f"{out} exists and is {what}; export to a new file name")
    if not force:
        raise InputError(f"{out} exists; pass --force to replace it, or choose a new file name")


def export_run(
    db: Database,
    ref: str | int,
    fmt: Literal["perfetto", "parquet", "csv"],
    path: str | os.PathLike[str],
    *,
    steps: str | tuple[int, int] | None = None,
    chips: str | tuple[int, ...] | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
    force: bool = False,
) -> ExportReport:
    """Export one stored run.

    Parameters
    ----------
    db, ref
        The database and the run (id or name).
    fmt
        ``perfetto`` (one JSON file; gzipped if ``path`` ends in ``.gz``), or ``parquet`` /
        ``csv`` (a directory ``path`` with one file per table).
    steps, chips
        The window: ``"A:B"`` (half-open) and ``"0-7,12"``, or already parsed. Perfetto
        export caps the window at ``max_events`` events when either is omitted; Parquet
        and CSV export the whole run unless a window is given.
    force
        Perfetto: replace an existing regular file at ``path`` (never a device, folder or
        other special file). Without it an existing path is refused.

    Returns
    -------
    ExportReport
        What was written and what was cut (``report.message()`` says how to widen it).

    Raises
    ------
    InputError
        Bad window, unknown format, an output path that exists (a Perfetto file without
        ``force``, anything but a regular file even with it; a directory that is not empty).
    RunNotFoundError, ProfilerError
        Missing run; storage or file-system failure.
    """
    if fmt not in ("perfetto", "parquet", "csv"):
        raise InputError(f"unknown export format {fmt!r}; expected perfetto, parquet or csv")
    out = Path(path)
    if fmt == "perfetto":
        _check_perfetto_target(out, force)
    elif out.exists() and out.is_file():
        raise InputError(f"{out} exists and is a file")
    if not out.parent.is_dir():
        raise InputError(f"{out.parent} is not an existing folder")
    if fmt != "perfetto" and out.is_dir() and any(out.iterdir()):
        raise InputError(f"{out} is a directory that is not empty; export into a new or empty directory")
    with db.read() as con:
        run_id = resolve_run(con, ref)
        name, summary_json = con.execute(_SUMMARY_SQL, {"id": run_id}).fetchone()
        summary = json.loads(summary_json) if summary_json else {}
        chip_ids = np.array([r[0] for r in con.execute(_CHIPS_SQL, {"id": run_id}).fetchall()], dtype=np.int64)
        counts = con.execute(_STEP_COUNTS_SQL, {"id": run_id}).fetchall()
        total_steps = int(con.execute("SELECT count(*) FROM steps WHERE run_id = $id", {"id": run_id}).fetchone()[0])
        step_counts = np.zeros(total_steps, dtype=np.float64)
        for step, cnt in counts:
            if 0 <= step < total_steps:
                step_counts[step] = cnt
        win = parse_steps(steps, total_steps) if isinstance(steps, str) or steps is None else tuple(steps)
        sel = parse_chips(chips, chip_ids) if isinstance(chips, str) or chips is None else tuple(sorted(chips))
        counter_points = _memory_points(con, run_id) if fmt == "perfetto" else []
        sample = sampled_chips(con, run_id)
        if fmt == "perfetto":
            event_ids = chip_ids if sample is None else chip_ids[np.isin(chip_ids, sample["chip"].to_numpy())]
            if sample is not None and sel is not None:  # a trace of a chip without events would be empty lanes
                sel = _sampled_only(sel, sample, run_id)
            win, sel = _choose_window(step_counts, event_ids, win, sel, max_events, per_chip_step=1 + len(counter_points))
        else:
            win = win or (0, total_steps)
            sel = sel or tuple(sorted(int(c) for c in chip_ids))
        tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # same file system: rename is atomic
        try:
            if fmt == "perfetto":
                tmp = tmp_dir / out.name
                n = _write_perfetto(con, run_id, tmp, win, sel, summary | {"name": name}, counter_points, sample)
                _check_perfetto_target(out, force)  # again: something may have appeared meanwhile
                tmp.chmod(0o644)
                os.replace(tmp, out)
                files: list[str] = [out.name]
            else:
                files, n = _write_tables(con, run_id, tmp_dir, fmt, win, sel)
                if out.is_dir():
                    out.rmdir()
                tmp_dir.chmod(0o755)  # mkdtemp makes it private; an export is an ordinary folder
                os.replace(tmp_dir, out)
        except OSError as e:
            raise ProfilerError(f"cannot write export {out}: {e}") from e
        finally:
            if tmp_dir.exists():
                shutil.rmtree(tmp_dir, ignore_errors=True)
    return ExportReport(
        run_id=run_id,
        path=out,
        format=fmt,
        events=n,
        steps=(int(win[0]), int(win[1])),
        total_steps=total_steps,
        chips=tuple(int(c) for c in sel),
        total_chips=len(chip_ids),
        files=tuple(files),
        summary_mode=not step_counts.any(),
        sample_text=None if sample is None else describe_sample(sample, len(chip_ids)),
        sampled_chips=() if sample is None else tuple(int(c) for c in sample["chip"]),
    )


def _sampled_only(chips: tuple[int, ...], sample: Any, run_id: int) -> tuple[int, ...]:
    """The chips of ``chips`` a sampled run holds events of.

    Raises
    ------
    InputError
        None of them was sampled.
    """
    kept = tuple(c for c in chips if c in set(sample["chip"].tolist()))
    if not kept:
        raise InputError(
            f"--chips: run {run_id} was simulated with sim.trace = \"sampled\" and holds events of chips "
            f"{format_chips(tuple(sample['chip'].tolist()))} only; none of the chips asked for is among them"
        )
    return kept
