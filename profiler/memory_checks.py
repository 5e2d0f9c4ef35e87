"""Podscope's HBM model against the reference's published memory figures, and a bundled run beside MaxText's.

Validation only: nothing here sets the model. Each check reads its inputs from the reference
entry (or the catalog) and compares the model's number with the entry's expected figure.
``tests/test_memory_published.py`` holds each to its tolerance; ``scripts/plot_validation.py``
writes :func:`memory_block` into docs/validation.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from engine.data_files import DATA_DIR
from engine.memory.activations import transformer_layer_activation_bytes
from engine.memory.hbm import MemoryPlan, hbm_plan
from engine.memory.states import bytes_per_param
from engine.model.analytic import evaluate
from engine.model.models import model_cost
from engine.pod.catalog import load_catalog
from engine.scenario import TransformerModel, load_scenario
from engine.scenario.calibration import load_calibration
from engine.units import GIB_BYTES

from .maxtext_cases import maxtext_flops_per_chip_per_step
from .reference import Entry, load_reference

__all__ = [
    "LlamaMemory",
    "llama3_70b_memory",
    "deepseek_hbm_after_init_bytes",
    "maxtext_dense_runs",
    "maxtext_dense_plans",
    "BUNDLED_32B",
    "memory_block",
]

#: LLaMA-3 70B's shape (Meta 2024): 80 layers, d 8192, 64 heads / 8 kv heads, d_ff 28672 SwiGLU, vocab 128256
_LLAMA3_70B = dict(kind="transformer", layers=80, d_model=8192, heads=64, kv_heads=8, d_ff=28672, vocab=128256, seq_len=2000, mlp="swiglu")
#: the bundled scenario that is MaxText's 32B shape with its v5p configuration, and the entry it is set beside
BUNDLED_32B = "llm-32b-fsdp-tp-v5p-128"
_MAXTEXT_32B = "e2e_maxtext_v5p_32B_v5p-128"


def _by_id(entries: list[Entry] | None) -> dict[str, Entry]:
    return {e["id"]: e for e in (entries if entries is not None else load_reference())}


@dataclass(frozen=True)
class LlamaMemory:
    """The scaling book's LLaMA-3 70B training-memory arithmetic, Podscope's side and the book's."""

    params: float
    params_published: float
    optimizer_bytes: float
    optimizer_published_bytes: float
    checkpoint_bytes: float  # one bf16 checkpoint per layer (the layer input) over the batch
    checkpoint_formula_bytes: float  # the book's formula with the same inputs
    checkpoint_printed_bytes: float  # the book's printed total / its checkpoints per layer


