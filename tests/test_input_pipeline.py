"""Input pipeline: hand-worked queues, batch production cost, and the Keras example's direction of change."""

from __future__ import annotations

import numpy as np
import pytest

from engine import ScenarioError, load_scenario, simulate
from engine.idle.input_pipeline import InputSection, batch_production_s, run_input_queue
from tests.conftest import SCENARIOS

KERAS = SCENARIOS / "keras-mlp-v5e-8.toml"


def _queue(produce_s, consume_s, prefetch, steps=5, hosts=1):
    """One chip per host; each step the chip works `consume_s` after its wait; nothing after the barrier."""
    section = InputSection(
        num_parallel_calls=1, interleave=1, prefetch=prefetch, decode_cpu_s_per_sample=produce_s, host_cpu_cores=1
    )
    return run_input_queue(
        section,
        global_batch=hosts,  # one sample per host per step: production = decode_cpu_s_per_sample
        hosts=hosts,
        host_of_chip=np.arange(hosts),
        pre_s=np.full((steps, hosts), consume_s),
        post_s=np.zeros(steps),
        rng=np.random.default_rng(0),
    )


class TestBatchProduction:
    def test_pipelined_stages_take_the_slowest(self):
        # 10 samples: read 10 x 1000 B / 1e6 B/s = 10 ms; decode 10 x 1 ms / 2 threads = 5 ms -> 10 ms
        s = InputSection(num_parallel_calls=2, interleave=2, host_cpu_cores=4, read_bytes_per_s_per_host=1e6,
                         sample_bytes=1000, decode_cpu_s_per_sample=1e-3)  # fmt: skip
        assert batch_production_s(s, 10, np.array([False]))[0] == pytest.approx(10e-3)

    def test_one_thread_reads_then_decodes(self):
        s = InputSection(num_parallel_calls=1, interleave=1, read_bytes_per_s_per_host=1e6, sample_bytes=1000,
                         decode_cpu_s_per_sample=1e-3)  # fmt: skip
        assert batch_production_s(s, 10, np.array([False]))[0] == pytest.approx(20e-3)

    def test_threads_beyond_cores_do_not_help(self):
        s = InputSection(num_parallel_calls=64, host_cpu_cores=4, decode_cpu_s_per_sample=1e-3)
        assert batch_production_s(s, 8, np.array([False]))[0] == pytest.approx(2e-3)

    def test_cache_replaces_read_and_decode_by_a_memory_copy(self):
        s = InputSection(decode_cpu_s_per_sample=1e-3, sample_bytes=1000, host_memory_bytes_per_s=1e10, cache=True)
        assert batch_production_s(s, 10, np.array([True]))[0] == pytest.approx(10 * 1000 / 1e10)

    def test_single_stream_share_limits_reads_until_interleaved(self):
        s = InputSection(interleave=1, read_bytes_per_s_per_host=1e9, single_stream_read_frac=0.1)
        assert s.effective_read_bytes_per_s == pytest.approx(1e8)
        assert s.model_copy(update={"interleave": "autotune"}).effective_read_bytes_per_s == pytest.approx(1e9)


