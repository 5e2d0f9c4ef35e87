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

__all__ = ["cause_differences", "cause_difference_lines", "default_other_run", "time_to_train_parts"]


def default_other_run(runs: pd.DataFrame, run_id: int, base_name: str | None, base_chip: str | None,
                      same_model: list[int] | tuple[int, ...] = ()) -> tuple[int | None, bool]:  # fmt: skip
    """The run Compare opens beside ``run_id`` when the user has chosen none, and whether it is the same model.

    This run's newest what-if (named ``"<base> · ..."``); else the newest run of the same model
    (``same_model``: run ids whose ``[model]`` table is the base's) that fits in HBM, on the same
    chip first; else the newest run on the same chip that fits; else the newest run that fits;
    else the newest other run. ``runs`` is :func:`profiler.queries.list_runs` (newest first).
    (None, False) when there is no other run.
    """
    others = runs[runs["run_id"] != run_id]
    if others.empty:
        return None, False
    fits = others[~others["oom"].fillna(False).astype(bool)]
    kin = fits[fits["run_id"].isin(list(same_model))]
    whatifs = others[others["name"].astype(str).str.startswith(f"{base_name} · ")] if base_name else others.iloc[:0]
    for pick, related in (
        (whatifs, True),
        (kin[kin["chip"] == base_chip] if base_chip else kin.iloc[:0], True),
        (kin, True),
        (fits[fits["chip"] == base_chip] if base_chip else fits.iloc[:0], False),
        (fits, False),
        (others, False),
    ):
        if not pick.empty:
            run = int(pick["run_id"].iloc[0])
            return run, related or run in set(same_model)
    return None, False


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


def time_to_train_parts(a: dict, b: dict, deltas: pd.DataFrame) -> pd.DataFrame | None:
    """The change in time to train from run ``a`` to run ``b``, split into step-time causes and steps to target.

    The training part of a time to train is ``N * s`` (steps to target times the steady step time,
    ``time_to_train_breakdown_s["train"]``). Its change splits exactly and symmetrically into
    ``(s_b - s_a) * (N_a + N_b) / 2`` (the step time) and ``(N_b - N_a) * (s_a + s_b) / 2`` (the
    steps); the step-time part is split further by cause in proportion to ``deltas``' per-cause change,
    which sums to ``s_b - s_a``. Evaluation, compiles and checkpoints are one more part, so the parts
    sum to ``b.time_to_train_s - a.time_to_train_s``.

    Parameters
    ----------
    a, b
        The two runs' summaries (``time_to_train_s``, ``steps_to_target``, ``step_time_s``).
    deltas
        One row per cause: ``kind``, ``delta_s`` (seconds per steady step, b - a).

    Returns
    -------
    DataFrame or None
        ``label``, ``delta_s`` (seconds of time to train), ``part`` ("cause", "steps" or "other");
        None unless both runs have a time to train.
    """
    keys = ("time_to_train_s", "steps_to_target", "step_time_s")
    if any(r.get(k) is None for r in (a, b) for k in keys):
        return None
    n_a, n_b = float(a["steps_to_target"]), float(b["steps_to_target"])
    s_a, s_b = float(a["step_time_s"]), float(b["step_time_s"])
    step_part = (s_b - s_a) * (n_a + n_b) / 2
    steps_part = (n_b - n_a) * (s_a + s_b) / 2
    total = float(deltas["delta_s"].sum())
    if total:  # causes tile the step, so ``total`` is s_b - s_a up to rounding
        rows = [(kind_label(k), float(d) * step_part / total, "cause") for k, d in zip(deltas["kind"], deltas["delta_s"])]
    else:
        rows = [("step time", step_part, "cause")]
    rows.append(("steps to target", steps_part, "steps"))
    # evaluation, compiles and checkpoints: what N * s does not cover
    rows.append(("eval, compile, checkpoints", float(b["time_to_train_s"]) - float(a["time_to_train_s"]) - step_part - steps_part, "other"))
    return pd.DataFrame(rows, columns=["label", "delta_s", "part"])
