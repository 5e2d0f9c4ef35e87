"""Figure builders: a DataFrame in, a Plotly figure out. No SQL, no Streamlit.

Colours come from :mod:`views.palette` (one per event kind and per memory term, in every
figure), and axes from :mod:`views.figure_style` (from zero, with units, log axes by decade).
The pod and timeline builders live in :mod:`views.figures_pod` and are re-exported here.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from profiler import format as fmt
from views import palette
from views.figure_style import fraction_tickformat, layout, log_decades, nonneg_y, percent_axis
from views.figures_pod import pod_3d, pod_plane, timeline_gantt
from views.figures_scale import binned_histogram, slice_grid

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
    "binned_histogram",
    "slice_grid",
    "compiles_over_steps",
    "compiles_by_cause_bar",
    "scaling_figure",
    "compare_bars",
    "delta_waterfall",
    "figure_bytes",
    "validation_scatter",
    "validation_errors",
    "plan_scatter",
]

KIND_COLORS = palette.KIND_COLORS
KIND_LABELS = palette.KIND_LABELS
_layout = layout


def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, "", height=200)


def breakdown_bar(df: pd.DataFrame, title: str = "Where chip time goes") -> go.Figure:
    """Horizontal stacked bar of chip-time fractions by kind (columns: kind, frac), on a 0-100% axis."""
    fig = go.Figure()
    for kind in _kind_order(df["kind"]):
        frac = float(df.loc[df["kind"] == kind, "frac"].sum())
        label = palette.kind_label(kind)
        fig.add_bar(
            y=["chip time"], x=[frac * 100], name=label, orientation="h", marker_color=palette.kind_color(kind),
            hovertemplate=f"{label}: %{{x:.1f}}%<extra></extra>",
        )  # fmt: skip
    fig.update_layout(barmode="stack", xaxis_title="share of chip time", yaxis_visible=False, legend_orientation="h")
    percent_axis(fig, "x")
    return layout(fig, title, height=220)


def step_time_line(df: pd.DataFrame, title: str = "Step time") -> go.Figure:
    """Step time over steps (columns: step, step_s, min_s, max_s), with the min-max band of each bucket.

    The y axis starts at zero; when a compile or restart step is over 20x the steady step, it is a
    log axis labelled by decade, so the steady state stays readable.
    """
    fig = go.Figure()
    if (df["max_s"] != df["min_s"]).any():
        fig.add_scatter(x=df["step"], y=df["max_s"] * 1e3, mode="lines", line_width=0, showlegend=False, hoverinfo="skip")
        fig.add_scatter(
            x=df["step"], y=df["min_s"] * 1e3, mode="lines", line_width=0, fill="tonexty",
            fillcolor="rgba(76,120,168,0.2)", name="min-max", hoverinfo="skip",
        )  # fmt: skip
    fig.add_scatter(
        x=df["step"], y=df["step_s"] * 1e3, mode="lines+markers" if len(df) < 3 else "lines", name="step time",
        line_color=palette.TOTAL, hovertemplate="step %{x}: %{y:,.3f} ms<extra></extra>",
    )  # fmt: skip
    fig.update_layout(xaxis_title="step", showlegend=False)
    fig.update_xaxes(rangemode="tozero")
    if df["max_s"].max() > 20 * df["step_s"].median():
        lo = int(np.floor(np.log10(max(float(df["min_s"].min()) * 1e3, 1e-3))))
        hi = int(np.ceil(np.log10(float(df["max_s"].max()) * 1e3)))
        decades = [10.0**k for k in range(lo, hi + 1)]
        log_decades("y", fig, "step time (log scale)")
        top = float(np.log10(float(df["max_s"].max()) * 1e3)) + 0.1
        fig.update_yaxes(tickmode="array", tickvals=decades, ticktext=[fmt.duration(v / 1e3) for v in decades], range=[lo, top])
    else:
        nonneg_y(fig, " ms", title="step time")
    return layout(fig, title)


def validation_errors(df: pd.DataFrame, title: str = "Prediction error by case") -> go.Figure:
    """Signed error % of every case, one row per case, coloured by family (columns: id, family, metric,
    unit, predicted, published, error_pct). One axis in one unit: each case's own units are in the hover."""
    df = df.assign(_abs=df["error_pct"].abs()).sort_values("_abs")
    fig = go.Figure()
    fig.add_vline(x=0, line_color=palette.IDEAL, line_width=1)
    for i, (family, g) in enumerate(df.groupby("family", sort=True)):
        fig.add_scatter(
            x=g["error_pct"], y=g["id"], mode="markers", name=str(family), marker=dict(size=10, color=_FAMILY_COLORS[i % len(_FAMILY_COLORS)]),
            customdata=g[["metric", "unit", "predicted", "published"]].to_numpy(),
            hovertemplate="%{y}<br>%{customdata[0]}<br>predicted %{customdata[2]:.4g} %{customdata[1]}, "
                          "published %{customdata[3]:.4g} %{customdata[1]}<br>error %{x:+.1f}%<extra></extra>",
        )  # fmt: skip
    bound = max(5.0, float(df["error_pct"].abs().max()) * 1.1) if not df.empty else 5.0
    fig.update_xaxes(range=[-bound, bound], ticksuffix="%", title="prediction error (predicted vs published)", zeroline=False)
    fig.update_yaxes(title="", categoryorder="array", categoryarray=list(df["id"]))
    fig.update_layout(legend_orientation="h")
    return layout(fig, title, height=max(360, 160 + 22 * len(df)))


