"""The Timeline and Compare pages on the bundled TPU-compiled HLO module, as the real engine simulated it:
each op's time by Podscope and by XLA:TPU's estimate, the collectives' exposed and hidden time, and
two runs of the module (the compiler's estimates against Podscope's roofline) op by op."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from profiler import format as fmt
from profiler import hlo_queries, queries
from tests.real_runs import open_page

ROOT = Path(__file__).resolve().parent.parent


def _page(page: str, run_id: int, other: int | None = None) -> AppTest:
    return open_page(page, run_id, other)


def _specs(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _n(values) -> int:
    if isinstance(values, dict):
        import base64

        return len(np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])))
    return len(values)


def _values(values) -> np.ndarray:
    if isinstance(values, dict):
        import base64

        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])).astype(float)
    return np.asarray(values, dtype=float)


def _engine_ops(page_db, label: str):
    """The per-op table the engine returned for the run, before the store saw it."""
    return page_db.results[label].trace.extra["hlo_ops"].to_pandas()


def _weighted_quantile(ratio: np.ndarray, weight: np.ndarray, q: float) -> float:
    order = np.argsort(ratio, kind="stable")
    cum = np.cumsum(weight[order]) / weight.sum()
    return float(ratio[order][np.searchsorted(cum, q - 1e-12)])


def test_timeline_shows_each_ops_two_estimates_and_the_collectives(page_db):
    summary = page_db.summary("hlo_tpu")
    assert summary["compute_source"] == "xla"
    ops = _engine_ops(page_db, "hlo_tpu")
    both = ops[(ops["xla_ns"] > 0) & (ops["podscope_ns"] > 0)]
    ratio = (both["podscope_ns"] / both["xla_ns"]).to_numpy(dtype=float)
    at = _page("views/timeline.py", page_db.run_ids["hlo_tpu"])
    assert "Per op: Podscope vs the compiler" in [s.value for s in at.subheader]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Compute, XLA estimate"] == fmt.duration(summary["hlo_xla_compute_s"])
    assert metrics["Compute, Podscope"] == fmt.duration(summary["hlo_podscope_compute_s"])
    assert metrics["Per-op ratio, median"] == f"{np.quantile(ratio, 0.5):.2f}"
    assert metrics["Per-op ratio, p90"] == f"{np.quantile(ratio, 0.9):.2f}"
    weight = (both["xla_ns"] * both["executions"]).to_numpy(dtype=float)
    weighted = f"median {_weighted_quantile(ratio, weight, 0.5):.2f}, p90 {_weighted_quantile(ratio, weight, 0.9):.2f}"
    assert any("Weighted by each op's XLA time" in c.value and weighted in c.value for c in at.caption)

    specs = {s["layout"]["title"]["text"]: s for s in _specs(at)}
    scatter = next(s for t, s in specs.items() if t.startswith("Each op, one execution"))
    markers = [t for t in scatter["data"] if t.get("mode") == "markers"]
    assert sum(_n(t["x"]) for t in markers) == len(both) <= queries.MAX_POINTS
    assert {t["name"] for t in markers} <= {"MXU-bound (matmul FLOPs)", "HBM-bound (bytes)"}
    assert scatter["layout"]["xaxis"]["type"] == scatter["layout"]["yaxis"]["type"] == "log"
    assert any(t.get("name") == "same time" for t in scatter["data"]), "the diagonal"

    top = at.dataframe[0].value
    assert len(top) == hlo_queries.HLO_TOP_OPS
    charged = np.where(ops["xla_ns"].notna(), ops["xla_ns"], ops["podscope_ns"]) * ops["executions"]
    assert top["name"].iloc[0] == ops["name"].iloc[int(np.argmax(charged))], "the op the run charges most comes first"

    bars = next(s for t, s in specs.items() if t.startswith("Collectives per step"))
    exposed = next(t for t in bars["data"] if t["name"].startswith("exposed"))
    hidden = next(t for t in bars["data"] if t["name"].startswith("hidden"))
    assert _values(exposed["x"]).sum() == pytest.approx(summary["hlo_collective_s"] * 1e3, rel=1e-3)
    assert _values(hidden["x"]).sum() == pytest.approx(summary["hlo_collective_hidden_s"] * 1e3, rel=1e-3)
    assert any("· async ·" in label for label in bars["data"][0]["y"]), "the module's async collective-permutes"


def test_timeline_of_a_run_without_per_op_times_has_no_op_section(page_db):
    at = _page("views/timeline.py", page_db.run_ids["full"])
    assert "Per op: Podscope vs the compiler" not in [s.value for s in at.subheader]


def test_op_points_keep_the_heaviest_ops_and_sample_the_rest(page_db):
    run_id = page_db.run_ids["hlo_tpu"]
    with page_db.db.read() as con:
        every = hlo_queries.hlo_op_points(con, run_id)
        capped = hlo_queries.hlo_op_points(con, run_id, cap=50, top=20)
    assert len(capped) <= 51 < len(every)
    weight = np.maximum(every["podscope_ns"], every["xla_ns"]) * every["executions"]
    heaviest = set(every["name"][weight.sort_values(ascending=False, kind="stable").index[:20]])
    assert set(capped[capped["heaviest"]]["name"]) == heaviest
    assert len(capped) > 20, "a sample of the lighter ops, not only the heaviest"


def test_compare_two_runs_of_one_module_op_by_op(page_db):
    """The compiler's estimates (base) against Podscope's roofline (other) for the same TPU module."""
    a, b = page_db.summary("hlo_tpu"), page_db.summary("hlo_tpu_roofline")
    assert (a["compute_source"], b["compute_source"]) == ("xla", "podscope")
    at = _page("views/compare.py", page_db.run_ids["hlo_tpu"], page_db.run_ids["hlo_tpu_roofline"])
    assert "Per op: the two HLO runs" in [s.value for s in at.subheader]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Compute, base"] == fmt.duration(a["hlo_xla_compute_s"])
    assert metrics["Compute, other"] == fmt.duration(b["hlo_podscope_compute_s"])
    ops = _engine_ops(page_db, "hlo_tpu")
    assert metrics["Ops matched"] == fmt.count(((ops["podscope_ns"] > 0) & (ops["xla_ns"].fillna(ops["podscope_ns"]) > 0)).sum())
    pairs = next(s for s in _specs(at) if s["layout"]["title"]["text"].startswith("Each op's time per step"))
    assert 0 < sum(_n(t["x"]) for t in pairs["data"] if t.get("mode") == "markers") <= queries.MAX_POINTS
    table = at.dataframe[-1].value
    assert len(table) == hlo_queries.HLO_TOP_OPS
    moved = table["delta_ms"].abs().to_numpy()
    assert (np.diff(moved) <= 1e-9).all(), "the ops whose time moved most first"


def test_compare_form_sets_an_hlo_runs_compute_source(writable_db):
    at = _page("views/compare.py", writable_db.run_ids["hlo_tpu"])
    box = next(s for s in at.selectbox if s.label == "Compute source")
    assert box.value == "xla" and list(box.options) == ["xla", "podscope"]
    box.set_value("podscope")
    next(b for b in at.button if b.label == "Simulate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    with writable_db.db.read() as con:
        newest = int(queries.list_runs(con)["run_id"].iloc[0])
        summary = queries.run_summary(con, newest)
        scenario = queries.run_scenario(con, newest)
    assert summary["compute_source"] == "podscope" and scenario["model"]["compute_source"] == "podscope"
    assert summary["name"].endswith("compute source xla → podscope")
    assert "Per op: the two HLO runs" in [s.value for s in at.subheader]
