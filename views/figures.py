"""Figure builders: a DataFrame in, a Plotly figure out. No SQL, no Streamlit.

Colours for event kinds are fixed across every figure, so "input wait" is the
same orange on the Overview, the Idle-time page and the Timeline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

__all__ = [
    "KIND_COLORS",
    "KIND_LABELS",
    "breakdown_bar",
    "step_time_line",
    "empty_figure",
    "kind_area",
    "host_bars",
    "pod_plane",
    "pod_3d",
    "timeline_gantt",
    "hbm_bar",
    "memory_timeline_area",
    "chip_memory_histogram",
    "compiles_over_steps",
    "compiles_by_cause_bar",
    "scaling_figure",
    "compare_bars",
    "delta_waterfall",
    "figure_bytes",
    "validation_scatter",
    "plan_scatter",
    "INFEASIBLE_COLOR",
]

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
    if fig.layout.legend.orientation == "h":
        # Above the plot, under the title: below it would collide with the x-axis title.
        fig.update_layout(legend=dict(y=1.0, yanchor="bottom", x=0), margin_t=90, title=dict(y=0.99, yanchor="top", yref="container"))
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
    # A compile or restart step can be 100x the steady step: a log axis keeps the steady state readable.
    if df["max_s"].max() > 20 * df["step_s"].median():
        fig.update_yaxes(type="log", title="ms (log)")
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


def _kind_order(kinds) -> list[str]:
    known = [k for k in KIND_COLORS if k in set(kinds)]
    return known + sorted(set(kinds) - set(known))


def figure_bytes(fig: go.Figure) -> int:
    """Size of the JSON a figure sends to the browser (what the 5 MB budget limits)."""
    return len(fig.to_json().encode())


def kind_area(df: pd.DataFrame, title: str = "Chip time per step by cause") -> go.Figure:
    """Stacked area of mean chip time per step by kind (columns: step, kind, chip_s_per_step)."""
    fig = go.Figure()
    for kind in _kind_order(df["kind"]):
        part = df[df["kind"] == kind]
        fig.add_scatter(
            x=part["step"], y=part["chip_s_per_step"] * 1e3, name=KIND_LABELS.get(kind, kind), mode="lines",
            stackgroup="one", line_width=0.5, line_color=KIND_COLORS.get(kind, "#BBBBBB"),
            hovertemplate=f"{KIND_LABELS.get(kind, kind)}: %{{y:.3f}} ms<extra>step %{{x}}</extra>",
        )  # fmt: skip
    fig.update_layout(xaxis_title="step", yaxis_title="ms per chip-step", legend_orientation="h")
    return _layout(fig, title, height=360)


def _stacked_kind_bars(df: pd.DataFrame, x: str, y: str, scale: float, hover: str) -> go.Figure:
    """One bar per ``x`` value, stacked by kind in the fixed kind order and colours; ``hover`` formats %{x}, %{y}."""
    fig = go.Figure()
    for kind in _kind_order(df["kind"]):
        part = df[df["kind"] == kind]
        label = KIND_LABELS.get(kind, kind)
        fig.add_bar(
            x=part[x], y=part[y] * scale, name=label, marker_color=KIND_COLORS.get(kind, "#BBBBBB"),
            hovertemplate=hover.replace("{label}", label),
        )  # fmt: skip
    return fig


def host_bars(df: pd.DataFrame, title: str = "Chip time by host") -> go.Figure:
    """Stacked bars of each host's chip-time fractions by kind (columns: host, kind, frac)."""
    fig = _stacked_kind_bars(df, "host", "frac", 100, "host %{x}: {label} %{y:.2f}%<extra></extra>")
    fig.update_layout(barmode="stack", xaxis_title="host", yaxis_title="% of chip time", legend_orientation="h", bargap=0.05)
    return _layout(fig, title, height=360)


def _link_traces(links: pd.DataFrame, horizontal: str, vertical: str) -> list[go.Scatter]:
    """Link load as line segments between chip centres, one trace per utilisation band (few traces, many segments)."""
    bands = [(0.0, 0.25, "#C6DBEF"), (0.25, 0.5, "#6BAED6"), (0.5, 0.75, "#2171B5"), (0.75, 10.0, "#08306B")]
    out = []
    util = links["utilization"].to_numpy(dtype=float)
    for lo, hi, color in bands:
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
                name=f"link util {lo:.0%}-{min(hi, 1.0):.0%}",
            )  # fmt: skip
        )
    return out


