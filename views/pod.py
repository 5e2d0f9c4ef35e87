"""Pod: the torus drawn by chip coordinates, coloured by a per-chip metric, with link load where stored.

A run of several slices opens on a grid of its slices, coloured by the chosen metric aggregated
per slice (or by its DCN traffic); choosing a slice (a click, or the select box) draws that slice's
torus below (views/pod_slices.py). The page asks for the slices' aggregates and then for the one
slice's chips and links, never for every chip of a 50,944-chip run. 3D tori are shown one plane at
a time (choose the axis and the index) or as a 3D point cloud. Click a chip (or type its id) to see
its numbers.
"""

from __future__ import annotations

import streamlit as st

from profiler import format as fmt
from profiler import queries, slice_queries
from views import common, figures, pod_slices

METRICS = {
    "idle_frac": "Idle %",
    "input_wait_frac": "Input wait %",
    "sync_wait_frac": "Sync wait %",
    "bubble_frac": "Pipeline bubble %",
    "compute_frac": "Compute %",
    "collective_frac": "Collective %",
    "hbm_peak_bytes": "HBM peak (GiB)",
    "expert_load_ratio": "Expert load (x even share)",
}
#: display unit of the metrics that are not shares of time (None: a percentage)
_UNITS = {"hbm_peak_bytes": " GiB", "expert_load_ratio": "x"}
_SCALE = {"hbm_peak_bytes": 1 / fmt.GIB}


def _plane(df, axes_used: list[str]):
    """Pick the plane to draw: returns (rows in it, horizontal axis, vertical axis, fixed axis or None)."""
    if len(axes_used) <= 2:
        h, v = (axes_used + ["x", "y"])[:2] if axes_used else ("x", "y")
        return df, h, v, None
    c1, c2 = st.columns(2)
    fixed = c1.selectbox("Slice the torus across", ["z", "y", "x"], key="pod_fixed")
    values = sorted(df[fixed].unique().tolist())
    index = c2.select_slider(f"{fixed} =", values, value=values[0], key=f"pod_index_{fixed}")
    h, v = [a for a in ("x", "y", "z") if a != fixed]
    return df[df[fixed] == index], h, v, (fixed, index)


def _chip_panel(df, chip: int) -> None:
    row = df[df["chip"] == chip]
    if row.empty:
        st.caption(f"No chip {chip} in this slice.")
        return
    r = row.iloc[0]
    st.markdown(f"**Chip {chip}** · host {int(r['host'])} · slice {int(r['slice'])} · ({int(r['x'])}, {int(r['y'])}, {int(r['z'])})")
    shown = [(k, v) for k, v in METRICS.items() if k.endswith("_frac")] + [("hbm_peak_bytes", "HBM peak")]
    if "expert_load_ratio" in row:
        shown.append(("expert_load_ratio", "Expert load"))
    for col, (key, label) in zip(st.columns(len(shown)), shown):
        if key not in row:
            col.metric(label, "n/a")
        elif key == "hbm_peak_bytes":
            col.metric(label, fmt.gib(r[key], 2))
        elif key == "expert_load_ratio":
            col.metric(label, f"{r[key]:.3f}x", help="tokens this chip's expert GEMMs compute over an even share, steady-state mean")
        else:
            col.metric(label, fmt.percent(r[key], 2), help="of this chip's time over the whole run")


def _scaled(df, metric: str):
    return df.assign(**{metric: df[metric] * _SCALE[metric]}) if metric in _SCALE else df


def _slices_view(run_id: int, metric: str, controls) -> int:
    """The grid of slices, coloured as chosen; returns the slice to draw."""
    slices = common.query(slice_queries.slice_metrics, run_id)
    ids = [int(s) for s in slices["slice"]]
    sl = pod_slices.chosen_slice(ids, run_id)
    options = pod_slices.slice_value_options(slices)
    how = controls[1].selectbox("Colour slices by", list(options), format_func=options.get, key="pod_slice_value")
    controls[2].selectbox("Slice", ids, key=pod_slices.SLICE_KEY)
    if how in ("dcn_bytes_per_step", "dcn_busy_ns_per_step"):
        gib = how == "dcn_bytes_per_step"
        grid = slices.assign(v=slices[how] / (fmt.GIB if gib else 1e6))
        pod_slices.draw_grid(grid, "v", options[how].capitalize(), False, " GiB" if gib else " ms", sl, run_id)
    else:
        column = metric + pod_slices.AGGREGATES[how][1]
        grid = slices.assign(v=slices[column] * _SCALE.get(metric, 1.0))
        pod_slices.draw_grid(grid, "v", f"{METRICS[metric]}, {options[how]}", metric not in _UNITS, _UNITS.get(metric), sl, run_id)
    if "dcn_bytes_per_step" in slices.columns:
        total = float(slices["dcn_bytes_per_step"].sum())
        st.caption(
            f"DCN: the slices' host NICs send {fmt.gib(total, 1)} per step in all (the data-parallel gradient sync "
            f"across slices); the busiest NIC is busy {fmt.duration(float(slices['dcn_busy_ns_per_step'].max()) / 1e9)} per step."
        )
    return sl


