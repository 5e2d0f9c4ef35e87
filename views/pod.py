"""Pod: the torus drawn by chip coordinates, coloured by a per-chip metric, with link load where stored.

3D tori are shown one plane at a time (choose the axis and the index) or as a 3D point cloud.
Click a chip (or type its id) to see its numbers.
"""

from __future__ import annotations

import streamlit as st

from profiler import format as fmt
from profiler import queries
from views import common, figures

METRICS = {
    "idle_frac": "Idle %",
    "input_wait_frac": "Input wait %",
    "sync_wait_frac": "Sync wait %",
    "compute_frac": "Compute %",
    "collective_frac": "Collective %",
    "hbm_peak_bytes": "HBM peak (GiB)",
}


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
        st.caption(f"No chip {chip} in this run.")
        return
    r = row.iloc[0]
    st.markdown(f"**Chip {chip}** · host {int(r['host'])} · slice {int(r['slice'])} · ({int(r['x'])}, {int(r['y'])}, {int(r['z'])})")
    cols = st.columns(6)
    for col, (key, label) in zip(cols, [(k, v) for k, v in METRICS.items() if k.endswith("_frac")] + [("hbm_peak_bytes", "HBM peak")]):
        if key not in row:
            col.metric(label, "n/a")
        elif key == "hbm_peak_bytes":
            col.metric(label, fmt.gib(r[key], 2))
        else:
            col.metric(label, fmt.percent(r[key], 2), help="of this chip's time over the whole run")


def main() -> None:
    ctx = common.run_context("Pod")
    if ctx is None:
        return
    run_id, summary = ctx
    df = common.query(queries.chip_metrics, run_id)
    if df.empty:
        st.info("This run stored no chips.")
        return
    metrics = {k: v for k, v in METRICS.items() if k in df.columns}
    c1, c2, c3 = st.columns([2, 1, 1])
    metric = c1.selectbox("Colour chips by", list(metrics), format_func=metrics.get, key="pod_metric")
    slices = sorted(df["slice"].unique().tolist())
    if len(slices) > 1:
        sl = c2.selectbox("Slice", slices, key="pod_slice")
        df_view = df[df["slice"] == sl]
    else:
        df_view = df
    axes_used = [a for a in ("x", "y", "z") if df_view[a].nunique() > 1]
    view = "Planes"
    if len(axes_used) == 3:
        view = c3.radio("View", ["Planes", "3D"], horizontal=True, key="pod_view")
    stragglers = summary.get("stragglers") or []
    if stragglers:
        shown = ", ".join(str(c) for c in stragglers[:20]) + (f" and {len(stragglers) - 20} more" if len(stragglers) > 20 else "")
        st.warning(f"Straggler chip{'s' if len(stragglers) > 1 else ''}: {shown} (slowest {summary.get('straggler_slowdown_max', 0):.2f}x); type an id under the plot to see its numbers.")
    links = common.query(queries.link_load, run_id)
    percent = metric.endswith("_frac")
    plot_df = df_view.assign(**{metric: df_view[metric] / fmt.GIB}) if metric == "hbm_peak_bytes" else df_view
    if view == "3D":
        fig = figures.pod_3d(plot_df, metric, metrics[metric], title=f"{summary.get('topology') or ''} torus", percent=percent)
        event = common.chart(fig, plot_df, f"run{run_id}_chips.csv", "pod3d", on_select="rerun", selection_mode="points")
    else:
        plane, h, v, fixed = _plane(plot_df, axes_used)
        plane_links = None
        if links is not None and not links.empty:
            ici = links[links["axis"].isin([h, v])]
            if fixed is not None:
                f, i = fixed
                ici = ici[(ici[f"src_{f}"] == i) & (ici[f"dst_{f}"] == i)]
            plane_links = ici
        title = f"{summary.get('topology') or ''} torus" + (f", plane {fixed[0]} = {fixed[1]}" if fixed else "")
        fig = figures.pod_plane(plane, metric, metrics[metric], h, v, plane_links, title=title, percent=percent)
        event = common.chart(fig, plane, f"run{run_id}_chips.csv", "pod2d", on_select="rerun", selection_mode="points")
    if links is None:
        st.caption("This run stored no link load (runs from before the interconnect model have none).")
    elif not links.empty:
        with st.expander("Busiest links"):
            top = links.sort_values("utilization", ascending=False).head(20)
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
            common.download_csv(links, f"run{run_id}_link_load.csv", key="csv_links")
    picked = None
    points = (event.get("selection") or {}).get("points") or [] if event else []
    for p in points:
        if p.get("customdata") is not None:
            cd = p["customdata"]
            picked = int(cd[0] if isinstance(cd, list) else cd)
            break
    chip = st.number_input("Chip", min_value=0, max_value=int(df["chip"].max()), value=picked if picked is not None else 0, key=f"pod_chip_{picked}")
    _chip_panel(df, int(chip))


main()