class TestQueueKnownRates:
    def test_slow_producer_waits_the_rate_difference(self):
        # produce 3 ms, consume 1 ms, one buffer slot: first batch 3 ms late, then 3 - 1 = 2 ms each step
        q = _queue(3e-3, 1e-3, prefetch=1)
        np.testing.assert_allclose(q.wait_s[:, 0], [3e-3, 2e-3, 2e-3, 2e-3, 2e-3])
        np.testing.assert_allclose(q.step_s, [4e-3, 3e-3, 3e-3, 3e-3, 3e-3])

    def test_without_prefetch_production_and_compute_serialise(self):
        q = _queue(3e-3, 1e-3, prefetch=0)
        np.testing.assert_allclose(q.wait_s[:, 0], [3e-3] * 5)

    def test_fast_producer_waits_only_for_the_first_batch(self):
        q = _queue(1e-3, 3e-3, prefetch=2)
        np.testing.assert_allclose(q.wait_s[:, 0], [1e-3, 0, 0, 0, 0], atol=1e-15)

    def test_shuffle_buffer_fills_before_the_first_batch(self):
        section = InputSection(num_parallel_calls=1, interleave=1, prefetch=1, decode_cpu_s_per_sample=1e-3, shuffle_buffer=100)
        q = run_input_queue(section, global_batch=10, hosts=1, host_of_chip=np.array([0]), pre_s=np.full((2, 1), 1.0),
                            post_s=np.zeros(2), rng=np.random.default_rng(0))  # fmt: skip
        # 100 samples x 1 ms to fill, then a 10-sample batch x 1 ms
        assert q.wait_s[0, 0] == pytest.approx(0.110)

    def test_step_waits_for_its_slowest_chip(self):
        # two hosts, two chips each; chip 3 computes longest; the step's barrier is set by wait + work
        section = InputSection(num_parallel_calls=1, interleave=1, prefetch=1, decode_cpu_s_per_sample=1e-3)
        pre = np.array([[1e-3, 1e-3, 1e-3, 5e-3]])
        q = run_input_queue(section, global_batch=4, hosts=2, host_of_chip=np.array([0, 0, 1, 1]), pre_s=pre,
                            post_s=np.array([1e-3]), rng=np.random.default_rng(0))  # fmt: skip
        assert q.wait_s.shape == (1, 2)
        np.testing.assert_allclose(q.wait_s[0], [2e-3, 2e-3])  # 2 samples x 1 ms on each host
        assert q.step_s[0] == pytest.approx(2e-3 + 5e-3 + 1e-3)


def _wait_frac(**over):
    r = simulate(load_scenario(KERAS, overrides={f"input.{k}": v for k, v in over.items()}))
    return r.facts.extra["input_wait_frac"], r


class TestKerasExample:
    def test_is_highly_input_bound(self):
        frac, r = _wait_frac()
        assert frac >= 0.2
        assert r.facts.extra["input_batch_s"] > 2 * 0.3e-3  # a batch takes longer than a step's compute

    def test_raising_parallel_calls_and_prefetch_from_1_cuts_the_wait(self):
        base, _ = _wait_frac(num_parallel_calls=1, prefetch=1)
        more_threads, _ = _wait_frac(num_parallel_calls="autotune", prefetch=1)
        both, _ = _wait_frac(num_parallel_calls="autotune", prefetch="autotune")
        assert base > 0.5
        assert more_threads < base / 2  # decode spread over cores: most of the gap closes
        # The 2x4 slice is one host of 8 chips, so that host makes all 128 samples a step: its
        # single-threaded stage (128 x 3.5 us = 0.45 ms) outlasts the step's device work, and a
        # deeper buffer absorbs the bursts but not that deficit.
        assert both < more_threads
        _, r = _wait_frac(num_parallel_calls="autotune", prefetch="autotune")
        assert r.facts.hosts == 1
        assert r.facts.extra["input_batch_s"] == pytest.approx(128 * 3.5e-6, rel=0.01)

    def test_prefetch_overlaps_production_with_compute(self):
        none, _ = _wait_frac(prefetch=0)
        one, _ = _wait_frac(prefetch=1)
        assert none > one

    def test_cache_helps_after_the_first_epoch(self):
        _, r = _wait_frac(cache=True)
        e = r.trace.events.to_pandas()
        wait = e[e.kind == "input_wait"].groupby("step").dur_ns.sum().reindex(range(r.facts.steps), fill_value=0)
        first_epoch = wait.iloc[10:460].mean()  # 60,000 / 128 = 468.75 steps per epoch
        later = wait.iloc[480:].mean()
        assert later < first_epoch / 3
        cached, _ = _wait_frac(cache=True)
        uncached, _ = _wait_frac()
        assert cached < uncached


@pytest.mark.parametrize("toml_value", ['"auto"', "0", "-1", "2.5", "true"])
def test_bad_parallel_calls_names_the_key(write_toml, toml_value):
    text = KERAS.read_text().replace("num_parallel_calls = 1 ", f"num_parallel_calls = {toml_value} ")
    with pytest.raises(ScenarioError) as e:
        load_scenario(write_toml(text))
    assert any(key == "input.num_parallel_calls" for key, _ in e.value.problems)


def test_unknown_input_key_is_rejected():
    with pytest.raises(ScenarioError) as e:
        load_scenario(KERAS, overrides={"input.prefetch_depth": 3})
    assert any(key == "input.prefetch_depth" for key, _ in e.value.problems)
