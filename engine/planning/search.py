"""The planner's search: enumerate configurations, prune what cannot work, cost the rest analytically.

For each combination of the plan's knob values (:class:`~engine.planning.planner.Plan`), and
with ``mesh = "auto"`` for every factorisation of the slice over the model's mesh
axes, a candidate is checked from cheapest to dearest, and the first check it fails
is its reason (counted in :attr:`PlanResult.infeasible`):

1. the chip budget (``max_chips``, ``min_chips``);
2. mesh rules, vectorised over all factorisations of a slice at once: attention heads
   divisible by ``tensor``; ``seq_len`` divisible by ``context``; the experts divisible by
   ``expert``; the global batch divisible by ``data x fsdp x expert x slices``;
3. a memory lower bound, vectorised too: the model states alone (stored weights,
   gradients and optimizer state over ``fsdp x tensor``, as the ZeRO stage shards them, and
   over ``expert``) exceed the usable HBM;
4. full scenario validation (the mesh must lie on the torus; every other scenario rule);
5. the analytic step (:func:`engine.model.analytic.evaluate`): same cost functions as a full
   run; a peak above usable HBM is out of memory, named by its largest term; with
   ``hbm_fit = "range"`` a peak whose range of the TPU compiler's peak (the ``hbm_range_factor``
   the caller gives: :func:`profiler.plan.run_plan` reads the compiler grid's table) reaches past the
   usable HBM may not fit.

Mesh axes are data-driven (:func:`search_axes` and :func:`_axis_rules`): every model is
searched over ``data x fsdp x tensor``, a transformer also over ``context``, a mixture of
experts also over ``expert``. ``pipeline`` is not searched: a pipeline is only worth its
bubble with enough microbatches, a second knob the mesh search does not choose, so it stays
the base's value (vary it by hand with ``mesh = "fixed"``). Knobs such as microbatches are ordinary
dotted keys.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..convergence import TimeToTrain, plan_convergence, time_to_train
from ..errors import PlanError, ScenarioError
from ..idle.plan import default_checkpoint_bytes
from ..memory.states import bytes_per_param, zero_shards
from ..model.analytic import evaluate
from ..model.models import ModelCost, model_cost
from ..pod.topology import Pod, build_pod
from ..scenario import Scenario, apply_overrides, parse_topology, scenario_from_dict, with_parallelism
from ..scenario.calibration import Calibration, load_calibration
from .planner import OBJECTIVES, Plan

__all__ = [
    "SEARCH_AXES",
    "search_axes",
    "REASONS",
    "Candidate",
    "PlanResult",
    "mesh_factorisations",
    "search",
]

#: mesh axes the search may factorise a slice over, in scenario order (:func:`search_axes` picks per model)
SEARCH_AXES = ("data", "fsdp", "tensor", "expert", "context")

#: infeasibility reasons (out-of-memory reasons also name the term: "out of memory (activations)")
REASONS = {
    "budget": "outside the chip budget",
    "heads": "heads not divisible by tensor",
    "batch": "batch not divisible by data x fsdp x expert x slices",
    "seq": "seq_len not divisible by context",
    "experts": "experts not divisible by expert",
    "indivisible": "indivisible mesh",
    "torus": "mesh does not fit the torus",
    "model_states": "out of memory (model states)",
    "hbm_range": "may not fit (HBM range)",
}
#: validation problem key -> reason, for problems the vectorised checks do not catch first
_KEY_REASONS = {
    "parallelism": REASONS["indivisible"],
    "parallelism.mapping": REASONS["torus"],
    "parallelism.tensor": REASONS["heads"],
    "parallelism.context": REASONS["seq"],
    "parallelism.expert": REASONS["experts"],
    "training.global_batch": REASONS["batch"],
}


@dataclass(frozen=True)
class Candidate:
    """One configuration the search considered, feasible or not (numbers are None when not costed)."""

    index: int
    overrides: dict[str, Any]  # dotted keys applied to the base (knobs, then the mesh)
    chips: int
    mesh: dict[str, int] | None
    reason: str | None = None  # None: feasible
    step_time_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    peak_hbm_bytes: float | None = None
    objective: float | None = None
    time_to_train_s: float | None = None  # with the base's [convergence] only
    chip_hours: float | None = None
    cost_usd: float | None = None

    @property
    def feasible(self) -> bool:
        return self.reason is None

    def mesh_text(self) -> str:
        return " ".join(f"{k} {v}" for k, v in (self.mesh or {}).items())


@dataclass(frozen=True)
class PlanResult:
    """Every candidate of a search, with what it cost to find them."""

    plan: Plan
    points: list[Candidate]
    elapsed_s: float
    costed: int  # candidates that reached the analytic step
    infeasible: dict[str, int] = field(default_factory=dict)

    @property
    def candidates(self) -> int:
        return len(self.points)

    @property
    def feasible(self) -> int:
        return sum(p.feasible for p in self.points)

    @property
    def throughput_key(self) -> str:
        """``tokens_per_s`` for models with tokens, else ``samples_per_s``: the Pareto front's y."""
        return "tokens_per_s" if model_cost(self.plan.base.model).tokens_per_sample else "samples_per_s"

    def ranked(self) -> list[Candidate]:
        """Feasible candidates, best first (ties: fewer chips, then enumeration order)."""
        maximise = OBJECTIVES[self.plan.objective][2]
        sign = -1.0 if maximise else 1.0
        return sorted((p for p in self.points if p.feasible), key=lambda p: (sign * p.objective, p.chips, p.index))

    def pareto(self) -> list[Candidate]:
        """Feasible candidates no other beats on both chips (fewer) and throughput (more), by chips."""
        key = self.throughput_key
        front: list[Candidate] = []
        best = -math.inf
        for p in sorted((p for p in self.points if p.feasible), key=lambda p: (p.chips, -getattr(p, key), p.index)):
            if getattr(p, key) > best:
                front.append(p)
                best = getattr(p, key)
        return front

    def scenario(self, candidate: Candidate, name: str | None = None) -> dict[str, Any]:
        """The complete scenario of a candidate, as a dict ``profiler run`` accepts as is."""
        raw = _apply(self.plan, candidate.overrides)
        raw["name"] = name or _name(self.plan, candidate)
        return scenario_from_dict(raw, source=self.plan.source).to_dict()

    def to_json(self, top: int = 5) -> dict[str, Any]:
        """The plan command's JSON object (see docs/planner.md)."""
        ranked = self.ranked()[:top]
        return {
            "candidates": self.candidates,
            "feasible": self.feasible,
            "infeasible": dict(sorted(self.infeasible.items())),
            "elapsed_s": self.elapsed_s,
            "objective_name": self.plan.objective,
            "best": [
                {"rank": i + 1, "scenario": self.scenario(p, _name(self.plan, p, i + 1)), **_numbers(p), "mesh": p.mesh}
                for i, p in enumerate(ranked)
            ],
            "pareto": [{**_numbers(p), "mesh": p.mesh, "knobs": _knob_values(self.plan, p)} for p in self.pareto()],
        }


