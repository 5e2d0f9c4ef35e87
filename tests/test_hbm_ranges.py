"""The 80% range of XLA's HBM peak around Podscope's: its groups, its verdict, its check against the TPU compiler grid
with each chip generation held out, and where a run, the advisor and the planner show it.

Known answers are worked by hand from the inputs; the grid's own numbers are only compared with what the same code
computes from the committed grid file.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine.scenario.calibration import Calibration
from profiler import calibrate, plan, ranges, xla_grid
from profiler.advisor import advise
from profiler.cli_output import summary_text
from profiler.summary import RunAggregates, summary_from

ROOT = Path(__file__).resolve().parent.parent
GIB = 2**30


class TestGroupsAndVerdict:
    def test_keys_split_each_family_at_one_gibibyte_of_podscopes_peak(self):
        assert ranges.hbm_keys("moe", GIB) == ("moe/large", "moe", "all")
        assert ranges.hbm_keys("moe", GIB - 1) == ("moe/small", "moe", "all")

    def test_a_program_in_a_regime_is_first_ranged_with_its_regime(self):
        assert ranges.hbm_keys("mlp", GIB, "full-windowed") == ("mlp/full-windowed", "mlp", "all")  # not with the sizes outside it

    @pytest.mark.parametrize(
        ("chip", "topology", "changes", "regime"),
        [("tpu-v5e", "2x4", {}, "full-windowed"),  # 8 FSDP devices
         ("tpu-v6e", "4x4", {}, "full-windowed"),  # 16
         ("tpu7x", "2x2x1", {}, "full-windowed"),  # 4 chips, a device per TensorCore: 8
         ("tpu-v5e", "2x2", {}, None),  # 4: no windowed-einsum loops
         ("tpu-v5e", "2x4", {"training": {"remat": "none"}}, None),
         ("tpu-v5e", "2x4", {"parallelism": {"fsdp_shard": "optimizer"}}, None),  # gradients replicated: no loops
         ("tpu-v5e", "2x4", {"training": {"microbatches": 2}}, None)],
    )  # fmt: skip
    def test_the_recompute_order_regime_is_an_mlp_under_full_remat_over_windowed_fsdp(self, chip, topology, changes, regime):
        from engine import scenario_from_dict

        chips = math.prod(int(n) for n in topology.split("x"))
        raw = {"name": "r", "pod": {"chip": chip, "topology": topology}, "model": {"kind": "mlp", "layer_sizes": [1024, 1024, 1000]},
               "training": {"global_batch": 64 * chips, "steps": 2, "remat": "full"}, "parallelism": {"data": 1, "fsdp": chips}}  # fmt: skip
        for section, values in changes.items():
            raw[section].update(values)
        assert ranges.hbm_regime(scenario_from_dict(raw)) == regime

    @pytest.mark.parametrize(
        ("changes", "share", "regime"),
        [({}, 0.96, "standard-past-target"),
         ({}, 0.94, None),  # under the rematerialization target
         ({"training": {"remat": "minimal"}}, 0.96, "standard-past-target"),
         ({"training": {"remat": "none"}}, 0.96, None),  # nothing recomputed
         ({"model": {"attention": "flash"}}, 0.96, None),
         ({}, None, None)],  # no peak to read
    )  # fmt: skip
    def test_a_recomputed_transformer_with_standard_attention_past_the_target_is_a_regime(self, changes, share, regime):
        from engine import scenario_from_dict

        raw = {"name": "t", "pod": {"chip": "tpu-v4", "topology": "2x2x1"},
               "model": {"kind": "transformer", "layers": 2, "d_model": 256, "heads": 4, "d_ff": 1024, "vocab": 4096,
                         "seq_len": 256, "attention": "standard"},
               "training": {"global_batch": 16, "steps": 2, "remat": "full"}, "parallelism": {"data": 4}}  # fmt: skip
        for section, values in changes.items():
            raw[section].update(values)
        peak = None if share is None else share * 30 * GIB
        assert ranges.hbm_regime(scenario_from_dict(raw), peak, 30 * GIB) == regime

    def test_family_of_a_scenario(self):
        assert ranges.model_family("transformer") == "transformer"
        assert ranges.model_family("transformer", experts=8) == "moe"
        assert ranges.model_family("transformer", pipeline=4) == "pipeline"
        assert ranges.model_family("resnet50", experts=8, pipeline=4) == "resnet50"

    @pytest.mark.parametrize(
        ("band", "verdict"),
        [((80.0, 100.0), "fits"), ((90.0, 100.5), "may not fit"), ((100.0, 110.0), "may not fit"), ((100.5, 110.0), "out of memory")],
    )  # fmt: skip
    def test_verdict_reads_the_range_against_the_usable_hbm(self, band, verdict):
        assert ranges.hbm_verdict(band, 100.0) == verdict

    def test_a_runs_range_comes_from_the_written_table_most_specific_group_first(self, tmp_path):
        table = {"all": {"n": 50, "low_factor": 0.8, "high_factor": 1.25},
                 "moe": {"n": 20, "low_factor": 0.9, "high_factor": 1.1},
                 "moe/large": {"n": 10, "low_factor": 0.95, "high_factor": 1.05}}  # fmt: skip
        report = {"date": "2026-01-01", "reference": "ref.json", "reference_sha256": "0" * 64, "evaluations": 1, "loss": 0.0,
                  "cases": [], "fitted": {}, "hbm_range_rule": ranges.HBM_RULE, "hbm_ranges": table}  # fmt: skip
        path = tmp_path / "cal.toml"
        calibrate.write_calibration_toml(path, Calibration(), report)
        written = ranges.load_hbm_range_table(path)
        assert written == table
        moe = {"model": {"kind": "transformer", "experts": 8}, "parallelism": {"pipeline": 1}}
        band, basis, verdict = ranges.peak_hbm_range(10 * GIB, 10.4 * GIB, moe, written)
        assert band == [pytest.approx(9.5 * GIB), pytest.approx(10.5 * GIB)]
        assert basis == {"group": "moe/large", "programs": 10, "nominal_coverage": 0.8} and verdict == "may not fit"
        # under 1 GiB there is no moe/small row: the family's
        band, basis, verdict = ranges.peak_hbm_range(0.5 * GIB, 10 * GIB, moe, written)
        assert basis["group"] == "moe" and band[1] == pytest.approx(0.55 * GIB) and verdict == "fits"
        # a family without a row of its own: every program's
        _, basis, _ = ranges.peak_hbm_range(GIB, 10 * GIB, {"model": {"kind": "mlp"}}, written)
        assert basis["group"] == "all"
        assert ranges.peak_hbm_range(GIB, 10 * GIB, None, written) == (None, None, None)  # imported run: no model
        # an MLP in the recompute-order regime has its own row where the table holds one
        regime = {"name": "r", "pod": {"chip": "tpu-v5e", "topology": "2x4"}, "model": {"kind": "mlp", "layer_sizes": [1024, 1000]},
                  "training": {"global_batch": 512, "steps": 2, "remat": "full"}, "parallelism": {"data": 1, "fsdp": 8}}  # fmt: skip
        with_regime = {**written, "mlp/full-windowed": {"n": 12, "low_factor": 0.6, "high_factor": 1.8}}
        band, basis, verdict = ranges.peak_hbm_range(5 * GIB, 10 * GIB, regime, with_regime)
        assert basis["group"] == "mlp/full-windowed" and band[1] == pytest.approx(9 * GIB) and verdict == "fits"
        assert ranges.peak_hbm_range(6 * GIB, 10 * GIB, regime, with_regime)[2] == "may not fit"
        assert ranges.peak_hbm_range(5 * GIB, 10 * GIB, regime, written)[1]["group"] == "all"  # no such row: the next key
        assert ranges.peak_hbm_range(GIB, None, moe, written)[2] is None  # no usable HBM: a range, no verdict


def test_held_out_ranges_build_one_table_per_fold_as_if_one_per_case():
    rng = random.Random(7)
    ratios = {f"c{i}": math.exp(rng.gauss(0.0, 0.1)) for i in range(60)}
    keys = {i: (rng.choice(["a", "b"]), "all") for i in ratios}
    fold_of = {i: rng.choice("XYZ") for i in ratios}
    out = ranges.held_out_ranges(ratios, keys, fold_of)
    for i, r in ratios.items():
        pool = {j: rj for j, rj in ratios.items() if fold_of[j] != fold_of[i]}
        group, row = ranges.lookup(ranges.range_table(pool, keys), keys[i])
        assert (out[i]["group"], out[i]["low_factor"], out[i]["high_factor"]) == (group, row["low_factor"], row["high_factor"])
        assert out[i]["inside"] == (row["low_factor"] <= r <= row["high_factor"])


def _row(id_: str, chip: str, podscope: float, xla: float, usable: float = 100.0, refused: bool = False,
         regime: str | None = None) -> dict:  # fmt: skip
    return {"id": id_, "chip": chip, "family": "mlp", "hbm_regime": regime, "xla_hbm_bytes": xla * GIB, "xla": {"oom": refused},
            "podscope": {"peak_hbm_bytes": podscope * GIB, "usable_hbm_bytes": usable * GIB}, "hbm_limit_ratio": xla / usable}  # fmt: skip


def test_programs_in_a_regime_are_a_group_apart_from_the_sizes():
    """Eight MLPs XLA holds as Podscope counts; eight in the recompute-order regime, half of them at 1.8 times the count:
    the regime's range spans 1.8, the size group's stays a point, the family's holds all sixteen."""
    plain = [_row(f"p{i}", "A", 10.0, 10.0) for i in range(8)]
    windowed = [_row(f"w{i}", "A", 10.0, 10.0 * (1.8 if i % 2 else 1.0), regime="full-windowed") for i in range(8)]
    table = xla_grid.hbm_range_table(plain + windowed)
    assert table["mlp/large"] == {"n": 8, "low_factor": 1.0, "high_factor": 1.0}
    assert table["mlp/full-windowed"]["n"] == 8 and table["mlp/full-windowed"]["high_factor"] == pytest.approx(1.8)
    assert table["mlp"]["n"] == 16


