"""Figure builders: a DataFrame in, a Plotly figure out. No SQL, no Streamlit.

Colours for event kinds are fixed across every figure, so "input wait" is the
same orange on the Overview, the Idle-time page and the Timeline.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

__all__ = ["KIND_COLORS", "breakdown_bar", "step_time_line", "empty_figure", "validation_scatter"]

KIND_COLORS = {
    "compute": "#4C78A8",
    "collective": "#72B7B2",
    "input_wait": "#F58518",
    "sync_wait": "#E45756",
    "recompile": "#B279A2",
    "other": "#9D9D9D",
}
KIND_LABELS = {
    "compute": "Compute",
    "collective": "Collective (exposed)",
    "input_wait": "Input wait",
    "sync_wait": "Sync wait",
    "recompile": "Recompile",
    "other": "Other",
}


def _layout(fig: go.Figure, title: str, height: int = 320) -> go.Figure:
    fig.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10), template="plotly_white")
    return fig


def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, "", height=200)


def breakdown_bar(df: pd.DataFrame, title: str = "Where chip time goes") -> go.Figure:
    """Horizontal stacked bar of chip-time fractions by kind (columns: kind, frac)."""
    fig = go.Figure()
    for row in df.itertuples():
        fig.add_bar(
            y=["chip time"],
            x=[row.frac * 100],
            name=KIND_LABELS.get(row.kind, row.kind),
            orientation="h",
            marker_color=KIND_COLORS.get(row.kind, "#BBBBBB"),
            hovertemplate=f"{KIND_LABELS.get(row.kind, row.kind)}: %{{x:.1f}}%<extra></extra>",
        )
    fig.update_layout(barmode="stack", xaxis_title="% of chip time", yaxis_visible=False, legend_orientation="h")
    return _layout(fig, title, height=220)


def step_time_line(df: pd.DataFrame, title: str = "Step time") -> go.Figure:
    """Step time over steps (columns: step, step_s, min_s, max_s), with the min-max band of each bucket."""
    fig = go.Figure()
    if (df["max_s"] != df["min_s"]).any():
        fig.add_scatter(x=df["step"], y=df["max_s"] * 1e3, mode="lines", line_width=0, showlegend=False, hoverinfo="skip")
        fig.add_scatter(
            x=df["step"], y=df["min_s"] * 1e3, mode="lines", line_width=0, fill="tonexty",
            fillcolor="rgba(76,120,168,0.2)", name="min-max", hoverinfo="skip",
        )  # fmt: skip
    fig.add_scatter(x=df["step"], y=df["step_s"] * 1e3, mode="lines", name="step time", line_color="#4C78A8")
    fig.update_layout(xaxis_title="step", yaxis_title="ms", showlegend=False)
    return _layout(fig, title)


def validation_scatter(df: pd.DataFrame, title: str = "Predicted vs published") -> go.Figure:
    """Log-log scatter of predicted against published, one colour per family, with the ideal y = x line.

    Columns: id, family, metric, unit, predicted, published, error_pct. Metrics with different units
    share the axes because both are log-scaled: distance from the diagonal is the relative error.
    """
    fig = go.Figure()
    lo = float(min(df["predicted"].min(), df["published"].min())) / 1.5
    hi = float(max(df["predicted"].max(), df["published"].max())) * 1.5
    fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="ideal (y = x)", line=dict(color="#9D9D9D", dash="dash"))
    for family, g in df.groupby("family", sort=True):
        fig.add_scatter(
            x=g["published"], y=g["predicted"], mode="markers", name=str(family), marker=dict(size=9),
            customdata=g[["id", "metric", "error_pct"]].to_numpy(),
            hovertemplate="%{customdata[0]}<br>%{customdata[1]}<br>published %{x:.4g}, predicted %{y:.4g}"
                          "<br>error %{customdata[2]:+.1f}%<extra></extra>",
        )  # fmt: skip
    fig.update_xaxes(type="log", title="published")
    fig.update_yaxes(type="log", title="predicted")
    return _layout(fig, title, height=480)
