"""Figures that do not mislead, on data the real engine wrote: one colour per category everywhere,
colour scales that say how much the chips differ, torus axes 0..N-1, axes from zero, log axes by decade."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import load_scenario, simulate
from profiler import queries, write_run
from profiler.store import Database
from views import figures, palette
from views.figures_pod import SPREAD_FIXED_BELOW_PP

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "data" / "scenarios"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    db = Database(tmp_path_factory.mktemp("figs") / "figs.duckdb")
    ids = {
        "input_bound": write_run(db, simulate(load_scenario(SCENARIOS / "resnet50-v4-gcs-input-bound.toml", {"training.steps": 12}))),
        "straggler": write_run(db, simulate(load_scenario(SCENARIOS / "resnet50-v3-32-straggler.toml", {"training.steps": 6}))),
    }
    return db, ids


def _colors_by_name(fig) -> dict[str, str]:
    out = {}
    for t in fig.data:
        color = getattr(t.marker, "color", None) if t.type == "bar" else (t.fillcolor or t.line.color)
        if t.name and isinstance(color, str):
            out[t.name] = color
    return out


def test_memory_terms_keep_one_colour_across_charts(runs):
    db, ids = runs
    with db.read() as con:
        summary = queries.run_summary(con, ids["input_bound"])
        timeline = queries.memory_timeline(con, ids["input_bound"])
    bd = summary["hbm_breakdown_bytes"]
    bar = figures.hbm_bar(pd.DataFrame({"category": list(bd), "bytes": list(bd.values())}), summary["hbm_capacity_bytes"])
    area = figures.memory_timeline_area(timeline, summary["hbm_capacity_bytes"])
    a, b = _colors_by_name(bar), _colors_by_name(area)
    shared = set(a) & set(b)
    assert {"Parameters", "Activations"} <= shared
    assert all(a[n] == b[n] for n in shared), {n: (a[n], b[n]) for n in shared}
    assert a["Activations"] == palette.MEMORY_COLORS["activations"]


def test_event_kinds_keep_one_colour_across_charts(runs):
    db, ids = runs
    with db.read() as con:
        bar = figures.breakdown_bar(queries.breakdown(con, ids["input_bound"]))
        area = figures.kind_area(queries.kind_by_step(con, ids["input_bound"]))
    a, b = _colors_by_name(bar), _colors_by_name(area)
    assert a["Input wait"] == b["Input wait"] == palette.KIND_COLORS["input_wait"]


def test_nearly_equal_chips_use_a_fixed_scale_and_say_their_range(runs):
    db, ids = runs
    with db.read() as con:
        chips = queries.chip_metrics(con, ids["input_bound"])
    plane = chips[chips["z"] == 0]
    values = plane["idle_frac"] * 100
    assert values.max() - values.min() < SPREAD_FIXED_BELOW_PP  # jitter only: 64 chips within a point
    fig = figures.pod_plane(plane, "idle_frac", "Idle %", "x", "y", title="4x4x4 torus")
    marker = fig.data[-1].marker
    assert (marker.cmin, marker.cmax) == (0.0, 100.0)
    assert "spread" in fig.layout.title.text and "fixed 0-100%" in fig.layout.title.text
    # the torus is 0..3 on both axes, nothing beyond
    assert list(fig.layout.xaxis.range) == [-0.5, 3.5] and list(fig.layout.xaxis.tickvals) == [0, 1, 2, 3]
    assert sorted(fig.layout.yaxis.range) == [-0.5, 3.5]


def test_a_real_spread_diverges_around_the_median(runs):
    db, ids = runs
    with db.read() as con:
        chips = queries.chip_metrics(con, ids["straggler"])
    values = chips["sync_wait_frac"].to_numpy() * 100
    assert values.max() - values.min() >= SPREAD_FIXED_BELOW_PP  # stragglers make the others wait
    fig = figures.pod_plane(chips, "sync_wait_frac", "Sync wait %", "x", "y")
    marker = fig.data[-1].marker
    med = float(np.median(values))
    assert marker.colorscale is not None and (marker.cmin + marker.cmax) / 2 == pytest.approx(med)
    assert f"{values.min():.2f}" in fig.layout.title.text and "median" in fig.layout.title.text


def test_one_point_scaling_axes_start_at_zero_and_percent_ticks_differ(runs):
    db, ids = runs
    one = pd.DataFrame({"chips": [64], "series": ["s"], "name": ["r"], "step_time_s": [0.5673], "mfu": [0.0201], "efficiency": [1.0]})
    step = figures.scaling_figure(one, "step_time_s")
    assert step.layout.yaxis.rangemode == "tozero" and step.layout.yaxis.ticksuffix == " ms"
    mfu = figures.scaling_figure(one, "mfu")
    assert mfu.layout.yaxis.rangemode == "tozero" and mfu.layout.yaxis.tickformat == ".1%"
    assert list(mfu.layout.xaxis.tickvals) == [64]  # chips ticked where drawn, no bare minor digits


def test_step_time_with_a_compile_spike_is_a_log_axis_by_decade(runs):
    db, ids = runs
    with db.read() as con:
        steps = queries.step_times(con, ids["input_bound"])
    fig = figures.step_time_line(steps)
    assert fig.layout.yaxis.type == "log"
    ticks = list(fig.layout.yaxis.tickvals)
    assert all(np.log10(t) == round(np.log10(t)) for t in ticks)  # decades only
    assert {"100 ms", "1 s", "10 s"} <= set(fig.layout.yaxis.ticktext)  # each with its unit


def test_timeline_gives_every_chip_a_labelled_row_and_outlines_the_compile(runs):
    db, ids = runs
    with db.read() as con:
        chips = [int(c) for c in queries.worst_chips(con, ids["input_bound"], 16)["chip"]]
        cells, steps = queries.timeline(con, ids["input_bound"], tuple(chips), 0, 3, 400)
    fig = figures.timeline_gantt(cells, steps, chips)
    assert len(fig.layout.yaxis.tickvals) == 16
    assert fig.layout.height >= 16 * 20
    labels = [a.text for a in fig.layout.annotations]
    assert any(t.startswith("compile, ") for t in labels), labels


def test_compile_bars_are_one_step_wide_even_when_far_apart():
    df = pd.DataFrame({"step": [0, 130], "compiles": [1, 1], "compile_s": [17.8, 17.8], "causes": ["first", "restart"]})
    fig = figures.compiles_over_steps(df, 300)
    assert max(fig.data[0].width) <= 1.5 and fig.layout.yaxis.rangemode == "tozero"
