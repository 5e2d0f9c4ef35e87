"""Compile a JAX train step for a real TPU slice on a CPU-only machine and save what XLA made of it.

The TPU compiler (libtpu) runs on the host CPU: ``jax.experimental.topologies`` gives
compile-only devices for any slice shape, so ``jax.jit(step).lower(...).compile()`` yields
the very program a pod would run, with XLA's own memory and cost analysis, and no TPU.
:func:`capture` writes that as a *module bundle* (``NAME.hlo.txt.gz`` + ``NAME.xla.json``,
keys in :mod:`engine.hlo.bundle_format`); a program too large for the chip's HBM still gives a
sidecar, with XLA's message, so "does it fit" is answered by the compiler itself.

``jax[tpu]`` is optional and imported only here, when a target's devices are first asked for:
this module, and everything that imports it, loads without JAX.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.errors import HloError, InputError, TpuCompileError
from engine.hlo.bundle import xla_flag_problems
from engine.hlo.live_range import LivePeak, read_live_peak
from engine.hlo.bundle_format import FORMAT, FORMAT_VERSION, LIVE_PEAK_SUFFIX, MEMORY_KEYS, MODULE_SUFFIX, SIDE_SUFFIX, TOP_KEYS

__all__ = ["TPU_EXTRA_HINT", "CaptureResult", "TpuTarget", "capture", "parse_oom", "parse_xla_flags", "FLAGS_WITHOUT_COMPILE", "require_tpu_compiler", "tpu_compiler_missing",
           "tpu_target"]

#: what to install when JAX or libtpu is missing
TPU_EXTRA_HINT = "pip install 'podscope[tpu]' (or, in a checkout, pip install -r requirements-tpu.txt)"

#: XLA's messages are long (the largest allocations follow); the sidecar keeps this many characters
OOM_MESSAGE_CHARS = 4000


@dataclass(frozen=True)
class _Generation:
    chip: str  # Podscope's catalog key
    topology_prefix: str  # libtpu's topology name prefix
    torus_dims: int
    cores_per_count: int | None  # what the "-N" name counts: 2 = TensorCores of 2-core chips, 1 = chips, None = no -N form
    accelerator_type: str  # a valid TPU_ACCELERATOR_TYPE for libtpu's start-up (see _libtpu_env_for_compiling)


_GENERATIONS = {
    "v4": _Generation("tpu-v4", "v4", 3, 2, "v4-8"),
    "v5p": _Generation("tpu-v5p", "v5p", 3, 2, "v5p-8"),
    "v5e": _Generation("tpu-v5e", "v5e", 2, 1, "v5litepod-4"),
    "v5litepod": _Generation("tpu-v5e", "v5e", 2, 1, "v5litepod-4"),  # Cloud TPU's accelerator-type spelling of v5e
    "v6e": _Generation("tpu-v6e", "v6e", 2, 1, "v6e-4"),
    "tpu7x": _Generation("tpu7x", "tpu7x", 3, None, "tpu7x-8"),
}

_VALID_FORMS = (
    "v4-N or v5p-N (N TensorCores, 2 per chip: v5p-8 is 4 chips, v5p-128 is 64), "
    "v5e-N, v5litepod-N or v6e-N (N chips: v5e-256), N a power of two; "
    "or the topology form GEN:AxB / GEN:AxBxC (v5p:4x4x4, v5e:16x16, v6e:2x4, tpu7x:2x2x1)"
)

#: libtpu chip configuration per generation where its compile-only default is not how JAX runs the chip: libtpu's
#: default v4 topology holds one device per TensorCore, where JAX runs a v4 chip's two TensorCores as one megacore
#: device (``jax.devices()`` on a v4-8 lists 4; data/chips.toml [jax-chipversion]); ``chip_config_name="megacore"``
#: gives that device, with the HBM limit v4 run logs print (30.75 GiB).
_CHIP_CONFIG = {"v4": "megacore"}

_DASH = re.compile(r"^(v4|v5p|v5e|v5litepod|v6e|tpu7x)-(\d+)$")
_TOPO = re.compile(r"^(v4|v5p|v5e|v5litepod|v6e|tpu7x):(\d+(?:x\d+){1,2})$")
_BUNDLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


@dataclass(frozen=True)
class TpuTarget:
    """A TPU slice (or several, over DCN) to compile for.

    Attributes
    ----------
    name : str
        The target as the user wrote it (``"v5p-128"``).
    topology : str
        libtpu's topology name of one slice (``"v5p:4x4x4"``).
    chip : str
        Podscope's chip catalog key (``"tpu-v5p"``).
    slices : int
        Slices joined over the data-centre network.
    chips : int
        Chips in all slices.
    shape : tuple of int
        One slice's torus shape in chips.

    Notes
    -----
    The devices are the ones JAX runs a slice on: one per chip on v4 and v5p (the chip's two
    TensorCores as one megacore device), v5e and v6e, and one per TensorCore (two per chip) on
    tpu7x, so a tpu7x target has ``2 * chips`` devices and its programs are partitioned per
    TensorCore. :attr:`devices` and :meth:`mesh` use them as they are.
    """

    name: str
    topology: str
    chip: str
    slices: int
    chips: int
    shape: tuple[int, ...]

    @property
    def devices(self) -> list[Any]:
        """libtpu's compile-only devices for the target, slice by slice (needs ``jax[tpu]``).

        Raises
        ------
        InputError
            JAX or libtpu is not installed, or libtpu refuses the topology.
        """
        return list(_topology_devices(self.topology, self.slices, self.shape))

    def mesh(self, axis_sizes: Mapping[str, int]) -> Any:
        """A ``jax.sharding.Mesh`` over :attr:`devices` with the given axes, outermost first.

        On one slice the devices are laid out by ``mesh_utils.create_device_mesh`` (rings follow
        the torus); over several slices the first axes span slices (device order is slice-major).

        Parameters
        ----------
        axis_sizes : mapping of str to int
            Axis name to size, e.g. ``{"data": 2, "fsdp": 32}``; the sizes multiply to the
            device count.

        Raises
        ------
        InputError
            The sizes do not multiply to the device count, or a size is not a positive integer.
        """
        jax, np = _jax(), importlib.import_module("numpy")
        devices = self.devices
        sizes = dict(axis_sizes)
        if not sizes or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in sizes.values()):
            raise InputError(f"mesh axis sizes must be positive integers, got {sizes}")
        if math.prod(sizes.values()) != len(devices):
            raise InputError(
                f"mesh axes {sizes} hold {math.prod(sizes.values())} devices; {self.name} ({self.topology}"
                f"{f' x {self.slices} slices' if self.slices > 1 else ''}) has {len(devices)}"
            )
        shape = tuple(sizes.values())
        grid = None
        if self.slices == 1:
            try:
                from jax.experimental import mesh_utils

                grid = mesh_utils.create_device_mesh(shape, devices)
            except (ValueError, NotImplementedError, AssertionError):  # shapes it cannot map onto the torus
                grid = None
        if grid is None:
            grid = np.array(devices, dtype=object).reshape(shape)
        return jax.sharding.Mesh(grid, tuple(sizes))


def tpu_target(name: str, slices: int = 1) -> TpuTarget:
    """The slice a Cloud TPU name or a libtpu topology name stands for.

    ``v4-N`` and ``v5p-N`` count TensorCores (two per chip: ``v5p-128`` is 64 chips, 4x4x4);
    ``v5e-N``, ``v5litepod-N`` and ``v6e-N`` count chips (``v5e-256`` is 16x16), as Cloud TPU's
    accelerator types do. The shape is Cloud TPU's for that size: 3D slices double their
    shortest side, last axis first (2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, ...), 2D slices
    alternate (1x1, 2x2, 2x4, 4x4, ..., 16x16; no 1x2 slice exists). Sizes that are not a power of two, and
    twisted tori, are written in the topology form: ``v5p:8x8x12``.

    tpu7x takes the topology form only (``tpu7x:2x2x1`` is 4 chips): libtpu 0.0.42.1 rejects
    every ``tpu7x-N`` topology name, so Podscope does not guess what N counts.

    Parameters
    ----------
    name : str
        ``"v5p-128"``, ``"v5e-256"``, ``"v6e-8"``, ``"v4-32"``, ``"v5p:4x4x4"``, ``"tpu7x:2x2x1"``.
    slices : int
        Identical slices joined over DCN (multislice).

    Returns
    -------
    TpuTarget

    Raises
    ------
    InputError
        An unknown generation, a count the generation does not offer, a shape the generation
        has no slice of, or ``slices`` below 1.
    """
    from engine.pod.catalog import load_catalog
    from engine.pod.topology import is_supported_shape, supported_shapes

    if not isinstance(name, str):
        raise InputError(f"a TPU target is text such as 'v5p-128', got {type(name).__name__}")
    if not isinstance(slices, int) or isinstance(slices, bool) or slices < 1:
        raise InputError(f"slices must be a positive integer, got {slices!r}")
    text = name.strip().lower()
    dash, topo = _DASH.match(text), _TOPO.match(text)
    if not (dash or topo):
        raise InputError(f"unknown TPU target {name!r}; valid: {_VALID_FORMS}")
    gen_name = (dash or topo).group(1)
    gen = _GENERATIONS[gen_name]
    spec = load_catalog()[gen.chip]
    if dash:
        count = int(dash.group(2))
        if gen.cores_per_count is None:
            raise InputError(
                f"TPU target {name!r}: {gen_name} takes the topology form only ({gen_name}:2x2x1 is 4 chips); "
                f"libtpu names no {gen_name}-N slices. Valid: {_VALID_FORMS}"
            )
        chips, rest = divmod(count, gen.cores_per_count)
        least = 4 if gen.torus_dims == 3 else 1
        if rest or chips < least or chips & (chips - 1) or chips > spec.max_slice_chips:
            what = "TensorCores (2 per chip)" if gen.cores_per_count == 2 else "chips"
            raise InputError(
                f"TPU target {name!r}: {gen_name}-N counts {what}; N must give a power of two from {least} to "
                f"{spec.max_slice_chips} chips (e.g. {gen_name}-{least * gen.cores_per_count}); other sizes take the "
                f"topology form {gen.topology_prefix}:{'AxBxC' if gen.torus_dims == 3 else 'AxB'}"
            )
        shape = _cloud_shape(chips, gen.torus_dims)
        if not is_supported_shape(spec, shape):
            raise InputError(f"TPU target {name!r}: {gen_name} has no {'x'.join(map(str, shape))} slice; valid shapes: "
                             f"{', '.join(supported_shapes(spec))}")  # fmt: skip
    else:
        sides = tuple(int(s) for s in topo.group(2).split("x"))
        if gen.torus_dims == 2 and len(sides) == 3 and sides[2] == 1:
            sides = sides[:2]
        shape = sides + (1,) * (gen.torus_dims - len(sides))
        if len(shape) != gen.torus_dims or not is_supported_shape(spec, shape):
            raise InputError(
                f"TPU target {name!r}: {gen_name} has no {topo.group(2)} slice; valid shapes: "
                f"{', '.join(supported_shapes(spec))}"
            )
    topology = f"{gen.topology_prefix}:{'x'.join(map(str, shape))}"
    return TpuTarget(name=name, topology=topology, chip=gen.chip, slices=slices, chips=math.prod(shape) * slices, shape=shape)


def _cloud_shape(chips: int, torus_dims: int) -> tuple[int, ...]:
    if torus_dims == 2:
        a, b = 1, 1
        while a * b < chips:
            a, b = (a, 2 * b) if a == b else (2 * a, b)
        return (a, b)
    shape = [2, 2, 1]
    while math.prod(shape) < chips:
        i = max(k for k in range(3) if shape[k] == min(shape))
        shape[i] *= 2
    return tuple(shape)


@dataclass(frozen=True)
class CaptureResult:
    """Where :func:`capture` wrote the bundle and what XLA said.

    Attributes
    ----------
    sidecar_path : Path
        ``NAME.xla.json``.
    module_path : Path or None
        ``NAME.hlo.txt.gz``; None when XLA ran out of HBM.
    oom : bool
        XLA refused the program for lack of HBM.
    memory : dict or None
        ``memory_analysis()`` per device, in bytes (keys ``bundle_format.MEMORY_KEYS``).
    cost : dict or None
        ``cost_analysis()`` as XLA returns it.
    compile_s : float
        Seconds to lower and compile.
    live_peak_path : Path or None
        ``NAME.live-peak.json``, where the capture asked for it and XLA's dumps could be read.
    live_peak_error : str or None
        Why they could not, where the capture asked for it.
    """

    sidecar_path: Path
    module_path: Path | None
    oom: bool
    memory: dict[str, int] | None
    cost: dict[str, float] | None
    compile_s: float
    live_peak_path: Path | None = None
    live_peak_error: str | None = None


def capture(
    fn: Callable[..., Any],
    *args: Any,
    target: TpuTarget | str,
    name: str,
    out_dir: str | os.PathLike[str],
    progress: bool = True,
    describes: Mapping[str, Any] | None = None,
    live_range: bool = False,
    xla_flags: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> CaptureResult:
    """Lower and compile ``fn(*args, **kwargs)`` for ``target`` and write its module bundle.

    Parameters
    ----------
    fn : callable
        A ``jax.jit``-wrapped function, or a plain one (then jitted with default options).
    *args
        Arrays or ``jax.ShapeDtypeStruct`` pytrees, sharded over ``target.mesh(...)``. A leaf
        with no sharding on the target's devices is replicated over all of them.
    target : TpuTarget or str
        The slice to compile for (a name is passed to :func:`tpu_target`).
    name : str
        The bundle's name: letters, digits, ``.``, ``_``, ``-``.
    out_dir : path
        Folder for ``NAME.hlo.txt.gz`` and ``NAME.xla.json`` (created if missing).
    progress : bool
        Show a spinner with the elapsed seconds on stderr while XLA compiles.
    describes : mapping, optional
        What the program is (model dims, mesh, dtype, ...), stored as the sidecar's ``describes``.
    live_range : bool
        Also write what the compiler holds live at the module's peak, ``NAME.live-peak.json``
        (:func:`engine.hlo.live_range.read_live_peak` of the live-range, buffer-assignment and module dumps
        XLA writes with ``xla_dump_to``, for this compile only; also when it runs out of HBM).
    xla_flags : mapping, optional
        XLA options to compile with beyond the compiler's defaults (``{"xla_tpu_enable_async_collective_fusion":
        "true"}``, :func:`parse_xla_flags`), for this compile only; the sidecar records them as ``xla_flags``.
    **kwargs
        Keyword arguments of ``fn``.

    Returns
    -------
    CaptureResult

    Raises
    ------
    InputError
        JAX or libtpu is missing, the name, target or an XLA option is invalid (XLA knows no such option, or cannot
        read its value), or there are no array arguments.
    TpuCompileError
        XLA failed for a reason other than running out of HBM. Errors raised while tracing
        ``fn`` (a shape mismatch in the step) propagate unchanged.

    Notes
    -----
    Both files are written to a temporary name and renamed into place, the module first: a
    capture that is killed leaves the previous bundle or none, never half of one. When XLA
    runs out of HBM only the sidecar is written (``module``, ``memory`` and ``cost`` null,
    ``oom`` set), with the live-range analysis where asked for, and an older module of the same
    name is removed.
    """
    if not isinstance(name, str) or not _BUNDLE_NAME.match(name):
        raise InputError(f"bundle name {name!r}: valid names are 1-200 letters, digits, '.', '_' or '-', starting with a letter or digit")
    tgt = tpu_target(target) if isinstance(target, str) else target
    if not isinstance(tgt, TpuTarget):
        raise InputError(f"target must be a TpuTarget or a name such as 'v5p-128', got {type(target).__name__}")
    flags = dict(xla_flags or {})
    wrong = xla_flag_problems(flags)
    if wrong:
        raise InputError("XLA options: " + "; ".join(wrong))
    jax = _jax()
    devices = tgt.devices
    args, kwargs = _on_target(jax, devices, (args, kwargs))
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)

    start = time.perf_counter()
    compiled, failure, live, live_error = None, None, None, None
    with _progress(progress, f"compiling {name} for {tgt.topology}{f' x {tgt.slices}' if tgt.slices > 1 else ''}"), \
            (tempfile.TemporaryDirectory(prefix="podscope-xla-dump-") if live_range else contextlib.nullcontext()) as dump:  # fmt: skip
        lowered = jitted.lower(*args, **kwargs)  # an error while tracing is the step's own: raised as it is
        try:
            options = {**flags, **({"xla_dump_to": dump} if live_range else {})}
            compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
        except Exception as e:  # XLA raises JaxRuntimeError (or ValueError / XlaRuntimeError): judged by message
            if flags and _BAD_OPTION.search(str(e)):
                raise InputError(f"XLA refused an option of {', '.join(flags)}: {str(e).splitlines()[0][:300]}") from None
            failure = e
        if live_range:
            live, live_error = _live_peak(Path(dump), name)
    compile_s = time.perf_counter() - start

    oom = None
    if failure is not None:
        message = str(failure)
        if not _is_hbm_oom(message):
            raise TpuCompileError(f"XLA could not compile {name} for {tgt.topology}: {message[:OOM_MESSAGE_CHARS]}") from failure
        oom = parse_oom(message)
    memory = None if compiled is None else _memory(compiled.memory_analysis())
    cost = None if compiled is None else _cost(compiled.cost_analysis())

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    module_path = out / f"{name}{MODULE_SUFFIX}"
    sidecar_path = out / f"{name}{SIDE_SUFFIX}"
    live_path = out / f"{name}{LIVE_PEAK_SUFFIX}"
    if compiled is not None:
        # mtime=0: the same program gives the same bytes
        _write_atomic(module_path, gzip.compress(compiled.as_text().encode(), mtime=0))
    if live is not None:
        _write_atomic(live_path, (json.dumps(live.to_json(), indent=1) + "\n").encode())
    else:
        live_path.unlink(missing_ok=True)  # an older capture's peak is not this program's
    side = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": name,
        "module": module_path.name if compiled is not None else None,
        "target": tgt.name,
        "topology": tgt.topology,
        "chip": tgt.chip,
        "slices": tgt.slices,
        "devices": len(devices),
        "device_kind": devices[0].device_kind,
        "jax_version": jax.__version__,
        "libtpu_version": _libtpu_version(),
        "memory": memory,
        "cost": cost,
        "compile_s": round(compile_s, 3),
        "oom": oom,
    }
    assert tuple(side) == TOP_KEYS
    if describes is not None:
        side["describes"] = dict(describes)
    if flags:
        side["xla_flags"] = flags
    _write_atomic(sidecar_path, (json.dumps(side, indent=1) + "\n").encode())
    if compiled is None:
        module_path.unlink(missing_ok=True)
    if progress:
        verdict = "out of HBM" if oom else "compiled"
        print(f"{name}: {verdict} for {tgt.topology} in {compile_s:.1f} s -> {sidecar_path}", file=sys.stderr)
    return CaptureResult(
        sidecar_path=sidecar_path,
        module_path=module_path if compiled is not None else None,
        live_peak_path=live_path if live is not None else None,
        live_peak_error=live_error,
        oom=oom is not None,
        memory=memory,
        cost=cost,
        compile_s=compile_s,
    )


#: how XLA refuses a compile option it does not know, or a value it cannot read
_BAD_OPTION = re.compile(r"No such compile option|Failed to parse '.*' into flag", re.I)


#: what a command says of XLA options given where nothing compiles (``run`` or ``plan`` without ``--xla``)
FLAGS_WITHOUT_COMPILE = "--xla-flag: XLA options apply to a compile; add --xla"


def parse_xla_flags(items: Sequence[str], compiling: bool = True) -> dict[str, str]:
    """XLA options from ``NAME=VALUE`` texts (``--xla-flag``; a leading ``--``, as in ``LIBTPU_INIT_ARGS``, is dropped).

    Raises
    ------
    InputError
        An item is not ``NAME=VALUE``, a name is not an XLA option's (``xla_...``), a value is empty, or a name repeats;
        or there are options and nothing ``compiling`` (:data:`FLAGS_WITHOUT_COMPILE`).

    Examples
    --------
    >>> parse_xla_flags(["--xla_tpu_enable_async_collective_fusion=true"])
    {'xla_tpu_enable_async_collective_fusion': 'true'}
    """
    flags: dict[str, str] = {}
    for item in items:
        name, eq, value = item.strip().removeprefix("--").partition("=")
        if not eq:
            raise InputError(f"--xla-flag {item!r}: expected NAME=VALUE, e.g. xla_tpu_enable_async_collective_fusion=true")
        if name in flags:
            raise InputError(f"--xla-flag {item!r}: {name} is given twice")
        wrong = xla_flag_problems({name: value})
        if wrong:
            raise InputError(f"--xla-flag {item!r}: {wrong[0]}")
        flags[name] = value
    if flags and not compiling:
        raise InputError(FLAGS_WITHOUT_COMPILE)
    return flags


_SIZE = r"(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?"
_UNIT_BYTES = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
# XLA TPU's phrasings, required first then available
_OOM_SIZES = (
    re.compile(rf"required for [^()]*\({_SIZE}\)\s*exceeds available HBM\s*\({_SIZE}\)", re.I),
    re.compile(rf"Used\s+{_SIZE}\s+of\s+{_SIZE}\s+hbm", re.I),
    re.compile(rf"requires?\s+{_SIZE}[^.]*?(?:exceeds|of|but only)\s+(?:the\s+)?(?:available\s+)?(?:HBM\s+)?(?:capacity\s+)?(?:of\s+)?{_SIZE}", re.I),
)


def _is_hbm_oom(message: str) -> bool:
    low = message.lower()
    return "resource_exhausted" in low or ("out of memory" in low and "hbm" in low)


def parse_oom(message: str) -> dict[str, Any]:
    """The sidecar's ``oom`` object from XLA's out-of-HBM message.

    ``G`` in XLA's sizes is GiB, ``M`` MiB, ``K`` KiB.

    Parameters
    ----------
    message : str
        The compile error's text, e.g. ``"RESOURCE_EXHAUSTED: Ran out of memory on HBM, the
        total memory required for HLO temporaries (24.41G) exceeds available HBM (15.75G)."``

    Returns
    -------
    dict
        ``message`` (first ``OOM_MESSAGE_CHARS`` characters), ``required_bytes`` and
        ``available_bytes`` (int, or None when the message gives no sizes).

    Examples
    --------
    >>> parse_oom("RESOURCE_EXHAUSTED: Used 30.21G of 15.48G hbm.")["available_bytes"]
    16621523436
    """
    required = available = None
    for pattern in _OOM_SIZES:
        m = pattern.search(message)
        if m:
            required = round(float(m.group(1)) * _UNIT_BYTES[m.group(2).upper()])
            available = round(float(m.group(3)) * _UNIT_BYTES[m.group(4).upper()])
            break
    return {"message": message[:OOM_MESSAGE_CHARS], "required_bytes": required, "available_bytes": available}


def _memory(stats: Any) -> dict[str, int]:
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
              "generated_code_size_in_bytes", "peak_memory_in_bytes")  # fmt: skip
    return {key: int(getattr(stats, f)) for key, f in zip(MEMORY_KEYS, fields, strict=True)}


def _cost(cost: Any) -> dict[str, float]:
    if isinstance(cost, (list, tuple)):  # older JAX returned one dict per module
        cost = cost[0] if cost else {}
    return {str(k): float(v) for k, v in sorted((cost or {}).items())}


#: the dumps :func:`engine.hlo.live_range.read_live_peak` reads, by their names' endings in an ``xla_dump_to`` folder
_PEAK_DUMPS = ("after_optimizations-live-range.txt", "after_optimizations-buffer-assignment.txt", "after_optimizations.txt")


def _live_peak(folder: Path, name: str) -> tuple[LivePeak | None, str | None]:
    """What is live at the peak of the one module XLA compiled with its dumps in ``folder``, or why it cannot be read."""
    texts = []
    for ending in _PEAK_DUMPS:
        found = sorted(folder.glob(f"*.{ending}"))
        if len(found) != 1:
            return None, f"XLA wrote {len(found)} *.{ending} dumps for {name}, not one"
        texts.append(found[0].read_text())
    try:
        return read_live_peak(*texts, source=f"XLA's dumps of {name}"), None
    except HloError as e:
        return None, str(e)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() would create it: mkstemp makes it private to the owner
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _libtpu_version() -> str | None:
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        return None


def _on_target(jax: Any, devices: list[Any], tree: Any) -> Any:
    """Every array leaf as a ``ShapeDtypeStruct`` on the target: its own sharding if it has one there, else replicated."""
    from jax.sharding import NamedSharding, PartitionSpec

    np = importlib.import_module("numpy")
    on_target = {id(d) for d in devices}
    replicated = NamedSharding(jax.sharding.Mesh(np.array(devices, dtype=object), ("_all",)), PartitionSpec())
    seen = []

    def leaf(x: Any) -> Any:
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            return x
        seen.append(x)
        sharding = getattr(x, "sharding", None)
        if sharding is None or not {id(d) for d in sharding.device_set} <= on_target:
            sharding = replicated
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding, weak_type=getattr(x, "weak_type", False))

    out = jax.tree.map(leaf, tree)
    if not seen:
        raise InputError("capture needs at least one array (or jax.ShapeDtypeStruct) argument to place the program on the TPU target")
    return out


class _progress:
    """A transient spinner with the elapsed time on stderr (nothing when off or not a terminal)."""

    def __init__(self, on: bool, text: str):
        self.on, self.text, self._p = on and sys.stderr.isatty(), text, None

    def __enter__(self) -> _progress:
        if self.on:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._p = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                               console=Console(stderr=True), transient=True)  # fmt: skip
            self._p.start()
            self._p.add_task(self.text, total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()


def _has_tpu_chips() -> bool:
    return any(Path("/dev").glob("accel*")) or any(Path("/dev/vfio").glob("[0-9]*"))


def _libtpu_env_for_compiling(topology: str) -> None:
    """Set up libtpu's start-up for compiling only, on a machine with no TPU chips.

    libtpu takes a machine-wide lock (``/tmp/libtpu_lockfile``) so that two processes do not
    drive the same chips; with no chips there is nothing to guard, and the lock would make
    concurrent captures (parallel tests, two users) fail, so ``ALLOW_MULTIPLE_LIBTPU_LOAD``
    lifts it. libtpu also asks for the accelerator type and worker hostnames (from the
    environment, else the GCE metadata server) and prints warnings when it finds none.
    Compile-only topologies do not use them (the same program compiles with any value), so
    where the user set neither, valid placeholders are set. On a host with TPU chips nothing
    is changed.
    """
    if _has_tpu_chips():
        return
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    if any(k in os.environ for k in ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")):
        return
    gen = _GENERATIONS[topology.split(":")[0]]
    os.environ.update(TPU_ACCELERATOR_TYPE=gen.accelerator_type, TPU_WORKER_HOSTNAMES="localhost")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # JAX sets it too when it finds no TPU chips


def tpu_compiler_missing() -> list[str]:
    """Which of JAX and libtpu (``podscope[tpu]``) are not installed, found without importing either."""
    return [m for m in ("jax", "libtpu") if importlib.util.find_spec(m) is None]


def require_tpu_compiler() -> None:
    """Raise :class:`~engine.errors.InputError` unless JAX and libtpu are installed: a command that will compile
    checks it before doing any other work."""
    missing = tpu_compiler_missing()
    if missing:
        raise InputError(f"compiling for a TPU target needs jax[tpu] ({' and '.join(missing)} not installed): {TPU_EXTRA_HINT}")


def _jax() -> Any:
    try:
        return importlib.import_module("jax")
    except ImportError as e:
        raise InputError(f"compiling for a TPU target needs jax[tpu] (JAX and libtpu): {TPU_EXTRA_HINT}") from e


@lru_cache(maxsize=16)
def _topology_devices(topology: str, slices: int, shape: tuple[int, ...]) -> tuple[Any, ...]:
    _libtpu_env_for_compiling(topology)
    _jax()
    from jax.experimental import topologies

    kwargs: dict[str, Any] = {}
    config = _CHIP_CONFIG.get(topology.split(":")[0])
    if config:
        kwargs["chip_config_name"] = config
    if slices > 1:
        kwargs["num_slices"] = slices
    host = (2, 2, 1)  # libtpu's default chips per host; a smaller slice is one host of its own size
    dims = tuple(shape) + (1,) * (3 - len(shape))
    if any(n % h for n, h in zip(dims, host)):
        kwargs["chips_per_host_bounds"] = [min(n, h) for n, h in zip(dims, host)]
    try:
        return tuple(topologies.get_topology_desc(topology_name=topology, platform="tpu", **kwargs).devices)
    except RuntimeError as e:  # the TPU plugin is missing (JaxRuntimeError derives from RuntimeError too)
        msg = str(e)
        if "TPU support not installed" in msg or "libtpu" in msg.lower() and "not found" in msg.lower():
            raise InputError(f"compiling for a TPU target needs libtpu: {TPU_EXTRA_HINT} ({msg})") from e
        raise InputError(f"libtpu refused topology {topology}{f' x {slices} slices' if slices > 1 else ''}: {msg}") from e
