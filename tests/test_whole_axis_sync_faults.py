"""Whole-torus-axis gradient sync: a failed link costs its detour only where the data rings cross it.

The scenario: a v4 4x4x4 slice with ``tensor = 4``. Tensor takes the z ring, so ``data = 16``
runs over the whole y and x rings (the interconnect model's path, engine/comm/gradient_sync.py
``gradient_sync``). Every link of a wraparound ring is used by that ring, so the only links the
data rings never use are those of an axis they do not span: here z.

Latency is isolated by differencing: (faulty - healthy) with 1 us hops minus the same with no
hop latency is the detour's hops x 1 us, whatever route networkx picks for the detour.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.conftest import TORUS_MLP_TOML, simulate_toml

SCEN = TORUS_MLP_TOML + "[parallelism]\ntensor = 4\n"
HOP_S = 1e-6


def sync_s(extra: str = "", cal=None) -> float:
    r = simulate_toml(SCEN + extra, cal)
    assert r.facts.extra["mesh"] == "data=16 on y:4*x:4, fsdp=1, tensor=4 on z:4"
    return r.facts.extra["grad_allreduce_s"]


def test_a_failed_link_on_an_axis_the_data_rings_do_not_span_costs_the_sync_nothing():
    healthy = sync_s()  # real calibration: hop latency and efficiency both count
    assert sync_s("[interconnect]\nfailed_links = [{a = [0, 0, 0], b = [0, 0, 1]}]\n") == healthy


def test_a_failed_link_on_a_data_ring_still_costs_its_detour():
    healthy = sync_s()
    assert sync_s("[interconnect]\nfailed_links = [{a = [0, 0, 0], b = [1, 0, 0]}]\n") > healthy


@pytest.mark.parametrize(
    ("schedule", "stages_crossing"),
    [("simultaneous", 4), ("sequential", 2)],  # sequential: RS y, RS x, AG x, AG y; only the x stages cross it
)
def test_the_detour_hops_are_charged_on_the_stages_that_cross_it(ideal_calibration, schedule, stages_crossing):
    # an x link's shortest detour takes 3 hops instead of 1: 2 extra per stage that uses it
    faults = f"[interconnect]\nschedule = '{schedule}'\nfailed_links = [{{a = [0, 0, 0], b = [1, 0, 0]}}]\n"
    base = f"[interconnect]\nschedule = '{schedule}'\n"
    slow = replace(ideal_calibration, ici_hop_latency_s=HOP_S)
    added = (sync_s(faults, slow) - sync_s(base, slow)) - (sync_s(faults, ideal_calibration) - sync_s(base, ideal_calibration))
    assert added == pytest.approx(2 * stages_crossing * HOP_S, rel=1e-6)
