"""Figure builders for the pod (torus planes, 3D cloud) and the timeline Gantt. DataFrames in, figures out.

A per-chip colour scale must say how much the chips differ, not invent hot spots: when the
chips of a run lie within a percentage point of each other (jitter), a percentage is drawn on a
fixed 0-100% scale, so nearly equal chips look nearly equal; otherwise the colours diverge
around the median chip. Either way the title states the range.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from profiler import format as fmt
from views import palette
from views.figure_style import layout

__all__ = ["pod_plane", "pod_3d", "timeline_gantt", "color_scale", "SPREAD_FIXED_BELOW_PP"]

#: below this spread between chips (percentage points) a percentage metric uses the fixed 0-100% scale
SPREAD_FIXED_BELOW_PP = 1.0


def _unit(percent: bool, unit: str | None) -> str:
    return unit if unit is not None else ("%" if percent else " GiB")


def color_scale(values: np.ndarray, label: str, percent: bool, unit: str | None = None, across: str = "chips") -> tuple[dict, str]:
    """Marker colour settings for per-chip ``values`` (already in % or ``unit``, default GiB) and a caption of their range.

    Returns (marker keywords: colorscale, cmin/cmax or cmid, colorbar), caption text such as
    "Idle %: 97.54-97.55% across chips (spread 0.01 pp); fixed 0-100% scale". ``across`` names
    what the values are of ("chips", "slices").
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return dict(colorscale=palette.SEQUENTIAL), f"{label}: no values"
    lo, hi, med = float(finite.min()), float(finite.max()), float(np.median(finite))
    unit = _unit(percent, unit)
    spread = hi - lo
    if percent:
        rng = f"{lo:.2f}-{hi:.2f}% across {across} (spread {spread:.2f} pp)"
    else:
        rng = f"{lo:.2f}-{hi:.2f}{unit} across {across} (spread {spread:.2f}{unit})"
    suffix = dict(ticksuffix=unit)
    if percent and spread < SPREAD_FIXED_BELOW_PP:
        marker = dict(colorscale=palette.SEQUENTIAL, cmin=0.0, cmax=100.0, colorbar=dict(title=label, **suffix))
        return marker, f"{label}: {rng}; fixed 0-100% scale (the chips are nearly equal)"
    if spread == 0:
        marker = dict(colorscale=palette.SEQUENTIAL, cmin=0.0, cmax=max(hi, 1e-9), colorbar=dict(title=label, **suffix))
        return marker, f"{label}: every {across.removesuffix('s')} {lo:.2f}{unit}"
    half = max(hi - med, med - lo)
    marker = dict(
        colorscale=palette.DIVERGING, cmin=med - half, cmax=med + half,
        colorbar=dict(title=f"{label}<br>(median {med:.2f}{unit})", **suffix),
    )  # fmt: skip
    return marker, f"{label}: {rng}; red above, blue below the median ({med:.2f}{unit})"


def _link_traces(links: pd.DataFrame, horizontal: str, vertical: str) -> list[go.Scatter]:
    """Link load as line segments between chip centres, one trace per utilisation band (few traces, many segments)."""
    out = []
    util = links["utilization"].to_numpy(dtype=float)
    for lo, hi, color in palette.LINK_BANDS:
        sel = links[(util >= lo) & (util < hi)]
        if sel.empty:
            continue
        n = len(sel)
        xs = np.empty(n * 3)
        ys = np.empty(n * 3)
        xs[0::3], xs[1::3], xs[2::3] = sel[f"src_{horizontal}"], sel[f"dst_{horizontal}"], np.nan
        ys[0::3], ys[1::3], ys[2::3] = sel[f"src_{vertical}"], sel[f"dst_{vertical}"], np.nan
        # Wrap-around links would cross the whole plane; draw them as short stubs instead.
        long_ = (np.abs(xs[1::3] - xs[0::3]) > 1) | (np.abs(ys[1::3] - ys[0::3]) > 1)
        xs[1::3] = np.where(long_, xs[0::3] + np.sign(xs[0::3] - xs[1::3]) * 0.45, xs[1::3])
        ys[1::3] = np.where(long_, ys[0::3] + np.sign(ys[0::3] - ys[1::3]) * 0.45, ys[1::3])
        out.append(
            go.Scatter(
                x=xs, y=ys, mode="lines", line=dict(color=color, width=3), hoverinfo="skip",
                name=f"link utilisation {lo:.0%}-{min(hi, 1.0):.0%}",
            )  # fmt: skip
        )
    return out


