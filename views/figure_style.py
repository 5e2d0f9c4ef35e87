"""The look every figure shares: layout, and axes that cannot mislead.

Quantities that cannot be negative (times, bytes, rates, shares) get axes starting at zero;
tick labels carry their unit; log axes label decades only (1, 10, 100, ...), never bare minor
digits.
"""

from __future__ import annotations

from collections.abc import Iterable

import plotly.graph_objects as go

__all__ = ["layout", "nonneg_y", "log_decades", "percent_axis", "fraction_tickformat"]


def layout(fig: go.Figure, title: str, height: int = 320) -> go.Figure:
    fig.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=40, b=10), template="plotly_white")
    if "<br>" in (title or ""):
        fig.update_layout(margin_t=70)
    if fig.layout.legend.orientation == "h":
        # Above the plot, under the title: below it would collide with the x-axis title.
        two_lines = "<br>" in (title or "")
        fig.update_layout(legend=dict(y=1.0, yanchor="bottom", x=0), margin_t=120 if two_lines else 90,
                          title=dict(y=1.0, yanchor="top", yref="container", pad=dict(t=24 if two_lines else 8)))  # fmt: skip
    return fig


def nonneg_y(fig: go.Figure, suffix: str = "", **kwargs) -> go.Figure:
    """A y axis from zero for a non-negative quantity, ticks carrying ``suffix`` (" ms", " GiB")."""
    fig.update_yaxes(rangemode="tozero", ticksuffix=suffix, **kwargs)
    return fig


def log_decades(axis: str, fig: go.Figure, title: str, suffix: str = "") -> go.Figure:
    """A log axis ticked at decades only (dtick=1 on a log axis is one tick per power of ten)."""
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    update(type="log", dtick=1, title=title, ticksuffix=suffix, minor=dict(ticks="", showgrid=False))
    return fig


def percent_axis(fig: go.Figure, axis: str = "y", upper: float | None = 100.0) -> go.Figure:
    """An axis in percent (values already x100), from 0 to ``upper`` (None: 0 to the data)."""
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    if upper is None:
        update(rangemode="tozero", ticksuffix="%")
    else:
        update(range=[0, upper], ticksuffix="%")
    return fig


def fraction_tickformat(values: Iterable[float]) -> str:
    """A d3 percent format for fractions with enough decimals that neighbouring ticks differ."""
    top = max((abs(float(v)) for v in values if v == v), default=1.0)
    if top >= 0.2:
        return ".0%"
    if top >= 0.02:
        return ".1%"
    return ".2%"