def test_grid_check_ranges_each_chip_generation_from_the_others():
    """Chip A: XLA exactly Podscope; chip B: XLA 20% either side. A's range (from B) holds A's programs; B's (from A) is
    a point and holds none. A's 90 GiB program ranged by B's +-20% may not fit; B's fits where XLA refused one."""
    a = [_row(f"a{i}", "A", 10.0 + i, 10.0 + i) for i in range(8)] + [_row("a-near", "A", 90.0, 90.0)]
    up, down = math.exp(0.2), math.exp(-0.2)
    b = [_row(f"b{i}", "B", 10.0, 10.0 * (up if i % 2 else down)) for i in range(8)]
    b.append(_row("b-refused", "B", 90.0, 90.0 * up, refused=True))
    check = xla_grid.hbm_range_check(a + b)
    assert (check["n"], check["inside"]) == (18, 9)
    assert (check["by_generation"]["A"]["inside"], check["by_generation"]["B"]["inside"]) == (9, 0)
    v = check["verdicts"]
    assert v["may not fit"] == {"compiled": 1, "refused": 0}  # a-near: 90 x e^0.2 > 100
    assert v["fits"] == {"compiled": 16, "refused": 1} and check["false_fits"] == 1  # b-refused: range a point at 90
    assert v["out of memory"] == {"compiled": 0, "refused": 0} and check["false_ooms"] == 0
    table = xla_grid.hbm_range_table(a + b)
    assert table["mlp/large"]["n"] == 18 and table["mlp/large"]["high_factor"] == pytest.approx(up)


