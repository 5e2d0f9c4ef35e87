"""Context parallelism: per-chip FLOPs, ring-attention sends and their exposure, memory, gradient sync, bad input."""

from __future__ import annotations

import pytest

from engine import ScenarioError, scenario_from_dict, simulate
from engine.memory.activations import transformer_layer_activation_bytes
from engine.model.analytic import step_costs
from engine.model.compute import step_compute
from engine.model.context import kv_block_bytes, plan_ring_attention, ring_hop_s
from engine.model.models import model_cost
from engine.pod.catalog import load_catalog
from engine.pod.mesh import MeshAxis, Segment1D
from engine.scenario import TransformerModel
from engine.scenario.calibration import load_calibration

W = 100e9  # one link, bytes/s
RING4 = MeshAxis("context", 4, (Segment1D(0, 4, True, 1),))
LINE4 = MeshAxis("context", 4, (Segment1D(0, 4, False, 1),))
#: seq 4096, 8 heads of 128 (8 KV heads), 2 layers
LONG = TransformerModel(kind="transformer", layers=2, d_model=1024, heads=8, d_ff=4096, vocab=1000, seq_len=4096)


def _llm(**par) -> dict:
    model = {"kind": "transformer", "layers": 4, "d_model": 1024, "heads": 8, "d_ff": 4096, "vocab": 32000, "seq_len": 8192}
    return {"name": "cp", "pod": {"chip": "tpu-v5p", "topology": "2x2x4"}, "model": model,
            "training": {"global_batch": 16, "steps": 4}, "parallelism": {"fsdp": 2, **par}, "sim": {"jitter_frac": 0.0}}  # fmt: skip


class TestPerChipCompute:
    def test_attention_and_projection_flops_by_hand(self, ideal_calibration):
        # t = 8 tokens, d = 8, 2 heads of 4, d_ff 16, vocab 10, one layer; 2 context chips hold 4 tokens each
        m = TransformerModel(kind="transformer", layers=1, d_model=8, heads=2, d_ff=16, vocab=10, seq_len=8)
        chip = load_catalog()["tpu-v5p"]
        one = step_compute(model_cost(m), chip, ideal_calibration, 1, "bf16", "none", context=1)
        two = step_compute(model_cost(m), chip, ideal_calibration, 1, "bf16", "none", context=2)
        t, tc = 8, 4
        qkv, out, mlp = 2 * tc * 8 * 24, 2 * tc * 8 * 8, 2 * (2 * tc * 8 * 16)
        scores = 2 * tc * 4 * t * 2  # local queries x every key (the ring brings the other blocks), 2 heads
        values = 2 * tc * t * 4 * 2
        unembed = 2 * tc * 8 * 10
        assert two.model_flops == pytest.approx(3 * (qkv + scores + values + out + mlp + unembed))
        assert two.model_flops == pytest.approx(one.model_flops / 2)

    def test_hardware_flops_of_the_job_do_not_change(self):
        # same tokens per chip: context 2 halves the sequence each chip holds and doubles its samples
        base = simulate(scenario_from_dict(_llm()))
        cp = simulate(scenario_from_dict(_llm(context=2)))
        assert cp.facts.hardware_flops_per_step == pytest.approx(base.facts.hardware_flops_per_step, rel=1e-9)
        assert cp.facts.model_flops_per_step == pytest.approx(base.facts.model_flops_per_step)


