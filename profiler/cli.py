"""``python -m profiler``: the command line.

Exit status: 0 success; 1 a Podscope error at run time (storage, missing run, a sweep
point that failed); 2 bad input (scenario, sweep file, arguments, a trace that cannot be
imported: nothing written); 3 the run was stored but does not fit in HBM.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.errors import InputError, PlanError, PodscopeError, ReferenceFileError, ScenarioError, TraceImportError
from engine.scenario.names import printable
from rich.markup import escape as markup_escape

from . import api, cli_output, collective_cli, hlo_cli, plan_cli, queries, tpu_cli, xla_cli
from .cli_output import positive_int
from .store import Database, delete_run

__all__ = ["main", "EXIT_OK", "EXIT_ERROR", "EXIT_BAD_INPUT", "EXIT_OOM"]

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_OOM = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 already; keep the message plain
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _fmt_summary(s: dict[str, Any]) -> str:
    return printable(cli_output.summary_text(s), keep_newlines=True)


def _database(args: argparse.Namespace) -> Database:
    """The database ``--db`` (or $PODSCOPE_DB) names, refusing a folder that does not exist.

    A typo in ``--db`` would otherwise create a new, empty database and hide every run. With
    ``--create`` the folder is made and stderr says a new database is being started. The
    default location (no --db, no $PODSCOPE_DB) is Podscope's own and is created as needed.
    """
    db = Database(args.db)
    folder = db.path.parent
    given = bool(args.db) or bool(os.environ.get("PODSCOPE_DB"))
    where = "--db" if args.db else "$PODSCOPE_DB"
    if not given:
        return db
    if not folder.exists():
        if not getattr(args, "create", False):
            raise InputError(
                f"{where} {db.path}: folder {folder} does not exist. Check the path, or pass --create to start a new database there."
            )
        try:
            folder.mkdir(parents=True)
        except OSError as e:
            raise InputError(f"{where} {db.path}: cannot create folder {folder}: {e}") from None
        print(f"created folder {folder} for a new database {db.path}", file=sys.stderr)
    elif getattr(args, "create", False) and not db.path.exists():
        print(f"starting a new database {db.path}", file=sys.stderr)
    return db


def _cmd_run(args: argparse.Namespace) -> int:
    from .tpu_capture import parse_xla_flags

    flags = parse_xla_flags(args.xla_flag, compiling=args.xla)  # bad input fails before a database is opened or made
    db = _database(args)
    what = "Compiling with the TPU compiler and simulating" if args.xla else "Simulating"
    with cli_output.status(f"{what} {args.scenario} ..."):
        summary = api.run_file(api.scenario_path(args.scenario), db, name=args.name, overrides=cli_output.parse_set(args.set),
                               xla=args.xla, xla_flags=flags)  # fmt: skip
    print(json.dumps(summary) if args.json else _fmt_summary(summary))
    return EXIT_OOM if summary.get("oom") else EXIT_OK


def _cmd_runs(args: argparse.Namespace) -> int:
    db = _database(args)
    with db.read() as con:
        df = queries.list_runs(con)
    if args.json:
        print(df.to_json(orient="records", date_format="iso"))
    elif df.empty:
        print(f"no runs in {db.path}")
    else:
        for col in df.columns:  # names and imported device kinds: no raw control bytes, no rich markup
            df[col] = df[col].map(lambda v: markup_escape(printable(v)) if isinstance(v, str) else v)
        cli_output.print_table(cli_output.runs_table(df))
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    from . import validation  # imported on use: the run/runs commands do not need it

    with cli_output.status("Simulating the published configurations ..."):
        v = validation.run_validation(args.reference, args.calibration)
    if args.json:
        print(json.dumps(v.to_json()))
    else:
        print(cli_output.validation_text(validation.format_report(v), len(v.skipped), args.verbose))
    return EXIT_OK


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from . import calibrate

    with cli_output.status("Fitting the calibration and refitting it without each chip generation and family (a few minutes) ..."):
        report = calibrate.calibrate(args.reference, args.out, family_folds=not args.no_family_folds)
    print(json.dumps(report) if args.json else calibrate.format_fit(report))
    return EXIT_OK


def _cmd_delete(args: argparse.Namespace) -> int:
    db = _database(args)
    run_id = delete_run(db, args.run)
    print(f"deleted run {run_id} from {db.path}")
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    from .check import check_database

    report = check_database(Database(args.db))
    print(report.message())
    return EXIT_OK if report.ok else EXIT_ERROR


def _cmd_export(args: argparse.Namespace) -> int:
    from .export import DEFAULT_MAX_EVENTS, export_run

    db = _database(args)
    with cli_output.status(f"Exporting run {args.run} as {args.format} ..."):
        report = export_run(
            db, args.run, args.format, args.output, steps=args.steps, chips=args.chips,
            max_events=args.max_events or DEFAULT_MAX_EVENTS, force=args.force,
        )  # fmt: skip
    print(report.message(), file=sys.stderr)
    return EXIT_OK


def _cmd_import(args: argparse.Namespace) -> int:
    from .trace_import import import_trace

    db = _database(args)
    with cli_output.status(f"Importing {args.trace} ..."):
        run_id = import_trace(db, args.trace, name=args.name)
    with db.read() as con:
        summary = queries.run_summary(con, run_id)
    print(json.dumps(summary) if args.json else _fmt_summary(summary))
    return EXIT_OK


def _cmd_sweep(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from .sweep import load_sweep, make_executor, run_sweep
    from .tpu_capture import parse_xla_flags, require_tpu_compiler

    load_sweep(args.sweep)  # bad input fails before any worker starts
    flags = parse_xla_flags(args.xla_flag, compiling=args.xla)
    if args.xla:
        require_tpu_compiler()
    db = _database(args)
    executor, close = make_executor(args.executor, address=args.address, workers=args.workers)
    try:
        with Progress(transient=False, disable=args.quiet, console=cli_output.stderr_console()) as bar:
            task = bar.add_task("sweep", total=None)

            def progress(done: int, total: int, message: str) -> None:
                bar.update(task, completed=done, total=total, description=message[-60:])

            result = run_sweep(args.sweep, db, executor, progress=progress, xla_flags=flags if args.xla else None)
    finally:
        close()
    print(
        f"sweep {result.name}: {result.points} points, {len(result.stored)} stored now, "
        f"{len(result.skipped)} already stored, {len(result.failed)} failed",
        file=sys.stderr,
    )
    for point, error in result.failed:
        print(f"  failed {point}: {printable(error.splitlines()[0])}", file=sys.stderr)
    return EXIT_ERROR if result.failed else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    prog = "podscope" if Path(sys.argv[0]).name == "podscope" else "python -m profiler"  # the console script or -m
    p = _Parser(prog=prog, description="Podscope: simulate and profile training on TPU pods.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def db_arg(sp: argparse.ArgumentParser, create: bool = False) -> None:
        sp.add_argument("--db", help="DuckDB file (default: $PODSCOPE_DB, else podscope.duckdb in data/ of a checkout or "
                                     "~/.local/share/podscope); a folder given here must exist")  # fmt: skip
        if create:
            sp.add_argument("--create", action="store_true", help="start a new database, creating the --db folder if needed")

    r = sub.add_parser("run", help="simulate a scenario and store the run")
    r.add_argument("scenario", help="scenario TOML file, or a bundled scenario's name (e.g. resnet50-v3-32)")
    db_arg(r, create=True)
    r.add_argument("--name", help="run name (default: the scenario's name)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key (repeatable)")
    r.add_argument("--json", action="store_true", help="print the run summary as one JSON object")
    r.add_argument("--xla", action="store_true", help="compile the scenario's JAX program (transformer, mlp or resnet50 "
                   "family) with the TPU compiler (needs podscope[tpu]) and take XLA's HBM peak and out-of-memory verdict")  # fmt: skip
    r.add_argument("--xla-flag", action="append", default=[], metavar="NAME=VALUE",
                   help="with --xla: compile with this XLA option (repeatable, as LIBTPU_INIT_ARGS gives it)")
    r.set_defaults(func=_cmd_run)

    ls = sub.add_parser("runs", help="list stored runs")
    db_arg(ls)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_cmd_runs)

    d = sub.add_parser("delete", help="delete a run and all its rows")
    d.add_argument("run", help="run id, or name (the newest run of that name)")
    db_arg(d)
    d.set_defaults(func=_cmd_delete)

    ck = sub.add_parser("check", help="read every table of the database in full; say which runs still read if damaged")
    db_arg(ck)
    ck.set_defaults(func=_cmd_check)
    ex = sub.add_parser("export", help="export a run: Perfetto/chrome://tracing JSON, or its tables as Parquet/CSV")
    ex.add_argument("run", help="run id or name")
    ex.add_argument("--format", required=True, choices=["perfetto", "parquet", "csv"])
    ex.add_argument("-o", "--output", required=True, help="file (perfetto; .gz to compress) or new directory (parquet/csv)")
    ex.add_argument("--steps", help="half-open step window A:B (default for perfetto: as many as fit --max-events)")
    ex.add_argument("--chips", help="chips, e.g. 0-7,12 (default for perfetto: all that fit)")
    ex.add_argument("--max-events", type=positive_int, help="perfetto: cap on events when the window is not given")
    ex.add_argument("--force", action="store_true", help="perfetto: replace an existing regular file (never a device or folder)")
    db_arg(ex)
    ex.set_defaults(func=_cmd_export)

    im = sub.add_parser("import", help="import a Chrome Trace Event JSON (.json/.json.gz) or an XProf .xplane.pb as a run")
    im.add_argument("trace", help="torch.profiler, JAX/TensorFlow *.trace.json.gz, XProf *.xplane.pb (needs xprof), or Podscope export")
    im.add_argument("--name", help="run name (default: the file name)")
    im.add_argument("--json", action="store_true", help="print the run summary as one JSON object")
    db_arg(im, create=True)
    im.set_defaults(func=_cmd_import)

    sw = sub.add_parser("sweep", help="run a parameter sweep (resumable) on a process pool or Dask")
    sw.add_argument("sweep", help="sweep TOML file (see data/sweeps/)")
    sw.add_argument("--executor", choices=["local", "dask"], default="local")
    sw.add_argument("--address", help="Dask scheduler, e.g. tcp://HOST:8786 (default: a loopback LocalCluster)")
    sw.add_argument("--workers", type=positive_int, help="worker processes (local pool or LocalCluster)")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.add_argument("--xla", action="store_true", help="compile each point's JAX program with the TPU compiler (needs "
                    "podscope[tpu] on every worker) and store XLA's HBM peak and verdict, as run --xla does")
    sw.add_argument("--xla-flag", action="append", default=[], metavar="NAME=VALUE",
                    help="with --xla: compile with this XLA option (repeatable, as LIBTPU_INIT_ARGS gives it)")
    db_arg(sw, create=True)
    sw.set_defaults(func=_cmd_sweep)

    collective_cli.add_parser(sub)
    plan_cli.add_parser(sub)
    hlo_cli.add_parser(sub)
    tpu_cli.add_parser(sub)
    xla_cli.add_parser(sub)
    v = sub.add_parser("validate", help="compare predictions with published results (median / p90 / worst %% error)")
    v.add_argument("--reference", help="reference JSON (default: data/reference/published.json)")
    v.add_argument("--calibration", help="calibration TOML (default: data/calibration.toml)")
    v.add_argument("--json", action="store_true", help="print one JSON object: cases, summary, skipped")
    v.add_argument("--verbose", action="store_true", help="also list every reference entry that cannot be expressed, and why")
    v.set_defaults(func=_cmd_validate)

    c = sub.add_parser(
        "calibrate",
        help="fit the general engine parameters to published results; record leave-one-generation-out and "
        "leave-one-family-out errors and the step-time range table",
    )
    c.add_argument("--reference", help="reference JSON (default: data/reference/published.json)")
    c.add_argument("--out", help="calibration TOML to write (default: data/calibration.toml)")
    c.add_argument("--no-family-folds", action="store_true", help="skip leave-one-family-out validation (faster)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_cmd_calibrate)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ScenarioError, PlanError, ReferenceFileError, TraceImportError, InputError) as e:
        print(f"error: {printable(e, keep_newlines=True)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except PodscopeError as e:
        print(f"error: {printable(e, keep_newlines=True)}", file=sys.stderr)
        return EXIT_ERROR
