"""The HLO file a scenario names: read and costed once per file version, checked against the pod.

Validation (:mod:`engine.scenario`) and simulation (:mod:`engine.hlo.run`) both need the
costed module; it is cached by path, size and modification time, so a scenario is
validated and simulated from one read of a possibly large file.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from ..errors import HloError
from .cost import HloModuleCost, load_hlo

__all__ = ["cached_module", "module_problems", "module_sha256"]


@lru_cache(maxsize=8)
def _load(path: str, size: int, mtime_ns: int) -> HloModuleCost:
    return load_hlo(path)


def cached_module(path: str | Path) -> HloModuleCost:
    """The costed module at ``path``, read once per file version."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        raise HloError(f"{p}: no such HLO file") from None
    return _load(str(p), st.st_size, st.st_mtime_ns)


def module_problems(path: str, chips: int) -> list[tuple[str, str]]:
    """Scenario problems of an HLO model: the file must read, and be compiled for exactly ``chips`` devices."""
    try:
        cost = cached_module(path)
    except HloError as e:
        return [("model.path", str(e))]
    if cost.devices != chips:
        return [
            ("model.path", f"the module is compiled for {cost.devices} devices but the pod has {chips} chips; "
             f"valid: a pod of {cost.devices} chips, or recompile for {chips} devices "
             f"(XLA_FLAGS=--xla_force_host_platform_device_count={chips} on CPU)")
        ]  # fmt: skip
    return []


def module_sha256(path: str | Path) -> str:
    """Fingerprint of the module file (a stored run names the exact program it simulated)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