def _float(x: float | None) -> float | None:
    return None if x is None else float(x)


def _numbers(p: Candidate) -> dict[str, Any]:
    return {
        "step_time_s": _float(p.step_time_s),
        "tokens_per_s": _float(p.tokens_per_s),
        "samples_per_s": _float(p.samples_per_s),
        "chips": p.chips,
        "peak_hbm_bytes": _float(p.peak_hbm_bytes),
        "objective": _float(p.objective),
        "time_to_train_s": _float(p.time_to_train_s),
        "chip_hours": _float(p.chip_hours),
        "cost_usd": _float(p.cost_usd),
    }


def _knob_values(plan: Plan, p: Candidate) -> dict[str, Any]:
    return {k: p.overrides[k] for k in plan.knobs}


def _name(plan: Plan, p: Candidate, rank: int | None = None) -> str:
    """A run name that says what the plan chose: the knob values and the mesh."""
    parts = [f"{k.split('.')[-1]} {v}" for k, v in _knob_values(plan, p).items() if v != _base_value(plan, k)]
    if p.mesh is not None and plan.mesh == "auto":
        parts.append(p.mesh_text())
    head = f"{plan.base.name} · plan" + (f" #{rank}" if rank else "")
    return (head + " · " + " · ".join(parts))[:200] if parts else head


def _base_value(plan: Plan, dotted: str) -> Any:
    node: Any = plan.base_raw
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _apply(plan: Plan, overrides: Mapping[str, Any]) -> dict[str, Any]:
    raw = apply_overrides(plan.base_raw, {k: v for k, v in overrides.items() if not k.startswith("parallelism.")})
    if plan.mesh == "auto":
        axes = search_axes(raw.get("model") or {})
        par = {k: v for k, v in (raw.get("parallelism") or {}).items() if k not in (*axes, "mapping")}
        raw["parallelism"] = par
    return apply_overrides(raw, {k: v for k, v in overrides.items() if k.startswith("parallelism.")})