def pod_plane(
    df: pd.DataFrame,
    metric: str,
    label: str,
    horizontal: str = "x",
    vertical: str = "y",
    links: pd.DataFrame | None = None,
    title: str = "",
    percent: bool = True,
) -> go.Figure:
    """One plane of the torus: a square per chip at its coordinates, coloured by ``metric``.

    ``df`` has chip, host, x, y, z and the metric column; ``links`` (optional) has src_/dst_
    coordinates and utilization for the links inside the plane. Each marker carries its chip id as
    ``customdata`` so a click can select it.
    """
    values = df[metric].to_numpy(dtype=float) * (100 if percent else 1)
    n_h = int(df[horizontal].max()) + 1 if not df.empty else 1
    n_v = int(df[vertical].max()) + 1 if not df.empty else 1
    size = max(6, min(90, int(480 / max(n_h, n_v))))
    fig = go.Figure()
    if links is not None and not links.empty:
        for trace in _link_traces(links, horizontal, vertical):
            fig.add_trace(trace)
    unit = "%" if percent else ""
    fig.add_scatter(
        x=df[horizontal], y=df[vertical], mode="markers", customdata=df["chip"], name="chips",
        marker=dict(symbol="square", size=size, color=values, colorscale="YlOrRd", showscale=True,
                    colorbar=dict(title=label), line=dict(width=0.5, color="#555")),
        text=[f"chip {c} · host {h}" for c, h in zip(df["chip"], df["host"])],
        hovertemplate=f"%{{text}}<br>{horizontal}=%{{x}}, {vertical}=%{{y}}<br>{label}: %{{marker.color:.2f}}{unit}<extra></extra>",
    )  # fmt: skip
    fig.update_xaxes(title=horizontal, dtick=1 if n_h <= 16 else None, showgrid=False, zeroline=False)
    fig.update_yaxes(title=vertical, dtick=1 if n_v <= 16 else None, showgrid=False, zeroline=False, scaleanchor="x", autorange="reversed")
    fig.update_layout(legend_orientation="h", clickmode="event+select")
    return _layout(fig, title, height=620)


def pod_3d(df: pd.DataFrame, metric: str, label: str, title: str = "", percent: bool = True) -> go.Figure:
    """The whole 3D torus as a point cloud coloured by ``metric`` (columns: chip, host, x, y, z, metric)."""
    values = df[metric].to_numpy(dtype=float) * (100 if percent else 1)
    fig = go.Figure()
    fig.add_scatter3d(
        x=df["x"], y=df["y"], z=df["z"], mode="markers", customdata=df["chip"],
        marker=dict(size=4 if len(df) > 512 else 8, color=values, colorscale="YlOrRd", showscale=True, colorbar=dict(title=label), opacity=0.9),
        hovertemplate=f"chip %{{customdata}}<br>(%{{x}}, %{{y}}, %{{z}})<br>{label}: %{{marker.color:.2f}}<extra></extra>",
    )  # fmt: skip
    fig.update_layout(scene=dict(xaxis_title="x", yaxis_title="y", zaxis_title="z", aspectmode="cube"))
    return _layout(fig, title, height=620)


