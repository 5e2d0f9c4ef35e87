"""The Pod page's slices view: a grid of a multi-slice run's slices, and which slice the torus shows.

A slice is chosen by clicking its cell (a Plotly selection) or in the select box beside the grid
(the accessible way, and the one that works without a pointer). The choice is kept in the URL
(``?slice=5``) like the run is (``?run=3``), so a reload or a shared link opens the same slice.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from views import common, figures

__all__ = ["URL_PARAM", "SLICE_KEY", "GRID_KEY", "AGGREGATES", "slice_value_options", "clicked", "chosen_slice", "draw_grid"]

#: the URL query parameter holding the chosen slice
URL_PARAM = "slice"
#: session keys: the select box, the slice kept across reruns and pages, the grid chart, the grid click applied last
SLICE_KEY = "pod_slice"
_KEPT_KEY = "pod_slice_kept"
GRID_KEY = "chart_pod_slices"
_CLICK_KEY = "pod_slice_clicked"

#: how a slice's cell is coloured: key -> (label, column suffix of a chip metric or a DCN column)
AGGREGATES = {
    "max": ("its highest chip", "_max"),
    "mean": ("mean of its chips", "_mean"),
    "min": ("its lowest chip", "_min"),
    "dcn_bytes_per_step": ("DCN traffic out per step", None),
    "dcn_busy_ns_per_step": ("busiest DCN NIC per step", None),
}


def slice_value_options(slices: pd.DataFrame) -> dict[str, str]:
    """The ways the run's slices can be coloured (DCN ones only when it stored DCN link load)."""
    return {k: label for k, (label, suffix) in AGGREGATES.items() if suffix is not None or k in slices.columns}


def clicked(event: Any) -> int | None:
    """The ``customdata`` id of the first point a chart's selection event holds (None when nothing is selected)."""
    points = ((event or {}).get("selection") or {}).get("points") or []
    for p in points:
        cd = p.get("customdata")
        if cd is not None:
            return int(cd[0] if isinstance(cd, list) else cd)
    return None


def _url_slice() -> int | None:
    raw = st.query_params.get(URL_PARAM)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def chosen_slice(ids: list[int], run_id: int) -> int:
    """The slice to show: just clicked in the grid, else in the select box, else kept, else from the URL, else the first.

    Call before the select box is drawn (it sets the box's state when the grid was clicked).
    """
    click = clicked(st.session_state.get(GRID_KEY))
    kept = st.session_state.get(_KEPT_KEY)
    if click is not None and click != st.session_state.get(_CLICK_KEY) and click in ids:
        st.session_state[_CLICK_KEY] = click  # a new click: it wins once, then the select box may move on
        choice = click
    else:
        candidates = (st.session_state.get(SLICE_KEY), kept[1] if kept and kept[0] == run_id else None, _url_slice())
        choice = next((c for c in candidates if c in ids), ids[0])
    st.session_state[SLICE_KEY] = choice
    st.session_state[_KEPT_KEY] = (run_id, choice)
    if st.query_params.get(URL_PARAM) != str(choice):
        st.query_params[URL_PARAM] = str(choice)
    return choice


def draw_grid(slices: pd.DataFrame, value: str, label: str, percent: bool, unit: str | None, selected: int, run_id: int) -> None:
    """The grid of slices, clickable; the chart's selection is read back by :func:`chosen_slice` on the rerun."""
    fig = figures.slice_grid(slices, value, label, percent, unit, selected=selected,
                             title=f"{len(slices)} slices over DCN: click one (or pick it above) to open its torus")  # fmt: skip
    common.chart(fig, slices, f"run{run_id}_slices.csv", GRID_KEY.removeprefix("chart_"), on_select="rerun", selection_mode="points")
