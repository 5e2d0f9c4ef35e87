"""MaxText's published runs -> validation cases: dense models, mixtures of experts, multi-slice rows.

MaxText's READMEs and docs publish TFLOP/s per chip (in MaxText's own FLOP count), step times and
MFU; its config scripts and ``base.yml`` say how each run was set up. Each mapping builds the
scenario from the entry's inputs plus what the MaxText source of that time fixed (cited beside each
constant), and converts the prediction into MaxText's FLOP convention where the figure uses it.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from engine.model.compute import SAVED_OPS_BY_REMAT
from engine.pod.catalog import load_catalog

from .reference_cases import Case, Entry, Skipped, chip_key, default_topology, scenario_dict, to_int, transformer_params

__all__ = ["MAXTEXT_V5P_ATTENTION", "map_maxtext", "map_maxtext_multislice", "maxtext_flops_per_chip_per_step", "maxtext_scale_dims"]


#: MaxText ``base.yml`` model at global_parameter_scale 1 (MaxText repository, MaxText/configs/base.yml,
#: as transcribed in the reference file's tolerance notes): emb 2048, 16 heads, mlp 7168, 16 layers,
#: head_dim 128, vocab 32000, mlp_activations ["silu", "linear"].
_MAXTEXT_BASE = {"emb_dim": 2048, "num_query_heads": 16, "mlp_dim": 7168, "num_layers": 16, "head_dim": 128, "vocab": 32000}

def maxtext_scale_dims(scale: int) -> dict[str, int]:
    """MaxText's ``pyconfig.get_individual_scales``: a global parameter scale 2^k doubles, in turn,
    heads and mlp_dim, then emb_dim, then layers (MaxText repository, MaxText/pyconfig.py)."""
    log2 = int(math.log2(scale))
    if 2**log2 != scale:
        raise ValueError(f"global_parameter_scale {scale} is not a power of two")
    base, rem = divmod(log2, 3)
    heads_scale = base + int(rem > 0)
    emb_scale = base + int(rem > 1)
    b = _MAXTEXT_BASE
    return {
        "emb_dim": b["emb_dim"] * 2**emb_scale,
        "num_query_heads": b["num_query_heads"] * 2**heads_scale,
        "num_kv_heads": b["num_query_heads"] * 2**heads_scale,
        "mlp_dim": b["mlp_dim"] * 2**heads_scale,
        "num_layers": b["num_layers"] * 2**base,
        "head_dim": b["head_dim"],
        "vocab": b["vocab"],
    }

def maxtext_flops_per_chip_per_step(
    params: float, heads: int, layers: int, head_dim: int, seq: int, per_chip_batch: float
) -> float:
    """Training FLOPs per chip per step as MaxText counted them in 2023-24.

    ``6 * params * seq * batch`` for the weights plus causal-halved attention
    ``12 * heads * layers * head_dim * seq^2 * batch / 2`` (MaxText maxtext_utils.py,
    ``calculate_tflops_training_per_device``, as quoted in the reference file's tolerance
    notes). Podscope's own count (3x forward GEMM FLOPs, full attention matrix) differs;
    MaxText's TFLOP/s/chip is this count divided by the step time, so Podscope's
    prediction in MaxText's convention is this count over Podscope's step time.
    """
    weights = 6.0 * params * seq * per_chip_batch
    attention = 12.0 * heads * layers * head_dim * seq**2 * per_chip_batch / 2.0
    return weights + attention

#: Mixture-of-experts architectures named (not dimensioned) by some entries. Inputs, not outcomes.
#: deepseek2-16b: MaxText repository, MaxText/configs/models/deepseek2-16b.yml (commit 0ed7bd5):
#: emb 2048, 16 heads, mlp 10944 (first layer dense), moe mlp 1408, 27 layers, 64 experts top-6,
#: 2 shared, silu-linear (SwiGLU), vocab 102400. Podscope has no multi-head latent attention: the
#: attention is taken as 16 full heads of v_head_dim 128, and all 27 layers as MoE layers.
KNOWN_MOE_ARCHITECTURES = {
    "deepseek2-16b": {"layers": 27, "d_model": 2048, "heads": 16, "head_dim": 128, "d_ff": 10944, "vocab": 102400,
                      "mlp": "swiglu", "experts": 64, "experts_per_token": 6, "shared_experts": 2, "d_ff_expert": 1408},
}  # fmt: skip

#: How a MoE run a source describes in words was set up, where the source links its configuration.
#: "700B Mixtral-like MoE": MaxText docs/guides/custom_model.md links its final configuration,
#: AI-Hypercomputer/maxtext @ 3662540ee852d0d8f8333a36c04ddc0f1316ebfb,
#: benchmarks/maxtext_trillium_model_configs.py, custom_moe_700b: per_device_batch_size 1 x
#: max_target_length 8192, ici_fsdp_parallelism 16 x ici_expert_parallelism 16, attention "flash",
#: sparse_matmul False (MaxText's dense_matmul, capacity_factor-sized buffers: the engine's moe_dispatch
#: "dense"), opt_type "sgd", remat_policy "custom" with decoder_layer_input and the q/k/v/out projections
#: offloaded to host and everything else recomputed (taken as the engine's "full", which also recomputes
#: those projections and keeps the layer inputs in HBM), weight_dtype bfloat16. Its XLA flags
#: include DATA_PARALLEL_OVERLAP (benchmarks/xla_flags_library.py: --xla_tpu_enable_data_parallel_all_reduce_opt,
#: as in the v5p scripts below), so on several pods the cross-pod gradient all-reduce overlaps compute.
KNOWN_MOE_RUNS = {
    "700b mixtral-like moe": {"seq": 8192, "per_device_batch": 1, "fsdp": 16, "expert": 16, "attention": "flash", "moe_dispatch": "dense",
                              "optimizer": "sgd", "remat": "full", "weight_dtype": "bf16", "dcn_overlap": True,
                              "source": "custom_model.md's linked config custom_moe_700b (maxtext @ 3662540e)"},
}  # fmt: skip

def _moe_dims_from_text(text: str) -> dict[str, Any] | None:
    """Dims of a MoE model described in words ("emb 8192, mlp 32768, 16 experts top-2, head_dim 256, 128 q / 8 kv heads, 56 layers")."""
    pats = {"d_model": r"emb (\d+)", "d_ff": r"mlp (\d+)", "experts": r"(\d+) experts", "experts_per_token": r"top-(\d+)",
            "head_dim": r"head_dim (\d+)", "heads": r"(\d+) q\b", "kv_heads": r"(\d+) kv", "layers": r"(\d+) layers"}  # fmt: skip
    found = {k: re.search(p, text) for k, p in pats.items()}
    if not all(found.values()):
        return None
    m = {k: int(v.group(1)) for k, v in found.items()}
    cf = re.search(r"capacity factor ([\d.]+)", text)
    if cf:
        m["capacity_factor"] = float(cf.group(1))
    # Mixtral-like: each expert is a full-width SwiGLU MLP; vocab from MaxText base.yml (not in the entry)
    return {**m, "d_ff_expert": m["d_ff"], "vocab": _MAXTEXT_BASE["vocab"], "mlp": "swiglu"}

def _map_maxtext_moe(e: Entry) -> Case | tuple[Case, ...] | Skipped:
    """A MaxText mixture-of-experts run: a named architecture or dims in words, FSDP over the slice.

    An entry that also gives the MFU on several pods (``mfu_<N>pods_<chips>chips``) adds a DCN
    weak-scaling check: MFU on N pods over MFU on one, the per-chip batch held, never fitted. One that
    gives the MFU of the same model at another capacity factor (``mfu_cf<X>_...``) adds a check of
    what the capacity costs: MFU at the run's capacity factor over MFU at X."""
    inp, exp = e["inputs"], e["expected"]
    text = str(inp.get("model", ""))
    chip = chip_key(str(inp.get("chip", "")))
    if chip is None:
        return Skipped(e["id"], e["kind"], f"chip {inp.get('chip')!r} is not in the catalog")
    named = next((a for name, a in KNOWN_MOE_ARCHITECTURES.items() if text.lower().startswith(name)), None)
    if named is not None and "steady_step_time_s" in exp and inp.get("per_device_batch") and inp.get("seq"):
        chips, pdb, seq = int(inp["chips"]), int(inp["per_device_batch"]), int(inp["seq"])
        # MaxText routes dropless by default (MaxText/configs/base.yml: capacity_factor -1.0, "no dropping by
        # default", megablox True; google/maxtext @ e64f6813): the engine's capacity_factor 0
        m = {"kind": "transformer", **named, "seq_len": seq, "capacity_factor": 0.0}
        topo, _ = default_topology(chip, chips)
        return Case(
            id=e["id"], kind=e["kind"], family="MaxText MoE", chip=chip, model=text.split(" ")[0],
            metric="step time (s)", unit="s", published=float(exp["steady_step_time_s"]), how="step_time",
            scenarios=(scenario_dict(e["id"], chip, topo, 1, m, pdb * chips, remat="full", fsdp=chips),),
            note=f"{topo}, fsdp {chips} (the entry's default sharding), {pdb} seq/chip, dropless grouped routing (megablox), "
                 "remat full, attention autoselected -> flash (MaxText base.yml defaults); dims from MaxText's deepseek2-16b.yml, "
                 "MLA taken as full multi-head attention",
            never_fitted=True,
        )  # fmt: skip
    dims = _moe_dims_from_text(text)
    mfu_key = next((k for k in exp if k.startswith("mfu_1pod")), None)
    tokens = to_int(inp.get("tokens_per_device"))
    if dims is None or mfu_key is None or not tokens:
        return Skipped(e["id"], e["kind"], "mixture-of-experts entry without dims Podscope can read, tokens per device or a 1-pod MFU")
    chips = to_int(mfu_key.split("_")[2]) or 256
    run = next((r for name, r in KNOWN_MOE_RUNS.items() if text.lower().startswith(name)), None)
    if run is not None and run["seq"] * run["per_device_batch"] != tokens:
        return Skipped(e["id"], e["kind"], f"the entry's {tokens} tokens per device disagree with its source's configuration "
                       f"({run['per_device_batch']} x {run['seq']}, {run['source']})")  # fmt: skip
    if run is None:  # the entry gives tokens per device only: MaxText base.yml's max_target_length, FSDP over the slice
        run = {"seq": 2048, "per_device_batch": max(1, tokens // 2048), "fsdp": chips, "expert": 1, "attention": "autoselected",
               "optimizer": "adam", "remat": "full", "weight_dtype": "fp32", "source": "seq assumed: MaxText's default; FSDP over the slice"}  # fmt: skip
    seq, pdb = run["seq"], run["per_device_batch"]
    topo, slices = default_topology(chip, chips)
    m = {"kind": "transformer", **dims, "seq_len": seq, "attention": run["attention"],
         **({"moe_dispatch": run["moe_dispatch"]} if "moe_dispatch" in run else {})}
    active = float(re.search(r"([\d.]+e\d+) active", text).group(1)) if re.search(r"([\d.]+e\d+) active", text) else None
    if active is None:
        return Skipped(e["id"], e["kind"], "mixture-of-experts entry without its active parameter count (MaxText's MFU counts them)")
    # MaxText's MFU: 6 x active params x tokens + causal attention, over the step time and the chip's peak
    flops = maxtext_flops_per_chip_per_step(active, dims["heads"], dims["layers"], dims["head_dim"], seq, float(pdb))
    peak = load_catalog()[chip].peak_flops_per_s("bf16")
    one_pod = scenario_dict(e["id"], chip, topo, slices, m, pdb * chips, optimizer=run["optimizer"], remat=run["remat"],
                            fsdp=run["fsdp"], expert=run["expert"], weight_dtype=run["weight_dtype"])
    case = Case(
        id=e["id"], kind=e["kind"], family="MaxText MoE", chip=chip, model=f"MoE {dims['experts']}x top-{dims['experts_per_token']}",
        metric="MFU, 1 pod (MaxText count)", unit="fraction", published=float(exp[mfu_key]), how="work_per_step",
        scenarios=(one_pod,),
        work_per_step=flops / peak,
        note=f"{topo}, fsdp {run['fsdp']} x expert {run['expert']}, {pdb} x {seq} tokens/chip, {run['attention']} attention, "
             f"{run.get('moe_dispatch', 'grouped')} dispatch, "
             f"{run['optimizer']}, {run['weight_dtype']} weights, remat {run['remat']} ({run['source']}); vocab 32000 (MaxText base.yml); MaxText FLOP count "
             "with the entry's active parameters over Podscope's step time",
        never_fitted=True,
    )  # fmt: skip
    pods = [(k, int(mt.group(1))) for k in exp if (mt := re.fullmatch(r"mfu_(\d+)pods_\d+chips", k)) and int(mt.group(1)) > 1]
    checks = []
    overlap = bool(run.get("dcn_overlap"))
    for key, n in pods:
        single = copy.deepcopy(one_pod)
        single["interconnect"] = {"overlap": overlap}
        multi = copy.deepcopy(single)
        multi["pod"]["slices"] = slices * n
        multi["training"]["global_batch"] *= n
        checks.append(Case(
            id=f"{e['id']}_{n}pods", kind="collective", family="MaxText MoE", chip=chip, model=case.model,
            metric=f"MFU, {n} pods vs 1 (weak scaling)", unit="x", published=float(exp[key]) / float(exp[mfu_key]),
            how="weak_scaling", scenarios=(single, multi), scale=1.0, from_entry=e["id"],
            note=f"{n} x {topo} over DCN, data parallel across pods, with the 1-pod case's mesh and batch per chip; the DCN "
                 f"all-reduce {'overlaps compute (the configuration sets DATA_PARALLEL_OVERLAP)' if overlap else 'follows the backward pass'}; "
                 "ratio = step(1 pod) / step(N pods)",
        ))  # fmt: skip
    for key in exp:
        mt = re.fullmatch(r"mfu_cf([\d.]+)_\w+", key)
        if not mt or "capacity_factor" not in dims:
            continue
        other = copy.deepcopy(one_pod)
        other["model"]["capacity_factor"] = float(mt.group(1))
        checks.append(Case(
            id=f"{e['id']}_cf{mt.group(1)}", kind="collective", family="MaxText MoE", chip=chip, model=case.model,
            metric=f"MFU, capacity factor {dims['capacity_factor']:g} vs {mt.group(1)}", unit="x",
            published=float(exp[mfu_key]) / float(exp[key]), how="weak_scaling", scenarios=(other, one_pod), scale=1.0,
            from_entry=e["id"],
            note=f"the 1-pod case at capacity factor {mt.group(1)} (the source's table: that configuration differs only in "
                 f"capacity_factor) against {dims['capacity_factor']:g}; {m.get('moe_dispatch', 'grouped')} dispatch; "
                 "ratio = step(other) / step(run)",
        ))  # fmt: skip
    return (case, *checks) if checks else case

#: The attention kernel each source's runs used, with where the source says so (inputs, not outcomes).
#: MaxText's v5p scripts (AI-Hypercomputer/maxtext @ 75a430609ff6875a8a7543e9311cc644b3a53d17,
#: src/MaxText/configs/v5p/{32b,64b,128b,256b,512b,1024b}.sh and gpt3_175b/gpt3_175b_base.sh) pass
#: attention='flash' (the Pallas splash kernel).
MAXTEXT_V5P_ATTENTION = ("flash", "MaxText configs/v5p scripts set attention='flash'")

#: MaxText's 2023 v4 runs (README @ 28816574b, MaxText/configs/1xv4-128.sh, 1xv4-384.sh) name no kernel and ran
#: MaxText/configs/base.yml of that commit, which sets enable_flash_attention: False: dot-product attention.
MAXTEXT_2023_ATTENTION = ("standard", "2023 MaxText base.yml: enable_flash_attention False; the v4 scripts name no kernel")

#: The model MaxText's base.yml defined when its v4 results were published (MaxText repository,
#: MaxText/configs/base.yml @ 28816574b, 2023-12-08, the README commit the v4 entries cite): head_dim
#: 256, mlp_activations ["relu"] (the engine's "relu" MLP), logits_via_embedding True (the output layer reuses the input embedding) and vocab 32,768;
#: its decoder layer (MaxText/layers.py DecoderLayer) runs attention and MLP side by side on one layer
#: norm and sums them: a parallel block. The v4 scripts of that commit (MaxText/configs/1xv4-128.sh,
#: 1xv4-384.sh) override only emb, heads, mlp and layers, which the entries give. These defaults give
#: the models the README names: 22.1B and 52.3B parameters.
MAXTEXT_2023_BASE = {"head_dim": 256, "mlp": "relu", "tied_embeddings": True, "vocab": 32768, "parallel_block": True}

#: MaxText remat_policy -> the engine's remat policy with the same saved/recomputed split
_MAXTEXT_REMAT = {"full": "full", "minimal": "minimal", "none": "none", **{name: name for name in SAVED_OPS_BY_REMAT}}

def map_maxtext(e: Entry) -> Case | tuple[Case, ...] | Skipped | None:
    inp = e["inputs"]
    if str(inp.get("framework", "")).lower() != "maxtext" or "benchmark" in inp:
        return None  # MLPerf submissions run on MaxText too; _map_mlperf reads those
    text = str(inp.get("model", ""))
    if "moe" in text.lower() or "experts" in text.lower():
        return _map_maxtext_moe(e)
    chip = chip_key(str(inp.get("chip", "")))
    if chip is None:
        return Skipped(e["id"], e["kind"], f"chip {inp.get('chip')!r} is not in the catalog")
    chips = to_int(inp.get("chips", inp.get("chips_total")))
    dims = inp.get("derived_dims")
    cfg = inp.get("config_from_scripts")
    if dims:
        m = {"layers": dims["num_layers"], "d_model": dims["emb_dim"], "heads": dims["num_query_heads"],
             "kv_heads": dims["num_kv_heads"], "head_dim": dims["head_dim"], "d_ff": dims["mlp_dim"], "vocab": dims["vocab"]}  # fmt: skip
        pdb = inp.get("per_device_batch_size")
        par = str(inp.get("ici_parallelism", ""))
        tp = int(re.search(r"tp=(\d+)", par).group(1)) if "tp=" in par else 1
        remat = str(inp.get("remat_policy", "full"))
        m["mlp"] = "swiglu"
        assumed = "dims derived from global_parameter_scale (entry); SwiGLU per the entry"
        attention, kernel_src = MAXTEXT_V5P_ATTENTION
    elif cfg:
        m = {"layers": cfg["layers"], "d_model": cfg["emb_dim"], "heads": cfg["heads"], "kv_heads": cfg["kv_heads"],
             "d_ff": cfg["mlp_dim"], **MAXTEXT_2023_BASE}  # fmt: skip
        pdb = cfg.get("per_device_batch_size")
        tp = 1  # ici_fsdp covers the whole slice
        remat = str(cfg.get("remat", "full"))
        assumed = ("head_dim 256, a ReLU MLP, tied embeddings, vocab 32768 and a parallel block from "
                   "MaxText's 2023 base.yml and decoder layer (not given in the entry)")
        attention, kernel_src = MAXTEXT_2023_ATTENTION
    else:
        return Skipped(e["id"], e["kind"], "MaxText entry without structured model dims, sequence length or per-device "
                       "batch (configs-README rows, free-text model descriptions): no scenario can be built from its inputs")  # fmt: skip
    seq = to_int(inp.get("seq"))
    if not (chips and pdb and seq) or "tflops_per_chip" not in e["expected"]:
        return Skipped(e["id"], e["kind"], "MaxText entry missing chips, seq or per-device batch, or no TFLOP/s/chip figure")
    m.update(kind="transformer", seq_len=seq, attention=attention)
    topo, slices = default_topology(chip, chips)
    if slices > 1:
        return Skipped(e["id"], e["kind"], f"{chips} chips exceed one {chip} slice; the entry gives no multislice layout")
    batch = int(pdb * chips)
    fsdp = chips // tp
    params = transformer_params({k: v for k, v in m.items() if k != "kind"})
    head_dim = m.get("head_dim") or m["d_model"] // m["heads"]
    flops = maxtext_flops_per_chip_per_step(params, m["heads"], m["layers"], head_dim, seq, float(pdb))
    # MaxText's remat policies (MaxText/layers/decoders.py): "full" saves nothing (jax.checkpoint's
    # nothing_saveable); "minimal" is checkpoint_dots_with_no_batch_dims, which saves the weight
    # matmuls' outputs and recomputes the attention core: the engine's "minimal" policy.
    remat_engine = _MAXTEXT_REMAT.get(remat)
    if remat_engine is None:
        return Skipped(e["id"], e["kind"], f"MaxText remat_policy {remat!r} has no engine equivalent "
                       f"(mapped: {', '.join(sorted(_MAXTEXT_REMAT))})")  # fmt: skip
    return Case(
        id=e["id"], kind=e["kind"], family="MaxText", chip=chip, model=f"dense {params / 1e9:.0f}B",
        metric="TFLOP/s per chip (MaxText 2023-24 count)", unit="TFLOP/s", published=float(e["expected"]["tflops_per_chip"]),
        how="work_per_step", scenarios=(scenario_dict(e["id"], chip, topo, 1, m, batch, remat=remat_engine, fsdp=fsdp, tensor=tp),),
        work_per_step=flops / 1e12,
        note=f"{topo}, fsdp {fsdp} x tp {tp}, {pdb} seq/chip, remat {remat}->{remat_engine}, {attention} attention "
             f"({kernel_src}); MaxText FLOP count (6N + causal attention) over Podscope's step time; {assumed}",
    )  # fmt: skip

#: MaxText's v5p scripts (MaxText/configs/v5p/{32b,64b,128b,256b,512b,1024b}.sh; read at google/maxtext @ e64f6813)
#: set --xla_tpu_enable_data_parallel_all_reduce_opt and --xla_tpu_data_parallel_opt_different_sized_ops, which
#: MaxText's benchmarks/xla_flags_library.py names DATA_PARALLEL_OVERLAP ("optimize DCN all-reduces used for
#: data parallel sharding", "pipelining of data parallel ops across multiple iterations"): the cross-slice
#: gradient all-reduce overlaps compute, the engine's [interconnect] overlap.
MAXTEXT_V5P_DCN_OVERLAP = ({"overlap": True}, "the v5p scripts' XLA flags overlap the data-parallel DCN all-reduce with compute")

def _maxtext_rows(e: Entry) -> tuple[str, str, int] | None:
    """(model, accelerator, slices) of a MaxText configs-README row ("32B", "v5p-128", 2), else None."""
    inp = e["inputs"]
    m = re.fullmatch(r"\s*(\d+)x\s+(v\w+-\d+)\s*", str(inp.get("hardware", "")))
    if str(inp.get("framework", "")).lower() != "maxtext" or "multislice" not in inp or not m or "tflops_per_chip" not in e["expected"]:
        return None
    return str(inp.get("model", "")), m.group(2), int(m.group(1))

def map_maxtext_multislice(e: Entry, entries: list[Entry]) -> Case | Skipped | None:
    """A MaxText configs-README row on N slices against the same model's 1-slice row: a DCN weak-scaling check.

    The rows name a model and an accelerator only; the model's dimensions, batch, mesh and remat come from the
    dimensioned entry of the same model on the same accelerator (the same config script). The check is the
    per-chip throughput on N slices over that on one, with the per-chip batch held: a ratio of two published
    figures, predicted from the ratio of step times, never fitted.
    """
    row = _maxtext_rows(e)
    if row is None:
        return None
    model, accel, slices = row
    same = [(x, r) for x in entries if x["kind"] == e["kind"] and (r := _maxtext_rows(x)) and r[:2] == (model, accel)]
    if slices == 1:
        more = [x["id"] for x, r in same if r[2] > 1]
        if more:
            return Skipped(e["id"], e["kind"], f"the 1-slice figure of the multi-slice check {more[0]} (a ratio, never fitted)")
        return None
    one = next((x for x, r in same if r[2] == 1), None)
    dims = next((x for x in entries if x["kind"] == "end_to_end" and x["inputs"].get("derived_dims")
                 and str(x["inputs"].get("accelerator")) == accel and str(x["inputs"].get("model", "")).startswith(f"{model} ")), None)  # fmt: skip
    base = map_maxtext(dims) if dims is not None else None
    if one is None or not isinstance(base, Case):
        return Skipped(e["id"], e["kind"], f"a {slices}-slice row without the same model's 1-slice row and dimensioned entry on {accel}")
    single = copy.deepcopy(base.scenarios[0])
    single["interconnect"], overlap_src = MAXTEXT_V5P_DCN_OVERLAP if base.chip == "tpu-v5p" else ({}, "no DCN overlap flag")
    multi = copy.deepcopy(single)
    multi["pod"]["slices"] = slices
    multi["training"]["global_batch"] *= slices
    return Case(
        id=e["id"], kind="collective", family="MaxText", chip=base.chip, model=base.model,
        metric=f"per-chip throughput, {slices} slices vs 1 (weak scaling)", unit="x",
        published=float(e["expected"]["tflops_per_chip"]) / float(one["expected"]["tflops_per_chip"]),
        how="weak_scaling", scenarios=(single, multi), scale=1.0,
        note=f"{slices} x {accel} over DCN against {one['id']}; model, batch per chip, mesh and remat from {dims['id']}; "
             f"{overlap_src}; ratio = step(1 slice) / step({slices} slices)",
    )  # fmt: skip
