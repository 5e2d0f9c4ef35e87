"""Full remat against XLA's own FLOP count: which of a layer's GEMMs the backward pass reruns.

The fixture (``scripts/fixtures/make_remat_flops.py``, JAX 0.10.2 on CPU) holds
``compiled.cost_analysis()["flops"]`` of the gradient of 4- and 8-layer stacks, with and
without ``jax.checkpoint``; the per-layer difference cancels everything outside the layers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.model.compute import passes_per_op, step_compute
from engine.model.models import model_cost
from engine.pod.catalog import load_catalog
from engine.scenario import TransformerModel
from engine.scenario.calibration import Calibration

FIXTURE = Path(__file__).parent / "fixtures" / "remat" / "remat_flops.json"
DATA = json.loads(FIXTURE.read_text())
DIMS = DATA["model"]


def _xla(parallel: bool, layers: int, remat: str) -> float:
    (row,) = [r for r in DATA["steps"] if (r["parallel_block"], r["layers"], r["remat"]) == (parallel, layers, remat)]
    return row["xla_flops"]


def _model(parallel: bool, layers: int) -> TransformerModel:
    return TransformerModel(kind="transformer", layers=layers, d_model=DIMS["d_model"], heads=DIMS["heads"],
                            head_dim=DIMS["head_dim"], d_ff=DIMS["d_ff"], vocab=128, seq_len=DIMS["seq_len"],
                            mlp="swiglu", attention="standard", parallel_block=parallel)  # fmt: skip


def _engine(parallel: bool, layers: int, remat: str) -> float:
    cal = Calibration(mxu_efficiency=1.0, hbm_efficiency=1.0, op_overhead_s=0.0, step_overhead_s=0.0, jitter_frac=0.0)
    cost = model_cost(_model(parallel, layers))
    return step_compute(cost, load_catalog()["tpu-v5p"], cal, DIMS["batch"], "fp32", remat).hardware_flops


def _per_layer(f, parallel: bool, remat: str) -> float:
    return (f(parallel, 8, remat) - f(parallel, 4, remat)) / 4


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel-block"])
class TestAgainstXla:
    def test_a_layer_without_remat_is_three_forward_passes(self, parallel):
        assert _per_layer(_engine, parallel, "none") == pytest.approx(_per_layer(_xla, parallel, "none"), rel=0.01)

    def test_full_remat_reruns_what_xla_reruns(self, parallel):
        def recompute(f):
            return _per_layer(f, parallel, "full") - _per_layer(f, parallel, "none")

        engine, xla = recompute(_engine), recompute(_xla)
        assert engine == pytest.approx(xla, rel=0.02)
        forward = _per_layer(_engine, parallel, "none") / 3
        # a whole forward would be 1.0: the down-projection (and a parallel block's attention output) is not rerun
        assert engine / forward == pytest.approx(0.708 if parallel else 0.767, abs=0.005)


def test_residual_only_outputs_are_the_block_ends():
    seq, par = model_cost(_model(False, 2)).ops, model_cost(_model(True, 2)).ops
    assert [n for n, r in zip(seq.names, seq.residual_out) if r] == ["layer.mlp_out"]
    assert [n for n, r in zip(par.names, par.residual_out) if r] == ["layer.out", "layer.mlp_out"]
    passes = passes_per_op(seq, "full")
    assert passes[list(seq.names).index("layer.mlp_out")] == 3.0 and passes[list(seq.names).index("layer.qkv")] == 4.0
    assert np.all(passes_per_op(seq, "none") == 3.0)


def test_the_recompute_reruns_the_all_reduces_after_what_it_reruns():
    assert model_cost(_model(False, 2)).tp_all_reduces_recomputed_per_layer == 1  # attention's, not the MLP's
    assert model_cost(_model(True, 2)).tp_all_reduces_recomputed_per_layer == 0
    moe = _model(False, 2).model_copy(update={"experts": 8, "experts_per_token": 2})
    cost = model_cost(moe)
    assert cost.moe_layers == 2 and cost.tp_all_reduces_recomputed_per_layer == 2  # the gates read the experts' outputs
    names = [n for n, r in zip(cost.ops.names, cost.ops.residual_out) if r]
    assert "layer.expert_out" not in names



def test_a_named_save_reruns_the_layer_but_the_projections_it_keeps():
    """MaxText's ``save_qkv_proj`` keeps Q, K and V, ``save_dot_except_mlp`` the attention's output projection too: those
    ops run their three passes, the attention core and the MLP's input projections rerun as under ``full``."""
    ops = model_cost(_model(False, 2)).ops
    names = list(ops.names)
    full = dict(zip(names, passes_per_op(ops, "full")))
    qkv = dict(zip(names, passes_per_op(ops, "save_qkv_proj")))
    dot = dict(zip(names, passes_per_op(ops, "save_dot_except_mlp")))
    assert (full["layer.qkv"], qkv["layer.qkv"], dot["layer.qkv"]) == (4.0, 3.0, 3.0)
    assert (full["layer.out"], qkv["layer.out"], dot["layer.out"]) == (4.0, 4.0, 3.0)
    for rerun in ("layer.scores", "layer.values", "layer.mlp_in"):
        assert qkv[rerun] == dot[rerun] == full[rerun] == 4.0
    # the MLP's projection back to d_model is never rerun: keeping it (save_dot_except_mlpwi) changes nothing
    assert dict(zip(names, passes_per_op(ops, "save_dot_except_mlpwi"))) == dot
    assert qkv["layer.mlp_out"] == qkv["unembed"] == 3.0


def test_keeping_the_output_projection_keeps_its_all_reduce_out_of_the_recompute():
    from engine import scenario_from_dict
    from engine.model.analytic import step_costs
    from engine.scenario.calibration import load_calibration

    def recomputed_all_reduce_bytes(remat: str) -> float:
        s = scenario_from_dict({"name": "tp", "pod": {"chip": "tpu-v5p", "topology": "2x2x1"},
                                "model": {"kind": "transformer", "layers": 4, "d_model": 1024, "heads": 8, "d_ff": 4096,
                                          "vocab": 32000, "seq_len": 1024},
                                "training": {"global_batch": 8, "steps": 2, "remat": remat},
                                "parallelism": {"fsdp": 2, "tensor": 2}})  # fmt: skip
        rows = step_costs(s, load_calibration()).comm.per_layer.to_pylist()
        return sum(r["bytes"] for r in rows if r["phase"] == "recompute" and r["op"] == "all-reduce")

    full = recomputed_all_reduce_bytes("full")
    assert full > 0 and recomputed_all_reduce_bytes("save_qkv_proj") == full  # the output projection reruns: its all-reduce too
    assert recomputed_all_reduce_bytes("save_dot_except_mlp") == 0.0
