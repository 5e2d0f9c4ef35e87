"""The planner: the analytic step against full runs, the search's counts and ranking, the plan command.

What the analytic step is compared with: the median steady-state step and the peak HBM of
a full run of the same scenario with ``[input]``, ``[compile]`` and ``[failures]`` removed
(host queues, changing shapes and failures are not expressed analytically). Stragglers and
jitter stay on: the analytic step takes the slowest chip class's median over steps.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import ScenarioError, SimulationError, load_scenario, scenario_from_dict, simulate
from engine.errors import PlanError
from engine.memory.states import bytes_per_param
from engine.model.analytic import evaluate, slowest_factor, steady_state_scenario
from engine.model.models import model_cost
from engine.planning.planner import is_scenario_key, load_plan, plan_from_dict, scenario_to_toml
from engine.planning.search import REASONS, mesh_factorisations, search
from engine.scenario.calibration import load_calibration

ROOT = Path(__file__).resolve().parent.parent
ALL_BUNDLED = sorted((ROOT / "data" / "scenarios").glob("**/*.toml"))
#: the analytic step covers the built-in model families; a user's HLO program is costed by a full run only
BUNDLED = [p for p in ALL_BUNDLED if tomllib.loads(p.read_text())["model"]["kind"] != "hlo"]


def _full_step_s(scenario) -> tuple[float, float]:
    result = simulate(scenario)
    return float(np.median(result.trace.steps.column("step_ns").to_numpy())) / 1e9, result.facts.peak_hbm_bytes


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_analytic_step_matches_a_full_run_of_every_bundled_scenario(path):
    scenario = steady_state_scenario(load_scenario(path))
    full_s, full_peak = _full_step_s(scenario)
    est = evaluate(scenario)
    assert est.step_time_s == pytest.approx(full_s, rel=0.01)
    assert est.peak_hbm_bytes == pytest.approx(full_peak, rel=1e-12)
    assert est.oom == simulate(scenario).facts.oom


_TOPOLOGIES = ["2x2x1", "2x2x2", "2x2x4", "4x4x4"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    topology=st.sampled_from(_TOPOLOGIES),
    mesh_pick=st.integers(0, 10_000),
    remat=st.sampled_from(["none", "minimal", "selective", "full"]),
    per_shard=st.sampled_from([1, 2, 4]),
    layers=st.integers(2, 8),
    d_model=st.sampled_from([512, 1024]),
    overlap=st.booleans(),
)
def test_analytic_step_matches_full_runs_on_random_search_points(topology, mesh_pick, remat, per_shard, layers, d_model, overlap):
    n = math.prod(int(x) for x in topology.split("x"))
    meshes = [m for m in mesh_factorisations(n, 3).tolist() if 8 % m[2] == 0]
    data, fsdp, tensor = meshes[mesh_pick % len(meshes)]
    raw = {
        "name": "random-point",
        "pod": {"chip": "tpu-v5p", "topology": topology},
        "model": {"kind": "transformer", "layers": layers, "d_model": d_model, "heads": 8, "d_ff": 4 * d_model,
                  "vocab": 32000, "seq_len": 1024},
        "training": {"global_batch": per_shard * data * fsdp, "steps": 40, "remat": remat},
        "parallelism": {"data": data, "fsdp": fsdp, "tensor": tensor},
        "interconnect": {"overlap": overlap},
        "sim": {"trace": "summary"},
    }  # fmt: skip
    scenario = scenario_from_dict(raw)
    full_s, full_peak = _full_step_s(scenario)
    est = evaluate(scenario)
    assert est.step_time_s == pytest.approx(full_s, rel=0.01)
    assert est.peak_hbm_bytes == pytest.approx(full_peak, rel=1e-12)


def test_slowest_factor_known_answers():
    # one chip: the median of exp(j z) is exp(0) = 1; no jitter: the slowest factor itself
    assert slowest_factor(np.ones(1), 0.01) == pytest.approx(1.0)
    assert slowest_factor(np.array([1.0, 1.3, 1.1]), 0.0) == 1.3
    # two chips: P(max <= x) = Phi(ln x / j)^2 = 1/2  ->  ln x = j * Phi^-1(sqrt(1/2)) = j * 0.5449
    assert slowest_factor(np.ones(2), 0.01) == pytest.approx(math.exp(0.01 * 0.544919), rel=1e-6)
    assert slowest_factor(np.ones(1), 0.01, chips=2) == pytest.approx(math.exp(0.01 * 0.544919), rel=1e-6)
    # one much slower chip dominates: its own median
    assert slowest_factor(np.array([1.0, 1.0, 1.5]), 0.01) == pytest.approx(1.5, rel=1e-4)


def test_mesh_factorisations_are_every_ordered_product():
    table = mesh_factorisations(64, 3)
    assert len(table) == 28  # 64 = 2^6: stars and bars, C(6 + 2, 2)
    assert (table.prod(axis=1) == 64).all()
    assert len({tuple(r) for r in table.tolist()}) == 28
    assert mesh_factorisations(12, 2).tolist() == [[1, 12], [2, 6], [3, 4], [4, 3], [6, 2], [12, 1]]


# -- a tiny search whose counts can be worked by hand ------------------------------------------------

_TINY_BASE = {
    "name": "tiny",
    "pod": {"chip": "tpu-v5p", "topology": "2x2x1"},
    # ~15.4 B parameters, 2 heads: model states of 16 bytes/param need fsdp x tensor >= 3 on 95 GiB
    "model": {"kind": "transformer", "layers": 48, "d_model": 5120, "heads": 2, "d_ff": 20480, "vocab": 32000, "seq_len": 512},
    "training": {"global_batch": 2, "steps": 10, "optimizer": "adam", "remat": "full"},
    "parallelism": {"fsdp": 2, "tensor": 2},
}


def _tiny_plan(tmp_path, **search):
    return plan_from_dict({"base": _TINY_BASE, "search": {"mesh": "auto", **search}}, source=str(tmp_path / "tiny.toml"))


def test_infeasible_reasons_are_counted_on_a_hand_checkable_search(tmp_path):
    plan = _tiny_plan(tmp_path, max_chips=4, **{"pod.topology": ["2x2x1", "4x4x4"]})
    base = scenario_from_dict(_TINY_BASE)
    usable = base.chip_spec().usable_hbm_bytes(load_calibration().hbm_reserved_frac)
    states = model_cost(base.model).params * bytes_per_param("adam", "bf16").model_states
    assert states / 2 > usable > states / 4  # fsdp x tensor = 2 cannot hold the model states; 4 can
    result = search(plan)
    # 2x2x1 (4 chips): the 10 ordered (data, fsdp, tensor, context) with product 4 are
    #   (1,1,4,1) heads 2 % 4; (1,4,1,1) (4,1,1,1) (2,2,1,1) batch 2 % (data x fsdp = 4);
    #   (2,1,2,1) (1,2,1,2) (1,1,2,2) model states over 2 chips, (1,1,1,4) (2,1,1,2) over 1; (1,2,2,1) fits.
    # 4x4x4 (64 chips, over max_chips = 4): its 84 meshes, all outside the budget.
    assert result.candidates == 10 + 84
    assert result.infeasible == {
        REASONS["heads"]: 1,
        REASONS["batch"]: 3,
        REASONS["model_states"]: 5,
        REASONS["budget"]: 84,
    }
    assert result.feasible == 1
    [best] = result.ranked()
    assert best.mesh == {"data": 1, "fsdp": 2, "tensor": 2, "context": 1}
    assert result.costed == 1  # everything else was pruned before costing


def test_json_has_exactly_the_documented_keys(tmp_path):
    out = search(_tiny_plan(tmp_path)).to_json(3)
    assert set(out) == {"candidates", "feasible", "infeasible", "elapsed_s", "objective_name", "best", "pareto"}
    [best] = out["best"]
    assert {"rank", "scenario", "step_time_s", "tokens_per_s", "samples_per_s", "chips", "peak_hbm_bytes", "objective"} <= set(best)
    assert best["rank"] == 1 and best["chips"] == 4
    assert best["objective"] == pytest.approx(best["tokens_per_s"] / 4)
    json.dumps(out)  # plain JSON types only


# -- the best plan against profiler run, and against the base --------------------------------------


def _write_plan(tmp_path: Path, search_text: str) -> Path:
    base = ROOT / "data" / "scenarios" / "llm-1b-v5p-64.toml"
    (tmp_path / "base.toml").write_text(base.read_text())
    plan = tmp_path / "plan.toml"
    plan.write_text(f'base = "base.toml"\n[search]\n{search_text}')
    return plan


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip


@pytest.fixture(scope="module")
def llm_plan(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plan")
    path = _write_plan(tmp, '"pod.topology" = ["4x4x4", "4x4x8"]\n"training.remat" = ["none", "minimal", "full"]\n')
    out = _cli("plan", str(path), "--json", "--top", "3", "--quiet")
    assert out.returncode == 0, out.stderr
    return tmp, path, json.loads(out.stdout)


def test_the_best_plan_run_through_profiler_run_matches_and_fits(llm_plan):
    tmp, _, out = llm_plan
    # ordered (data, fsdp, tensor, context) of 64 = 2^6 and of 128 = 2^7 chips: C(9, 3) and C(10, 3)
    assert out["candidates"] == 84 * 3 + 120 * 3 and out["feasible"] > 0
    for best in out["best"]:
        scenario = tmp / f"best{best['rank']}.toml"
        scenario.write_text(scenario_to_toml(best["scenario"]))
        run = _cli("run", str(scenario), "--json", "--db", str(tmp / "runs.duckdb"))
        assert run.returncode == 0, run.stderr  # 3 would be out of memory
        summary = json.loads(run.stdout)
        assert summary["oom"] is False
        assert summary["step_time_s"] == pytest.approx(best["step_time_s"], rel=0.01)
        assert summary["peak_hbm_bytes"] == pytest.approx(best["peak_hbm_bytes"], rel=1e-9)
    ranks = [b["objective"] for b in out["best"]]
    assert ranks == sorted(ranks, reverse=True)


def test_the_base_configuration_never_beats_the_best_plan(llm_plan):
    _, path, out = llm_plan
    base = load_scenario(path.parent / "base.toml")  # 4x4x4, data 8 x fsdp 8, remat full: inside the space
    est = evaluate(base)
    assert est.tokens_per_s / est.chips <= out["best"][0]["objective"] * (1 + 1e-12)
    plan = load_plan(path)
    in_space = [p for p in search(plan).points if p.mesh == {"data": 8, "fsdp": 8, "tensor": 1, "context": 1}
                and p.overrides["pod.topology"] == "4x4x4" and p.overrides["training.remat"] == "full"]  # fmt: skip
    assert len(in_space) == 1 and in_space[0].objective == pytest.approx(est.tokens_per_s / est.chips, rel=1e-12)


def test_the_pareto_front_is_not_dominated(llm_plan):
    _, _, out = llm_plan
    front = out["pareto"]
    assert [p["chips"] for p in front] == sorted({p["chips"] for p in front})
    assert all(a["tokens_per_s"] < b["tokens_per_s"] for a, b in zip(front, front[1:]))


def test_db_stores_the_best_as_full_runs(tmp_path):
    path = _write_plan(tmp_path, '"training.remat" = ["minimal", "full"]\n')
    db = tmp_path / "plan.duckdb"
    out = _cli("plan", str(path), "--json", "--top", "2", "--db", str(db), "--quiet")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert len(data["stored_run_ids"]) == 2
    runs = json.loads(_cli("runs", "--json", "--db", str(db)).stdout)
    assert sorted(r["name"] for r in runs) == sorted(b["scenario"]["name"] for b in data["best"])


def test_db_in_a_folder_that_does_not_exist_is_refused_before_searching(tmp_path):
    path = _write_plan(tmp_path, '"training.remat" = ["full"]\n')
    out = _cli("plan", str(path), "--db", str(tmp_path / "typo" / "plan.duckdb"))
    assert out.returncode == 2 and "does not exist" in out.stderr
    assert not (tmp_path / "typo").exists()


def test_the_table_output_ranks_and_shows_the_front(tmp_path):
    path = _write_plan(tmp_path, '"training.remat" = ["minimal", "full"]\n')
    out = _cli("plan", str(path), "--top", "2")
    assert out.returncode == 0, out.stderr
    assert "Best configurations" in out.stdout and "Pareto front" in out.stdout


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("search_text", "key", "what"),
    [
        ('colour = ["red"]\n', "search.colour", "unknown key"),
        ('"training.remat" = []\n', 'search."training.remat"', "empty list"),
        ('"pod.colour" = ["red"]\n', 'search."pod.colour"', "not a scenario key"),
        ('"training.remat" = "full"\n', 'search."training.remat"', "expected a list"),
        ('objective = "speed"\n', "search.objective", "unknown objective"),
        ('"parallelism.fsdp" = [2, 4]\n', 'search."parallelism.fsdp"', "mesh is searched"),
    ],
)
def test_bad_plans_exit_2_naming_the_file_and_key_and_write_nothing(tmp_path, search_text, key, what):
    path = _write_plan(tmp_path, search_text)
    db = tmp_path / "never.duckdb"
    out = _cli("plan", str(path), "--db", str(db))
    assert out.returncode == 2
    assert str(path) in out.stderr and key in out.stderr and what in out.stderr
    assert not db.exists()


def test_a_base_that_does_not_load_is_named(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text('base = "missing.toml"\n[search]\n"training.remat" = ["full"]\n')
    out = _cli("plan", str(plan))
    assert out.returncode == 2 and "base" in out.stderr and "missing.toml" in out.stderr
    with pytest.raises(PlanError, match="unknown key"):
        plan_from_dict({"base": _TINY_BASE, "extra": 1})
    with pytest.raises(PlanError, match="inline base scenario is invalid"):
        plan_from_dict({"base": {**_TINY_BASE, "pod": {"chip": "tpu-v99", "topology": "2x2x1"}}})


@pytest.mark.parametrize("hlo", [p for p in ALL_BUNDLED if p not in BUNDLED], ids=lambda p: p.stem)
def test_an_hlo_base_is_refused_and_not_evaluated(hlo):
    with pytest.raises(PlanError, match="HLO module fixes its model"):
        plan_from_dict({"base": str(hlo.name), "search": {}}, base_dir=hlo.parent)
    with pytest.raises(SimulationError, match="analytic step covers the built-in"):
        evaluate(load_scenario(hlo))


def test_scenario_keys_are_recognised():
    assert is_scenario_key("pod.topology") and is_scenario_key("model.heads") and is_scenario_key("input.prefetch")
    assert is_scenario_key("interconnect.overlap") and is_scenario_key("interconnect.degraded_links")
    assert not is_scenario_key("pod.colour") and not is_scenario_key("pod.chip.x") and not is_scenario_key("colour")


@pytest.mark.parametrize("path", ALL_BUNDLED, ids=lambda p: p.stem)
def test_scenario_toml_round_trips(path):
    scenario = load_scenario(path)
    assert scenario_from_dict(tomllib.loads(scenario_to_toml(scenario.to_dict()))) == scenario


def test_mesh_that_does_not_divide_the_slice_is_counted_with_a_fixed_mesh(tmp_path):
    base = {**_TINY_BASE, "parallelism": {"data": 1, "fsdp": 2, "tensor": 2}}
    plan = plan_from_dict({"base": base, "search": {"mesh": "fixed", "pod.topology": ["2x2x1", "2x2x2"]}})
    result = search(plan)
    assert result.infeasible == {REASONS["indivisible"]: 1}  # 2x2x2 has 8 chips, the mesh 4
    assert result.feasible == 1
    with pytest.raises(ScenarioError):
        scenario_from_dict({**base, "pod": {"chip": "tpu-v5p", "topology": "2x2x2"}})


def test_context_and_expert_are_searched_with_their_rules(tmp_path):
    from engine.planning.search import search_axes

    base = {"name": "tiny-moe", "pod": {"chip": "tpu-v5p", "topology": "2x2x1"},
            "model": {"kind": "transformer", "layers": 2, "d_model": 256, "heads": 2, "d_ff": 512, "vocab": 1000, "seq_len": 6,
                      "experts": 2, "experts_per_token": 1},
            "training": {"global_batch": 8, "steps": 2}}  # fmt: skip
    assert search_axes(base["model"]) == ("data", "fsdp", "tensor", "expert", "context")
    assert search_axes({"kind": "resnet50"}) == ("data", "fsdp", "tensor")
    result = search(plan_from_dict({"base": base, "search": {"mesh": "auto"}}, source=str(tmp_path / "moe.toml")))
    # 4 = 2^2 chips over 5 axes: C(2 + 4, 4) = 15 orderings; tensor 4 splits 2 heads, context 4 does not divide
    # seq_len 6, expert 4 does not divide 2 experts: one candidate each, everything else is feasible
    assert result.candidates == 15
    assert result.infeasible == {REASONS["heads"]: 1, REASONS["seq"]: 1, REASONS["experts"]: 1}
    best = result.scenario(result.ranked()[0])
    assert scenario_from_dict(best).model.experts == 2


class TestTimeToTrainObjectives:
    """The planner ranks by the job's end: time or chip-hours to the base's [convergence] target."""

    BASE = {
        "name": "r50-plan",
        "pod": {"chip": "tpu-v4", "topology": "4x4x4"},
        "model": {"kind": "resnet50"},
        "training": {"global_batch": 8192, "steps": 10, "optimizer": "momentum", "remat": "full"},
        "convergence": {"task": "mlperf-resnet50"},
        "cost": {"usd_per_chip_hour": 1.0},
    }

    def _best(self, objective: str, **limits):
        from engine.planning.planner import plan_from_dict
        from engine.planning.search import search

        search_table = {"objective": objective, "mesh": "fixed", "pod.topology": ["4x4x4", "8x8x8"],
                        "training.global_batch": [8192, 131072], **limits}  # fmt: skip
        result = search(plan_from_dict({"base": self.BASE, "search": search_table}))
        return result, result.ranked()[0]

    def _batch(self, result, candidate) -> int:
        return candidate.overrides.get("training.global_batch", self.BASE["training"]["global_batch"])

    def test_cost_to_train_picks_a_smaller_batch_than_throughput_far_past_b_crit(self):
        # B_crit of mlperf-resnet50 is ~47k images: 131,072 is ~2.8x past it, so it needs ~2.4x the samples of 8,192
        thr, best_thr = self._best("samples_per_s")
        cost, best_cost = self._best("cost_to_train")
        assert self._batch(thr, best_thr) == 131072
        assert self._batch(cost, best_cost) == 8192 and best_cost.chips == 64
        assert best_cost.chip_hours < best_thr.chip_hours
        assert best_cost.cost_usd == pytest.approx(best_cost.chip_hours * 1.0)

    def test_time_to_train_is_not_throughput(self):
        thr, best_thr = self._best("samples_per_s")
        ttt, best_ttt = self._best("time_to_train")
        assert best_ttt.time_to_train_s < best_thr.time_to_train_s
        assert self._batch(ttt, best_ttt) < self._batch(thr, best_thr)

    def test_a_deadline_and_a_budget_rule_candidates_out(self):
        _, fastest = self._best("time_to_train")
        result, _ = self._best("cost_to_train", max_time_to_train_s=fastest.time_to_train_s * 1.01)
        feasible = [p for p in result.points if p.feasible]
        assert feasible and all(p.time_to_train_s <= fastest.time_to_train_s * 1.01 for p in feasible)
        assert result.infeasible.get("over the time-to-train limit")
        _, cheapest = self._best("cost_to_train")
        result, _ = self._best("time_to_train", max_cost_usd=cheapest.cost_usd * 1.01)
        assert result.infeasible.get("over the cost limit")

    @pytest.mark.parametrize(
        ("base_edit", "search", "key"),
        [
            ({"convergence": None}, {"objective": "cost_to_train"}, "search.objective"),
            ({"convergence": None}, {"max_time_to_train_s": 3600}, "search.max_time_to_train_s"),
            ({}, {"max_time_to_train_s": 0}, "search.max_time_to_train_s"),
            ({"cost": None}, {"max_cost_usd": 100}, "search.max_cost_usd"),
        ],
    )
    def test_bad_limits_are_plan_errors(self, base_edit, search, key):
        from engine.errors import PlanError
        from engine.planning.planner import plan_from_dict

        base = {k: v for k, v in {**self.BASE, **base_edit}.items() if v is not None}
        with pytest.raises(PlanError) as e:
            plan_from_dict({"base": base, "search": search})
        assert key in dict(e.value.problems)
