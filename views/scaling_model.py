"""Scaling arithmetic for the Scaling page: series, efficiency and the ideal line (pandas, no SQL, no UI).

Strong scaling keeps the global batch fixed as chips grow; weak scaling keeps the per-chip batch
fixed. Efficiency is throughput relative to perfect linear scaling from the series' smallest run:
``eff(n) = thr(n) / (thr(n0) * n / n0)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["scaling_table", "ideal_table", "oom_points", "series_labels"]


def series_labels(df: pd.DataFrame, mode: str) -> pd.Series:
    """The series each run belongs to: model, chip and global batch (strong) or per-chip batch (weak)."""
    if df.empty:
        return pd.Series(dtype=str, index=df.index)
    if mode == "strong":
        return df["model_kind"].astype(str) + " on " + df["chip"].astype(str) + ", batch " + df["global_batch"].astype(int).astype(str)
    return df["model_kind"].astype(str) + " on " + df["chip"].astype(str) + ", " + df["per_chip_batch"].map("{:g}".format) + "/chip"


def oom_points(runs: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Runs left off the curves because they do not fit in HBM: run_id, name, series, chips."""
    df = runs.dropna(subset=["global_batch"])
    df = df[df["oom"].fillna(False).astype(bool)]
    return df.assign(series=series_labels(df, mode))[["run_id", "name", "series", "chips"]].sort_values(["series", "chips"])


def scaling_table(runs: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Group runs into series and add throughput and efficiency.

    Parameters
    ----------
    runs
        From ``queries.scaling_runs`` (simulated runs; rows without a step time are dropped).
    mode
        "strong" (series share model, chip and global batch) or "weak" (model, chip, per-chip batch).

    Returns
    -------
    The runs with: series, throughput (tokens/s for sequence models, else samples/s), efficiency.
    """
    df = runs.dropna(subset=["step_time_s", "global_batch"]).copy()
    df = df[~df["oom"].fillna(False).astype(bool)]
    if df.empty:
        return df.assign(series=pd.Series(dtype=str), throughput=pd.Series(dtype=float), efficiency=pd.Series(dtype=float))
    df["throughput"] = df["tokens_per_s"].where(df["tokens_per_s"].notna(), df["samples_per_s"])
    df["series"] = series_labels(df, mode)
    # The newest run of each (series, chips) stands for that point.
    df = df.sort_values("run_id").groupby(["series", "chips"], as_index=False).last()
    base = df.loc[df.groupby("series")["chips"].idxmin(), ["series", "chips", "throughput"]]
    base = base.rename(columns={"chips": "base_chips", "throughput": "base_throughput"})
    df = df.merge(base, on="series")
    df["efficiency"] = df["throughput"] / (df["base_throughput"] * df["chips"] / df["base_chips"])
    return df.drop(columns=["base_chips", "base_throughput"]).sort_values(["series", "chips"]).reset_index(drop=True)


def ideal_table(table: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Perfect scaling from each series' smallest run: chips, series and every plotted metric."""
    rows = []
    for series, part in table.groupby("series"):
        part = part.sort_values("chips")
        if len(part) < 2:
            continue
        b = part.iloc[0]
        n = part["chips"].to_numpy(dtype=float)
        ratio = n / b["chips"]
        step = b["step_time_s"] / ratio if mode == "strong" else np.full_like(n, b["step_time_s"])
        rows.append(pd.DataFrame({
            "series": series, "chips": n, "step_time_s": step, "throughput": b["throughput"] * ratio,
            "efficiency": 1.0, "mfu": b["mfu"],
        }))  # fmt: skip
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["series", "chips", "step_time_s", "throughput", "efficiency", "mfu"])
