"""The glue: untouched steps without idle sections, and the attribution priority between hosts."""

from __future__ import annotations

from engine import load_calibration, load_scenario, simulate
from engine.idle.plan import plan_idle
from engine.model.compute import step_compute
from engine.model.models import model_cost
from engine.model.step import Segment, SimContext
from engine.pod.topology import build_pod
from tests.conftest import SCENARIOS


def test_without_idle_sections_the_step_is_untouched(small_scenario):
    s = small_scenario
    cal = load_calibration()
    ctx = SimContext(scenario=s, cal=cal, pod=build_pod(s.chip_spec(), s.slice_shape, s.pod.slices), cost=model_cost(s.model))
    comp = step_compute(ctx.cost, ctx.pod.chip, cal, s.per_chip_batch, s.training.precision, s.training.remat)
    base = [Segment("compute", 1e-3), Segment("collective", 1e-4, barrier=True), Segment("other", 1e-5)]
    plan = plan_idle(ctx, comp, base)
    assert plan.segments == base
    assert plan.facts["recompiles"] == 0 and plan.facts["stragglers"] == [] and plan.badput_s == 0
    assert "compiles" not in plan.tables  # compilation not modelled: no log at all, not an empty one


def test_waiting_for_another_hosts_batch_is_input_wait_not_sync_wait():
    # Two hosts with independent production noise, no compute noise: every chip's barrier
    # wait is caused by the later host's batch, so none of it may be called sync_wait.
    # A v5e 4x4 slice is two hosts of 8 chips (Cloud TPU v5e docs: v5litepod-16).
    over = {"sim.jitter_frac": 0.0, "input.jitter_frac": 0.3, "training.steps": 60, "pod.topology": "4x4", "parallelism.data": 16}
    r = simulate(load_scenario(SCENARIOS / "keras-mlp-v5e-8.toml", overrides=over))
    assert r.facts.hosts == 2
    e = r.trace.events.to_pandas()
    per = e.pivot_table(index=["step", "chip"], columns="kind", values="dur_ns", aggfunc="sum", fill_value=0, observed=True)
    waits = per["input_wait"].groupby(level="step")
    assert (waits.max() - waits.min()).max() <= 2  # every chip waits as long as the latest host (ns rounding)
    assert per.get("sync_wait", 0).max() <= 2
    own = e[e.kind == "input_wait"].groupby(["step", "chip"]).size()
    assert (own == 2).any()  # the early host's chips carry a second, peer-caused input_wait event
