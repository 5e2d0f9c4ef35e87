"""A fresh database, as a newcomer meets it: seeding says what it does in the terminal, and the
Scaling page opens on a curve (the bundled strong-scaling sweep) with its out-of-memory points named."""

from __future__ import annotations

import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def _n(values) -> int:
    """Points in a Plotly JSON array (a list, or a typed array as base64 ``bdata``)."""
    if isinstance(values, dict):
        import base64

        import numpy as np

        return len(np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])))
    return len(values)


def test_fresh_database_scaling_shows_a_curve(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PODSCOPE_DB", str(tmp_path / "fresh.duckdb"))
    at = AppTest.from_file(APP, default_timeout=180).run()
    assert not at.exception, [e.value for e in at.exception]
    err = capfd.readouterr().err
    assert "podscope: first start: simulating" in err and "the dashboard is ready" in err
    at.switch_page("views/scaling.py").run()
    assert not at.exception, [e.value for e in at.exception]
    picked = at.multiselect(key="sc_series_strong").value
    assert any("ResNet-50" in s and "batch 8,192" in s for s in picked), picked
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    step = next(s for s in specs if s["layout"]["title"]["text"] == "Step time")
    curve = max((t for t in step["data"] if t.get("mode") == "lines+markers"), key=lambda t: _n(t["x"]))
    assert _n(curve["x"]) >= 4  # a curve, not one point per series
    assert step["layout"]["yaxis"]["rangemode"] == "tozero"
    # 8,192 images on 4 and 8 chips pass the usable HBM without remat; XLA's rematerialization fits them (down to
    # one checkpoint per block), so no point of the sweep is out of memory
    assert not [w.value for w in at.warning if "do not fit in HBM" in w.value]
    # every series the page offers on the fresh database is one job: one model, recipe and mesh on one chip
    from profiler import queries
    from profiler.store import Database
    from views.scaling_model import scaling_table

    with Database(tmp_path / "fresh.duckdb").read() as con:
        runs = queries.scaling_runs(con)
    for mode in ("strong", "weak"):
        jobs = scaling_table(runs, mode).groupby("series")[["model_json", "recipe_json", "mesh_json", "chip"]].nunique()
        assert (jobs == 1).all().all(), jobs[(jobs > 1).any(axis=1)]


def test_a_finished_sweep_selects_its_series(tmp_path, monkeypatch, small_scenario):
    from engine import simulate
    from profiler import write_run
    from profiler.store import Database
    from views.common import seed_database

    path = tmp_path / "sweep.duckdb"
    seed_database(Database(path))  # the bundled examples and the strong-scaling curve
    small_id = write_run(Database(path), simulate(small_scenario), name="small")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    at = AppTest.from_file(str(ROOT / "views" / "scaling.py"), default_timeout=180).run()
    before = at.multiselect(key="sc_series_strong").value
    assert any("ResNet-50" in s for s in before)  # the seeded curve is what opens
    at.selectbox[0].set_value(small_id)
    at.text_input[0].set_value("2x2x1, 2x2x4")
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.multiselect(key="sc_series_strong").value == ["MLP 8.39M on tpu-v4, batch 256"]