def timeline_gantt(cells: pd.DataFrame, steps: pd.DataFrame, chips: list[int], title: str = "Timeline") -> go.Figure:
    """Level-of-detail Gantt: one row per chip, one cell per time bucket coloured by its dominant kind.

    ``cells`` has chip, bucket, kind, share, t0_ns, width_ns (from ``queries.timeline``); ``steps``
    has step, start_rel_ns for the step boundaries. Drawn as one heatmap with a discrete colour scale,
    so the browser gets len(chips) x buckets small integers, not one shape per event.
    """
    kinds = list(KIND_COLORS)
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
        scale += [[i / n, KIND_COLORS[k]], [(i + 1) / n, KIND_COLORS[k]]]
    x_ms = (np.arange(n_buckets) + 0.5) * width_ns / 1e6
    labels = np.array([KIND_LABELS[k] for k in kinds], dtype=object)
    text = np.where(np.isnan(z), "", labels[np.nan_to_num(z, nan=0).astype(int)])
    fig = go.Figure(
        go.Heatmap(
            z=z, x=np.round(x_ms, 4), y=[f"chip {c}" for c in chips], zmin=-0.5, zmax=n - 0.5, colorscale=scale,
            showscale=False, text=text, customdata=np.round(share * 100, 1),
            hovertemplate="%{y} · %{x:.3f} ms<br>%{text} (%{customdata}% of bucket)<extra></extra>",
        )  # fmt: skip
    )
    for kind in kinds:  # legend entries for the discrete colours
        fig.add_scatter(x=[None], y=[None], mode="markers", marker=dict(symbol="square", size=12, color=KIND_COLORS[kind]), name=KIND_LABELS[kind])
    if len(steps) <= 60:
        for start in steps["start_rel_ns"].iloc[1:]:
            fig.add_vline(x=start / 1e6, line_width=1, line_dash="dot", line_color="#333")
    fig.update_layout(xaxis_title="ms from window start", legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0), yaxis_autorange="reversed")
    return _layout(fig, title, height=max(300, min(900, 60 + 14 * len(chips))))


def hbm_bar(breakdown_bytes: pd.DataFrame, capacity_bytes: float | None, title: str = "HBM per chip by category") -> go.Figure:
    """Stacked bar of HBM use by category (columns: category, bytes) against the chip's capacity."""
    fig = go.Figure()
    for row in breakdown_bytes.itertuples():
        fig.add_bar(
            x=["HBM"], y=[row.bytes / 2**30], name=str(row.category),
            hovertemplate=f"{row.category}: %{{y:.2f}} GiB<extra></extra>",
        )  # fmt: skip
    total_bytes = float(breakdown_bytes["bytes"].sum())
    if capacity_bytes and total_bytes >= 0.2 * capacity_bytes:
        fig.add_hline(y=capacity_bytes / 2**30, line_color="#E45756", line_dash="dash", annotation_text=f"capacity {capacity_bytes / 2**30:.0f} GiB")
    elif capacity_bytes:  # a line far above the bars would flatten them to nothing
        title += f" (capacity {capacity_bytes / 2**30:.0f} GiB, off scale)"
    fig.update_layout(barmode="stack", yaxis_title="GiB", legend_orientation="v")
    return _layout(fig, title, height=400)


def memory_timeline_area(df: pd.DataFrame, capacity_bytes: float | None, title: str = "HBM through one step") -> go.Figure:
    """Stacked area of HBM by category over the points of one step (columns: point, phase, category, bytes)."""
    fig = go.Figure()
    for category in df["category"].unique():
        part = df[df["category"] == category]
        fig.add_scatter(
            x=part["point"], y=part["bytes"] / 2**30, name=str(category), stackgroup="one", mode="lines", text=part["phase"],
            hovertemplate=f"{category}: %{{y:.2f}} GiB<br>%{{text}}<extra></extra>",
        )  # fmt: skip
    if capacity_bytes:
        fig.add_hline(y=capacity_bytes / 2**30, line_color="#E45756", line_dash="dash", annotation_text="capacity")
    fig.update_layout(xaxis_title="point in step", yaxis_title="GiB", legend_orientation="h")
    return _layout(fig, title, height=380)


def chip_memory_histogram(df: pd.DataFrame, capacity_bytes: float | None, title: str = "Peak HBM across chips") -> go.Figure:
    """Histogram of per-chip peak HBM (column peak_bytes), with the capacity line."""
    fig = go.Figure()
    fig.add_histogram(x=df["peak_bytes"] / 2**30, nbinsx=min(60, max(5, len(df))), marker_color="#4C78A8", name="chips")
    if capacity_bytes:
        fig.add_vline(x=capacity_bytes / 2**30, line_color="#E45756", line_dash="dash", annotation_text="capacity")
    fig.update_layout(xaxis_title="peak GiB", yaxis_title="chips", showlegend=False)
    return _layout(fig, title, height=340)