def test_the_held_out_verdicts_false_fits_beyond_the_margin_are_those_xla_refuses_by_more_than_it():
    """Ranges that are points (both chips' XLA sizes are Podscope's): a program Podscope puts at 90% that XLA refuses
    asking 103% is a false fit inside the 5% margin, one it refuses asking 110% a false fit beyond it."""
    rows = [_row(f"{chip}{i}", chip, 10.0 + i, 10.0 + i) for chip in "AB" for i in range(8)]
    rows += [_row("A-close", "A", 90.0, 103.0, refused=True), _row("B-far", "B", 90.0, 110.0, refused=True)]
    check = xla_grid.hbm_range_check(rows)
    assert check["false_fits"] == 2 and check["false_fits_beyond_margin"] == 1


def test_bundled_hbm_ranges_are_what_the_grid_gives_the_model_now():
    """The table runs read was written from the committed grid by this HBM model: a model change re-runs calibrate."""
    rows = xla_grid.grid_rows(xla_grid.load_grid())
    fresh = xla_grid.hbm_range_table(rows)
    bundled = ranges.load_hbm_range_table()
    assert set(bundled) == set(fresh)
    for group, row in fresh.items():
        assert bundled[group]["n"] == row["n"], group
        assert bundled[group]["low_factor"] == pytest.approx(row["low_factor"], abs=2e-6), group
        assert bundled[group]["high_factor"] == pytest.approx(row["high_factor"], abs=2e-6), group
    block = xla_grid.block_of(rows)["hbm_range"]
    assert sum(c for v in block["verdicts"].values() for c in v.values()) == block["n"] == sum(1 for r in rows if r["xla_hbm_bytes"])


