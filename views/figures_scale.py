"""Figure builders for pods too large to draw chip by chip: the grid of slices, and binned histograms.

A job of 199 slices draws 199 cells, one per slice, arranged in a compact grid (slice ids in
reading order); a distribution across 50,944 chips draws the few dozen bins DuckDB counted, never
a value per chip. DataFrames in, figures out; no SQL, no Streamlit.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from views import palette
from views.figure_style import layout, nonneg_y
from views.figures_pod import color_scale

__all__ = ["slice_grid_shape", "slice_grid", "binned_histogram", "GRID_WIDTH_PX"]

#: width in pixels the slice grid's cells are sized for (the plot area of a wide page's main column)
GRID_WIDTH_PX = 760


def slice_grid_shape(slices: int) -> tuple[int, int]:
    """(columns, rows) of a grid holding ``slices`` cells, about twice as wide as tall (a wide page)."""
    cols = max(1, min(slices, math.ceil(math.sqrt(slices * 2))))
    return cols, math.ceil(slices / cols)


def slice_grid(
    df: pd.DataFrame,
    value: str,
    label: str,
    percent: bool,
    unit: str | None = None,
    selected: int | None = None,
    title: str = "",
) -> go.Figure:
    """One square per slice in reading order, coloured by ``value``; the ``selected`` slice is outlined.

    ``df`` has slice, chips, hosts and the ``value`` column (fractions when ``percent``), and, when
    the run stored them, dcn_bytes_per_step and dcn_busy_ns_per_step for the hover. Every cell
    carries its slice id as ``customdata``, so a click selects it.
    """
    cols, rows = slice_grid_shape(len(df))
    pos = np.arange(len(df))
    gx, gy = pos % cols, pos // cols
    values = df[value].to_numpy(dtype=float) * (100 if percent else 1)
    marker, caption = color_scale(values, label, percent, unit, across="slices")
    shown = "%" if percent else (unit if unit is not None else " GiB")
    # Markers are sized in pixels, not data units: size the grid so a cell is ``unit`` px in a plot
    # area about GRID_WIDTH_PX wide (a wide page's main column), and the figure as tall as its rows.
    unit = max(10, min(60, GRID_WIDTH_PX // cols))
    size = int(unit * 0.86)
    hover = [f"slice {int(s)} · {int(c)} chips on {int(h)} hosts" for s, c, h in zip(df["slice"], df["chips"], df["hosts"])]
    if "dcn_bytes_per_step" in df.columns:
        hover = [
            f"{t}<br>DCN out {b / 2**30:,.2f} GiB per step, busiest NIC {n / 1e6:,.2f} ms per step"
            for t, b, n in zip(hover, df["dcn_bytes_per_step"].fillna(0.0), df["dcn_busy_ns_per_step"].fillna(0.0))
        ]
    fig = go.Figure()
    fig.add_scatter(
        x=gx, y=gy, mode="markers", customdata=df["slice"].to_numpy(), text=hover, name="slices",
        marker=dict(symbol="square", size=size, color=values, showscale=True, line=dict(width=0.5, color="#555"), **marker),
        hovertemplate=f"%{{text}}<br>{label}: %{{marker.color:.2f}}{shown}<extra></extra>",
    )  # fmt: skip
    if selected is not None and selected in set(df["slice"]):
        i = int(np.flatnonzero(df["slice"].to_numpy() == selected)[0])
        fig.add_scatter(
            x=[gx[i]], y=[gy[i]], mode="markers", name=f"slice {selected} (shown below)", hoverinfo="skip",
            marker=dict(symbol="square-open", size=unit, color=palette.TOTAL, line=dict(width=3)),
        )  # fmt: skip
    fig.update_xaxes(range=[-0.6, cols - 0.4], visible=False, constrain="domain")
    fig.update_yaxes(range=[rows - 0.4, -0.6], visible=False, scaleanchor="x")
    fig.update_layout(legend_orientation="h", clickmode="event+select", dragmode=False)
    full = f"{title}<br><sup>{caption}</sup>" if title else caption
    return layout(fig, full, height=max(260, 150 + rows * unit))


def binned_histogram(
    bins: pd.DataFrame,
    label: str,
    scale: float = 1.0,
    suffix: str = "",
    title: str = "",
    what: str = "chips",
    color: str = palette.TOTAL,
) -> go.Figure:
    """Bars of counts over bins counted in SQL (columns: lo, hi, chips), the x axis in ``label``'s unit.

    ``scale`` converts the bin edges for display (100 for a fraction in %, 1/2**30 for GiB).
    One bin with lo == hi (every chip alike) is drawn as one bar at that value.
    """
    lo = bins["lo"].to_numpy(dtype=float) * scale
    hi = bins["hi"].to_numpy(dtype=float) * scale
    width = hi - lo
    if np.all(width == 0):
        width = np.full(len(lo), max(abs(float(lo[0])) * 0.02, 1e-9) if len(lo) else 1.0)
    fig = go.Figure()
    fig.add_bar(
        x=(lo + hi) / 2, y=bins["chips"], width=width, marker_color=color, name=what,
        customdata=np.stack([lo, hi], axis=1),
        hovertemplate=f"%{{customdata[0]:.3f}}-%{{customdata[1]:.3f}}{suffix}: %{{y:,}} {what}<extra></extra>",
    )  # fmt: skip
    fig.update_layout(xaxis_title=label, yaxis_title=what, showlegend=False, bargap=0.02)
    fig.update_xaxes(ticksuffix=suffix)
    nonneg_y(fig)
    return layout(fig, title, height=340)