def compiles_over_steps(df: pd.DataFrame, steps: int, title: str = "Compilations over steps") -> go.Figure:
    """Bars of compile seconds at the steps where compilation happened (columns: step, compiles, compile_s, causes)."""
    fig = go.Figure()
    fig.add_bar(
        x=df["step"], y=df["compile_s"], customdata=df[["compiles", "causes"]], marker_color=KIND_COLORS["recompile"],
        hovertemplate="step %{x}: %{customdata[0]} compile(s), %{y:.2f} s<br>%{customdata[1]}<extra></extra>",
    )  # fmt: skip
    fig.update_xaxes(range=[-0.5, max(steps, 1) - 0.5], title="step")
    fig.update_layout(yaxis_title="compile s", showlegend=False)
    return _layout(fig, title, height=320)


def compiles_by_cause_bar(df: pd.DataFrame, title: str = "Compile time by cause") -> go.Figure:
    """Horizontal bars of compile seconds by cause (columns: cause, compiles, compile_s)."""
    fig = go.Figure()
    fig.add_bar(
        y=df["cause"], x=df["compile_s"], orientation="h", customdata=df["compiles"], marker_color=KIND_COLORS["recompile"],
        hovertemplate="%{y}: %{customdata} compile(s), %{x:.2f} s<extra></extra>",
    )  # fmt: skip
    fig.update_layout(xaxis_title="compile s", showlegend=False)
    return _layout(fig, title, height=max(220, 60 + 30 * len(df)))


_SCALING_LABELS = {
    "step_time_s": "step time (s)",
    "throughput": "throughput (per s)",
    "efficiency": "scaling efficiency",
    "mfu": "MFU",
}


def scaling_figure(
    df: pd.DataFrame,
    metric: str,
    ideal: pd.DataFrame | None = None,
    title: str = "",
    published: pd.DataFrame | None = None,
) -> go.Figure:
    """A metric against chip count, one line per series (columns: chips, series, name and ``metric``).

    ``ideal`` (chips, series, ``metric``) is drawn dashed: each series' perfect-scaling line from its smallest run.
    ``published`` (chips, ``metric``, id, global_batch) adds published measurements as black diamonds.
    """
    fig = go.Figure()
    for series, part in df.sort_values("chips").groupby("series", sort=False):
        fig.add_scatter(
            x=part["chips"], y=part[metric], mode="lines+markers", name=str(series), text=part["name"],
            hovertemplate="%{text}<br>%{x} chips: %{y:.4g}<extra></extra>",
        )  # fmt: skip
    if ideal is not None and not ideal.empty:
        for i, (series, part) in enumerate(ideal.sort_values("chips").groupby("series", sort=False)):
            fig.add_scatter(
                x=part["chips"], y=part[metric], mode="lines", name="ideal", legendgroup="ideal", showlegend=i == 0,
                line=dict(dash="dash", color="#888"), hovertemplate=f"ideal ({series})<br>%{{x}} chips: %{{y:.4g}}<extra></extra>",
            )  # fmt: skip
    if published is not None and not published.empty:
        fig.add_scatter(
            x=published["chips"], y=published[metric], mode="markers", name="published",
            marker=dict(symbol="diamond", size=10, color="#222"), customdata=published[["id", "global_batch"]].to_numpy(),
            hovertemplate="%{customdata[0]} (global batch %{customdata[1]})<br>%{x} chips: %{y:.4g}<extra>published</extra>",
        )  # fmt: skip
    fig.update_xaxes(type="log", title="chips")
    fig.update_layout(yaxis_title=_SCALING_LABELS.get(metric, metric), legend_orientation="h")
    if metric == "efficiency" or metric == "mfu":
        fig.update_yaxes(tickformat=".0%")
    return _layout(fig, title, height=360)


def compare_bars(df: pd.DataFrame, title: str = "Step time by cause") -> go.Figure:
    """Side-by-side stacked bars of seconds per step by kind (columns: run, kind, s_per_step)."""
    fig = _stacked_kind_bars(df, "run", "s_per_step", 1e3, "{label}: %{y:.3f} ms<extra>%{x}</extra>")
    fig.update_layout(barmode="stack", yaxis_title="ms per step (mean over chips)", legend_orientation="h")
    return _layout(fig, title, height=380)