class TestRingSends:
    def test_block_bytes_and_one_hop_by_hand(self):
        # K and V of 1 sample x 1024 tokens x 8 KV heads x 128 x 2 bytes: 4 MiB; one link at 100 GB/s plus one hop
        block = kv_block_bytes(LONG, 1, "bf16", tensor=1, context=4)
        assert block == 2 * 1024 * 8 * 128 * 2
        assert ring_hop_s(block, RING4, W, 1e-6) == pytest.approx(block / W + 1e-6)
        # on a line the ring runs out and back: the same link bandwidth, two hops of latency
        assert ring_hop_s(block, LINE4, W, 1e-6) == pytest.approx(block / W + 2e-6)
        # a strided axis shares its links with the inner groups
        strided = MeshAxis("context", 4, (Segment1D(0, 4, False, 2),))
        assert ring_hop_s(block, strided, W, 0.0) == pytest.approx(2 * block / W)
        # tensor parallelism splits the KV heads; int8 keeps K/V in bf16
        assert kv_block_bytes(LONG, 1, "int8", tensor=4, context=4) == block / 4

    def test_exposed_time_on_a_known_ring(self):
        block = 2 * 1024 * 8 * 128 * 2.0
        hop = block / W + 1e-6  # 42.94 us
        grad_hop = 2 * block / W + 1e-6  # K, V, dK, dV: 84.89 us
        # attention core: 20 us per block forward, 40 us per block backward (4 blocks, 2 layers)
        r = plan_ring_attention(LONG, RING4, micro_batch=1, precision="bf16", tensor=1, forward_passes=1,
                                attention_forward_s=2 * 4 * 20e-6, attention_fwd_bwd_s=2 * 4 * 60e-6,
                                link_bytes_per_s=W, hop_latency_s=1e-6)  # fmt: skip
        assert r.hop_s == pytest.approx(hop)
        assert r.forward_exposed_s == pytest.approx(2 * 3 * (hop - 20e-6))
        # backward: 3 sends of K/V/dK/dV beside 40 us blocks, and dK/dV's last hop home, exposed
        assert r.backward_exposed_s == pytest.approx(2 * (3 * (grad_hop - 40e-6) + hop))
        assert r.bytes_sent == pytest.approx(2 * (3 * block + 3 * 2 * block + block))
        assert r.buffer_bytes == (2 * block, 4 * block)
        rows = r.per_layer.to_pandas()
        assert set(rows.op) == {"collective-permute"} and set(rows.mesh_axis) == {"context"} and len(rows) == 2 * 2

    def test_ample_compute_hides_every_send_but_the_last_gradient_hop(self):
        r = plan_ring_attention(LONG, RING4, micro_batch=1, precision="bf16", tensor=1, forward_passes=1,
                                attention_forward_s=1.0, attention_fwd_bwd_s=3.0, link_bytes_per_s=W, hop_latency_s=0.0)  # fmt: skip
        assert r.forward_exposed_s == 0.0
        assert r.backward_exposed_s == pytest.approx(2 * r.hop_s)

    def test_full_remat_passes_the_ring_again(self):
        kw = dict(micro_batch=1, precision="bf16", tensor=1, attention_forward_s=0.0, attention_fwd_bwd_s=0.0,
                  link_bytes_per_s=W, hop_latency_s=0.0)  # fmt: skip
        none = plan_ring_attention(LONG, RING4, forward_passes=1, **kw)
        full = plan_ring_attention(LONG, RING4, forward_passes=2, **kw)
        assert full.backward_exposed_s == pytest.approx(none.backward_exposed_s + none.forward_exposed_s)
        assert full.bytes_sent == pytest.approx(none.bytes_sent + 2 * 3 * none.block_bytes)  # 3 more sends a layer
        assert list(full.per_layer.to_pandas().phase[:3]) == ["forward", "backward", "recompute"]
        twice = plan_ring_attention(LONG, RING4, forward_passes=3, **kw)  # a rematerialised pipeline stage besides
        assert twice.bytes_sent == pytest.approx(none.bytes_sent + 2 * 2 * 3 * none.block_bytes)

    @pytest.mark.parametrize(("remat", "flash", "stage_recompute", "passes"), [
        ("none", False, False, 1), ("none", True, False, 1),
        ("full", False, False, 2), ("full", True, False, 2),
        ("minimal", False, False, 2), ("minimal", True, False, 2),
        ("selective", False, False, 2), ("selective", True, False, 1),  # the flash kernel keeps its output
        ("save_qkv_proj", True, False, 2), ("save_dot_except_mlp", False, False, 2),
        ("full", False, True, 3), ("minimal", True, True, 3),  # MaxText's gpipe loop reruns a stage, then its layers
    ])  # fmt: skip
    def test_the_ring_passes_again_for_every_rerun_of_the_attention_output(self, remat, flash, stage_recompute, passes):
        chip = load_catalog()["tpu-v5p"]
        comp = step_compute(model_cost(LONG), chip, load_calibration(), 1, "bf16", remat, flash=flash, context=4,
                            stage_recompute=stage_recompute)  # fmt: skip
        assert comp.attention_forward_passes == passes

    @pytest.mark.parametrize("remat", ["minimal", "save_qkv_proj"])
    def test_a_run_that_reruns_the_attention_core_sends_full_remats_ring(self, remat):
        def ring(remat, attention="standard"):
            d = _llm(context=2)
            d["training"]["remat"] = remat
            d["model"]["attention"] = attention
            return step_costs(scenario_from_dict(d), load_calibration()).ring

        assert ring(remat).bytes_sent == pytest.approx(ring("full").bytes_sent)
        assert ring("full").bytes_sent > ring("none").bytes_sent
        assert ring("selective", "flash").bytes_sent == pytest.approx(ring("none", "flash").bytes_sent)

    def test_the_run_charges_the_ring_to_its_collectives(self):
        s = scenario_from_dict(_llm(context=2))
        c = step_costs(s, load_calibration())
        assert c.ring is not None and c.ring.degree == 2
        facts = simulate(s).facts.extra
        assert facts["context_parallel"] == 2
        assert facts["ring_bytes_per_step"] == pytest.approx(c.ring.bytes_sent)
        assert facts["ring_exposed_s"] == pytest.approx(c.ring.exposed_s)
        assert facts["hbm_ring_kv_buffer_bytes"] == pytest.approx(4 * c.ring.block_bytes)