def _torus_axis(n: int) -> dict:
    """A torus axis of n chips shows exactly 0..n-1."""
    ticks = dict(tickmode="array", tickvals=list(range(n))) if n <= 32 else {}
    return dict(range=[-0.5, n - 0.5], showgrid=False, zeroline=False, constrain="domain", **ticks)


def pod_plane(
    df: pd.DataFrame,
    metric: str,
    label: str,
    horizontal: str = "x",
    vertical: str = "y",
    links: pd.DataFrame | None = None,
    title: str = "",
    percent: bool = True,
    extent: tuple[int, int] | None = None,
    unit: str | None = None,
) -> go.Figure:
    """One plane of the torus: a square per chip at its coordinates, coloured by ``metric``.

    ``df`` has chip, host, x, y, z and the metric column; ``links`` (optional) has src_/dst_
    coordinates and utilization for the links inside the plane. ``extent`` is the torus size
    along (horizontal, vertical) (default: the largest coordinate + 1). Each marker carries its
    chip id as ``customdata`` so a click can select it. The title gains the metric's range.
    """
    values = df[metric].to_numpy(dtype=float) * (100 if percent else 1)
    if extent is None:
        extent = (int(df[horizontal].max()) + 1 if not df.empty else 1, int(df[vertical].max()) + 1 if not df.empty else 1)
    n_h, n_v = extent
    size = max(6, min(90, int(480 / max(n_h, n_v))))
    fig = go.Figure()
    if links is not None and not links.empty:
        for trace in _link_traces(links, horizontal, vertical):
            fig.add_trace(trace)
    marker, caption = color_scale(values, label, percent, unit)
    unit = _unit(percent, unit)
    fig.add_scatter(
        x=df[horizontal], y=df[vertical], mode="markers", customdata=df["chip"], name="chips",
        marker=dict(symbol="square", size=size, color=values, showscale=True, line=dict(width=0.5, color="#555"), **marker),
        text=[f"chip {c} · host {h}" for c, h in zip(df["chip"], df["host"])],
        hovertemplate=f"%{{text}}<br>{horizontal}=%{{x}}, {vertical}=%{{y}}<br>{label}: %{{marker.color:.2f}}{unit}<extra></extra>",
    )  # fmt: skip
    fig.update_xaxes(title=f"{horizontal} (torus axis, 0-{n_h - 1})", **_torus_axis(n_h))
    fig.update_yaxes(title=f"{vertical} (0-{n_v - 1})", scaleanchor="x", autorange=False, **_torus_axis(n_v))
    fig.update_yaxes(range=[n_v - 0.5, -0.5])  # row 0 on top, as a grid is read
    fig.update_layout(legend_orientation="h", clickmode="event+select")
    full = f"{title}<br><sup>{caption}</sup>" if title else caption
    return layout(fig, full, height=620)


def pod_3d(df: pd.DataFrame, metric: str, label: str, title: str = "", percent: bool = True, unit: str | None = None) -> go.Figure:
    """The whole 3D torus as a point cloud coloured by ``metric`` (columns: chip, host, x, y, z, metric)."""
    values = df[metric].to_numpy(dtype=float) * (100 if percent else 1)
    marker, caption = color_scale(values, label, percent, unit)
    fig = go.Figure()
    fig.add_scatter3d(
        x=df["x"], y=df["y"], z=df["z"], mode="markers", customdata=df["chip"],
        marker=dict(size=4 if len(df) > 512 else 8, color=values, showscale=True, opacity=0.9, **marker),
        hovertemplate=f"chip %{{customdata}}<br>(%{{x}}, %{{y}}, %{{z}})<br>{label}: %{{marker.color:.2f}}<extra></extra>",
    )  # fmt: skip
    axes = {f"{a}axis": dict(title=a, dtick=1) for a in "xyz"}
    fig.update_layout(scene=dict(aspectmode="cube", **axes))
    full = f"{title}<br><sup>{caption}</sup>" if title else caption
    return layout(fig, full, height=620)


