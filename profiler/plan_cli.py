"""``python -m profiler plan PLAN.toml``: search slice, mesh and knobs for the best configuration.

Prints the ranked best candidates and the Pareto front (chips vs throughput), or with
``--json`` one object (see docs/planner.md); a progress bar goes to stderr. ``--xla`` compiles
the best ``--top`` candidates for their targets with the TPU compiler and gives XLA's HBM peak
and verdict beside Podscope's. ``--db`` simulates the best ``--top`` candidates fully and stores
them as runs. A bad plan, or ``--xla`` without jax[tpu], is reported before anything is searched
or written (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.errors import InputError
from engine.planning.search import PlanResult

from . import plan as plans
from .cli_output import positive_int

__all__ = ["add_parser", "format_result"]


def add_parser(sub: Any) -> None:
    """Register the ``plan`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("plan", help="search slice, mesh and knobs for the best configuration (the planner)")
    p.add_argument("plan", help="plan TOML file, or a bundled plan's name (e.g. llm-7b-v5p); see docs/planner.md")
    p.add_argument("--json", action="store_true", help="print one JSON object: candidates, feasible, infeasible, best, pareto")
    p.add_argument("--top", type=positive_int, default=5, help="best candidates to list (and to store with --db); default 5")
    p.add_argument("--db", help="store the best --top candidates as fully simulated runs in this DuckDB file")
    p.add_argument("--xla", action="store_true", help="compile the best --top candidates for their chip and topology with the "
                   "TPU compiler (needs podscope[tpu]) and give XLA's HBM peak and fits verdict beside Podscope's; with "
                   "--db the stored runs take XLA's (hbm_source = \"xla\")")  # fmt: skip
    p.add_argument("--xla-flag", action="append", default=[], metavar="NAME=VALUE",
                   help="with --xla: compile with this XLA option (repeatable, as LIBTPU_INIT_ARGS gives it)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_plan)


def _cmd_plan(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from .tpu_capture import parse_xla_flags

    flags = parse_xla_flags(args.xla_flag, compiling=args.xla)
    plan = plans.load_plan(plans.plan_path(args.plan))  # bad input fails here: nothing searched, nothing written
    if args.db and not Path(args.db).expanduser().resolve().parent.exists():  # a typo must not start a new database
        raise InputError(f"--db {args.db}: folder {Path(args.db).expanduser().resolve().parent} does not exist; check the path")
    if args.xla:
        from .tpu_capture import require_tpu_compiler

        require_tpu_compiler()
    xla_rows = None
    with Progress(console=Console(stderr=True), transient=True, disable=args.quiet) as bar:
        task = bar.add_task("planning", total=plan.space_size)
        result = plans.run_plan(plan, progress=lambda done, total: bar.update(task, completed=done, total=total))
        if args.xla:
            compiling = bar.add_task("compiling the best with XLA", total=args.top)
            xla_rows = plans.xla_check_best(result, args.top, progress=lambda done, total: bar.update(compiling, completed=done, total=total),
                                            xla_flags=flags)  # fmt: skip
    out = plans.with_hbm_verdicts(result, result.to_json(args.top))
    if xla_rows is not None:
        for b, row in zip(out["best"], xla_rows):
            b["xla"] = {k: v for k, v in row.items() if k not in ("rank", "record")}
        out["xla"] = plans.xla_summary(xla_rows)
    if args.db:
        from .store import Database

        ids = plans.store_best(Database(args.db), result, args.top, xla=xla_rows)
        out["stored_run_ids"] = ids
        print(f"stored the best {len(ids)} as runs {', '.join(map(str, ids))} in {args.db}", file=sys.stderr)
    if args.json:
        print(json.dumps(out))
    else:
        Console().print(format_result(result, out))
    return 0


def _seconds(x: float) -> str:
    return f"{x:,.2f} s" if x >= 1 else f"{x * 1e3:,.1f} ms"


def _si(x: float | None) -> str:
    if x is None:
        return "-"
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:,.2f} {unit}"
    return f"{x:,.2f}"


def format_result(result: PlanResult, out: dict[str, Any]) -> Any:
    """The ranked table and the Pareto front as rich renderables."""
    from rich.console import Group
    from rich.table import Table

    plan = result.plan
    head = (
        f"[b]{plan.base.name}[/b]: {out['candidates']:,} candidates in {out['elapsed_s']:.2f} s "
        f"({out['candidates'] / max(out['elapsed_s'], 1e-9):,.0f}/s), {out['feasible']:,} feasible; "
        f"objective {plan.objective} (the last column)"
    )
    why = ", ".join(f"{n:,} {reason}" for reason, n in sorted(out["infeasible"].items(), key=lambda kv: -kv[1]))
    best = Table(title="Best configurations", title_justify="left")
    knob_cols = [k.split(".")[-1] for k in plan.knobs]
    checked = "xla" in out
    for col in ("#", "chips", *knob_cols, MESH_HEADER, "step", "tokens/s", "samples/s", "HBM", *(["HBM (XLA)"] if checked else []),
                "objective"):  # fmt: skip
        best.add_column(col, justify="left" if col in knob_cols else "right")
    for b in out["best"]:
        knobs = [str(_dotted(b["scenario"], k)) for k in plan.knobs]
        mesh = _mesh(b["mesh"])
        xla_col = [_xla_cell(b["xla"])] if checked else []
        best.add_row(str(b["rank"]), str(b["chips"]), *knobs, mesh, _seconds(b["step_time_s"]), _si(b["tokens_per_s"]),
                     _si(b["samples_per_s"]), _hbm_cell(b), *xla_col, _si(b["objective"]))  # fmt: skip
    front = Table(title="Pareto front (fewer chips, more throughput)", title_justify="left")
    key = result.throughput_key
    for col in ("chips", *knob_cols, MESH_HEADER, "step", key.replace("_per_s", "/s"), "per chip"):
        front.add_column(col, justify="left" if col in knob_cols else "right")
    for p in out["pareto"]:
        mesh = _mesh(p["mesh"])
        front.add_row(str(p["chips"]), *[str(p["knobs"][k]) for k in plan.knobs], mesh, _seconds(p["step_time_s"]),
                      _si(p[key]), _si(p[key] / p["chips"]))  # fmt: skip
    parts: list[Any] = [head]
    if why:
        parts.append(f"infeasible: {why}")
    parts += [best, front] if out["best"] else ["[b]no feasible configuration[/b]: widen the search (bigger slices, remat)"]
    if checked and out["best"]:
        parts.insert(-1, _xla_text(out))
    return Group(*parts)


def _hbm_cell(b: dict[str, Any]) -> str:
    """The best table's HBM column: Podscope's peak, marked where the range of XLA's peak holds the usable HBM."""
    cell = f"{b['peak_hbm_bytes'] / 2**30:.1f} GiB"
    return cell + " (may not fit)" if b.get("hbm_verdict") == "may not fit" else cell


def _xla_cell(x: dict[str, Any]) -> str:
    """The best table's XLA column: its peak, its refusal for want of HBM, or why it was not compiled."""
    if x["refusal"] is not None:
        return "not compiled"
    if x["oom"]:
        need = x.get("required_bytes")
        return f"OOM: needs {need / 2**30:.1f} GiB" if need else "OOM"
    return f"{x['peak_hbm_bytes'] / 2**30:.1f} GiB"


def _xla_text(out: dict[str, Any]) -> str:
    """What the TPU compiler said of the best candidates, in a few lines."""
    s = out["xla"]
    lines = [f"XLA (jax {s['jax_version'] or '-'}, libtpu {s['libtpu_version'] or '-'}) compiled the best {s['checked']} for "
             f"their chips and topologies: {s['fit']} fit, {s['out_of_memory']} out of HBM, {s['not_compiled']} not compiled"]  # fmt: skip
    for b in out["best"]:
        x = b["xla"]
        if x["refusal"] is not None:
            lines.append(f"  #{b['rank']} not compiled: {x['refusal']}")
        elif x["oom"]:
            lines.append(f"  #{b['rank']} out of HBM for XLA where Podscope says it fits: {x['oom_message']}")
        elif not x["verdicts_agree"]:
            lines.append(f"  #{b['rank']} fits for XLA where Podscope says it does not")
        if x.get("compute_diff_pct") is not None:
            lines.append(f"  #{b['rank']} compute per step {_seconds(x['podscope_compute_s'])}, XLA's cycle estimates "
                         f"{_seconds(x['compute_s'])} ({x['compute_diff_pct']:+.0f}%; its cost model, collectives aside)")  # fmt: skip
    best_fit = s["best_rank_xla_fits"]
    if best_fit is None and s["fit"] == 0 and s["checked"] > s["not_compiled"]:
        lines.append("  none of them fits for XLA: widen the search (more chips, remat) or raise --top")
    elif best_fit is not None and best_fit != 1:
        lines.append(f"  the best configuration XLA fits is #{best_fit}")
    return "\n".join(lines)


MESH_HEADER = "data×fsdp×tensor"


def _mesh(mesh: dict[str, int] | None) -> str:
    return "×".join(str(v) for v in mesh.values()) if mesh else "base"


def _dotted(raw: dict[str, Any], key: str) -> Any:
    node: Any = raw
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node
