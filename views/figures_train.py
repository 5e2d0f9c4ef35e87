"""Figure builders for time and cost to train: against chips or global batch, and how two runs' times differ.

The convergence model (engine/convergence/) prices ``steps_to_target`` at the step time. Past the
critical batch B_crit the steps to target stop falling with the batch, so a curve against the
global batch bends there; the figures mark B_crit so the bend has a name. DataFrames in, figures
out; no SQL, no Streamlit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from profiler import format as fmt
from views import palette
from views.figure_style import layout, nonneg_y

__all__ = ["time_unit", "train_figure", "train_time_waterfall", "TRAIN_METRICS"]

#: metric -> (axis label, unit kind): "time" in seconds, "usd" in dollars, "count" plain
TRAIN_METRICS = {
    "time_to_train_s": ("time to train", "time"),
    "cost_usd": ("cost to train", "usd"),
    "chip_hours": ("chip-hours to train", "count"),
}
_X_AXES = {"global_batch": "global batch (samples per step, log scale)", "chips": "chips (log scale)"}


def time_unit(seconds: float) -> tuple[float, str]:
    """(divisor, suffix) that keeps a time axis short: seconds below 2 min, minutes below 2 h, else hours."""
    a = abs(float(seconds)) if seconds == seconds else 0.0
    if a < 120:
        return 1.0, " s"
    if a < 7200:
        return 60.0, " min"
    return 3600.0, " h"


def _scale(metric: str, values: pd.Series) -> tuple[float, str, str]:
    """(divisor, tick prefix, tick suffix) for a train metric's axis."""
    kind = TRAIN_METRICS[metric][1]
    if kind == "time":
        div, suffix = time_unit(float(values.max()) if len(values) else 0.0)
        return div, "", suffix
    if kind == "usd":
        return 1.0, "$", ""
    return 1.0, "", ""


def _mark(fig: go.Figure, x: float, text: str) -> None:
    """A dashed vertical line at ``x`` on a log x axis, labelled at the top of the plot."""
    fig.add_vline(x=x, line=dict(dash="dash", color=palette.IDEAL))
    # an annotation's x on a log axis is the log of the value (a shape's is the value itself)
    fig.add_annotation(x=float(np.log10(x)), xref="x", y=1.0, yref="paper", text=text, showarrow=False,
                       xanchor="left", yanchor="bottom", font=dict(color=palette.IDEAL))  # fmt: skip


def train_figure(df: pd.DataFrame, metric: str, x: str = "global_batch", title: str = "") -> go.Figure:
    """Time (or cost, or chip-hours) to train against global batch or chips, one line per series.

    ``df`` has series, name, chips, global_batch, steps_to_target, batch_over_b_crit, b_crit_samples,
    per_chip_batch and ``metric``. B_crit is a dashed vertical line on a batch axis; on a chips axis,
    at the chip count where a series' global batch reaches it (series whose batch grows with chips).
    """
    label, _ = TRAIN_METRICS[metric]
    div, prefix, suffix = _scale(metric, df[metric])
    fig = go.Figure()
    for series, part in df.sort_values(x).groupby("series", sort=False):
        fig.add_scatter(
            x=part[x], y=part[metric] / div, mode="lines+markers", name=str(series),
            customdata=np.stack([part["name"].astype(str), part["chips"], part["global_batch"], part["steps_to_target"],
                                 part["batch_over_b_crit"]], axis=1),
            hovertemplate="%{customdata[0]}<br>%{customdata[1]:,} chips, global batch %{customdata[2]:,}<br>"
                          f"{label}: {prefix}%{{y:,.3g}}{suffix}<br>%{{customdata[3]:,}} steps to target, "
                          "B / B_crit %{customdata[4]:.2f}<extra></extra>",
        )  # fmt: skip
    for b_crit in sorted(set(df["b_crit_samples"].dropna().round())):
        if x == "global_batch":
            _mark(fig, b_crit, f"B_crit {fmt.si(b_crit)}")
            continue
        for _series, part in df[df["b_crit_samples"].round() == b_crit].groupby("series"):
            per_chip = part["per_chip_batch"].to_numpy(dtype=float)
            if len(part) > 1 and np.allclose(per_chip, per_chip[0]) and part["chips"].min() <= b_crit / per_chip[0] <= part["chips"].max():
                _mark(fig, b_crit / per_chip[0], f"B_crit ({fmt.si(b_crit)} samples)")
    fig.update_xaxes(type="log", title=_X_AXES[x], dtick=np.log10(2), tickformat=",")
    fig.update_layout(legend_orientation="h")
    nonneg_y(fig, suffix, title=label, tickprefix=prefix)
    return layout(fig, title, height=380)


def train_time_waterfall(base_s: float, parts: pd.DataFrame, new_s: float, title: str = "How each cause moved the time to train") -> go.Figure:
    """Waterfall from the base run's time to train to the other run's (``parts``: label, delta_s, summing to the change).

    Longer is red, shorter green; the axis is in seconds, minutes or hours, whichever keeps it short.
    """
    div, suffix = time_unit(max(base_s, new_s))
    labels = ["base"] + list(parts["label"]) + ["other run"]
    values = [base_s / div] + list(parts["delta_s"] / div) + [new_s / div]
    text = [fmt.duration(base_s)] + [("+" if d > 0 else "") + fmt.duration(d) if abs(d) >= 1e-3 else "0" for d in parts["delta_s"]] + [fmt.duration(new_s)]
    fig = go.Figure(
        go.Waterfall(
            x=labels, y=values, measure=["absolute"] + ["relative"] * len(parts) + ["total"], text=text, textposition="outside",
            increasing=dict(marker_color=palette.WORSE), decreasing=dict(marker_color=palette.BETTER), totals=dict(marker_color=palette.TOTAL),
            hovertemplate="%{x}: %{y:,.3g}" + suffix + "<extra></extra>",
        )  # fmt: skip
    )
    fig.update_layout(showlegend=False)
    nonneg_y(fig, suffix, title="time to train")
    return layout(fig, title, height=380)