def _summary(hbm_source: str, peak: float, usable: float, oom: bool = False) -> dict:
    scenario = {"model": {"kind": "transformer", "experts": 0}, "parallelism": {"pipeline": 1}, "pod": {"slices": 1}}
    facts = {"peak_hbm_bytes": peak, "hbm_capacity_bytes": usable * 1.01, "oom": oom,
             "extra": {"hbm_source": hbm_source, "hbm_usable_bytes": usable}}  # fmt: skip
    run = {"name": "x", "source": "simulated", "chip": "tpu-v5p", "chips": 8, "hosts": 2, "slices": 1, "topology": "2x2x2",
           "steps": 4, "scenario": json.dumps(scenario), "facts": json.dumps(facts)}  # fmt: skip
    return summary_from(1, run, RunAggregates(steady_ns=1e6, all_ns=1e6, wall_ns=4 * 10**6))


class TestRunSummary:
    def test_podscopes_peak_near_the_limit_may_not_fit_and_the_advisor_says_so(self):
        row = ranges.load_hbm_range_table()["transformer/large"]
        usable = 30 * GIB
        peak = usable / math.sqrt(row["high_factor"])  # the range's top lies past the usable HBM
        s = _summary("podscope", peak, usable)
        assert s["peak_hbm_range_bytes"] == [pytest.approx(peak * row["low_factor"]), pytest.approx(peak * row["high_factor"])]
        assert s["hbm_verdict"] == "may not fit" and s["peak_hbm_range_basis"]["group"] == "transformer/large"
        assert [a["rule"] for a in s["advice"]] == ["may_not_fit"]
        text = summary_text(s)
        assert "may not fit: the range holds the 30.00 GiB a step may use" in text
        far = _summary("podscope", usable / row["high_factor"] * 0.99, usable)
        assert far["hbm_verdict"] == "fits" and not far["advice"] and "may not fit" not in summary_text(far)

    def test_out_of_memory_within_the_range_may_fit_and_stays_out_of_memory(self):
        usable = 30 * GIB
        s = _summary("podscope", usable * 1.001, usable, oom=True)
        assert s["oom"] and s["hbm_verdict"] == "may not fit"
        assert [a["rule"] for a in s["advice"]] == ["out_of_memory"]  # one memory advice: the point verdict's
        assert "may fit: the range holds" in summary_text(s)

    def test_a_run_whose_hbm_is_xlas_has_no_range(self):
        s = _summary("xla", 29 * GIB, 30 * GIB)
        assert (s["peak_hbm_range_bytes"], s["peak_hbm_range_basis"], s["hbm_verdict"]) == (None, None, None)
        assert not advise(s)