def mesh_factorisations(chips: int, axes: int) -> np.ndarray:
    """Every ordered way to write ``chips`` as a product of ``axes`` positive factors, shape (ways, axes).

    >>> mesh_factorisations(4, 2).tolist()
    [[1, 4], [2, 2], [4, 1]]
    """
    divisors = np.array([d for d in range(1, chips + 1) if chips % d == 0], dtype=np.int64)
    rows = np.ones((1, 0), dtype=np.int64)
    rest = np.array([chips], dtype=np.int64)
    for _ in range(axes - 1):
        ok = rest[:, None] % divisors[None, :] == 0
        r, c = np.nonzero(ok)
        rows = np.concatenate([rows[r], divisors[c][:, None]], axis=1)
        rest = rest[r] // divisors[c]
    return np.concatenate([rows, rest[:, None]], axis=1)


def search_axes(model: Any) -> tuple[str, ...]:
    """The mesh axes a model is searched over (a subset of :data:`SEARCH_AXES`, in its order)."""
    kind = model.get("kind") if isinstance(model, Mapping) else getattr(model, "kind", None)
    experts = (model.get("experts") if isinstance(model, Mapping) else getattr(model, "experts", 0)) or 0
    extra = {"context": kind == "transformer", "expert": experts > 0}
    return tuple(a for a in SEARCH_AXES if a in ("data", "fsdp", "tensor") or extra[a])


