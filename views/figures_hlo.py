"""Figure builders for an HLO run's module: each op's time by two estimates, and its collectives.

A DataFrame in (from :mod:`profiler.hlo_queries`), a Plotly figure out; no SQL, no Streamlit.
Op times span four decades, so the op scatters are log-log, ticked by decade, with the
diagonal (both estimates agree) drawn dashed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from views import palette
from views.figure_style import layout, log_decades

__all__ = ["op_estimate_scatter", "op_pair_scatter", "collective_exposure_bars", "BOUND_COLORS"]

#: the roofline term that sets Podscope's time of an op
BOUND_COLORS = {"mxu": palette.KIND_COLORS["compute"], "hbm": palette.KIND_COLORS["input_wait"]}
BOUND_LABELS = {"mxu": "MXU-bound (matmul FLOPs)", "hbm": "HBM-bound (bytes)"}


def _diagonal(fig: go.Figure, lo: float, hi: float, name: str) -> None:
    fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name=name, line=dict(dash="dash", color=palette.IDEAL), hoverinfo="skip")


def _span(*columns: pd.Series) -> tuple[float, float]:
    values = np.concatenate([c.to_numpy(dtype=float) for c in columns])
    values = values[values > 0]
    if values.size == 0:
        return 1.0, 10.0
    return float(values.min()) / 1.5, float(values.max()) * 1.5


def op_estimate_scatter(df: pd.DataFrame, title: str = "Each op: Podscope's time against the compiler's") -> go.Figure:
    """Podscope's time of one execution (x) against XLA:TPU's estimate (y), one point per op, log-log.

    ``df`` is :func:`profiler.hlo_queries.hlo_op_points` (podscope_ns, xla_ns, bound, name, opcode,
    executions, ratio). Points are coloured by the roofline term that sets Podscope's time; the
    diagonal is where both agree (below it Podscope is slower than XLA's estimate).
    """
    fig = go.Figure()
    x_us, y_us = df["podscope_ns"] / 1e3, df["xla_ns"] / 1e3
    for bound, part in df.assign(x=x_us, y=y_us).groupby(df["bound"].fillna("").replace("", "none"), sort=True):
        fig.add_scatter(
            x=part["x"], y=part["y"], mode="markers", name=BOUND_LABELS.get(bound, "no work"),
            marker=dict(color=BOUND_COLORS.get(bound, palette.FALLBACK), size=7, opacity=0.75),
            customdata=part[["name", "opcode", "executions", "ratio"]].to_numpy(),
            hovertemplate="%{customdata[0]} (%{customdata[1]}, %{customdata[2]:,} per step)<br>"
                          "Podscope %{x:,.2f} µs · XLA %{y:,.2f} µs · ratio %{customdata[3]:.2f}<extra></extra>",
        )  # fmt: skip
    lo, hi = _span(x_us, y_us)
    _diagonal(fig, lo, hi, "same time")
    log_decades("x", fig, "Podscope, one execution (log scale)", " µs")
    log_decades("y", fig, "XLA:TPU estimate, one execution (log scale)", " µs")
    fig.update_layout(legend_orientation="h")
    return layout(fig, title, height=460)


def op_pair_scatter(df: pd.DataFrame, a_label: str, b_label: str, title: str = "Each op's time per step in the two runs") -> go.Figure:
    """Each op's time per step in run a (x) against run b (y), log-log, with the diagonal.

    ``df`` is :func:`profiler.hlo_queries.hlo_op_pairs` (name, opcode, bound, a_s, b_s, delta_s).
    """
    fig = go.Figure()
    x_us, y_us = df["a_s"] * 1e6, df["b_s"] * 1e6
    for bound, part in df.assign(x=x_us, y=y_us).groupby(df["bound"].fillna("").replace("", "none"), sort=True):
        fig.add_scatter(
            x=part["x"], y=part["y"], mode="markers", name=BOUND_LABELS.get(bound, "no work"),
            marker=dict(color=BOUND_COLORS.get(bound, palette.FALLBACK), size=7, opacity=0.75),
            customdata=part[["name", "opcode"]].to_numpy(),
            hovertemplate="%{customdata[0]} (%{customdata[1]})<br>base %{x:,.2f} µs · other %{y:,.2f} µs per step<extra></extra>",
        )  # fmt: skip
    lo, hi = _span(x_us, y_us)
    _diagonal(fig, lo, hi, "unchanged")
    log_decades("x", fig, f"{a_label}, per step (log scale)", " µs")
    log_decades("y", fig, f"{b_label}, per step (log scale)", " µs")
    fig.update_layout(legend_orientation="h")
    return layout(fig, title, height=440)


def collective_exposure_bars(df: pd.DataFrame, title: str = "Collectives per step: exposed and hidden under compute") -> go.Figure:
    """One horizontal bar per collective group, split into exposed and hidden time per step.

    ``df`` is :func:`profiler.hlo_queries.hlo_collectives` (op, asynchronous, algorithm, collectives,
    executions, exposed_s, hidden_s).
    """
    labels = [
        f"{r.op} · {'async' if r.asynchronous else 'sync'} · {r.algorithm} ({int(r.collectives)}×)" for r in df.itertuples()
    ]
    fig = go.Figure()
    for column, name, color in (("exposed_s", "exposed (the core waits)", palette.KIND_COLORS["collective"]),
                                ("hidden_s", "hidden under compute", palette.FALLBACK)):  # fmt: skip
        fig.add_bar(
            y=labels, x=df[column] * 1e3, orientation="h", name=name, marker_color=color,
            customdata=df[["executions"]].to_numpy(), hovertemplate="%{y}<br>" + name + ": %{x:,.3f} ms per step"
            " over %{customdata[0]:,} executions<extra></extra>",
        )  # fmt: skip
    fig.update_layout(barmode="stack", legend_orientation="h", yaxis=dict(autorange="reversed"))
    fig.update_xaxes(rangemode="tozero", ticksuffix=" ms", title="time per step")
    return layout(fig, title, height=max(220, 140 + 36 * len(df)))
