"""A TPU-compiled module bundle: ``NAME.hlo.txt.gz`` and its ``NAME.xla.json`` sidecar, read and checked.

The sidecar says what the module was compiled for (topology, chip, devices, the jax and
libtpu versions) and what XLA concluded about it: its memory analysis (argument,
output, alias and temporary bytes per device) and cost analysis, or the out-of-memory
refusal that left no module at all. Where the compiler has spoken, its answer is the
run's: the HBM peak is ``argument + output - alias + temp`` (the sum MaxText's
``print_compiled_memory_stats`` reports), and an ``oom`` bundle is an out-of-memory
run. The file is untrusted input: size, nesting, types and numbers are checked, and
every problem is an :class:`~engine.errors.HloError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import HloError
from ..pod.catalog import load_catalog
from .bundle_format import (FORMAT, FORMAT_VERSION, MAX_XLA_FLAGS, MEMORY_KEYS, MODULE_SUFFIX, OOM_KEYS, OPTIONAL_KEYS, SIDE_SUFFIX, TOP_KEYS,
                            XLA_FLAG_NAME)

__all__ = ["XlaBundle", "XlaHbm", "XlaMemory", "XlaOom", "read_bundle", "sidecar_for", "xla_flag_problems", "MAX_SIDECAR_BYTES", "MAX_XLA_FLAG_VALUE_CHARS",
           "TOPOLOGY_CHIPS"]

#: largest sidecar accepted: a cost analysis is a few hundred numbers
MAX_SIDECAR_BYTES = 4 * 2**20
#: deepest JSON nesting accepted (the format nests three levels)
_MAX_DEPTH = 8
#: the chip generation a topology name's prefix means (jax.experimental.topologies names)
TOPOLOGY_CHIPS = {"v4": "tpu-v4", "v5e": "tpu-v5e", "v5p": "tpu-v5p", "v6e": "tpu-v6e", "tpu7x": "tpu7x"}
_XLA_FLAG = re.compile(rf"^{XLA_FLAG_NAME}$")
#: the longest value of one XLA option a sidecar or ``--xla-flag`` takes
MAX_XLA_FLAG_VALUE_CHARS = 1024


def xla_flag_problems(flags: Any) -> list[str]:
    """What is wrong with ``flags`` as a sidecar's ``xla_flags``: an object of at most :data:`MAX_XLA_FLAGS` XLA options,
    each name ``xla_...`` (lower case, digits, ``_``) and each value a non-empty string; empty when nothing is."""
    if not isinstance(flags, dict):
        return [f"expected an object of XLA options and their values, got {type(flags).__name__}"]
    if len(flags) > MAX_XLA_FLAGS:
        return [f"{len(flags)} options; at most {MAX_XLA_FLAGS}"]
    out = []
    for name, value in flags.items():
        if not isinstance(name, str) or not _XLA_FLAG.match(name):
            out.append(f"{str(name)[:80]!r}: not an XLA option name (xla_ then lower-case letters, digits and _, "
                       "e.g. xla_tpu_enable_async_collective_fusion)")  # fmt: skip
        elif not isinstance(value, str) or not value or len(value) > MAX_XLA_FLAG_VALUE_CHARS:
            out.append(f"{name}: expected a value of 1 to {MAX_XLA_FLAG_VALUE_CHARS} characters, got {str(value)[:80]!r}")
    return out


_TOPOLOGY = re.compile(r"^(v4|v5e|v5p|v6e|tpu7x):(\d{1,5}(?:x\d{1,5}){0,2})$")


@dataclass(frozen=True)
class XlaMemory:
    """XLA's memory analysis of the compiled program, per device, bytes."""

    argument_bytes: float
    output_bytes: float
    alias_bytes: float
    temp_bytes: float
    generated_code_bytes: float
    peak_bytes: float | None  # memory_analysis().peak_memory_in_bytes, where jax reports it

    @property
    def total_bytes(self) -> float:
        """``argument + output - alias + temp``: what the program holds in HBM at its peak."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    @property
    def peak_live_bytes(self) -> float:
        """``peak_memory_in_bytes``, the most bytes XLA's buffer assignment holds live at once, where jax
        reports it; else :attr:`total_bytes`. The peak counts live buffers in every memory space, the
        temporaries only those in HBM: on small programs, whose buffers memory-space assignment puts in
        on-chip memory, the peak is the larger (a 130.7 MiB peak beside 37.3 MiB of arguments and
        temporaries, v6e, 8 layers of width 256; a 2-layer model of width 256 peaks at 92.3 MB on v4,
        v5e, v5p and v6e alike, its HBM temporaries 0 to 7.6 MB, its arguments 44.1 MB, and XLA's memory
        usage report holds the rest, 42-48 MiB, in the on-chip space)."""
        return self.peak_bytes if self.peak_bytes else self.total_bytes


@dataclass(frozen=True)
class XlaOom:
    """XLA's refusal to compile for want of HBM."""

    message: str
    required_bytes: float | None
    available_bytes: float | None