def validation_scatter(df: pd.DataFrame, title: str = "Predicted vs published") -> go.Figure:
    """Predicted against published, one panel per unit (so no axis mixes µs with images/s), each with y = x."""
    units = list(dict.fromkeys(df["unit"]))
    cols = min(3, len(units)) or 1
    rows = -(-len(units) // cols) or 1
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[str(u) for u in units], horizontal_spacing=0.08, vertical_spacing=0.12)
    families = sorted(df["family"].unique())
    for k, unit in enumerate(units):
        r, c = k // cols + 1, k % cols + 1
        g = df[df["unit"] == unit]
        lo = float(min(g["predicted"].min(), g["published"].min())) * 0.9
        hi = float(max(g["predicted"].max(), g["published"].max())) * 1.1
        fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color=palette.IDEAL, dash="dash"), showlegend=False, hoverinfo="skip", row=r, col=c)
        for family, part in g.groupby("family"):
            i = families.index(family)
            fig.add_scatter(
                x=part["published"], y=part["predicted"], mode="markers", name=str(family), legendgroup=str(family),
                showlegend=bool(k == min(j for j, u in enumerate(units) if family in set(df[df["unit"] == u]["family"]))),
                marker=dict(size=9, color=_FAMILY_COLORS[i % len(_FAMILY_COLORS)]), customdata=part[["id", "error_pct"]].to_numpy(),
                hovertemplate="%{customdata[0]}<br>published %{x:.4g}, predicted %{y:.4g}" + f" {unit}"
                              "<br>error %{customdata[1]:+.1f}%<extra></extra>",
                row=r, col=c,
            )  # fmt: skip
        fig.update_xaxes(title_text=f"published ({unit})", row=r, col=c)
        fig.update_yaxes(title_text=f"predicted ({unit})", row=r, col=c)
    fig.update_layout(legend_orientation="h")
    return layout(fig, title, height=120 + 300 * rows)


_FAMILY_COLORS = ["#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2", "#9D755D"]


