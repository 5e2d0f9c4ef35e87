"""Which causes differ most between two runs: the arithmetic behind Compare's sentence (pandas, no UI).

Both runs' steady-state step times are split by cause (exclusive causes tile the step), so the
difference per cause sums to the difference in step time. Ranking the causes by the size of that
difference says where two runs part ways: for a simulated run beside an imported trace of the
same job, which cause the prediction gets most wrong.
"""

from __future__ import annotations

import pandas as pd

from profiler import format as fmt
from views.palette import kind_label

__all__ = ["cause_differences", "cause_difference_lines", "default_other_run"]


def default_other_run(runs: pd.DataFrame, run_id: int, base_name: str | None, base_chip: str | None) -> int | None:
    """The run Compare opens beside ``run_id`` when the user has chosen none.

    This run's newest what-if (named ``"<base> · ..."``); else the newest run on the same chip that
    fits in HBM; else the newest run that fits; else the newest other run. ``runs`` is
    :func:`profiler.queries.list_runs` (newest first). None when there is no other run.
    """
    others = runs[runs["run_id"] != run_id]
    if others.empty:
        return None
    fits = others[~others["oom"].fillna(False).astype(bool)]
    for pick in (
        others[others["name"].astype(str).str.startswith(f"{base_name} · ")] if base_name else others.iloc[:0],
        fits[fits["chip"] == base_chip] if base_chip else fits.iloc[:0],
        fits,
        others,
    ):
        if not pick.empty:
            return int(pick["run_id"].iloc[0])
    return None


def cause_differences(deltas: pd.DataFrame, top: int = 3) -> pd.DataFrame:
    """The ``top`` causes whose seconds per step differ most, largest first.

    Parameters
    ----------
    deltas
        One row per cause: ``kind``, ``a`` and ``b`` (seconds per steady-state step of the base
        and the other run).

    Returns
    -------
    DataFrame
        ``kind``, ``a_s``, ``b_s``, ``delta_s`` (b - a) and each run's share of its own step
        (``a_share``, ``b_share``), for causes that differ at all.
    """
    a_total, b_total = float(deltas["a"].sum()), float(deltas["b"].sum())
    out = pd.DataFrame(
        {
            "kind": deltas["kind"],
            "a_s": deltas["a"].astype(float),
            "b_s": deltas["b"].astype(float),
            "delta_s": (deltas["b"] - deltas["a"]).astype(float),
            "a_share": deltas["a"] / a_total if a_total > 0 else 0.0,
            "b_share": deltas["b"] / b_total if b_total > 0 else 0.0,
        }
    )
    out = out[out["delta_s"] != 0]
    return out.reindex(out["delta_s"].abs().sort_values(ascending=False, kind="stable").index).head(top).reset_index(drop=True)


def cause_difference_lines(deltas: pd.DataFrame, top: int = 3) -> list[str]:
    """One line per cause that differs most, e.g. ``collective: 4.1 ms → 12.3 ms per step (6.0% → 50.2% of the step)``."""
    return [
        f"{kind_label(r.kind)}: {fmt.duration(r.a_s)} → {fmt.duration(r.b_s)} per step "
        f"({fmt.percent(r.a_share)} → {fmt.percent(r.b_share)} of the step)"
        for r in cause_differences(deltas, top).itertuples()
    ]
