"""The program a scenario names: a module, or a TPU bundle's module and sidecar, read once per file version.

``[model] path`` names an HLO text file (``compiled.as_text()``, plain or gzip) or a
bundle's ``NAME.xla.json``; a module with a ``NAME.xla.json`` beside it is read with it.
Validation (:mod:`engine.scenario`) and simulation (:mod:`engine.hlo.run`) both need
the costed program; it is cached by path, size and modification time, so a scenario is
validated and simulated from one read of a possibly large file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import HloError
from .bundle import XlaBundle, read_bundle, sidecar_for
from .bundle_format import SIDE_SUFFIX
from .cost import HloModuleCost, load_hlo

__all__ = ["HloProgram", "cached_module", "cached_program", "module_problems", "module_sha256"]


@dataclass(frozen=True)
class HloProgram:
    """A costed module (None for an out-of-memory bundle) and the sidecar it came with (None for a bare module)."""

    path: Path  # what the scenario named
    cost: HloModuleCost | None
    bundle: XlaBundle | None

    @property
    def devices(self) -> int:
        return self.bundle.devices if self.bundle is not None else self.cost.devices  # type: ignore[union-attr]

    @property
    def devices_per_chip(self) -> int:
        return self.bundle.devices_per_chip if self.bundle is not None else 1

    @property
    def module_path(self) -> Path | None:
        if self.bundle is not None:
            return self.bundle.module_path
        return self.path


def _stat(p: Path) -> tuple[int, int]:
    try:
        st = p.stat()
    except OSError:
        raise HloError(f"{p}: no such HLO file") from None
    return st.st_size, st.st_mtime_ns


@lru_cache(maxsize=8)
def _load(path: str, size: int, mtime_ns: int) -> HloModuleCost:
    return load_hlo(path)


def cached_module(path: str | Path) -> HloModuleCost:
    """The costed module at ``path``, read once per file version."""
    p = Path(path)
    return _load(str(p), *_stat(p))


@lru_cache(maxsize=8)
def _load_program(path: str, size: int, mtime_ns: int, side: str | None, side_size: int, side_mtime_ns: int) -> HloProgram:
    p = Path(path)
    bundle = read_bundle(side) if side else None
    if bundle is None:
        return HloProgram(p, cached_module(p), None)
    if bundle.module_path is None:
        return HloProgram(p, None, bundle)
    if not bundle.module_path.is_file():
        raise HloError(f"{bundle.path}: module: {bundle.module_path.name} is not beside the sidecar")
    cost = cached_module(bundle.module_path)
    if cost.devices != bundle.devices:
        raise HloError(f"{bundle.path}: devices: the sidecar says {bundle.devices} devices but the module "
                       f"{bundle.module_path.name} is partitioned for {cost.devices}")  # fmt: skip
    return HloProgram(p, cost, bundle)


def cached_program(path: str | Path) -> HloProgram:
    """The program ``path`` names (a module, or a bundle's sidecar), with its sidecar where one sits beside it.

    Raises
    ------
    HloError
        The module or sidecar is unreadable or inconsistent (see :func:`engine.hlo.bundle.read_bundle`),
        or the two disagree on the device count.
    """
    p = Path(path)
    size, mtime = _stat(p)
    side = p if p.name.endswith(SIDE_SUFFIX) else sidecar_for(p)
    side_size, side_mtime = _stat(side) if side is not None and side != p else (0, 0)
    return _load_program(str(p), size, mtime, str(side) if side else None, side_size, side_mtime)


def module_problems(path: str, chips: int, chip: str | None = None, slice_shape: tuple[int, ...] | None = None,
                    slices: int = 1) -> list[tuple[str, str]]:  # fmt: skip
    """Scenario problems of an HLO model: the program must read, and be compiled for this pod.

    A bare module must be partitioned for exactly ``chips`` devices; a TPU bundle must be
    compiled for the scenario's ``chip``, slice shape and slice count.
    """
    try:
        prog = cached_program(path)
    except HloError as e:
        return [("model.path", str(e))]
    b = prog.bundle
    if b is None:
        if prog.devices != chips:
            return [("model.path", f"the module is compiled for {prog.devices} devices but the pod has {chips} chips; "
                     f"valid: a pod of {prog.devices} chips, or recompile for {chips} devices "
                     f"(XLA_FLAGS=--xla_force_host_platform_device_count={chips} on CPU)")]  # fmt: skip
        return []
    problems = []
    shape = "x".join(str(d) for d in slice_shape) if slice_shape else "?"
    if chip is not None and b.chip != chip:
        problems.append(("pod.chip", f"the module was compiled for {b.chip} ({b.topology}) but the scenario names {chip}; "
                         f"valid: chip = {b.chip!r}, or recompile for {chip}"))  # fmt: skip
    if slice_shape is not None and tuple(b.slice_shape) != tuple(slice_shape):
        problems.append(("pod.topology", f"the module was compiled for {b.topology} but the scenario names {shape}; "
                         f"valid: topology = {b.topology.split(':')[1]!r}, or recompile for {shape}"))  # fmt: skip
    if b.slices != slices:
        problems.append(("pod.slices", f"the module was compiled for {b.slices} slice(s) but the scenario names {slices}; "
                         f"valid: slices = {b.slices}"))  # fmt: skip
    return problems


def module_sha256(path: str | Path) -> str:
    """Fingerprint of the module file (a stored run names the exact program it simulated)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