def test_run_json_carries_the_hbm_range(tmp_path):
    p = subprocess.run([sys.executable, "-m", "profiler", "run", "llm-1b-v5p-64", "--set", "sim.trace=summary", "--json",
                        "--db", str(tmp_path / "r.duckdb")], cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    low, high = s["peak_hbm_range_bytes"]
    assert low < s["peak_hbm_bytes"] < high and s["hbm_verdict"] == "fits"
    assert s["peak_hbm_range_basis"]["group"] == "transformer/large"


def test_plan_marks_the_best_whose_range_holds_the_usable_hbm():
    result = plan.run_plan(plan.plan_path("llm-7b-v5p"))
    out = plan.with_hbm_verdicts(result, result.to_json(5))
    assert len(out["best"]) == 5
    for b in out["best"]:
        low, high = b["peak_hbm_range_bytes"]
        assert low < b["peak_hbm_bytes"] < high and b["hbm_verdict"] in ranges.HBM_VERDICTS
    from profiler.plan_cli import _hbm_cell

    assert _hbm_cell({"peak_hbm_bytes": 30 * GIB, "hbm_verdict": "may not fit"}) == "30.0 GiB (may not fit)"
    assert _hbm_cell({"peak_hbm_bytes": 30 * GIB, "hbm_verdict": "fits"}) == "30.0 GiB"


def test_memory_page_warns_where_the_range_holds_the_usable_hbm(tmp_path, monkeypatch):
    import tomllib

    from engine import scenario_from_dict, simulate
    from profiler import write_run
    from profiler.store import Database
    from tests.test_pages import _page

    raw = tomllib.loads((ROOT / "data" / "scenarios" / "llm-1b-v5p-64.toml").read_text())
    raw["training"] |= {"steps": 2}
    raw["sim"] = {"trace": "summary"}
    path = tmp_path / "near.duckdb"
    ids = {}
    for batch in (4096, 13312):  # 31 GiB per chip, and 95.4 of the 95.7 GiB a step may use
        raw["training"]["global_batch"] = batch
        result = simulate(scenario_from_dict(raw))
        ids[batch] = write_run(Database(path), result, name=f"b{batch}")
    monkeypatch.setenv("PODSCOPE_DB", str(path))
    near, far = _page("views/memory.py", ids[13312]), _page("views/memory.py", ids[4096])
    assert [w.value for w in near.warning if w.value.startswith("May not fit")] and not near.success
    assert not far.warning and far.success
    assert any("80% range of the TPU compiler's peak" in c.value for c in near.caption)


@pytest.mark.parametrize(
    ("xla_gib", "refused", "where"),
    [(10.0, False, "XLA's peak inside it"), (11.55, False, "XLA's peak 5.0% above it"), (9.025, False, "XLA's peak 5.0% below it"),
     (5.775, True, "what XLA asks for 5.0% above it")],
)  # fmt: skip
def test_xla_check_says_where_xlas_peak_lies_against_the_range(xla_gib, refused, where):
    from profiler.xla_check import format_check

    pod = {"peak_hbm_bytes": 10 * GIB, "breakdown_bytes": {"params": GIB}, "peak_phase": "backward", "usable_hbm_bytes": 15 * GIB,
           "oom": False, "flops_per_chip": 0.0, "hbm_range_bytes": [9.5 * GIB, 11 * GIB],
           "hbm_range_basis": {"group": "moe/large", "programs": 121, "nominal_coverage": 0.8}, "hbm_verdict": "fits"}  # fmt: skip
    xla = {"peak_hbm_bytes": None if refused else xla_gib * GIB, "argument_bytes": GIB, "output_bytes": GIB, "alias_bytes": GIB,
           "temp_bytes": GIB, "oom": refused, "oom_message": "RESOURCE_EXHAUSTED: out of HBM", "flops_per_chip": 0.0}  # fmt: skip
    cmp = {"podscope": pod, "xla": xla, "hbm_diff_pct": 0.0, "verdicts_agree": not refused, "flops_diff_pct": None}
    record = {"devices_per_chip": 2, "mesh": {"fsdp": 4}, "devices": 8, "compile_s": 1.0, "notes": [],
              "oom": {"required_bytes": xla_gib * GIB} if refused else None}  # per device: a chip of two asks for twice  # fmt: skip
    text = format_check("s", cmp, record)
    line = next(x for x in text.splitlines() if x.startswith("  range"))
    assert "9.500 to 11.000 GiB" in line and "121 compiled 'moe/large' programs; verdict fits" in line and line.endswith(where)


class TestPlanHbmFit:
    def test_an_unknown_hbm_fit_is_named_with_its_key(self):
        from engine.errors import PlanError

        raw = {"base": "llm-1b-v5p-64.toml", "search": {"hbm_fit": "maybe", "training.remat": ["full"]}}
        with pytest.raises(PlanError) as e:
            plan.plan_from_dict(raw, source=str(ROOT / "data" / "scenarios" / "plan.toml"))
        assert ("search.hbm_fit", "unknown value 'maybe'; valid: peak, range") in e.value.problems

    def test_range_needs_the_factor_and_rules_out_what_it_pushes_past_the_usable_hbm(self):
        import dataclasses

        from engine.errors import PlanError
        from engine.planning.search import REASONS, search

        base = plan.load_plan(plan.plan_path("llm-7b-v5p"))
        ranged = dataclasses.replace(base, hbm_fit="range")
        with pytest.raises(PlanError):
            search(ranged)  # the engine alone has no compiler range to read
        point = search(base)
        same = search(ranged, hbm_range_factor=lambda scenario, peak: 1.0)
        assert [p.reason for p in same.points] == [p.reason for p in point.points]
        doubled = search(ranged, hbm_range_factor=lambda scenario, peak: 2.0)
        flipped = [(a, b) for a, b in zip(point.points, doubled.points) if a.reason != b.reason]
        assert flipped and all(a.feasible and b.reason == REASONS["hbm_range"] for a, b in flipped)
        # the bundled table: what it rules out lies under the usable HBM with its range's top past it
        result = plan.run_plan(ranged)
        out = [p for p in result.points if p.reason == REASONS["hbm_range"]]
        assert out and result.infeasible[REASONS["hbm_range"]] == len(out)
        for p in out[:5]:
            band, verdict = plan.hbm_verdict_of(result, p)
            assert verdict == "may not fit" and band[0] < p.peak_hbm_bytes < band[1]
        assert all(plan.hbm_verdict_of(result, p)[1] == "fits" for p in result.ranked()[:5])