def xla_hbm_scatter(df: pd.DataFrame, title: str = "HBM peak per chip: Podscope against the TPU compiler") -> go.Figure:
    """Podscope's HBM peak against XLA's (GiB per chip, log axes), one colour per remat policy, with y = x
    (columns: id, chip, remat, podscope_gib, xla_gib, hbm_diff_pct)."""
    fig = go.Figure()
    if df.empty:
        return layout(fig, title)
    lo = float(min(df["podscope_gib"].min(), df["xla_gib"].min())) * 0.8
    hi = float(max(df["podscope_gib"].max(), df["xla_gib"].max())) * 1.25
    fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color=palette.IDEAL, dash="dash"), name="equal",
                    hoverinfo="skip")  # fmt: skip
    for i, (remat, part) in enumerate(df.groupby("remat")):
        fig.add_scatter(
            x=part["xla_gib"], y=part["podscope_gib"], mode="markers", name=f"remat {remat}",
            marker=dict(size=8, color=_FAMILY_COLORS[i % len(_FAMILY_COLORS)]),
            customdata=part[["id", "hbm_diff_pct"]].to_numpy(),
            hovertemplate="%{customdata[0]}<br>XLA %{x:.3g} GiB, Podscope %{y:.3g} GiB<br>%{customdata[1]:+.1f}%<extra></extra>",
        )  # fmt: skip
    fig.update_xaxes(type="log", title_text="XLA's peak (GiB per chip)")
    fig.update_yaxes(type="log", title_text="Podscope's peak (GiB per chip)")
    fig.update_layout(legend_orientation="h")
    return layout(fig, title, height=460)


def _kind_order(kinds) -> list[str]:
    known = [k for k in palette.KIND_COLORS if k in set(kinds)]
    return known + sorted(set(kinds) - set(known))


def figure_bytes(fig: go.Figure) -> int:
    """Size of the JSON a figure sends to the browser (what the 5 MB budget limits)."""
    return len(fig.to_json().encode())


def kind_area(df: pd.DataFrame, title: str = "Chip time per step by cause") -> go.Figure:
    """Stacked area of mean chip time per step by kind (columns: step, kind, chip_s_per_step)."""
    fig = go.Figure()
    for kind in _kind_order(df["kind"]):
        part = df[df["kind"] == kind]
        label = palette.kind_label(kind)
        fig.add_scatter(
            x=part["step"], y=part["chip_s_per_step"] * 1e3, name=label, mode="lines",
            stackgroup="one", line_width=0.5, line_color=palette.kind_color(kind), fillcolor=palette.kind_color(kind),
            hovertemplate=f"{label}: %{{y:,.3f}} ms<extra>step %{{x}}</extra>",
        )  # fmt: skip
    fig.update_layout(xaxis_title="step", legend_orientation="h")
    nonneg_y(fig, " ms", title="chip time per step")
    return layout(fig, title, height=360)


def _stacked_kind_bars(df: pd.DataFrame, x: str, y: str, scale: float, hover: str) -> go.Figure:
    """One bar per ``x`` value, stacked by kind in the fixed kind order and colours; ``hover`` formats %{x}, %{y}."""
    fig = go.Figure()
    for kind in _kind_order(df["kind"]):
        part = df[df["kind"] == kind]
        label = palette.kind_label(kind)
        fig.add_bar(
            x=part[x], y=part[y] * scale, name=label, marker_color=palette.kind_color(kind),
            hovertemplate=hover.replace("{label}", label),
        )  # fmt: skip
    return fig


def host_bars(df: pd.DataFrame, title: str = "Chip time by host", by: str = "host") -> go.Figure:
    """Stacked bars of each host's (or slice's: ``by``) chip-time fractions by kind (columns: ``by``, kind, frac), 0-100%.

    The bars are categories in the order of ``df``, so a few hosts picked from thousands sit side by side.
    """
    fig = _stacked_kind_bars(df, by, "frac", 100, f"{by} %{{x}}: {{label}} %{{y:.2f}}%<extra></extra>")
    fig.update_layout(barmode="stack", xaxis_title=by, yaxis_title="share of chip time", legend_orientation="h", bargap=0.05)
    fig.update_xaxes(type="category")
    percent_axis(fig, "y")
    return layout(fig, title, height=360)


