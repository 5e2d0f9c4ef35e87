"""``python -m profiler compile FILE.py:FUNCTION --target v5p-128``: a train step compiled for a TPU slice.

``FUNCTION(target)`` builds the step for a :class:`~profiler.tpu_capture.TpuTarget` and returns
``(fn, args)`` or ``(fn, args, kwargs)``; :func:`~profiler.tpu_capture.capture` compiles it
with libtpu on this machine's CPU and writes the module bundle. The command says where the
bundle went, how much HBM XLA needs per device and whether that fits. Exit status 0 when it
compiled, 3 when XLA ran out of HBM (the bundle is still written), 2 for bad input (no such
file or function, a bad target, jax[tpu] not installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from engine.errors import InputError

from .tpu_capture import TPU_EXTRA_HINT, CaptureResult, TpuTarget, capture, parse_xla_flags, tpu_target

__all__ = ["add_parser", "compile_json", "format_compile", "load_step_builder", "xla_hbm_bytes"]

EXIT_OK, EXIT_OOM = 0, 3


def add_parser(sub: Any) -> None:
    """Register the ``compile`` subcommand on the CLI's subparsers."""
    c = sub.add_parser("compile", help="compile a JAX train step for a TPU slice on this CPU (needs jax[tpu]) and save its HLO bundle")
    c.add_argument("step", metavar="FILE.py:FUNCTION", help="FUNCTION(target) returns (fn, args) or (fn, args, kwargs)")
    c.add_argument("--target", required=True, help="v5p-128, v5e-256, v6e-8, v4-32, or a topology: v5p:4x4x4, tpu7x:2x2x1")
    c.add_argument("--slices", type=int, default=1, help="slices joined over DCN (default 1)")
    c.add_argument("--name", help="bundle name (default: FUNCTION)")
    c.add_argument("-o", "--out", default=".", help="folder for NAME.hlo.txt.gz and NAME.xla.json (default: .)")
    c.add_argument("--xla-flag", action="append", default=[], metavar="NAME=VALUE",
                   help="compile with this XLA option (repeatable; e.g. xla_tpu_enable_async_collective_fusion=true, as "
                        "LIBTPU_INIT_ARGS gives it); the sidecar records it")  # fmt: skip
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=_cmd_compile)


def load_step_builder(spec: str) -> Any:
    """The function named by ``FILE.py:FUNCTION``, from a fresh import of FILE.py.

    Raises
    ------
    InputError
        The spec has no ``:FUNCTION``, the file is missing, or it defines no such function.
    """
    path_text, sep, func_name = spec.rpartition(":")
    if not sep or not path_text or not func_name:
        raise InputError(f"{spec!r}: expected FILE.py:FUNCTION, e.g. tests/fixtures/tpu/example_step.py:make_step")
    path = Path(path_text)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    module_spec = importlib.util.spec_from_file_location(f"_podscope_step_{path.stem}", path)
    if module_spec is None or module_spec.loader is None:
        raise InputError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ("jax", "jaxlib", "libtpu"):
            raise
        raise InputError(f"{path} imports {e.name}, which is not installed: {TPU_EXTRA_HINT}") from e
    func = getattr(module, func_name, None)
    if not callable(func):
        defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_") and getattr(v, "__module__", "") == module.__name__)
        raise InputError(f"{path} defines no function {func_name!r}; it defines: {', '.join(defined) or 'none'}")
    return func


def _built(func_name: str, built: Any) -> tuple[Any, tuple, dict]:
    if isinstance(built, tuple) and len(built) in (2, 3):
        fn, args, *rest = built
        kwargs = rest[0] if rest else {}
        if callable(fn) and isinstance(args, (tuple, list)) and isinstance(kwargs, dict):
            return fn, tuple(args), kwargs
    raise InputError(f"{func_name}(target) must return (fn, args) or (fn, args, kwargs) with args a tuple, got {type(built).__name__}")


def xla_hbm_bytes(result: CaptureResult) -> int | None:
    """HBM XLA needs per device: arguments + outputs - aliased (donated) + temporaries; None when out of HBM."""
    m = result.memory
    if m is None:
        return None
    return m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"]


def compile_json(result: CaptureResult, target: TpuTarget) -> dict[str, Any]:
    """The ``--json`` object."""
    side = json.loads(result.sidecar_path.read_text())
    return {
        "sidecar": str(result.sidecar_path),
        "module": None if result.module_path is None else str(result.module_path),
        "target": target.name,
        "topology": target.topology,
        "slices": target.slices,
        "devices": side["devices"],
        "oom": side["oom"],
        "hbm_bytes_per_device": xla_hbm_bytes(result),
        "memory": result.memory,
        "compile_s": result.compile_s,
        "xla_flags": side.get("xla_flags", {}),
    }


def format_compile(result: CaptureResult, target: TpuTarget) -> str:
    gib = 2**30
    where = f"{target.topology}{f' x {target.slices} slices' if target.slices > 1 else ''}"
    lines = [f"bundle   {result.sidecar_path}" + (f"\n         {result.module_path}" if result.module_path else "")]
    side = json.loads(result.sidecar_path.read_text())
    if result.oom:
        oom = side["oom"]
        sizes = ""
        if oom["required_bytes"] is not None and oom["available_bytes"] is not None:
            sizes = f": needs {oom['required_bytes'] / gib:,.2f} GiB of {oom['available_bytes'] / gib:,.2f} GiB"
        lines.append(f"OUT OF MEMORY on {where} ({side['device_kind']}){sizes}")
        lines.append(f"  XLA: {oom['message'].splitlines()[0][:300]}")
    else:
        m = result.memory
        lines.append(
            f"fits on {where} ({side['devices']} x {side['device_kind']}): XLA needs {xla_hbm_bytes(result) / gib:,.3f} GiB "
            f"per device (arguments {m['argument_bytes'] / gib:,.3f} + outputs {m['output_bytes'] / gib:,.3f} "
            f"- donated {m['alias_bytes'] / gib:,.3f} + temporaries {m['temp_bytes'] / gib:,.3f})"
        )
    flags = side.get("xla_flags") or {}
    lines.append(f"compiled in {result.compile_s:,.1f} s" + (f" with {', '.join(f'{k}={v}' for k, v in flags.items())}" if flags else ""))
    return "\n".join(lines)


def _cmd_compile(args: argparse.Namespace) -> int:
    flags = parse_xla_flags(args.xla_flag)
    target = tpu_target(args.target, slices=args.slices)
    builder = load_step_builder(args.step)
    func_name = args.step.rpartition(":")[2]
    fn, fn_args, fn_kwargs = _built(func_name, builder(target))
    result = capture(fn, *fn_args, target=target, name=args.name or func_name, out_dir=args.out,
                     progress=not args.json and sys.stderr.isatty(), xla_flags=flags, **fn_kwargs)  # fmt: skip
    print(json.dumps(compile_json(result, target)) if args.json else format_compile(result, target))
    return EXIT_OOM if result.oom else EXIT_OK