class TestMemory:
    def test_activations_halve_at_context_2(self):
        for remat in ("none", "selective", "full"):
            one = transformer_layer_activation_bytes(LONG, 2, "bf16", remat)
            two = transformer_layer_activation_bytes(LONG, 2, "bf16", remat, context=2)
            assert two == pytest.approx(one / 2)

    def test_a_long_sequence_fits_at_context_2_with_the_ring_buffers(self):
        # same data x fsdp and global batch on twice the chips: each chip keeps half of every sequence
        cal = load_calibration()
        one = step_costs(scenario_from_dict({**_llm(), "training": {"global_batch": 16, "steps": 2}, "parallelism": {"fsdp": 8, "data": 2}}), cal)
        two = step_costs(scenario_from_dict({**_llm(context=2), "pod": {"chip": "tpu-v5p", "topology": "2x4x4"},
                                             "training": {"global_batch": 16, "steps": 2}, "parallelism": {"fsdp": 8, "data": 2, "context": 2}}), cal)  # fmt: skip
        assert two.mem.breakdown_bytes["activations"] == pytest.approx(one.mem.breakdown_bytes["activations"] / 2)
        a1 = one.mem.timeline.to_pandas().query("category == 'activations'")["bytes"].max()
        a2 = two.mem.timeline.to_pandas().query("category == 'activations'")["bytes"].max()
        assert a2 == pytest.approx(a1 / 2)
        t1 = one.mem.timeline.to_pandas().query("category == 'temporary' and phase == 'forward'")["bytes"].max()
        t2 = two.mem.timeline.to_pandas().query("category == 'temporary' and phase == 'forward'")["bytes"].max()
        assert t2 - t1 == pytest.approx(two.ring.buffer_bytes[0])


class TestGradientSync:
    def test_weights_replicated_over_context_reduce_there_too(self):
        s = scenario_from_dict(_llm(context=4))
        cal = load_calibration()
        c = step_costs(s, cal)
        base = step_costs(scenario_from_dict(_llm()), cal)  # fsdp 2: the same shard per chip before the context split
        assert [(seg.torus_axis, seg.chips, seg.wrap) for seg in c.mesh["context"].segments] == [(2, 4, False)]  # z, no wraparound
        link = s.chip_spec().ici_link_bytes_per_s * cal.ici_efficiency
        full = base.comm.grad_shard_bytes
        assert c.comm.grad_shard_bytes == pytest.approx(full / 4)  # the data all-reduce moves 1 / context of it
        # a one-way line ring of 4: reduce-scatter and all-gather, 3/4 of the shard over one link and 3 hops each
        assert c.comm.context_sync_s == pytest.approx(2 * (0.75 * full / link + 3 * cal.ici_hop_latency_s))
        lc = c.comm.per_layer.to_pandas()
        assert ((lc.mesh_axis == "context") & (lc.op == "all-reduce")).sum() == 1


class TestBadInput:
    @pytest.mark.parametrize(
        "scenario, key, needle",
        [
            (_llm(context=3, fsdp=1, data=1), "parallelism", ""),
            ({**_llm(context=4), "model": {**_llm()["model"], "seq_len": 8190}}, "parallelism.context",
             "does not divide the model's seq_len of 8190; valid: a divisor of 8190 that also divides the slice's 16 chips: 1, 2"),
            ({**_llm(context=2), "model": {"kind": "mlp", "layer_sizes": [8, 8]}}, "parallelism.context", "valid: 1"),
            ({**_llm(context=2), "model": {"kind": "resnet50"}}, "parallelism.context", "splits a transformer's sequence"),
            (_llm(context=4, data=4, fsdp=2), "parallelism", "data x fsdp x tensor x context = 4x2x1x4 = 32"),
            (_llm(context=2, strategy="parameter_server", fsdp=1), "parallelism.strategy", "context must be 1"),
        ],
    )
    def test_errors_name_the_key(self, scenario, key, needle):
        with pytest.raises(ScenarioError) as e:
            scenario_from_dict(scenario)
        assert any(k.startswith(key) for k, _ in e.value.problems), e.value.problems
        assert needle in str(e.value)