@dataclass(frozen=True)
class XlaHbm:
    """What the TPU compiler said of a program's HBM, for a chip of ``devices_per_chip`` devices: its memory
    analysis per device (None when it refused the program) or its refusal."""

    memory: XlaMemory | None
    oom: XlaOom | None
    devices_per_chip: int = 1
    xla_flags: dict[str, str] = field(default_factory=dict)  # the XLA options it was compiled with beyond the defaults

    @property
    def peak_bytes_per_chip(self) -> float | None:
        """XLA's peak (its ``peak_memory_in_bytes``, else arguments + outputs - aliased + temporaries), or what
        its out-of-memory message says the program needs, times the chip's devices; None when it says neither."""
        if self.memory is not None:
            per_device = self.memory.peak_live_bytes
        elif self.oom is not None and self.oom.required_bytes is not None:
            per_device = self.oom.required_bytes
        else:
            return None
        return per_device * self.devices_per_chip


@dataclass(frozen=True)
class XlaBundle:
    """A sidecar, checked; ``module_path`` is None for an out-of-memory bundle."""

    path: Path
    name: str
    module_path: Path | None
    target: str
    topology: str  # "v5p:2x2x2"
    chip: str  # catalog key
    slices: int
    devices: int
    device_kind: str
    jax_version: str
    libtpu_version: str | None
    memory: XlaMemory | None
    cost: dict[str, float]
    oom: XlaOom | None
    compile_s: float | None
    xla_flags: dict[str, str] = field(default_factory=dict)  # the options it was compiled with beyond the defaults

    @property
    def slice_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.topology.split(":")[1].split("x"))

    @property
    def chips(self) -> int:
        return math.prod(self.slice_shape) * self.slices

    @property
    def devices_per_chip(self) -> int:
        """2 where XLA compiled each TensorCore as a device of its own (tpu7x; v4 compiled without megacore), else 1."""
        return max(self.devices // self.chips, 1)

    @property
    def optimal_s(self) -> float | None:
        """The cost analysis's ``optimal_seconds`` (libtpu's roofline of the program), where given."""
        v = self.cost.get("optimal_seconds")
        return float(v) if v is not None and v > 0 else None  # libtpu reports a negative value where it has none


def sidecar_for(module: Path) -> Path | None:
    """The ``NAME.xla.json`` beside ``NAME.hlo.txt.gz`` (or ``NAME.hlo.txt`` / ``NAME.txt[.gz]``), if there is one."""
    name = module.name
    for suffix in (MODULE_SUFFIX, ".hlo.txt", ".txt.gz", ".txt"):
        if name.endswith(suffix):
            side = module.with_name(name[: -len(suffix)] + SIDE_SUFFIX)
            return side if side.is_file() else None
    return None


def _depth(x: Any, level: int = 0) -> int:
    if level > _MAX_DEPTH:
        return level
    if isinstance(x, dict):
        return max((_depth(v, level + 1) for v in x.values()), default=level + 1)
    if isinstance(x, list):
        return max((_depth(v, level + 1) for v in x), default=level + 1)
    return level


def _largest_hbm_bytes() -> float:
    return max(c.hbm_bytes for c in load_catalog().values())


def read_bundle(path: str | Path) -> XlaBundle:
    """Read and check a ``NAME.xla.json`` sidecar.

    Raises
    ------
    HloError
        The file is missing, larger than :data:`MAX_SIDECAR_BYTES`, not JSON, nested too
        deep, of another format, missing a key, or has a key of the wrong type or an
        impossible number (negative bytes, more bytes than any chip's HBM, a topology
        whose chips do not match its device count). The message names the file and key.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_SIDECAR_BYTES + 1)
    except FileNotFoundError:
        raise HloError(f"{p}: no such sidecar file") from None
    except OSError as e:
        raise HloError(f"{p}: cannot read: {e}") from None
    if len(data) > MAX_SIDECAR_BYTES:
        raise HloError(f"{p}: larger than the {MAX_SIDECAR_BYTES // 2**20} MiB limit for a sidecar; expected the few keys "
                       "profiler.tpu_capture writes")  # fmt: skip
    try:
        raw = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise HloError(f"{p}: nested deeper than Python's JSON reader allows; a sidecar nests three levels") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HloError(f"{p}: not a JSON sidecar ({type(e).__name__}: {str(e)[:120]}); expected NAME.xla.json "
                       "as profiler.tpu_capture writes it") from None  # fmt: skip
    if not isinstance(raw, dict):
        raise HloError(f"{p}: expected a JSON object of {', '.join(TOP_KEYS)}; got {type(raw).__name__}")
    if _depth(raw) > _MAX_DEPTH:
        raise HloError(f"{p}: nested more than {_MAX_DEPTH} levels deep; a sidecar nests three")
    return _check(p, raw)


def _check(p: Path, raw: dict[str, Any]) -> XlaBundle:
    problems: list[str] = []

    def bad(key: str, what: str) -> None:
        problems.append(f"{key}: {what}")

    if raw.get("format") != FORMAT:
        raise HloError(f"{p}: format: expected {FORMAT!r}, got {raw.get('format')!r} (not a Podscope module bundle)")
    if raw.get("format_version") != FORMAT_VERSION:
        raise HloError(f"{p}: format_version: expected {FORMAT_VERSION}, got {raw.get('format_version')!r}")
    missing = [k for k in TOP_KEYS if k not in raw]
    if missing:
        raise HloError(f"{p}: missing key(s) {', '.join(missing)}; a sidecar has {', '.join(TOP_KEYS)}")
    for k in raw:
        if k not in TOP_KEYS and k not in OPTIONAL_KEYS:
            bad(k, f"unknown key; valid keys: {', '.join((*TOP_KEYS, *OPTIONAL_KEYS))}")

    def text(key: str, nullable: bool = False, limit: int = 4096) -> str | None:
        v = raw.get(key)
        if v is None and nullable:
            return None
        if not isinstance(v, str) or not v or len(v) > limit:
            bad(key, f"expected a non-empty string of at most {limit} characters, got {type(v).__name__}")
            return None
        return v

    def count(key: str, hi: int) -> int:
        v = raw.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            bad(key, f"expected a whole number from 1 to {hi:,}, got {v!r}")
            return 1
        return v

    name, target, device_kind = text("name"), text("target"), text("device_kind")
    jax_version, libtpu_version = text("jax_version", limit=64), text("libtpu_version", nullable=True, limit=64)
    slices, devices = count("slices", 4096), count("devices", 1_000_000)
    topology = text("topology", limit=64) or ""
    m = _TOPOLOGY.match(topology)
    chip = raw.get("chip")
    if topology and not m:
        bad("topology", f"expected GENERATION:SHAPE such as v5p:4x4x4 or v5e:16x16 ({', '.join(TOPOLOGY_CHIPS)}), got {topology!r}")
    elif m and chip != TOPOLOGY_CHIPS[m.group(1)]:
        bad("chip", f"{chip!r} does not match topology {topology!r}; expected {TOPOLOGY_CHIPS[m.group(1)]!r}")
    catalog = load_catalog()
    if m and chip in catalog:
        chips = math.prod(int(d) for d in m.group(2).split("x")) * slices
        cores = catalog[chip].tensorcores_per_chip
        if devices % chips or not 1 <= devices // chips <= cores:
            bad("devices", f"{devices} devices on {chips} {chip} chip(s) of {topology} x {slices} slice(s); expected "
                f"{chips}" + (f" or {chips * cores} (one per TensorCore)" if cores > 1 else ""))  # fmt: skip
    largest = _largest_hbm_bytes()

    def nbytes(section: str, key: str, value: Any, nullable: bool) -> float | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            bad(f"{section}.{key}", f"expected a number of bytes, got {value!r}")
            return None
        if value < 0 or value > largest:
            bad(f"{section}.{key}", f"{value:,.0f} bytes is impossible: expected 0 to {largest:,.0f} (the largest chip's HBM)")
            return None
        return float(value)

    oom_raw, memory_raw, module = raw.get("oom"), raw.get("memory"), raw.get("module")
    oom = memory = None
    if oom_raw is not None:
        if not isinstance(oom_raw, dict) or not isinstance(oom_raw.get("message"), str) or set(oom_raw) - set(OOM_KEYS):
            bad("oom", f"expected null or an object of {', '.join(OOM_KEYS)} with a string message")
        else:
            oom = XlaOom(oom_raw["message"][:8192], nbytes("oom", "required_bytes", oom_raw.get("required_bytes"), True),
                         nbytes("oom", "available_bytes", oom_raw.get("available_bytes"), True))  # fmt: skip
        if module is not None:
            bad("module", "an out-of-memory bundle has no module; expected null")
    else:
        if not isinstance(module, str) or not module or "/" in module or "\\" in module:
            bad("module", f"expected the module's file name beside the sidecar (NAME{MODULE_SUFFIX}), got {module!r}")
        if not isinstance(memory_raw, dict):
            bad("memory", f"expected an object of {', '.join(MEMORY_KEYS)}, got {type(memory_raw).__name__}")
        else:
            vals = {k: nbytes("memory", k, memory_raw.get(k), k == "peak_bytes") for k in MEMORY_KEYS}
            for k in memory_raw:
                if k not in MEMORY_KEYS:
                    bad(f"memory.{k}", f"unknown key; valid keys: {', '.join(MEMORY_KEYS)}")
            if all(vals[k] is not None for k in MEMORY_KEYS if k != "peak_bytes"):
                memory = XlaMemory(**vals)  # type: ignore[arg-type]
                if memory.alias_bytes > memory.argument_bytes + memory.output_bytes:
                    bad("memory.alias_bytes", "more than the argument and output bytes it aliases")
                elif memory.total_bytes > largest:
                    bad("memory", f"argument + output - alias + temp = {memory.total_bytes:,.0f} bytes, more than any chip's HBM")
    cost_raw = raw.get("cost")
    cost: dict[str, float] = {}
    if cost_raw is not None:
        if not isinstance(cost_raw, dict) or len(cost_raw) > 10_000:
            bad("cost", "expected null or an object of numbers (XLA's cost_analysis)")
        else:
            for k, v in cost_raw.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > 1e30:
                    bad(f"cost.{k}", f"expected a finite number, got {v!r}")
                else:
                    cost[str(k)[:200]] = float(v)
    compile_s = raw.get("compile_s")
    if compile_s is not None and (isinstance(compile_s, bool) or not isinstance(compile_s, (int, float)) or not 0 <= compile_s < 1e7):
        bad("compile_s", f"expected null or seconds, got {compile_s!r}")
        compile_s = None
    flags = raw.get("xla_flags", {})
    problems += [f"xla_flags: {what}" for what in xla_flag_problems(flags)]
    if problems:
        raise HloError(f"{p}: invalid sidecar\n  " + "\n  ".join(problems))
    return XlaBundle(
        path=p, name=name or p.name, module_path=(p.parent / module) if isinstance(module, str) and oom is None else None,
        target=target or "", topology=topology, chip=str(chip), slices=slices, devices=devices,
        device_kind=device_kind or "", jax_version=jax_version or "", libtpu_version=libtpu_version,
        memory=memory, cost=cost, oom=oom, compile_s=float(compile_s) if compile_s is not None else None,
        xla_flags=dict(flags),
    )  # fmt: skip
