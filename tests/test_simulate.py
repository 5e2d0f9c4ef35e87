"""Simulation invariants: events tile each chip's step; barriers; determinism; scale."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import load_scenario, simulate
from engine.model.step import Segment, assemble


def _by_chip_step(events):
    d = {c: events.column(c).to_numpy() for c in ("chip", "step", "start_ns", "dur_ns")}
    order = np.lexsort((d["start_ns"], d["chip"], d["step"]))
    return {k: v[order] for k, v in d.items()}


def _assert_tiles(events, steps_table):
    e = _by_chip_step(events)
    step_start = steps_table.column("start_ns").to_numpy()
    step_ns = steps_table.column("step_ns").to_numpy()
    assert (e["dur_ns"] > 0).all()
    end = e["start_ns"] + e["dur_ns"]
    same = (e["chip"][1:] == e["chip"][:-1]) & (e["step"][1:] == e["step"][:-1])
    # within a chip-step, each event starts exactly where the previous ended: no gap, no overlap
    assert (e["start_ns"][1:][same] == end[:-1][same]).all()
    first = np.r_[True, ~same]
    last = np.r_[~same, True]
    assert (e["start_ns"][first] == step_start[e["step"][first]]).all()
    assert (end[last] == step_start[e["step"][last]] + step_ns[e["step"][last]]).all()


def test_events_tile_every_step(small_scenario):
    r = simulate(small_scenario)
    _assert_tiles(r.trace.events, r.trace.steps)
    assert r.trace.chips.num_rows == 8
    assert r.trace.steps.num_rows == 20


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.integers(1, 300),
    chips=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    barrier=st.booleans(),
)
def test_assembler_invariants(steps, chips, seed, barrier):
    rng = np.random.default_rng(seed)
    segments = [
        Segment("input_wait", rng.uniform(0, 1e-4, (steps, chips))),
        Segment("compute", rng.uniform(0, 1e-3, (steps, chips))),
        Segment("collective", rng.uniform(0, 1e-4, (steps, 1)), barrier=barrier),
        Segment("other", 5e-6),
    ]
    laid = assemble(segments, steps, chips)
    events, steps_table = laid.events, laid.steps
    _assert_tiles(events, steps_table)
    # phases sum to the step: chip time = chips x wall time
    assert events.column("dur_ns").to_numpy().sum() == chips * steps_table.column("step_ns").to_numpy().sum()


def test_barrier_makes_fast_chips_wait_for_the_slowest():
    compute = np.array([[1e-3, 2e-3, 4e-3]])
    laid = assemble([Segment("compute", compute), Segment("collective", 1e-3, barrier=True)], 1, 3)
    events, steps_table = laid.events, laid.steps
    kinds = events.column("kind").to_pylist()
    waits = {c: d for c, k, d in zip(events.column("chip").to_pylist(), kinds, events.column("dur_ns").to_pylist()) if k == "sync_wait"}
    assert waits == {0: 3_000_000, 1: 2_000_000}
    assert steps_table.column("step_ns")[0].as_py() == 5_000_000


def test_same_seed_same_trace_other_seed_differs(small_scenario_path):
    def digest(seed):
        r = simulate(load_scenario(small_scenario_path, overrides={"sim.seed": seed}))
        h = hashlib.sha256()
        for col in ("chip", "step", "start_ns", "dur_ns"):
            h.update(r.trace.events.column(col).to_numpy().tobytes())
        return h.hexdigest()

    assert digest(1) == digest(1)
    assert digest(1) != digest(2)


def _max_collective_ns(r):
    e = r.trace.events
    mask = np.asarray(e.column("kind").to_pylist()) == "collective"
    return e.column("dur_ns").to_numpy()[mask].max()


def test_longer_ring_adds_collective_time(small_scenario_path):
    def run(topology, batch):
        over = {"pod.topology": topology, "training.global_batch": batch, "sim.jitter_frac": 0.0}
        return simulate(load_scenario(small_scenario_path, overrides=over))

    # both slices are whole cubes with wraparound; the 8-long z ring moves more
    assert _max_collective_ns(run("4x4x8", 4096)) > _max_collective_ns(run("4x4x4", 2048))


def test_partial_cube_without_wraparound_pays_one_directional_rings(small_scenario_path):
    mesh = simulate(load_scenario(small_scenario_path, overrides={"sim.jitter_frac": 0.0}))  # 2x2x2: no wraparound
    torus = simulate(
        load_scenario(small_scenario_path, overrides={"pod.topology": "4x4x4", "training.global_batch": 2048, "sim.jitter_frac": 0.0})
    )
    assert _max_collective_ns(mesh) > _max_collective_ns(torus)


def test_pod_scale_run_is_vectorised():
    """4,096 chips x 100 steps must simulate without a Python loop over chips (a smoke check, not a timing)."""
    from engine.scenario import scenario_from_dict

    s = scenario_from_dict(
        {
            "name": "pod",
            "pod": {"chip": "tpu-v4", "topology": "16x16x16"},
            "model": {"kind": "resnet50"},
            "training": {"global_batch": 65536, "steps": 100},
        }
    )
    r = simulate(s)
    assert r.trace.chips.num_rows == 4096
    assert r.trace.events.num_rows >= 4096 * 100 * 3
    first_steps = r.trace.events.filter(pc.less(r.trace.events.column("step"), 3))
    _assert_tiles(first_steps, r.trace.steps)


@pytest.mark.parametrize("path", sorted(__import__("profiler").api.bundled_scenarios()), ids=lambda p: p.stem)
def test_bundled_scenarios_simulate_sanely(path):
    r = simulate(load_scenario(path))
    step_ns = r.trace.steps.column("step_ns").to_numpy()
    assert (step_ns > 0).all()
    mfu = r.facts.model_flops_per_step / (np.median(step_ns) / 1e9) / (r.facts.chips * r.facts.peak_flops_per_s_per_chip)
    assert 0 < mfu < 1
    assert not r.facts.oom


def test_block_events_of_a_chip_subset_are_those_chips_rows_of_the_whole_block():
    """The layout's chip selection (``emitting``) keeps exactly the chosen chips' rows, starts included."""
    from engine.model.step import _block_events, _lay_out_block

    rng = np.random.default_rng(3)
    steps, chips = 5, 9
    segments = [
        Segment("input_wait", rng.uniform(0, 1e-4, (steps, chips)) * (rng.random((steps, chips)) < 0.5)),
        Segment("compute", rng.uniform(1e-4, 1e-3, chips)),
        Segment("collective", rng.uniform(0, 1e-4, (steps, 1)), barrier=True),
        Segment("other", 5e-6),
    ]
    seg_ns = [np.rint(np.asarray(s.dur_s) * 1e9).astype(np.int64) for s in segments]
    parts, end = _lay_out_block(segments, seg_ns, 0, steps)
    whole = _block_events(parts, 0, steps, 1_000, int(end.sum()), chips, None).to_pandas()
    subset = np.array([1, 4, 8], dtype=np.int32)
    some = _block_events(parts, 0, steps, 1_000, int(end.sum()), chips, subset).to_pandas()
    expected = whole[whole["chip"].isin(subset)].reset_index(drop=True)
    assert some.equals(expected)
    assert len(some) > 3 * steps  # several events per chip-step, not one
