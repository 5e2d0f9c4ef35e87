"""Scaling arithmetic for the Scaling page: series, efficiency and the ideal line (pandas, no SQL, no UI).

Strong scaling keeps the global batch fixed as chips grow; weak scaling keeps the per-chip batch
fixed. Efficiency is throughput relative to perfect linear scaling from the series' smallest run:
``eff(n) = thr(n) / (thr(n0) * n / n0)``.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

__all__ = ["scaling_table", "ideal_table", "oom_points", "series_labels"]


_MODEL_NAMES = {"resnet50": "ResNet-50", "mlp": "MLP", "transformer": "transformer", "hlo": "HLO module"}


def _model_label(row) -> str:
    name = _MODEL_NAMES.get(str(row["model_kind"]), str(row["model_kind"]))
    params = row.get("params")
    if params is not None and params == params and params > 0:  # not NaN
        size = f"{params / 1e9:.3g}B" if params >= 1e9 else f"{params / 1e6:.3g}M"
        return f"{name} {size}"
    return name


def series_labels(df: pd.DataFrame, mode: str) -> pd.Series:
    """The series each run belongs to: the same job (model, training recipe, mesh axes but data, chip) at one
    global batch (strong scaling) or one per-chip batch (weak), labelled by what it is.

    Two jobs that would read alike (the same model kind and size on the same chip) but differ in their
    recipe or mesh are told apart by a number after the label, never merged into one curve.
    """
    if df.empty:
        return pd.Series(dtype=str, index=df.index)
    job_cols = [c for c in ("model_json", "recipe_json", "mesh_json") if c in df.columns]
    job = df[job_cols].astype(str).agg("|".join, axis=1) if job_cols else df["model_kind"].astype(str)
    if mode == "strong":
        scale = ", batch " + df["global_batch"].astype(int).map("{:,}".format)
    else:
        scale = ", " + df["per_chip_batch"].map("{:g}".format) + "/chip"
    base = df.apply(_model_label, axis=1) + " on " + df["chip"].astype(str) + scale
    key = job + "|" + base
    labels = {}
    for b in base.unique():
        rows = df[base == b].assign(_key=key[base == b]).drop_duplicates("_key")
        if len(rows) == 1:
            labels[rows["_key"].iloc[0]] = b
            continue
        # what tells the jobs apart: the recipe and mesh settings that differ between them
        settings = [{**json.loads(r.get("recipe_json") or "{}"), **json.loads(r.get("mesh_json") or "{}")} for _, r in rows.iterrows()]
        differ = [k for k in settings[0] if len({json.dumps(st.get(k)) for st in settings}) > 1]
        named = [", ".join(f"{k.replace('_', ' ')} {st.get(k)}" for k in differ) for st in settings]
        models = list(dict.fromkeys(rows["model_json"])) if "model_json" in rows else []
        for (_, r), what in zip(rows.iterrows(), named):
            if not what or named.count(what) > 1:  # the same recipe and mesh: the models themselves differ
                what = ", ".join(x for x in (what, f"model {models.index(r['model_json']) + 1} of {len(models)}") if x)
            labels[r["_key"]] = f"{b}, {what}"
    return key.map(labels)


def oom_points(runs: pd.DataFrame, mode: str) -> pd.DataFrame:
    """Runs left off the curves because they do not fit in HBM: run_id, name, series, chips, and ``by_compiler``
    (the out-of-memory verdict is the TPU compiler's: ``hbm_source = "xla"``)."""
    df = runs.dropna(subset=["global_batch"])
    df = df[df["oom"].fillna(False).astype(bool)]
    cols = ["run_id", "name", "series", "chips", "by_compiler"]
    return df.assign(series=series_labels(df, mode), by_compiler=df["hbm_source"].eq("xla"))[cols].sort_values(["series", "chips"])


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
