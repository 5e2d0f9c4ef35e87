"""Calibrated general parameters of the engine (``data/calibration.toml``).

Kept apart from the scenario: a scenario says what the user runs; calibration
says how real hardware falls short of its spec. Units in the file are converted
to seconds and fractions here, once.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from ..errors import ScenarioError
from ..pod.catalog import DATA_DIR

__all__ = ["Calibration", "load_calibration", "DEFAULT_CALIBRATION_PATH"]

DEFAULT_CALIBRATION_PATH = DATA_DIR / "calibration.toml"
_US = 1e-6


@dataclass(frozen=True)
class Calibration:
    mxu_efficiency: float = 0.8
    hbm_efficiency: float = 0.85
    op_overhead_s: float = 2e-6
    step_overhead_s: float = 2e-4
    jitter_frac: float = 0.01
    ici_efficiency: float = 0.9
    ici_hop_latency_s: float = 1e-6
    dcn_efficiency: float = 0.8
    dcn_latency_s: float = 2e-5
    # fixed cost of one collective beyond its ring's hops (the barrier XLA:TPU sets before each
    # collective, its setup): what small all-gathers take beyond the ring model
    collective_fixed_s: float = 1e-5
    # HBM a job cannot use on a chip whose XLA compile-time limit is not in the catalog (runtime
    # reservations, fragmentation; an assumption): ChipSpec.usable_hbm_bytes
    hbm_reserved_frac: float = 0.05


_KEYS = {
    ("compute", "mxu_efficiency"): ("mxu_efficiency", 1.0),
    ("compute", "hbm_efficiency"): ("hbm_efficiency", 1.0),
    ("compute", "op_overhead_us"): ("op_overhead_s", _US),
    ("compute", "step_overhead_us"): ("step_overhead_s", _US),
    ("compute", "jitter_frac"): ("jitter_frac", 1.0),
    ("interconnect", "ici_efficiency"): ("ici_efficiency", 1.0),
    ("interconnect", "ici_hop_latency_us"): ("ici_hop_latency_s", _US),
    ("interconnect", "dcn_efficiency"): ("dcn_efficiency", 1.0),
    ("interconnect", "dcn_latency_us"): ("dcn_latency_s", _US),
    ("interconnect", "collective_fixed_us"): ("collective_fixed_s", _US),
    ("memory", "hbm_reserved_frac"): ("hbm_reserved_frac", 1.0),
}


@lru_cache(maxsize=8)
def load_calibration(path: Path = DEFAULT_CALIBRATION_PATH) -> Calibration:
    """Load calibration; every key must be known and numeric, missing keys keep defaults."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ScenarioError(str(path), [("", str(e))]) from e
    values: dict[str, float] = {}
    problems = []
    for section, table in raw.items():
        if not isinstance(table, dict):
            continue  # free-form metadata (fit date, residuals) lives at top level
        for key, value in table.items():
            target = _KEYS.get((section, key))
            if target is None:
                if section in {"compute", "interconnect", "memory"}:
                    problems.append((f"{section}.{key}", "unknown calibration key"))
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                problems.append((f"{section}.{key}", f"expected a non-negative number, got {value!r}"))
                continue
            values[target[0]] = float(value) * target[1]
    if problems:
        raise ScenarioError(str(path), problems)
    known = {f.name for f in fields(Calibration)}
    assert set(values) <= known
    return Calibration(**values)
