"""The hardware catalog: chip generations loaded from ``data/chips.toml``.

Input keys carry their unit (``hbm_gib``, ``ici_link_gbytes_per_s``: gigabytes, 10^9 bytes, per second); :func:`load_catalog`
converts them once into SI units on a frozen :class:`ChipSpec`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from ..data_files import DATA_DIR
from ..errors import ScenarioError
from ..units import GB_BYTES, GIB_BYTES, TERA

__all__ = ["ChipSpec", "load_catalog", "DATA_DIR", "DEFAULT_CATALOG_PATH"]

DEFAULT_CATALOG_PATH = DATA_DIR / "chips.toml"

Wraparound = Literal["all", "cube", "axis16", "none"]
_WRAPAROUND = ("all", "cube", "axis16", "none")

_REQUIRED = {
    "display_name": str,
    "peak_bf16_tflops": float,
    "peak_int8_tops": float,
    "hbm_gib": float,
    "hbm_gbytes_per_s": float,
    "ici_link_gbytes_per_s": float,
    "ici_links_per_chip": int,
    "torus_dims": int,
    "chips_per_host": int,
    "host_shape": list,
    "dcn_gbytes_per_s_per_host": float,
    "mxu_dim": int,
    "max_slice_chips": int,
    "tensorcores_per_chip": int,
    "wraparound": str,
}

#: keys a chip table may omit, with their default: the fp8 matmul rate, 0 where the chip has none; the HBM XLA lets one program use, 0 where no
#: compiler log of it is on record; the TensorCores JAX sees as separate devices on one chip (1 where
#: the cores run as one "megacore" device, or the chip has one core)
_OPTIONAL = {"peak_fp8_tflops": 0.0, "hbm_program_limit_gib": 0.0, "clock_ghz": 0.0, "devices_per_chip": 1}
#: yes/no keys a chip table may omit, with their default: whether XLA:TPU runs the all-gathers of a checkpointed
#: layer's weights in the backward, and the all-reduces of replicated gradients, beside compute (false where no compile
#: for the chip is on record)
_OPTIONAL_FLAGS = {"xla_async_all_gather": False, "xla_async_all_reduce": False}


@dataclass(frozen=True)
class ChipSpec:
    """One TPU generation, in SI units."""

    key: str
    display_name: str
    peak_bf16_flops_per_s: float
    peak_int8_flops_per_s: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    ici_link_bytes_per_s: float  # one link, one direction
    ici_links_per_chip: int
    torus_dims: int
    chips_per_host: int
    host_shape: tuple[int, ...]
    dcn_bytes_per_s_per_host: float
    mxu_dim: int
    max_slice_chips: int
    tensorcores_per_chip: int
    wraparound: Wraparound
    peak_fp8_flops_per_s: float = 0.0  # 0: no fp8 matmul rate (fp8 training is refused)
    hbm_program_limit_bytes: float = 0.0  # XLA's compile-time HBM limit for one program; 0: not on record
    clock_hz: float = 0.0  # TensorCore clock: XLA:TPU's estimated cycles over it are seconds; 0: not on record
    devices_per_chip: int = 1  # JAX devices per chip: each holds its own copy of state replicated over the batch
    xla_async_all_gather: bool = False  # XLA:TPU overlaps the backward's weight all-gathers with compute (data/chips.toml)
    xla_async_all_reduce: bool = False  # ... and the all-reduces of replicated gradients

    @property
    def has_fp8(self) -> bool:
        return self.peak_fp8_flops_per_s > 0

    def usable_hbm_bytes(self, reserved_frac: float) -> float:
        """HBM a training step may use: XLA's compile-time limit where the catalog records one (what
        the runtime reserves is already taken off), else the capacity less ``reserved_frac`` of it."""
        if self.hbm_program_limit_bytes > 0:
            return self.hbm_program_limit_bytes
        return self.hbm_bytes * (1.0 - reserved_frac)

    def peak_flops_per_s(self, precision: str) -> float:
        """Peak matmul rate for a training precision (fp32 runs as multi-pass bf16)."""
        if precision == "int8":
            return self.peak_int8_flops_per_s
        if precision == "fp8":
            return self.peak_fp8_flops_per_s
        if precision == "fp32":
            # fp32 matmuls on the MXU use ~3 bf16 passes (XLA's default 'HIGHEST' precision
            # uses 6, 'HIGH' 3); Podscope assumes 3. Source: JAX docs, jax.lax.Precision.
            return self.peak_bf16_flops_per_s / 3.0
        return self.peak_bf16_flops_per_s


def _count(value: object) -> bool:
    """An integer that is not a bool (in Python ``True`` is an int; in TOML it is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _convert(key: str, raw: dict, source: str) -> ChipSpec:
    if not isinstance(raw, dict):
        raise ScenarioError(source, [(key, f"expected a table [{key}], got {raw!r}")])
    problems: list[tuple[str, str]] = []
    for name, typ in _REQUIRED.items():
        if name not in raw:
            problems.append((f"{key}.{name}", "required key is missing"))
        elif typ is float and (not isinstance(raw[name], (int, float)) or isinstance(raw[name], bool)):
            problems.append((f"{key}.{name}", f"expected a number, got {raw[name]!r}"))
        elif typ is not float and not (_count(raw[name]) if typ is int else isinstance(raw[name], typ)):
            problems.append((f"{key}.{name}", f"expected {typ.__name__}, got {raw[name]!r}"))
        elif typ in (float, int) and not raw[name] > 0:
            # every catalog number is a rate, a size or a count: zero or negative is a typo
            problems.append((f"{key}.{name}", f"must be greater than 0, got {raw[name]!r}"))
        elif name == "host_shape" and not (raw[name] and all(_count(v) and v > 0 for v in raw[name])):
            problems.append((f"{key}.{name}", f"expected a list of positive integers, got {raw[name]!r}"))
        elif name == "wraparound" and raw[name] not in _WRAPAROUND:
            problems.append((f"{key}.{name}", f"got {raw[name]!r}; valid: {', '.join(_WRAPAROUND)}"))
    for name, default in _OPTIONAL.items():
        value = raw.get(name, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            problems.append((f"{key}.{name}", f"expected a number >= 0, got {value!r}"))
    for name, default in _OPTIONAL_FLAGS.items():
        if not isinstance(raw.get(name, default), bool):
            problems.append((f"{key}.{name}", f"expected true or false, got {raw[name]!r}"))
    limit = raw.get("hbm_program_limit_gib", 0.0)
    if not problems and limit > raw["hbm_gib"]:
        problems.append((f"{key}.hbm_program_limit_gib", f"{limit!r} is more than the chip's hbm_gib {raw['hbm_gib']!r}; "
                                                         "valid: 0 (no limit on record) up to hbm_gib"))
    for name in raw:
        if name not in _REQUIRED and name not in _OPTIONAL and name not in _OPTIONAL_FLAGS:
            problems.append((f"{key}.{name}", f"unknown key; valid keys: {', '.join([*_REQUIRED, *_OPTIONAL, *_OPTIONAL_FLAGS])}"))
    if problems:
        raise ScenarioError(source, problems)
    return ChipSpec(
        key=key,
        display_name=raw["display_name"],
        peak_bf16_flops_per_s=float(raw["peak_bf16_tflops"]) * TERA,
        peak_int8_flops_per_s=float(raw["peak_int8_tops"]) * TERA,
        hbm_bytes=float(raw["hbm_gib"]) * GIB_BYTES,
        hbm_bytes_per_s=float(raw["hbm_gbytes_per_s"]) * GB_BYTES,
        ici_link_bytes_per_s=float(raw["ici_link_gbytes_per_s"]) * GB_BYTES,
        ici_links_per_chip=int(raw["ici_links_per_chip"]),
        torus_dims=int(raw["torus_dims"]),
        chips_per_host=int(raw["chips_per_host"]),
        host_shape=tuple(int(v) for v in raw["host_shape"]),
        dcn_bytes_per_s_per_host=float(raw["dcn_gbytes_per_s_per_host"]) * GB_BYTES,
        mxu_dim=int(raw["mxu_dim"]),
        max_slice_chips=int(raw["max_slice_chips"]),
        tensorcores_per_chip=int(raw["tensorcores_per_chip"]),
        wraparound=raw["wraparound"],
        peak_fp8_flops_per_s=float(raw.get("peak_fp8_tflops", _OPTIONAL["peak_fp8_tflops"])) * TERA,
        hbm_program_limit_bytes=float(limit) * GIB_BYTES,
        clock_hz=float(raw.get("clock_ghz", _OPTIONAL["clock_ghz"])) * 1e9,
        devices_per_chip=int(raw.get("devices_per_chip", _OPTIONAL["devices_per_chip"])),
        xla_async_all_gather=bool(raw.get("xla_async_all_gather", _OPTIONAL_FLAGS["xla_async_all_gather"])),
        xla_async_all_reduce=bool(raw.get("xla_async_all_reduce", _OPTIONAL_FLAGS["xla_async_all_reduce"])),
    )


@lru_cache(maxsize=8)
def load_catalog(path: Path = DEFAULT_CATALOG_PATH) -> dict[str, ChipSpec]:
    """Load the chip catalog.

    Returns
    -------
    dict mapping catalog key (``"tpu-v4"``) to :class:`ChipSpec`.

    Raises
    ------
    ScenarioError
        If the file is unreadable, not TOML, or a chip table is malformed.
    """
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ScenarioError(str(path), [("", str(e))]) from e
    return {key: _convert(key, table, str(path)) for key, table in raw.items()}
