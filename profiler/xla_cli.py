"""``python -m profiler xla-check SCENARIO``: a built-in scenario's HBM peak and FLOPs, Podscope's beside XLA's.

Builds the scenario's JAX train step (:mod:`profiler.xla_reference`), compiles it with libtpu for
the scenario's own chip and topology on this CPU, and prints Podscope's HBM peak per chip with its
terms beside XLA's (arguments + outputs - aliased + temporaries), the difference in percent, the
FLOPs per chip per step on both sides and both fits / out-of-memory verdicts
(:mod:`profiler.xla_check`), and the collective time the engine leaves exposed beside what XLA's compiled schedule
leaves, with ``--xla-flag`` the options the job compiles with. Exit status 0 when both sides answered (whatever the verdicts),
2 for bad input (a scenario that is not a dense transformer, an unmapped axis, jax[tpu] missing).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine.errors import InputError
from engine.scenario import load_scenario

__all__ = ["add_parser"]

EXIT_OK = 0


def add_parser(sub: Any) -> None:
    """Register the ``xla-check`` subcommand on the CLI's subparsers."""
    x = sub.add_parser("xla-check", help="compile a built-in scenario's JAX step for its TPU (needs jax[tpu]) and set "
                       "Podscope's HBM peak and FLOPs beside XLA's")  # fmt: skip
    x.add_argument("scenario", help="scenario TOML file, or a bundled scenario's name")
    x.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key (repeatable)")
    x.add_argument("--xla-flag", action="append", default=[], metavar="NAME=VALUE",
                   help="compile with this XLA option (repeatable; e.g. xla_tpu_enable_async_collective_fusion=true, "
                        "as LIBTPU_INIT_ARGS gives it)")  # fmt: skip
    x.add_argument("--json", action="store_true", help="print one JSON object")
    x.set_defaults(func=_cmd_xla_check)


def _cmd_xla_check(args: argparse.Namespace) -> int:
    from . import api, xla_check, xla_reference
    from .cli_output import parse_set
    from .tpu_capture import parse_xla_flags

    flags = parse_xla_flags(args.xla_flag)
    scenario = load_scenario(api.scenario_path(args.scenario), parse_set(args.set))
    why = xla_reference.refusal(scenario)
    if why:
        raise InputError(f"{args.scenario}: {why}")
    xla = xla_check.compile_numbers(scenario, xla_flags=flags)
    pod = xla_check.podscope_numbers(scenario)
    cmp = xla_check.compare(pod, xla)
    if args.json:
        print(json.dumps({"scenario": scenario.name, **cmp, "xla_compile": xla}))
    else:
        print(xla_check.format_check(scenario.name, cmp, xla))
    return EXIT_OK