def delta_waterfall(base_s: float, deltas: pd.DataFrame, new_s: float, title: str = "How each cause moved the step time") -> go.Figure:
    """Waterfall from the base run's mean step time to the new run's, one bar per kind (columns: kind, delta_s)."""
    labels = ["base"] + [KIND_LABELS.get(k, k) for k in deltas["kind"]] + ["new"]
    values = [base_s * 1e3] + list(deltas["delta_s"] * 1e3) + [new_s * 1e3]
    measure = ["absolute"] + ["relative"] * len(deltas) + ["total"]
    fig = go.Figure(
        go.Waterfall(
            x=labels, y=values, measure=measure, texttemplate="%{y:+.2f}", textposition="outside",
            increasing=dict(marker_color="#E45756"), decreasing=dict(marker_color="#54A24B"), totals=dict(marker_color="#4C78A8"),
            hovertemplate="%{x}: %{y:.3f} ms<extra></extra>",
        )  # fmt: skip
    )
    fig.update_layout(yaxis_title="ms per step", showlegend=False)
    return _layout(fig, title, height=380)


#: grey for configurations that do not fit or are not valid
INFEASIBLE_COLOR = "#BBBBBB"


def plan_scatter(df: pd.DataFrame, color_by: str = "remat", unit: str = "tokens/s", title: str = "Throughput per chip against chips") -> go.Figure:
    """The planner's candidates: chips against throughput per chip (columns of ``profiler.plan.PLAN_COLUMNS``).

    Feasible candidates are coloured by ``color_by`` (``remat`` or ``mesh``), the Pareto front is a line
    through them; candidates that were costed but do not fit are grey, with their reason on hover;
    candidates pruned before costing have no throughput and sit on the x axis as grey crosses.
    """
    fig = go.Figure()
    hover = "%{customdata[0]}<br>%{customdata[1]} · mesh %{customdata[2]}<br>%{x} chips: %{y:.4g} " + unit + " per chip<extra>%{customdata[3]}</extra>"

    def custom(part: pd.DataFrame) -> np.ndarray:
        return part[["topology", "remat", "mesh", "reason"]].astype(str).to_numpy()

    ok = df[df["feasible"]]
    for group, part in ok.groupby(color_by, sort=True):
        fig.add_scatter(x=part["chips"], y=part["throughput_per_chip"], mode="markers", name=str(group),
                        customdata=custom(part), hovertemplate=hover, marker=dict(size=9, opacity=0.85))  # fmt: skip
    front = ok[ok["pareto"]].sort_values("chips")
    if not front.empty:
        fig.add_scatter(x=front["chips"], y=front["throughput_per_chip"], mode="lines", name="Pareto front",
                        line=dict(color="#222", dash="dot"), hoverinfo="skip")  # fmt: skip
    costed = df[~df["feasible"] & df["throughput_per_chip"].notna()]
    if not costed.empty:
        fig.add_scatter(x=costed["chips"], y=costed["throughput_per_chip"], mode="markers", name="does not fit",
                        customdata=custom(costed), hovertemplate=hover, marker=dict(color=INFEASIBLE_COLOR, size=8))  # fmt: skip
    pruned = df[~df["feasible"] & df["throughput_per_chip"].isna()]
    if not pruned.empty:
        counts = pruned.groupby(["chips", "reason"]).size().rename("n").reset_index()
        fig.add_scatter(
            x=counts["chips"], y=np.zeros(len(counts)), mode="markers", name="ruled out before costing",
            marker=dict(color=INFEASIBLE_COLOR, symbol="x", size=8), customdata=counts[["reason", "n"]].to_numpy(),
            hovertemplate="%{x} chips: %{customdata[1]} ruled out<br>%{customdata[0]}<extra></extra>",
        )  # fmt: skip
    fig.update_xaxes(type="log", title="chips", dtick=np.log10(2))
    fig.update_yaxes(title=f"{unit} per chip", rangemode="tozero")
    fig.update_layout(legend_orientation="h")
    return _layout(fig, title, height=420)
