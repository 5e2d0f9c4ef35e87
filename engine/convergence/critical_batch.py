"""The critical-batch model of steps and samples to a target, and its fit to measured points.

McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of Large-Batch Training"
(arXiv:1812.06162), eq. 2.11: training to a fixed loss at batch ``B`` takes

    S = S_min (1 + B_crit / B) steps  and  E = E_min (1 + B / B_crit) samples,

with ``S_min = E_min / B_crit`` (so ``S x B = E``). ``E`` is linear in ``B``
(``E = E_min + (E_min / B_crit) B``), so the fit is a weighted linear least squares on the
relative error of ``E``: closed form, no optimiser, the same answer every time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["CriticalBatch", "fit_critical_batch", "leave_one_out", "conformal_q", "NOMINAL_COVERAGE"]

#: share of held-out points the convergence range is meant to contain (as profiler.ranges for step time)
NOMINAL_COVERAGE = 0.8


@dataclass(frozen=True)
class CriticalBatch:
    """``E_min`` (fewest samples, at a tiny batch) and ``B_crit`` (the critical batch), both in samples."""

    e_min_samples: float
    b_crit_samples: float

    @property
    def s_min_steps(self) -> float:
        """Fewest steps (at an unbounded batch): ``E_min / B_crit``."""
        return self.e_min_samples / self.b_crit_samples

    def samples_to_target(self, batch_samples: float) -> float:
        """``E_min (1 + B / B_crit)`` samples at global batch ``B``."""
        return self.e_min_samples * (1.0 + batch_samples / self.b_crit_samples)

    def steps_to_target(self, batch_samples: float) -> float:
        """``S_min (1 + B_crit / B)`` steps at global batch ``B`` (not rounded)."""
        return self.s_min_steps * (1.0 + self.b_crit_samples / batch_samples)


def fit_critical_batch(batch_samples: Sequence[float], samples: Sequence[float]) -> CriticalBatch:
    """Fit ``E = E_min + (E_min / B_crit) B`` to points, minimising the sum of squared relative errors.

    Parameters
    ----------
    batch_samples
        Global batches of the measured points (samples per step).
    samples
        Samples each point needed to reach the target.

    Returns
    -------
    CriticalBatch
        The fitted ``e_min_samples`` and ``b_crit_samples``.

    Raises
    ------
    ValueError
        Fewer than two points, or a fit whose samples do not grow with the batch (no critical batch).
    """
    b = np.asarray(batch_samples, dtype=np.float64)
    e = np.asarray(samples, dtype=np.float64)
    if b.size < 2 or b.size != e.size:
        raise ValueError(f"need at least two (batch, samples) points of equal length; got {b.size} and {e.size}")
    # rows scaled by 1/E: minimises sum(((a + c B) - E) / E)^2, the relative error
    design = np.stack([np.ones_like(b), b], axis=1) / e[:, None]
    (a, c), *_ = np.linalg.lstsq(design, np.ones_like(e), rcond=None)
    if a <= 0 or c <= 0:
        raise ValueError(f"fitted E_min {a:g} and slope {c:g}: samples must grow with the batch for a critical batch")
    return CriticalBatch(e_min_samples=float(a), b_crit_samples=float(a / c))


def leave_one_out(batch_samples: Sequence[float], samples: Sequence[float]) -> list[float]:
    """Each point's relative error (fitted / measured - 1) when the fit leaves that point out."""
    b, e = list(batch_samples), list(samples)
    out = []
    for i in range(len(b)):
        fit = fit_critical_batch(b[:i] + b[i + 1 :], e[:i] + e[i + 1 :])
        out.append(fit.samples_to_target(b[i]) / e[i] - 1.0)
    return out


def conformal_q(relative_errors: Sequence[float], coverage: float = NOMINAL_COVERAGE) -> float:
    """The ``ceil((n + 1) coverage)``-th smallest ``|ln(1 + err)|`` (the largest when that exceeds ``n``).

    Split conformal (Lei et al. 2018, JASA, sec. 2.2), as :mod:`profiler.ranges` builds step-time ranges.
    """
    a = sorted(abs(math.log1p(x)) for x in relative_errors)
    if not a:
        return 0.0
    rank = math.ceil((len(a) + 1) * coverage)
    return a[min(rank, len(a)) - 1]