def _memory_order(terms) -> list[str]:
    known = [t for t in palette.MEMORY_COLORS if t in set(terms)]
    return known + sorted(set(terms) - set(known))


def hbm_bar(breakdown_bytes: pd.DataFrame, capacity_bytes: float | None, title: str = "HBM per chip by category") -> go.Figure:
    """Stacked bar of HBM use by category (columns: category, bytes) against the chip's capacity."""
    fig = go.Figure()
    for term in _memory_order(breakdown_bytes["category"]):
        b = float(breakdown_bytes.loc[breakdown_bytes["category"] == term, "bytes"].sum())
        label = palette.memory_label(term)
        fig.add_bar(
            x=["HBM"], y=[b / fmt.GIB], name=label, marker_color=palette.memory_color(term),
            hovertemplate=f"{label}: {fmt.gib(b, 2)}<extra></extra>",
        )  # fmt: skip
    total_bytes = float(breakdown_bytes["bytes"].sum())
    if capacity_bytes and total_bytes >= 0.2 * capacity_bytes:
        fig.add_hline(y=capacity_bytes / fmt.GIB, line_color=palette.CAPACITY, line_dash="dash", annotation_text=f"capacity {fmt.gib(capacity_bytes, 0)}")
    elif capacity_bytes:  # a line far above the bars would flatten them to nothing
        title += f" (capacity {fmt.gib(capacity_bytes, 0)}, off scale)"
    fig.update_layout(barmode="stack", legend_orientation="v", legend_traceorder="reversed")
    nonneg_y(fig, " GiB", title="HBM per chip")
    return layout(fig, title, height=400)


def memory_timeline_area(df: pd.DataFrame, capacity_bytes: float | None, title: str = "HBM through one step") -> go.Figure:
    """Stacked area of HBM by category over the points of one step (columns: point, phase, category, bytes)."""
    fig = go.Figure()
    for term in _memory_order(df["category"].unique()):
        part = df[df["category"] == term]
        label = palette.memory_label(term)
        color = palette.memory_color(term)
        fig.add_scatter(
            x=part["point"], y=part["bytes"] / fmt.GIB, name=label, stackgroup="one", mode="lines", text=part["phase"],
            line=dict(color=color, width=0.5), fillcolor=color,
            hovertemplate=f"{label}: %{{y:.2f}} GiB<br>%{{text}}<extra></extra>",
        )  # fmt: skip
    peak_bytes = float(df.groupby("point")["bytes"].sum().max()) if not df.empty else 0.0
    if capacity_bytes and peak_bytes >= 0.2 * capacity_bytes:
        fig.add_hline(y=capacity_bytes / fmt.GIB, line_color=palette.CAPACITY, line_dash="dash", annotation_text=f"capacity {fmt.gib(capacity_bytes, 0)}")
    elif capacity_bytes:  # a line far above the areas would flatten them to nothing
        title += f" (capacity {fmt.gib(capacity_bytes, 0)}, off scale)"
    fig.update_layout(xaxis_title="point in the step (forward, backward, update)", legend_orientation="h")
    nonneg_y(fig, " GiB", title="HBM per chip")
    return layout(fig, title, height=380)


def chip_memory_histogram(bins: pd.DataFrame, capacity_bytes: float | None, title: str = "Peak HBM across chips") -> go.Figure:
    """Chips per bin of per-chip peak HBM (columns lo, hi, chips: bin edges in bytes, counted in SQL by
    :func:`profiler.distributions.chip_histogram`), with the capacity line; the x axis starts at zero."""
    top_bytes = float(bins["hi"].max()) if not bins.empty else 0.0
    if capacity_bytes and top_bytes < 0.2 * capacity_bytes:
        title += f" (capacity {fmt.gib(capacity_bytes, 0)}, off scale)"
    if len(bins) == 1 and float(bins["lo"].iloc[0]) == top_bytes:
        title += f": every chip {fmt.gib(top_bytes, 2)}"
    fig = binned_histogram(bins, "peak HBM of a chip", 1 / fmt.GIB, " GiB", title)
    if capacity_bytes and top_bytes >= 0.2 * capacity_bytes:
        fig.add_vline(x=capacity_bytes / fmt.GIB, line_color=palette.CAPACITY, line_dash="dash", annotation_text=f"capacity {fmt.gib(capacity_bytes, 0)}")
    fig.update_xaxes(rangemode="tozero")
    return fig