def _torus(run_id: int, summary: dict, df_view, metric: str, sl: int | None, view_col) -> object:
    """The torus of the drawn slice (one plane of it, or a 3D cloud); returns the chart's selection event."""
    axes_used = [a for a in ("x", "y", "z") if df_view[a].nunique() > 1]
    view = view_col.radio("View", ["Planes", "3D"], horizontal=True, key="pod_view") if len(axes_used) == 3 else "Planes"
    percent = metric not in _UNITS
    plot_df = _scaled(df_view, metric)
    where = f", slice {sl}" if sl is not None else ""
    if view == "3D":
        fig = figures.pod_3d(plot_df, metric, METRICS[metric], title=f"{summary.get('topology') or ''} torus{where}", percent=percent, unit=_UNITS.get(metric))
        return common.chart(fig, plot_df, f"run{run_id}_chips.csv", "pod3d", on_select="rerun", selection_mode="points")
    plane, h, v, fixed = _plane(plot_df, axes_used)
    links = common.query(slice_queries.slice_links, run_id, 0 if sl is None else sl)
    plane_links = None
    if links is not None and not links.empty:
        ici = links[links["axis"].isin([h, v])]
        if fixed is not None:
            f, i = fixed
            ici = ici[(ici[f"src_{f}"] == i) & (ici[f"dst_{f}"] == i)]
        plane_links = ici
    title = f"{summary.get('topology') or ''} torus{where}" + (f", plane {fixed[0]} = {fixed[1]}" if fixed else "")
    fig = figures.pod_plane(plane, metric, METRICS[metric], h, v, plane_links, title=title, percent=percent, unit=_UNITS.get(metric))
    return common.chart(fig, plane, f"run{run_id}_chips.csv", "pod2d", on_select="rerun", selection_mode="points")


def _busiest_links(run_id: int, sl: int | None) -> None:
    top = common.query(slice_queries.busiest_links, run_id, 20, -1 if sl is None else sl)
    if top is None:
        st.caption("This run stored no link load (runs from before the interconnect model have none).")
        return
    if top.empty:
        return
    with st.expander("Busiest links" + (f" leaving slice {sl}" if sl is not None else "")):
        table = top[["src_chip", "dst_chip", "axis"]].assign(
            mib_per_step=top["bytes_per_step"] / 2**20, busy_us_per_step=top["busy_ns_per_step"] / 1e3, utilization=top["utilization"],
        )  # fmt: skip
        st.dataframe(table, hide_index=True, column_config={
            "src_chip": st.column_config.NumberColumn("From chip"), "dst_chip": st.column_config.NumberColumn("To chip"),
            "axis": st.column_config.TextColumn("Axis"),
            "mib_per_step": st.column_config.NumberColumn("Data per step", format="%.1f MiB"),
            "busy_us_per_step": st.column_config.NumberColumn("Busy per step", format="%.1f µs"),
            "utilization": st.column_config.ProgressColumn("Utilisation (of the step)", format="percent", min_value=0, max_value=1),
        })  # fmt: skip
        common.download_csv(top, f"run{run_id}_busiest_links.csv", key="csv_links")


def main() -> None:
    ctx = common.run_context("Pod")
    if ctx is None:
        return
    run_id, summary = ctx
    multi = int(summary.get("slices") or 1) > 1
    controls = st.columns([2, 2, 1, 1]) if multi else st.columns([2, 1, 1])
    sl = None  # the slice drawn, chosen below the metric on a multi-slice run
    if multi:
        slices = common.query(slice_queries.slice_metrics, run_id)
        if slices.empty:
            st.info("This run stored no chips.")
            return
        metrics = {k: v for k, v in METRICS.items() if f"{k}_mean" in slices.columns}
    else:
        df_view = common.query(queries.chip_metrics, run_id)
        if df_view.empty:
            st.info("This run stored no chips.")
            return
        metrics = {k: v for k, v in METRICS.items() if k in df_view.columns}
    metric = controls[0].selectbox("Colour chips by", list(metrics), format_func=metrics.get, key="pod_metric")
    stragglers = summary.get("stragglers") or []
    if stragglers:
        shown = ", ".join(str(c) for c in stragglers[:20]) + (f" and {len(stragglers) - 20} more" if len(stragglers) > 20 else "")
        st.warning(f"Straggler chip{'s' if len(stragglers) > 1 else ''}: {shown} (slowest {summary.get('straggler_slowdown_max', 0):.2f}x); type an id under the plot to see its numbers.")
    if multi:
        sl = _slices_view(run_id, metric, controls)
        df_view = common.query(queries.chip_metrics, run_id, sl)
        st.subheader(f"Slice {sl}")
    event = _torus(run_id, summary, df_view, metric, sl, controls[-1])
    _busiest_links(run_id, sl)
    picked = pod_slices.clicked(event)  # the chip clicked in the torus
    lo, hi = int(df_view["chip"].min()), int(df_view["chip"].max())
    start = picked if picked is not None and lo <= picked <= hi else lo
    chip = st.number_input("Chip", min_value=lo, max_value=hi, value=start, key=f"pod_chip_{sl}_{picked}")
    _chip_panel(df_view, int(chip))


main()
