"""The bundled convergence tasks (``data/convergence.toml``): fitted critical-batch models with their sources.

Each task records the MLPerf reference convergence points it was fitted to (repository, commit,
path and the points themselves), the fitted ``e_min_samples`` and ``b_crit_samples``, and
``loo_q``, the spread of the points' leave-one-out errors that a run's range on its steps to
target rests on. ``scripts/fit_convergence.py`` refits them from the recorded points.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..data_files import DATA_DIR
from .critical_batch import CriticalBatch

__all__ = ["Task", "load_tasks", "tokens_per_param_default", "DEFAULT_TASKS_PATH"]

DEFAULT_TASKS_PATH = DATA_DIR / "convergence.toml"


@dataclass(frozen=True)
class Task:
    """One bundled task: its fitted model, the points it was fitted to, and where they come from."""

    key: str
    title: str
    model_kind: str
    model: CriticalBatch
    loo_q: float  # conformal 80% quantile of the leave-one-out |ln(measured / fitted)|
    points: tuple[tuple[float, float], ...]  # (global batch, RCP mean in rcp_unit)
    rcp_unit: str
    samples_per_rcp_unit: float
    source: str  # repo @ commit: path

    def point_samples(self) -> tuple[tuple[float, float], ...]:
        """The recorded points as (global batch, samples to target)."""
        return tuple((b, v * self.samples_per_rcp_unit) for b, v in self.points)


@lru_cache(maxsize=4)
def _read(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def load_tasks(path: str | Path | None = None) -> dict[str, Task]:
    """The tasks of a convergence file (default: the bundled one), by key."""
    raw = _read(Path(path) if path is not None else DEFAULT_TASKS_PATH)
    src = raw["source"]
    return {
        key: Task(
            key=key,
            title=t["title"],
            model_kind=t["model_kind"],
            model=CriticalBatch(float(t["e_min_samples"]), float(t["b_crit_samples"])),
            loo_q=float(t["loo_q"]),
            points=tuple((float(b), float(v)) for b, v in t["points"]),
            rcp_unit=t["rcp_unit"],
            samples_per_rcp_unit=float(t["samples_per_rcp_unit"]),
            source=f"{src['repo']} @ {src['commit']}: {t['path']}",
        )
        for key, t in raw["tasks"].items()
    }


def tokens_per_param_default(path: str | Path | None = None) -> float:
    """Chinchilla's compute-optimal tokens per parameter (Hoffmann et al. 2022), the suggested pre-training budget."""
    return float(_read(Path(path) if path is not None else DEFAULT_TASKS_PATH)["budget"]["chinchilla_tokens_per_param"])