def compiles_over_steps(df: pd.DataFrame, steps: int, title: str = "Compilations over steps") -> go.Figure:
    """Bars of compile seconds at the steps where compilation happened (columns: step, compiles, compile_s, causes)."""
    fig = go.Figure()
    fig.add_bar(
        x=df["step"], y=df["compile_s"], customdata=df[["compiles", "causes"]], marker_color=palette.kind_color("recompile"),
        width=[max(0.8, steps / 200)] * len(df),  # one step wide (visible on long runs), not stretched between far-apart compiles
        hovertemplate="step %{x}: %{customdata[0]} compile(s), %{y:.2f} s<br>%{customdata[1]}<extra></extra>",
    )  # fmt: skip
    fig.update_xaxes(range=[-0.5, max(steps, 1) - 0.5], title="step")
    fig.update_layout(showlegend=False)
    nonneg_y(fig, " s", title="compile time")
    return layout(fig, title, height=320)


def compiles_by_cause_bar(df: pd.DataFrame, title: str = "Compile time by cause") -> go.Figure:
    """Horizontal bars of compile seconds by cause (columns: cause, compiles, compile_s)."""
    fig = go.Figure()
    fig.add_bar(
        y=df["cause"], x=df["compile_s"], orientation="h", customdata=df["compiles"], marker_color=palette.kind_color("recompile"),
        hovertemplate="%{y}: %{customdata} compile(s), %{x:.2f} s<extra></extra>",
    )  # fmt: skip
    fig.update_layout(xaxis_title="compile time", showlegend=False)
    fig.update_xaxes(rangemode="tozero", ticksuffix=" s")
    return layout(fig, title, height=max(220, 60 + 30 * len(df)))


