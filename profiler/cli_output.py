"""What ``python -m profiler`` prints for people: run summaries, the runs table, the validation report,
and progress on stderr.

``--json`` output is built elsewhere (:mod:`profiler.cli`) and never passes through here, so
progress bars and spinners (always on stderr) cannot reach a script reading stdout. Numbers
are formatted by :mod:`profiler.format`, as on the dashboard.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from engine.errors import ScenarioError
from engine.scenario import parse_toml

from . import advice_words
from . import format as fmt

__all__ = ["summary_text", "runs_table", "validation_text", "status", "stderr_console", "print_table", "positive_int", "parse_set"]


def stderr_console() -> Console:
    """Progress and notes go to stderr, so stdout stays the command's answer."""
    return Console(stderr=True)


@contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner on stderr while a long step runs (drawn only on a terminal)."""
    console = stderr_console()
    if not console.is_terminal:
        yield
        return
    with console.status(message):
        yield


def print_table(table: Table) -> None:
    """Print a table to stdout, wide enough for its rows even when stdout is not a terminal."""
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200, soft_wrap=False)
    console.print(table)


def summary_text(s: dict[str, Any]) -> str:
    """The human summary printed by ``run`` and ``import``."""
    pct = fmt.percent
    lines = [
        f"run {s['run_id']} '{s['name']}': {fmt.count(s['chips'])} x {s['chip']} ({s['topology']}, {s['slices']} slice(s)), {s['steps']} steps",
        f"  step time     {fmt.duration(s['step_time_s'])} (median, steady state)" if s.get("step_time_s") else "  step time     n/a",
        f"  throughput    {fmt.rate(s['samples_per_s'], 'samples')}" if s.get("samples_per_s") else "  throughput    n/a",
    ]
    if s.get("tokens_per_s"):
        lines.append(f"  tokens        {fmt.rate(s['tokens_per_s'], 'tokens')}")
    lines.append(f"  MFU           {pct(s.get('mfu'))}   HFU {pct(s.get('hfu'))}")
    parts = ", ".join(f"{k.replace('_', ' ')} {pct(v)}" for k, v in s["breakdown"].items() if v > 0)
    if parts:
        lines.append(f"  chip time     {parts} (whole run, compile included)")
    if s.get("mesh"):
        lines.append(f"  mesh          {s['mesh']}")
    if s.get("peak_hbm_bytes") is not None:
        by = " (XLA's memory analysis)" if s.get("hbm_source") == "xla" else ""
        lines.append(f"  HBM peak      {fmt.gib(s['peak_hbm_bytes'], 2)} of {fmt.gib(s['hbm_capacity_bytes'], 2)} per chip{by}")
        lines += _hbm_range_lines(s)
        if s.get("hbm_source") != "xla" and (s.get("hbm_recomputed_bytes") or 0) > 0:
            lines.append(f"                with XLA's rematerialization recomputing {fmt.gib(s['hbm_recomputed_bytes'], 2)} it would "
                         "keep (its FLOPs not in the step time)")  # fmt: skip
    if s.get("hlo_compute_s") is not None:
        by = "XLA:TPU's cycle estimates" if s.get("compute_source") == "xla" else "Podscope's roofline"
        lines.append(f"  module        compute {fmt.duration(s['hlo_compute_s'])} per step ({by}); collectives "
                     f"{fmt.duration(s['hlo_collective_total_s'])}, {fmt.duration(s['hlo_collective_s'])} of it exposed")  # fmt: skip
    if s.get("oom"):
        lines.extend(_oom_lines(s))
    lines += _time_to_train_lines(s)
    lines += _idle_lines(s)
    return "\n".join(lines)


def _hbm_range_lines(s: dict[str, Any]) -> list[str]:
    """The 80% range of XLA's HBM peak around Podscope's, and what it says where it differs from the point verdict."""
    band, basis = s.get("peak_hbm_range_bytes"), s.get("peak_hbm_range_basis")
    if not band or not basis:
        return []
    lines = [f"                80% range of XLA's peak {fmt.gib(band[0], 2)} to {fmt.gib(band[1], 2)} (its spread around "
             f"Podscope's over {fmt.count(basis['programs'])} compiled '{basis['group']}' programs)"]  # fmt: skip
    usable = s.get("hbm_usable_bytes")
    if s.get("hbm_verdict") == "may not fit" and usable:
        lines.append(f"                {'may fit' if s.get('oom') else 'may not fit'}: the range holds the {fmt.gib(usable, 2)} "
                     "a step may use; --xla compiles it for XLA's verdict")  # fmt: skip
    return lines


def _time_to_train_lines(s: dict[str, Any]) -> list[str]:
    """Steps, time, chip-hours and cost to the scenario's target (only with a ``[convergence]`` section)."""
    if s.get("time_to_train_s") is None:
        return []
    lo, hi = s.get("time_to_train_range_s") or (None, None)
    band = f" (likely {fmt.duration(lo)} to {fmt.duration(hi)})" if lo is not None else ""
    cost = f", {fmt.usd(s['cost_usd'])}" if s.get("cost_usd") is not None else ""
    return [
        f"  to target     {fmt.count(s['steps_to_target'])} steps, {fmt.si(s['samples_to_target'])} samples",
        f"  time to train {fmt.duration(s['time_to_train_s'])}{band}, {fmt.si(s['chip_hours'])} chip-hours{cost}",
    ]