def _axis_rules(model: Any, sizes: Mapping[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """(reason, bad mask) of each mesh-axis rule the model imposes, over arrays of axis sizes."""
    rules = []
    heads = getattr(model, "heads", None)
    if heads is not None:  # tensor parallelism gives each chip whole heads (Megatron-LM)
        rules.append((REASONS["heads"], heads % sizes["tensor"] != 0))
    if "context" in sizes:  # each chip holds seq_len / context of every sequence
        rules.append((REASONS["seq"], model.seq_len % sizes["context"] != 0))
    if "expert" in sizes:  # each chip holds experts / expert of every MoE layer
        rules.append((REASONS["experts"], model.experts % sizes["expert"] != 0))
    return rules


class _Costs:
    """Pods and model costs shared by the candidates that have the same shape or model."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str, int], Pod] = {}
        self.models: dict[str, ModelCost] = {}
        self.memo: dict = {}  # engine.model.analytic.step_costs' memo: keeps the costs above alive, as its ids need

    def pod(self, s: Scenario) -> Pod:
        key = (s.pod.chip, s.pod.topology, s.pod.slices)
        if key not in self.pods:
            self.pods[key] = build_pod(s.chip_spec(), s.slice_shape, s.pod.slices)
        return self.pods[key]

    def cost(self, s: Scenario) -> ModelCost:
        key = s.model.model_dump_json()
        if key not in self.models:
            self.models[key] = model_cost(s.model)
        return self.models[key]


def _reason_of(e: ScenarioError) -> str:
    key = e.problems[0][0] if e.problems else ""
    return _KEY_REASONS.get(key, f"invalid scenario ({key or 'file'})")


def search(
    plan: Plan,
    calibration: Calibration | None = None,
    progress: Callable[[int, int], None] | None = None,
    hbm_range_factor: Callable[[Scenario, float], float] | None = None,
) -> PlanResult:
    """Search the plan's space; every candidate is kept with its reason or its numbers.

    ``progress(done, total)`` is called after each knob combination. ``hbm_range_factor(scenario, peak_bytes)``,
    needed by ``hbm_fit = "range"``, gives the top of the range of the TPU compiler's peak as a multiple of
    Podscope's.

    Raises
    ------
    PlanError
        ``hbm_fit = "range"`` without ``hbm_range_factor``.
    """
    if plan.hbm_fit == "range" and hbm_range_factor is None:
        raise PlanError(plan.source, [("search.hbm_fit", "\"range\" needs the TPU compiler's HBM ranges: search through "
                                       "profiler.plan.run_plan (podscope plan), which reads them")])  # fmt: skip
    factor = hbm_range_factor if plan.hbm_fit == "range" else None
    cal = calibration or load_calibration()
    t0 = time.perf_counter()
    shared = _Costs()
    quantity, per_chip, _ = OBJECTIVES[plan.objective]
    combos = [dict(zip(plan.knobs, values)) for values in itertools.product(*plan.knobs.values())]
    points: list[Candidate] = []
    costed = 0

    def add(overrides: dict[str, Any], chips: int, mesh: dict[str, int] | None, reason: str) -> None:
        points.append(Candidate(len(points), overrides, chips, mesh, reason))

    def cost(overrides: dict[str, Any], scenario: Scenario, mesh: dict[str, int]) -> None:
        nonlocal costed
        costed += 1
        est = evaluate(scenario, cal, pod=shared.pod(scenario), cost=shared.cost(scenario), memo=shared.memo)
        values = {"step_time_s": est.step_time_s, "samples_per_s": est.samples_per_s, "tokens_per_s": est.tokens_per_s}
        ttt = _time_to_train(scenario, shared, est.step_time_s)
        values |= {"time_to_train_s": ttt.total_s if ttt else None, "chip_hours": ttt.chip_hours if ttt else None}
        objective = values[quantity] / est.chips if per_chip else values[quantity]
        reason = f"out of memory ({est.oom_term})" if est.oom else None
        if reason is None and factor is not None and est.peak_hbm_bytes * factor(scenario, est.peak_hbm_bytes) > est.usable_hbm_bytes:
            reason = REASONS["hbm_range"]
        if reason is None and ttt is not None:
            if plan.max_time_to_train_s is not None and ttt.total_s > plan.max_time_to_train_s:
                reason = "over the time-to-train limit"
            elif plan.max_cost_usd is not None and ttt.cost_usd is not None and ttt.cost_usd > plan.max_cost_usd:
                reason = "over the cost limit"
        points.append(Candidate(len(points), overrides, est.chips, mesh, reason, est.step_time_s, est.samples_per_s,
                                est.tokens_per_s, est.peak_hbm_bytes, objective, values["time_to_train_s"],
                                values["chip_hours"], ttt.cost_usd if ttt else None))  # fmt: skip

    for done, combo in enumerate(combos, 1):
        raw = _apply(plan, combo)
        if plan.mesh == "auto":
            _search_meshes(plan, combo, raw, cal, shared, add, cost)
        else:
            _search_fixed(plan, combo, raw, cal, add, cost)
        if progress is not None:
            progress(done, len(combos))
    infeasible = Counter(p.reason for p in points if p.reason is not None)
    return PlanResult(plan, points, time.perf_counter() - t0, costed, dict(infeasible))


def _time_to_train(scenario: Scenario, shared: "_Costs", step_s: float) -> TimeToTrain | None:
    """The candidate's time to train at its analytic step (None without a [convergence] section).

    As a run prices it (engine/convergence), but with no compile: the planner does not cost one.
    """
    if scenario.convergence is None or not step_s > 0:
        return None
    cost = shared.cost(scenario)
    plan = plan_convergence(
        scenario.convergence, global_batch=scenario.training.global_batch, tokens_per_sample=cost.tokens_per_sample,
        chips=scenario.total_chips, hosts=shared.pod(scenario).hosts, failures=scenario.failures,
        checkpoint_bytes=default_checkpoint_bytes(cost.params, scenario.training), cost=scenario.cost,
    )  # fmt: skip
    return time_to_train(plan, step_s)


def _budget_ok(plan: Plan, chips: int) -> bool:
    return (plan.max_chips is None or chips <= plan.max_chips) and (plan.min_chips is None or chips >= plan.min_chips)


def _model_state_bytes(cost: ModelCost, s: Scenario, fsdp: np.ndarray | int, tensor: np.ndarray | int,
                       expert: np.ndarray | int = 1) -> np.ndarray:  # fmt: skip
    """Bytes of params, gradients and optimizer state per chip: a lower bound of the peak (engine.memory.hbm)."""
    tr, par = s.training, s.parallelism
    bpp = bytes_per_param(tr.optimizer, tr.precision, tr.optimizer_state, tr.weight_dtype)
    params = cost.params - (cost.sparse_params if par.strategy == "parameter_server" else 0)
    params = params / np.asarray(expert, dtype=np.float64)  # every weight shards over expert (MaxText's embed and exp rules)
    shard = np.asarray(fsdp, dtype=np.float64) * np.asarray(tensor, dtype=np.float64)
    weights_sharded, grads_sharded = zero_shards(par.fsdp_shard)
    if weights_sharded:  # ZeRO-3 (the default): everything over fsdp x tensor
        return params / shard * bpp.model_states / par.pipeline
    t = np.asarray(tensor, dtype=np.float64)
    per_param = bpp.params / t + bpp.grads / (shard if grads_sharded else t) + bpp.optimizer / shard
    return params * per_param / par.pipeline


def _search_fixed(plan: Plan, combo: dict[str, Any], raw: dict[str, Any], cal: Calibration, add: Callable, cost: Callable) -> None:
    try:
        chips = math.prod(parse_topology(str(raw["pod"]["topology"]))) * int(raw["pod"].get("slices", 1))
    except (ValueError, KeyError, TypeError):
        chips = 0
    if chips and not _budget_ok(plan, chips):
        add(combo, chips, None, REASONS["budget"])
        return
    try:
        s = scenario_from_dict(raw, source=plan.source)
    except ScenarioError as e:
        add(combo, chips, None, _reason_of(e))
        return
    par = s.parallelism
    mesh = {a: s.mesh_sizes[a] for a in search_axes(s.model)}
    usable = s.chip_spec().usable_hbm_bytes(cal.hbm_reserved_frac)
    if float(_model_state_bytes(model_cost(s.model), s, par.fsdp, par.tensor, par.expert)) > usable * (1 + 1e-9):
        add(combo, s.total_chips, mesh, REASONS["model_states"])
        return
    cost(combo, s, mesh)


def _search_meshes(
    plan: Plan, combo: dict[str, Any], raw: dict[str, Any], cal: Calibration, shared: _Costs, add: Callable, cost: Callable
) -> None:
    # Probe the combination with a pure data-parallel mesh: problems that do not depend on the mesh
    # (an unknown chip, an unsupported topology) rule out all its meshes at once.
    axes = search_axes(raw.get("model") or {})
    probe_raw = {**raw, "parallelism": {**raw.get("parallelism", {}), "data": None, **{a: 1 for a in axes[1:]}}}
    try:
        probe = scenario_from_dict(probe_raw, source=plan.source)
    except ScenarioError as e:
        blocking = [(k, m) for k, m in e.problems if k not in _KEY_REASONS]
        if blocking:
            try:
                chips = math.prod(parse_topology(str(raw["pod"]["topology"])))
                ways = len(mesh_factorisations(chips, len(axes)))
                chips *= int(raw["pod"].get("slices", 1))
            except (ValueError, KeyError, TypeError):
                chips, ways = 0, 1
            reason = f"invalid scenario ({blocking[0][0] or 'file'})"
            for _ in range(ways):
                add(combo, chips, None, reason)
            return
        probe = Scenario.model_validate(probe_raw)  # valid field by field; the mesh checks come below
    n, slices = probe.chips_per_slice, probe.pod.slices
    chips = n * slices
    table = mesh_factorisations(n, len(axes))
    sizes = {a: table[:, i] for i, a in enumerate(axes)}
    ones = np.ones(len(table), dtype=np.int64)
    reason = np.full(len(table), None, dtype=object)

    def rule(label: str, bad: np.ndarray) -> None:
        reason[(reason == None) & bad] = label  # noqa: E711 (elementwise on an object array)

    if not _budget_ok(plan, chips):
        rule(REASONS["budget"], np.ones(len(table), dtype=bool))
    for label, bad in _axis_rules(probe.model, sizes):
        rule(label, bad)
    expert = sizes.get("expert", ones)
    rule(REASONS["batch"], probe.training.global_batch % (sizes["data"] * sizes["fsdp"] * expert * slices) != 0)
    usable = probe.chip_spec().usable_hbm_bytes(cal.hbm_reserved_frac)
    states = _model_state_bytes(shared.cost(probe), probe, sizes["fsdp"], sizes["tensor"], expert)
    rule(REASONS["model_states"], states > usable * (1 + 1e-9))

    par_raw = raw.get("parallelism", {})
    for i, row in enumerate(table):
        mesh = {a: int(v) for a, v in zip(axes, row)}
        overrides = {**combo, **{f"parallelism.{a}": v for a, v in mesh.items()}}
        if reason[i] is not None:
            add(overrides, chips, mesh, reason[i])
            continue
        try:  # the probe differs from this candidate only in its [parallelism] table
            s = with_parallelism(probe, {**par_raw, **mesh}, source=plan.source)
        except ScenarioError as e:
            add(overrides, chips, mesh, _reason_of(e))
            continue
        cost(overrides, s, mesh)