_SCALING_AXES = {
    "step_time_s": ("step time", 1e3, " ms"),
    "throughput": ("throughput (samples or tokens per s)", 1.0, ""),
    "efficiency": ("scaling efficiency (vs ideal)", 1.0, None),
    "mfu": ("MFU", 1.0, None),
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
    ``published`` (chips, ``metric``, id, global_batch, optional series: which shown series each belongs to)
    adds published measurements as black diamonds.
    Every y axis starts at zero (none of these can be negative); chips are ticked at the counts drawn.
    """
    label, scale, suffix = _SCALING_AXES.get(metric, (metric, 1.0, ""))
    fig = go.Figure()
    for series, part in df.sort_values("chips").groupby("series", sort=False):
        fig.add_scatter(
            x=part["chips"], y=part[metric] * scale, mode="lines+markers", name=str(series), text=part["name"],
            hovertemplate="%{text}<br>%{x} chips: %{y:.4g}" + (suffix or "") + "<extra></extra>",
        )  # fmt: skip
    if ideal is not None and not ideal.empty:
        for i, (series, part) in enumerate(ideal.sort_values("chips").groupby("series", sort=False)):
            fig.add_scatter(
                x=part["chips"], y=part[metric] * scale, mode="lines", name="ideal", legendgroup="ideal", showlegend=i == 0,
                line=dict(dash="dash", color=palette.IDEAL), hovertemplate=f"ideal ({series})<br>%{{x}} chips: %{{y:.4g}}<extra></extra>",
            )  # fmt: skip
    if published is not None and not published.empty:
        fig.add_scatter(
            x=published["chips"], y=published[metric] * scale, mode="markers", name="published",
            marker=dict(symbol="diamond", size=10, color=palette.PUBLISHED),
            customdata=published[["id", "global_batch", *(["series"] if "series" in published else [])]].to_numpy(),
            hovertemplate="%{customdata[0]} (global batch %{customdata[1]})<br>%{x} chips: %{y:.4g}"
            + ("<br>%{customdata[2]}" if "series" in published else "") + "<extra>published</extra>",
        )  # fmt: skip
    chips = sorted({int(c) for c in df["chips"]} | ({int(c) for c in published["chips"]} if published is not None and not published.empty else set()))
    ticks = dict(tickmode="array", tickvals=chips, ticktext=[f"{c:,}" for c in chips]) if 0 < len(chips) <= 12 else dict(dtick=1)
    fig.update_xaxes(type="log", title="chips (log scale)", minor=dict(ticks="", showgrid=False), **ticks)
    fig.update_layout(legend_orientation="h")
    if suffix is None:  # a fraction: percent ticks with enough decimals to differ
        fig.update_yaxes(tickformat=fraction_tickformat(df[metric]), rangemode="tozero", title=label)
    else:
        nonneg_y(fig, suffix, title=label)
    return layout(fig, title, height=360)


def compare_bars(df: pd.DataFrame, title: str = "Steady-state step time by cause") -> go.Figure:
    """Side-by-side stacked bars of seconds per step by kind (columns: run, kind, s_per_step)."""
    fig = _stacked_kind_bars(df, "run", "s_per_step", 1e3, "{label}: %{y:,.3f} ms<extra>%{x}</extra>")
    fig.update_layout(barmode="stack", legend_orientation="h")
    nonneg_y(fig, " ms", title="step time (steady state)")
    return layout(fig, title, height=380)


def delta_waterfall(base_s: float, deltas: pd.DataFrame, new_s: float, title: str = "How each cause moved the step time") -> go.Figure:
    """Waterfall from the base run's step time to the new run's, one bar per kind (columns: kind, delta_s).

    Slower is red, faster green; the two totals are the runs' steady-state step times.
    """
    labels = ["base"] + [palette.kind_label(k) for k in deltas["kind"]] + ["other run"]
    values = [base_s * 1e3] + list(deltas["delta_s"] * 1e3) + [new_s * 1e3]
    measure = ["absolute"] + ["relative"] * len(deltas) + ["total"]
    text = [fmt.duration(base_s)] + [("+" if d > 0 else "") + fmt.duration(d) if round(d * 1e3, 3) else "0" for d in deltas["delta_s"]] + [fmt.duration(new_s)]
    fig = go.Figure(
        go.Waterfall(
            x=labels, y=values, measure=measure, text=text, textposition="outside",
            increasing=dict(marker_color=palette.WORSE), decreasing=dict(marker_color=palette.BETTER), totals=dict(marker_color=palette.TOTAL),
            hovertemplate="%{x}: %{y:,.3f} ms<extra></extra>",
        )  # fmt: skip
    )
    fig.update_layout(showlegend=False)
    nonneg_y(fig, " ms", title="step time (steady state)")
    return layout(fig, title, height=380)


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
                        customdata=custom(costed), hovertemplate=hover, marker=dict(color=palette.INFEASIBLE, size=8))  # fmt: skip
    pruned = df[~df["feasible"] & df["throughput_per_chip"].isna()]
    if not pruned.empty:
        counts = pruned.groupby(["chips", "reason"]).size().rename("n").reset_index()
        fig.add_scatter(
            x=counts["chips"], y=np.zeros(len(counts)), mode="markers", name="ruled out before costing",
            marker=dict(color=palette.INFEASIBLE, symbol="x", size=8), customdata=counts[["reason", "n"]].to_numpy(),
            hovertemplate="%{x} chips: %{customdata[1]} ruled out<br>%{customdata[0]}<extra></extra>",
        )  # fmt: skip
    fig.update_xaxes(type="log", title="chips", dtick=np.log10(2))
    fig.update_yaxes(title=f"{unit} per chip", rangemode="tozero")
    fig.update_layout(legend_orientation="h")
    return _layout(fig, title, height=420)