def _oom_lines(s: dict[str, Any]) -> list[str]:
    """Say plainly what overflowed HBM and what would make it fit."""
    d = s.get("oom_detail")
    if not d:
        return ["  OUT OF MEMORY: the job does not fit in HBM (see the Memory page)"]
    if d.get("source") == "xla":
        need = f": it needs {fmt.gib(d['peak_bytes'], 2)} of {fmt.gib(d['usable_bytes'], 2)} per device" if d.get("peak_bytes") else ""
        lines = [f"  OUT OF MEMORY: XLA refused to compile the program for this chip{need}.",
                 f"  XLA: {d.get('message', '')[:500]}", "  What would make it fit:"]  # fmt: skip
        return lines + [f"    - {text}" for text in d.get("suggestions", [])]
    term_bytes = (s.get("hbm_breakdown_bytes") or {}).get(d["term"])
    term = f"{d['term']} ({fmt.gib(term_bytes, 2)})" if term_bytes is not None else d["term"]
    lines = [
        f"  OUT OF MEMORY: chip {d['chip']} (every chip holds the same shards) needs {fmt.gib(d['peak_bytes'], 2)} "
        f"at its peak ({d['phase']}), {fmt.gib(d['over_bytes'], 2)} more than the {fmt.gib(d['usable_bytes'], 2)} usable;",
        f"  the largest term is {term}. What would make it fit:",
    ]
    lines += [f"    - {text}" for text in d.get("suggestions", [])]
    return lines


def _idle_lines(s: dict[str, Any]) -> list[str]:
    """Input wait, compiles, goodput, stragglers, then the advisor's findings."""
    lines = []
    if s.get("input_wait_frac") is not None:
        lines.append(f"  input wait    {fmt.percent(s['input_wait_frac'])} of steady-state chip time")
    if s.get("compile_s"):
        lines.append(f"  compiles      {s.get('recompiles', 0)} recompile(s), {fmt.duration(s['compile_s'])} compiling")
    if s.get("goodput") is not None:
        lines.append(f"  goodput       {fmt.percent(s['goodput'])} of wall time advanced training")
    if s.get("stragglers"):
        more = " ..." if len(s["stragglers"]) > 20 else ""
        lines.append(f"  stragglers    chips {', '.join(map(str, s['stragglers'][:20]))}{more}")
    advice = s.get("advice") or []
    if advice:
        lines.append("advice:")
        for item in advice:
            finding = advice_words.describe(item, s)
            lines.append(f"  [{finding.severity}] {finding.title}: {finding.message}")
    return lines


def runs_table(df: pd.DataFrame) -> Table:
    """The stored runs with formatted numbers (``runs``)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name, justify in (("Run", "right"), ("Name", "left"), ("Source", "left"), ("Chips", "right"), ("Topology", "left"),
                          ("Steps", "right"), ("Step time", "right"), ("Samples/s", "right"), ("MFU", "right"), ("Fits HBM", "left")):  # fmt: skip
        table.add_column(name, justify=justify, no_wrap=name != "Name")
    for r in df.itertuples():
        oom = getattr(r, "oom", None)
        table.add_row(
            str(r.run_id), str(r.name), str(r.source), fmt.chips_label(r.chips, r.chip), str(r.topology or ""), fmt.count(r.steps),
            fmt.duration(r.step_time_s), fmt.si(r.samples_per_s), fmt.percent(r.mfu),
            "n/a" if fmt.is_missing(oom) else ("no (out of memory)" if oom else "yes"),
        )  # fmt: skip
    return table


def validation_text(report: str, n_skipped: int, verbose: bool) -> str:
    """Reorder ``validation.format_report``'s sections for reading: the cases, what was skipped
    (listed only with ``--verbose``), and the summary last, where the eye lands."""
    table, summary, skipped = (report.split("\n\n", 2) + ["", ""])[:3]
    if verbose:
        middle = skipped
    else:
        middle = f"not expressible: {n_skipped} entries (run with --verbose to list them and why)"
    return "\n\n".join(part for part in (table, middle, summary) if part)


def positive_int(text: str) -> int:
    """An argparse ``type`` for counts given on the command line (``--top``, ``--workers``, ...): a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``--set training.global_batch=1024``: values parse as TOML literals, else strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ScenarioError("--set", [(item, "expected KEY=VALUE, e.g. training.global_batch=1024")])
        try:
            out[key.strip()] = parse_toml(f"v = {value}", f"--set {key.strip()}")["v"]
        except ScenarioError as e:
            if e.problems[0][1].startswith("malformed TOML"):
                out[key.strip()] = value  # not a TOML literal: a plain string
            else:
                raise

    return out