def _compile_blocks(z: np.ndarray, code: int, min_share: float = 0.5) -> list[tuple[int, int]]:
    """Runs of buckets (first, last) where most chips are compiling."""
    if z.size == 0:
        return []
    drawn = (~np.isnan(z)).sum(axis=0)
    hot = (z == code).sum(axis=0) >= min_share * np.maximum(drawn, 1)
    hot &= drawn > 0
    blocks, start = [], None
    for i, h in enumerate(hot):
        if h and start is None:
            start = i
        if not h and start is not None:
            blocks.append((start, i - 1))
            start = None
    if start is not None:
        blocks.append((start, len(hot) - 1))
    return blocks


#: pixels per chip row in the timeline: room for a label on every row
ROW_PX = 22


def timeline_gantt(cells: pd.DataFrame, steps: pd.DataFrame, chips: list[int], title: str = "Timeline") -> go.Figure:
    """Level-of-detail Gantt: one row per chip, one cell per time bucket coloured by its dominant kind.

    ``cells`` has chip, bucket, kind, share, t0_ns, width_ns (from ``queries.timeline``); ``steps``
    has step, start_rel_ns for the step boundaries. Drawn as one heatmap with a discrete colour scale,
    so the browser gets len(chips) x buckets small integers, not one shape per event. Every chip
    gets a labelled row; a stretch where most chips compile is outlined as one labelled block.
    """
    kinds = list(palette.KIND_COLORS)
    codes = {k: i for i, k in enumerate(kinds)}
    width_ns = int(cells["width_ns"].iloc[0])
    n_buckets = int(cells["bucket"].max()) + 1
    row_of = {c: i for i, c in enumerate(chips)}
    z = np.full((len(chips), n_buckets), np.nan)
    share = np.full((len(chips), n_buckets), np.nan)
    rows = cells["chip"].map(row_of).to_numpy()
    cols = cells["bucket"].to_numpy()
    z[rows, cols] = cells["kind"].map(codes).fillna(len(kinds) - 1).to_numpy()
    share[rows, cols] = cells["share"].to_numpy()
    n = len(kinds)
    scale = []
    for i, k in enumerate(kinds):
        scale += [[i / n, palette.KIND_COLORS[k]], [(i + 1) / n, palette.KIND_COLORS[k]]]
    x_ms = (np.arange(n_buckets) + 0.5) * width_ns / 1e6
    labels = np.array([palette.KIND_LABELS[k] for k in kinds], dtype=object)
    text = np.where(np.isnan(z), "", labels[np.nan_to_num(z, nan=0).astype(int)])
    y_labels = [f"chip {c}" for c in chips]
    fig = go.Figure(
        go.Heatmap(
            z=z, x=np.round(x_ms, 4), y=y_labels, zmin=-0.5, zmax=n - 0.5, colorscale=scale,
            showscale=False, text=text, customdata=np.round(share * 100, 1), ygap=1,
            hovertemplate="%{y} · %{x:.3f} ms<br>%{text} (%{customdata}% of bucket)<extra></extra>",
        )  # fmt: skip
    )
    for kind in kinds:  # legend entries for the discrete colours
        fig.add_scatter(x=[None], y=[None], mode="markers", marker=dict(symbol="square", size=12, color=palette.KIND_COLORS[kind]), name=palette.KIND_LABELS[kind])
    for first, last in _compile_blocks(z, codes["recompile"]):
        x0, x1 = first * width_ns / 1e6, (last + 1) * width_ns / 1e6
        fig.add_vrect(
            x0=x0, x1=x1, line=dict(color="#333", width=1.5), fillcolor="rgba(0,0,0,0)",
            annotation_text=f"compile, {fmt.duration((x1 - x0) / 1e3)}", annotation_position="top left",
        )  # fmt: skip
    if len(steps) <= 60:
        for start in steps["start_rel_ns"].iloc[1:]:
            fig.add_vline(x=start / 1e6, line_width=1, line_dash="dot", line_color="#333")
    fig.update_xaxes(title="time from window start", ticksuffix=" ms", rangemode="tozero")
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=y_labels, ticktext=y_labels)
    fig.update_layout(legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0))
    return layout(fig, title, height=max(300, 140 + ROW_PX * len(chips)))