def llama3_70b_memory(entries: list[Entry] | None = None) -> LlamaMemory:
    """Adam state and per-layer checkpoints of LLaMA-3 70B (entry ``fx_llama3_70b_training_memory``).

    The book keeps 3 d-sized bf16 tensors per layer; Podscope's ``full`` remat keeps 1 (the layer
    input), so the per-checkpoint size is compared: ``2 x d x tokens x layers``.
    """
    e = _by_id(entries)["fx_llama3_70b_training_memory"]
    inp, exp = e["inputs"], e["expected"]
    m = TransformerModel(**_LLAMA3_70B)
    params = model_cost(m).params
    bpp = bytes_per_param("adam", "bf16")
    sequences = int(inp["batch_tokens"] // m.seq_len)
    return LlamaMemory(
        params=params,
        params_published=float(inp["params"]),
        optimizer_bytes=params * bpp.optimizer,
        optimizer_published_bytes=exp["optimizer_GB"] * 1e9,
        checkpoint_bytes=transformer_layer_activation_bytes(m, sequences, "bf16", "full") * m.layers,
        checkpoint_formula_bytes=2 * inp["d_model"] * inp["batch_tokens"] * inp["layers"],
        checkpoint_printed_bytes=exp["activations_TB"] * 1e12 / inp["checkpoints_per_layer"],
    )


def deepseek_hbm_after_init_bytes(entries: list[Entry] | None = None) -> tuple[float, float]:
    """(predicted, published) HBM per chip after init of MaxText's DeepSeek-V2-16B on v5p-8, in bytes.

    After init a chip holds its FSDP shard of fp32 weights and Adam moments (no gradients yet);
    the log's "GB" are GiB (the entry's tolerance note).
    """
    e = _by_id(entries)["e2e_maxtext_deepseek2_16b_v5p8"]
    params = float(re.search(r"([\d.]+)B params", e["inputs"]["model"]).group(1)) * 1e9  # "... 15.933B params)"
    bpp = bytes_per_param("adam", "bf16")
    predicted = params * (bpp.params + bpp.optimizer) / e["inputs"]["chips"]
    return predicted, e["expected"]["hbm_used_after_init_GB"] * GIB_BYTES


def maxtext_dense_runs(entries: list[Entry] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The published MaxText dense runs with their dimensions and batch: (entry id, configuration)."""
    runs = []
    for id_, e in _by_id(entries).items():
        inp = e["inputs"]
        if not id_.startswith("e2e_maxtext_v") or ("derived_dims" not in inp and "config_from_scripts" not in inp):
            continue
        if "derived_dims" in inp:
            d = inp["derived_dims"]
            chips = inp["chips"]
            tp = int(inp["ici_parallelism"].split("tp=")[1])
            cfg = dict(layers=d["num_layers"], d_model=d["emb_dim"], heads=d["num_query_heads"], kv_heads=d["num_kv_heads"],
                       head_dim=d["head_dim"], d_ff=d["mlp_dim"], vocab=d["vocab"], pdb=inp["per_device_batch_size"],
                       remat=inp["remat_policy"], tp=tp)  # fmt: skip
        else:
            c = inp["config_from_scripts"]
            chips = inp["chips_total"]
            cfg = dict(layers=c["layers"], d_model=c["emb_dim"], heads=c["heads"], kv_heads=c["kv_heads"], head_dim=None,
                       d_ff=c["mlp_dim"], vocab=32000, pdb=c["per_device_batch_size"], remat=c["remat"], tp=1)  # fmt: skip
        chip = "tpu-v5p" if "v5p" in inp.get("chip", "") else "tpu-v4"
        runs.append((id_, dict(cfg, chips=chips, chip=chip)))
    return runs


def maxtext_dense_plans(entries: list[Entry] | None = None) -> dict[str, MemoryPlan]:
    """Each published MaxText dense run's HBM plan, by entry id.

    MaxText's defaults: SwiGLU MLP (silu, linear), flash attention on TPU, Adam, bf16 compute; a
    tensor group of ``tp`` chips shares the batch of its ``tp`` devices.
    """
    catalog, reserved = load_catalog(), load_calibration().hbm_reserved_frac
    plans = {}
    for run_id, cfg in maxtext_dense_runs(entries):
        m = TransformerModel(kind="transformer", layers=cfg["layers"], d_model=cfg["d_model"], heads=cfg["heads"],
                             kv_heads=cfg["kv_heads"], head_dim=cfg["head_dim"], d_ff=cfg["d_ff"], vocab=cfg["vocab"],
                             seq_len=2048, mlp="swiglu", attention="flash")  # fmt: skip
        chip, tp = catalog[cfg["chip"]], cfg["tp"]
        plans[run_id] = hbm_plan(model_cost(m), m, per_chip_batch=cfg["pdb"] * tp, precision="bf16", optimizer="adam",
                                 remat=cfg["remat"], fsdp=cfg["chips"] // tp, tensor=tp, capacity_bytes=chip.hbm_bytes,
                                 usable_bytes=chip.usable_hbm_bytes(reserved))  # fmt: skip
    return plans


def _pct(frac: float) -> str:
    return f"{100 * frac:+.1f} %"


def memory_block(entries: list[Entry] | None = None) -> str:
    """The memory checks' table and the bundled 32B run's sentence, as docs/validation.md shows them."""
    llama = llama3_70b_memory(entries)
    ds_pred, ds_pub = deepseek_hbm_after_init_bytes(entries)
    plans = maxtext_dense_plans(entries)
    tight_id, tight = max(plans.items(), key=lambda kv: kv[1].peak_bytes / kv[1].usable_bytes)
    fits = sum(not p.oom for p in plans.values())
    tb = 1e12
    rows = [
        "| check | predicted | published | error |",
        "| --- | --- | --- | --- |",
        f"| LLaMA-3 70B Adam state (scaling book) | {llama.optimizer_bytes / 1e9:,.0f} GB | {llama.optimizer_published_bytes / 1e9:,.0f} GB "
        f"| {_pct(llama.optimizer_bytes / llama.optimizer_published_bytes - 1)} |",
        f"| LLaMA-3 70B one bf16 checkpoint per layer, 4M tokens | {llama.checkpoint_bytes / tb:.2f} TB | book formula "
        f"{llama.checkpoint_formula_bytes / tb:.2f} TB (book's printed total / 3: {llama.checkpoint_printed_bytes / tb:.2f} TB) "
        f"| {_pct(llama.checkpoint_bytes / llama.checkpoint_formula_bytes - 1)} ({_pct(llama.checkpoint_bytes / llama.checkpoint_printed_bytes - 1)}) |",
        f"| MaxText deepseek2-16b on v5p-8, HBM after init | {ds_pred / GIB_BYTES:.2f} GiB | {ds_pub / GIB_BYTES:.2f} GiB "
        f"| {_pct(ds_pred / ds_pub - 1)} |",
        f"| MaxText dense runs that ran (v5p 32B-1024B, v4 22B/52B): predicted to fit | {fits} of {len(plans)} fit | {len(plans)} ran "
        f"| tightest: `{tight_id}` at {tight.peak_bytes / GIB_BYTES:.1f} of {tight.usable_bytes / GIB_BYTES:.2f} GiB usable |",
    ]
    scenario = load_scenario(DATA_DIR / "scenarios" / f"{BUNDLED_32B}.toml")
    step = evaluate(scenario, load_calibration())
    m, chip = scenario.model, load_catalog()[scenario.pod.chip]
    mfu = step.costs.comp.model_flops / step.step_time_s / chip.peak_flops_per_s(scenario.training.precision)
    per_device_batch = scenario.training.global_batch / step.chips  # MaxText's per_device_batch_size
    maxtext_flops = maxtext_flops_per_chip_per_step(model_cost(m).params, m.heads, m.layers, m.head_dim_eff, m.seq_len, per_device_batch)
    published_tflops = _by_id(entries)[_MAXTEXT_32B]["expected"]["tflops_per_chip"]
    sentence = (
        f"Bundled `data/scenarios/{BUNDLED_32B}.toml` (MaxText's 32B shape, fsdp 16 x tensor 4 on a v5p-128, minimal remat): "
        f"peak {step.peak_hbm_bytes / GIB_BYTES:.1f} GiB of {step.usable_hbm_bytes / GIB_BYTES:.1f} usable, "
        f"{step.step_time_s:.2f} s per step, MFU {100 * mfu:.1f} % in Podscope's FLOP count (full attention matrix); "
        f"in MaxText's 2023-24 count (causal-halved attention) that is {maxtext_flops / step.step_time_s / 1e12:.0f} TFLOP/s "
        f"per chip against the {published_tflops:g} MaxText reports (`{_MAXTEXT_32B}`)."
    )
    return "\n".join(rows) + "\n\n" + sentence + "\n"
