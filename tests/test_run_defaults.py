"""The kernel, remat and precision a run assumes are explicit, and the defaults follow TPU training stacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.model.assumptions import run_assumptions
from engine.model.compute import passes_per_op
from engine.model.models import model_cost
from engine.scenario import scenario_from_dict
from engine.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent


def _scenario(**model):
    m = {"kind": "transformer", "layers": 2, "d_model": 256, "heads": 4, "d_ff": 1024, "vocab": 1000, "seq_len": 512, **model}
    return scenario_from_dict({"name": "t", "pod": {"chip": "tpu-v5p", "topology": "2x2x1"}, "model": m,
                               "training": {"global_batch": 8, "steps": 2}, "sim": {"trace": "summary"}})  # fmt: skip


class TestDefaultKernel:
    def test_unnamed_kernel_is_flash_for_training(self):
        s = _scenario()
        assert s.model.attention == "autoselected" and s.model.attention_kernel == "flash"
        extra = simulate(s).facts.extra
        assert extra["attention_kernel"] == "flash"
        assert "model.attention" in extra["defaults_assumed"]
        assert extra["defaults_assumed"]["training.remat"] == "none"
        assert extra["remat_policy"] == "none" and extra["precision_recipe"].startswith("bf16")

    @pytest.mark.parametrize(("precision", "chip", "tail"), [
        ("bf16", "tpu-v5p", "bf16 weights and gradients (no fp32 master copy), bf16 optimizer state; gradients reduced in bf16"),
        ("fp8", "tpu7x", "bf16 weights and gradients (no fp32 master copy), bf16 optimizer state; gradients reduced in bf16"),
    ])  # fmt: skip
    def test_the_recipe_states_bf16_weights_and_moments(self, precision, chip, tail):
        raw = {"name": "t", "pod": {"chip": chip, "topology": "2x2x1"},
               "model": {"kind": "transformer", "layers": 2, "d_model": 256, "heads": 4, "d_ff": 1024, "vocab": 1000, "seq_len": 512},
               "training": {"global_batch": 8, "steps": 2, "precision": precision, "weight_dtype": "bf16", "optimizer_state": "bf16"}}  # fmt: skip
        recipe = run_assumptions(scenario_from_dict(raw))["precision_recipe"]
        assert recipe.startswith(f"{precision}: ") and recipe.endswith(tail) and "master weights" not in recipe

    def test_short_sequences_get_dot_product_attention(self):
        # MaxText layers/attentions.py: autoselected with length < 128 takes the dot-product path
        assert _scenario(seq_len=64).model.attention_kernel == "standard"
        assert _scenario(seq_len=128).model.attention_kernel == "flash"

    def test_a_named_kernel_is_kept_and_not_listed_as_assumed(self):
        extra = simulate(_scenario(attention="standard")).facts.extra
        assert extra["attention_kernel"] == "standard"
        assert "model.attention" not in extra["defaults_assumed"]

    def test_flash_default_is_faster_and_smaller_than_standard(self):
        flash, std = simulate(_scenario()), simulate(_scenario(attention="standard"))
        assert flash.facts.peak_hbm_bytes < std.facts.peak_hbm_bytes  # no seq x seq probabilities saved

    def test_non_transformers_have_no_kernel(self):
        s = scenario_from_dict({"name": "m", "pod": {"chip": "tpu-v5e", "topology": "2x2"}, "model": {"kind": "mlp", "layer_sizes": [8, 8]},
                                "training": {"global_batch": 4, "steps": 2, "remat": "none"}, "sim": {"trace": "summary"}})  # fmt: skip
        extra = simulate(s).facts.extra
        assert extra["attention_kernel"] is None
        # 4 replicas, no kernel: the gradients' reduce dtype is assumed too (bf16 matmuls over fp32 weights)
        assert set(extra["defaults_assumed"]) == {"training.precision", "interconnect.overlap", "training.gradient_reduce_dtype"}

    def test_gradient_overlap_is_an_assumption_only_where_gradients_cross_replicas(self):
        def assumed(topology="2x2x1", slices=1, **interconnect):
            s = scenario_from_dict({"name": "t", "pod": {"chip": "tpu-v5p", "topology": topology, "slices": slices},
                                    "model": {"kind": "mlp", "layer_sizes": [8, 8]}, "interconnect": interconnect,
                                    "training": {"global_batch": 8, "steps": 2, "remat": "none", "precision": "bf16"}})  # fmt: skip
            return run_assumptions(s)["defaults_assumed"]

        assert assumed()["interconnect.overlap"].startswith("false")  # 4 data-parallel replicas in the slice
        assert "interconnect.overlap" not in assumed(overlap=True) and "interconnect.overlap" not in assumed(overlap=False)
        assert "interconnect.overlap" not in assumed(topology="1x1x1")  # one replica: nothing to all-reduce
        assert "interconnect.overlap" in assumed(topology="1x1x1", slices=2)  # two slices over the DCN

    def test_the_gradient_reduce_dtype_is_an_assumption_only_where_gradients_are_reduced_and_the_dtypes_differ(self):
        def assumed(topology="2x2x1", training=None, parallelism=None):
            s = scenario_from_dict({"name": "t", "pod": {"chip": "tpu-v5p", "topology": topology},
                                    "model": {"kind": "mlp", "layer_sizes": [8, 8]}, "parallelism": parallelism or {},
                                    "training": {"global_batch": 8, "steps": 2, "remat": "none", **(training or {})}})  # fmt: skip
            return run_assumptions(s)["defaults_assumed"]

        assert assumed()["training.gradient_reduce_dtype"].startswith("compute")  # 4 replicas, bf16 matmuls, fp32 weights
        assert "training.gradient_reduce_dtype" in assumed(parallelism={"data": 1, "fsdp": 4})  # FSDP reduce-scatters them
        assert "training.gradient_reduce_dtype" not in assumed(topology="1x1x1")  # one chip: nothing reduced
        assert "training.gradient_reduce_dtype" not in assumed(training={"gradient_reduce_dtype": "weights"})
        assert "training.gradient_reduce_dtype" not in assumed(training={"weight_dtype": "bf16"})  # bf16 either way
        assert "training.gradient_reduce_dtype" not in assumed(training={"precision": "fp32"})  # fp32 either way

    def test_collective_matmul_is_an_assumption_only_for_tensor_parallel_runs(self):
        def assumed(tensor, **par):
            s = scenario_from_dict({"name": "t", "pod": {"chip": "tpu-v5p", "topology": "2x2x1"},
                                    "model": {"kind": "transformer", "layers": 2, "d_model": 256, "heads": 4, "d_ff": 1024,
                                              "vocab": 1000, "seq_len": 512},
                                    "parallelism": {"tensor": tensor, **par},
                                    "training": {"global_batch": 8, "steps": 2, "remat": "none", "precision": "bf16"}})  # fmt: skip
            return run_assumptions(s)["defaults_assumed"]

        assert assumed(4)["parallelism.collective_matmul"].startswith("true")
        assert "parallelism.collective_matmul" not in assumed(1)  # no tensor-parallel collectives
        assert "parallelism.collective_matmul" not in assumed(4, collective_matmul=True)
        assert "parallelism.collective_matmul" not in assumed(4, collective_matmul=False)

    def test_an_unpooled_batch_norm_is_an_assumption_only_at_small_per_chip_batches(self):
        def assumed(batch, **model):
            s = scenario_from_dict({"name": "r", "pod": {"chip": "tpu-v4", "topology": "2x2x2"}, "model": {"kind": "resnet50", **model},
                                    "training": {"global_batch": batch, "steps": 2, "remat": "none", "precision": "bf16"}})  # fmt: skip
            return run_assumptions(s)["defaults_assumed"]

        assert assumed(8 * 32)["model.batch_norm_group"].startswith("1 (each chip normalises over its own 32 images")
        assert "model.batch_norm_group" not in assumed(8 * 64)  # 64 per chip: what the MLPerf runs pool at least
        assert "model.batch_norm_group" not in assumed(8 * 32, batch_norm_group=2)  # the scenario says
        assert "model.batch_norm_group" not in assumed(8 * 32, batch_norm_group=1)

    def test_run_json_shows_what_was_assumed(self, tmp_path):
        env = {**os.environ, "PODSCOPE_DB": str(tmp_path / "db.duckdb")}
        p = subprocess.run([sys.executable, "-m", "profiler", "run", "data/scenarios/llm-1b-v5p-64.toml", "--json"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["attention_kernel"] == "flash" and out["remat_policy"] == "full"
        assert out["defaults_assumed"]["model.attention"].startswith("autoselected -> flash")


class TestFlashPasses:
    """Forward-pass equivalents per op: the flash backward recomputes S = QK^T only (Dao et al. 2022, Alg. 4)."""

    def _passes(self, remat, flash):
        ops = model_cost(_scenario().model).ops
        p = passes_per_op(ops, remat, flash)
        names = list(ops.names)
        return p[names.index("layer.scores")], p[names.index("layer.values")], p[names.index("layer.qkv")]

    @pytest.mark.parametrize(
        ("remat", "flash", "expected"),
        [
            ("none", False, (3, 3, 3)),
            ("none", True, (4, 3, 3)),  # backward: 5 attention matmuls = 2.5 forward passes of the core
            ("selective", False, (4, 4, 3)),
            ("selective", True, (4, 3, 3)),  # the kernel's own recompute is the selective recompute
            ("minimal", False, (4, 4, 3)),
            ("minimal", True, (5, 4, 3)),  # the kernel's forward is rerun, then its backward recomputes S
            ("full", False, (4, 4, 4)),
            ("full", True, (5, 4, 4)),
        ],
    )
    def test_passes(self, remat, flash, expected):
        assert self._passes(remat, flash) == tuple(float(x) for x in expected)

    def test_core_flops_per_step(self):
        # none + flash: the attention core runs (4 + 3) / 2 = 3.5 forward passes on average
        s, v, _ = self._passes("none", True)
        assert np.mean([s, v]) == pytest.approx(3.5)
