"""Published reference figures -> validation cases Podscope can predict.

Reads a file in the format of ``data/reference/published.json`` (a list of entries
with ``id``, ``kind``, ``inputs``, ``expected``, ``tolerance_note``, ``source``) and
maps each ``end_to_end``, ``collective`` and ``formula_example`` entry either to a
:class:`Case` (a scenario built from the entry's *inputs*, the metric compared, and
the published figure) or to a :class:`Skipped` with the reason it cannot be
expressed. Nothing is dropped silently: every entry of every kind ends up in one
of the two lists.

Only inputs go into scenarios. The published figure is read once, into
``Case.published``, and is used for nothing but the comparison. Where the source
counts FLOPs differently from Podscope, the conversion is explicit: the case
computes the *source's* FLOP count from the entry's inputs and divides it by
Podscope's predicted step time, so predicted and published are in the same
convention (see :func:`maxtext_flops_per_chip_per_step`).

Mappings are by recognisable input shape (a MaxText dense model with dims, an
MLPerf ResNet-50 system, the PaLM model string), not by entry id, so a new entry
of a known shape is picked up without code changes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.catalog import DATA_DIR, load_catalog
from engine.errors import ReferenceFileError

__all__ = [
    "Case",
    "Skipped",
    "DEFAULT_REFERENCE_PATH",
    "load_reference",
    "map_entries",
    "default_topology",
    "maxtext_scale_dims",
    "maxtext_flops_per_chip_per_step",
    "chip_key",
]

DEFAULT_REFERENCE_PATH = DATA_DIR / "reference" / "published.json"

#: kinds that are outcomes to predict; ``chip_spec`` entries are inputs (data/chips.toml)
PREDICTED_KINDS = ("end_to_end", "collective", "formula_example")

#: MaxText ``base.yml`` model at global_parameter_scale 1 (MaxText repository, MaxText/configs/base.yml,
#: as transcribed in the reference file's tolerance notes): emb 2048, 16 heads, mlp 7168, 16 layers,
#: head_dim 128, vocab 32000, mlp_activations ["silu", "linear"].
_MAXTEXT_BASE = {"emb_dim": 2048, "num_query_heads": 16, "mlp_dim": 7168, "num_layers": 16, "head_dim": 128, "vocab": 32000}

#: Published architectures named (not dimensioned) by some entries. Inputs, not outcomes.
#: GPT-3 175B: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1
#: (96 layers, d_model 12288, 96 heads of 128, d_ff = 4 d_model, context 2048; GPT-2 BPE vocab 50257).
KNOWN_ARCHITECTURES = {
    "GPT-3 175B": {"layers": 96, "d_model": 12288, "heads": 96, "d_ff": 49152, "vocab": 50257, "mlp": "gelu"},
}


@dataclass(frozen=True)
class Case:
    """One comparable figure: scenario(s) built from inputs, how to read the prediction, the published value.

    ``how`` says how the prediction is read from simulated step times:

    * ``"work_per_step"``: ``work_per_step / step_s`` (a throughput: images, tokens or
      source-convention TFLOP per chip per step, divided by the predicted step time);
    * ``"step_time"``: the predicted step time itself, in seconds;
    * ``"weak_scaling"``: ``scale x step_s[0] / step_s[1]`` for two scenarios (throughput ratio);
    * ``"collective"``: an engine collective cost (``formula``) at the entry's constants, in us;
    * ``"flops_per_token"``: Podscope's training FLOPs per token of ``scenarios[0]`` times
      ``work_per_step`` (tokens/s / peak FLOP/s of the job): an MFU by Podscope's FLOP count.
    """

    id: str
    kind: str
    family: str  # e.g. "MaxText", "MLPerf ResNet-50", "PaLM": used for filtering and folds
    chip: str  # catalog key
    model: str  # short model label
    metric: str
    unit: str
    published: float
    how: str
    scenarios: tuple[dict[str, Any], ...] = ()
    work_per_step: float = 1.0
    scale: float = 1.0
    formula: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    #: an end-to-end case that is predicted but never fitted: a kind of job (mixture-of-experts) whose
    #: mechanisms the fitted parameters were not chosen on, kept out of the fit so it stays a true prediction
    never_fitted: bool = False

    @property
    def fit(self) -> bool:
        """End-to-end cases are what calibration fits; formula and collective checks are not tuned."""
        return self.kind == "end_to_end" and not self.never_fitted


@dataclass(frozen=True)
class Skipped:
    id: str
    kind: str
    reason: str


def reference_sha256(path: str | Path | None = None) -> str:
    """SHA-256 of a reference file's bytes: what a calibration's ``[fit]`` record was fitted on."""
    return hashlib.sha256(Path(path if path is not None else DEFAULT_REFERENCE_PATH).read_bytes()).hexdigest()


def load_reference(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Read and shape-check a reference file; raises :class:`ReferenceFileError` naming file and entry."""
    path = Path(path) if path is not None else DEFAULT_REFERENCE_PATH
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ReferenceFileError(str(path), [("", f"cannot read file: {e.strerror or e}")]) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReferenceFileError(str(path), [("", f"not valid JSON: {e}")]) from None
    if not isinstance(data, list):
        raise ReferenceFileError(str(path), [("", "expected a JSON list of entries")])
    problems = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            problems.append((f"[{i}]", "expected an object"))
            continue
        for key, typ in (("id", str), ("kind", str), ("inputs", dict), ("expected", dict)):
            if not isinstance(entry.get(key), typ):
                problems.append((f"[{i}].{key}", f"missing or not a {typ.__name__}"))
    if problems:
        raise ReferenceFileError(str(path), problems)
    return data


# Hardware helpers -------------------------------------------------------------------------------


def chip_key(name: str) -> str | None:
    """Catalog key for a chip name as sources write it ("TPU v5p", "TPU v4p", "TPU v6e (Trillium)")."""
    m = re.search(r"v(\d)([a-z]?)", name.lower())
    if not m or "tpu" not in name.lower():
        return None
    gen, suffix = m.group(1), m.group(2)
    # The scaling book calls the v4 "v4p"; v2-v4 have no suffix in the catalog.
    key = f"tpu-v{gen}{suffix if gen in '56' else ''}"
    return key if key in load_catalog() else None


def _factor(n: int, parts: int) -> tuple[int, ...]:
    """The most balanced factorisation of n into ``parts`` ascending factors."""
    if parts == 1:
        return (n,)
    best: tuple[int, ...] | None = None
    for a in range(1, int(round(n ** (1 / parts))) + 1):
        if n % a:
            continue
        rest = _factor(n // a, parts - 1)
        cand = (a, *rest)
        if best is None or (max(cand), -min(cand)) < (max(best), -min(best)):
            best = cand
    return tuple(sorted(best)) if best else (1,) * (parts - 1) + (n,)


def default_topology(chip: str, chips: int) -> tuple[str, int]:
    """Slice shape and slice count for ``chips`` chips when a source gives only the count.

    3D-torus chips use whole 4x4x4 cubes where the count allows (as Cloud TPU slices
    are allocated), else the most balanced 3D shape; 2D chips the most balanced 2D
    shape. Counts above the largest slice become several slices joined over DCN.
    """
    spec = load_catalog()[chip]
    slices = 1
    per_slice = chips
    while per_slice > spec.max_slice_chips and per_slice % 2 == 0:
        per_slice //= 2
        slices *= 2
    if spec.torus_dims == 3 and per_slice % 64 == 0:
        shape = tuple(4 * f for f in _factor(per_slice // 64, 3))
    else:
        shape = _factor(per_slice, spec.torus_dims)
    return "x".join(map(str, shape)), slices


# Model helpers ----------------------------------------------------------------------------------


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


def _transformer_params(m: dict[str, Any]) -> int:
    from engine.models import model_cost  # engine's count for the same architecture
    from engine.scenario import TransformerModel

    return model_cost(TransformerModel(kind="transformer", **m)).params


def _int(value: Any) -> int | None:
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        m = re.match(r"\s*(\d+)", value)
        return int(m.group(1)) if m else None
    return None


def _scenario(name: str, chip: str, topology: str, slices: int, model: dict, batch: int, *, precision: str = "bf16",
              optimizer: str = "adam", remat: str = "none", fsdp: int = 1, tensor: int = 1) -> dict[str, Any]:  # fmt: skip
    # Few steps are enough: with calibrated jitter the median steady step settles within a few.
    return {
        "name": name,
        "pod": {"chip": chip, "topology": topology, "slices": slices},
        "model": model,
        "training": {"global_batch": batch, "steps": 4, "precision": precision, "optimizer": optimizer, "remat": remat},
        "parallelism": {"fsdp": fsdp, "tensor": tensor},
    }


#: Mixture-of-experts architectures named (not dimensioned) by some entries. Inputs, not outcomes.
#: deepseek2-16b: MaxText repository, MaxText/configs/models/deepseek2-16b.yml (commit 0ed7bd5):
#: emb 2048, 16 heads, mlp 10944 (first layer dense), moe mlp 1408, 27 layers, 64 experts top-6,
#: 2 shared, silu-linear (SwiGLU), vocab 102400. Podscope has no multi-head latent attention: the
#: attention is taken as 16 full heads of v_head_dim 128, and all 27 layers as MoE layers.
KNOWN_MOE_ARCHITECTURES = {
    "deepseek2-16b": {"layers": 27, "d_model": 2048, "heads": 16, "head_dim": 128, "d_ff": 10944, "vocab": 102400,
                      "mlp": "swiglu", "experts": 64, "experts_per_token": 6, "shared_experts": 2, "d_ff_expert": 1408},
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


def _map_maxtext_moe(e: Entry) -> Case | Skipped:
    """A MaxText mixture-of-experts run: a named architecture or dims in words, FSDP over the slice."""
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
            scenarios=(_scenario(e["id"], chip, topo, 1, m, pdb * chips, remat="full", fsdp=chips),),
            note=f"{topo}, fsdp {chips} (the entry's default sharding), {pdb} seq/chip, dropless routing, remat full "
                 "(MaxText default); dims from MaxText's deepseek2-16b.yml, MLA taken as full multi-head attention",
            never_fitted=True,
        )  # fmt: skip
    dims = _moe_dims_from_text(text)
    mfu_key = next((k for k in exp if k.startswith("mfu_1pod")), None)
    tokens = _int(inp.get("tokens_per_device"))
    if dims is None or mfu_key is None or not tokens:
        return Skipped(e["id"], e["kind"], "mixture-of-experts entry without dims Podscope can read, tokens per device or a 1-pod MFU")
    chips = _int(mfu_key.split("_")[2]) or 256
    seq = 2048  # MaxText base.yml max_target_length: the entry gives tokens per device only
    pdb = max(1, tokens // seq)
    topo, slices = default_topology(chip, chips)
    m = {"kind": "transformer", **dims, "seq_len": seq}
    active = float(re.search(r"([\d.]+e\d+) active", text).group(1)) if re.search(r"([\d.]+e\d+) active", text) else None
    if active is None:
        return Skipped(e["id"], e["kind"], "mixture-of-experts entry without its active parameter count (MaxText's MFU counts them)")
    # MaxText's MFU: 6 x active params x tokens + causal attention, over the step time and the chip's peak
    flops = maxtext_flops_per_chip_per_step(active, dims["heads"], dims["layers"], dims["head_dim"], seq, float(pdb))
    peak = load_catalog()[chip].peak_flops_per_s("bf16")
    return Case(
        id=e["id"], kind=e["kind"], family="MaxText MoE", chip=chip, model=f"MoE {dims['experts']}x top-{dims['experts_per_token']}",
        metric="MFU, 1 pod (MaxText count)", unit="fraction", published=float(exp[mfu_key]), how="work_per_step",
        scenarios=(_scenario(e["id"], chip, topo, slices, m, pdb * chips, remat="full", fsdp=chips),),
        work_per_step=flops / peak,
        note=f"{topo}, fsdp {chips}, {pdb} x {seq} tokens/chip (seq assumed: MaxText's default), remat full, "
             "vocab 32000 (MaxText base.yml); MaxText FLOP count with the entry's active parameters over Podscope's step time",
        never_fitted=True,
    )  # fmt: skip


def _with_sharded_update(scenario: dict[str, Any]) -> dict[str, Any]:
    """The Google MLPerf ResNet-50 submissions shard the weight update across replicas: "Scale MLPerf-0.6
    models on Google TPU-v3 Pods" (Kumar et al. 2019, arXiv:1909.09756) and "Exploring the limits of
    concurrency in ML training on Google TPUs" (Kumar et al. 2021) name weight-update sharding (Xu et al.
    2020) among the techniques of those runs."""
    scenario["parallelism"]["shard_weight_update"] = True
    return scenario


# Mappers: each returns a Case, a Skipped, or None (not its shape) ---------------------------------

Entry = dict[str, Any]

#: The attention kernel each source's runs used, with where the source says so (inputs, not outcomes).
#: MaxText's v5p scripts (AI-Hypercomputer/maxtext @ 75a430609ff6875a8a7543e9311cc644b3a53d17,
#: src/MaxText/configs/v5p/{32b,64b,128b,256b,512b,1024b}.sh and gpt3_175b/gpt3_175b_base.sh) pass
#: attention='flash' (the Pallas splash kernel).
MAXTEXT_V5P_ATTENTION = ("flash", "MaxText configs/v5p scripts set attention='flash'")
#: MaxText's 2023 v4 runs (README @ 28816574b, MaxText/configs/1xv4-128.sh, 1xv4-384.sh) name no kernel and ran
#: MaxText/configs/base.yml of that commit, which sets enable_flash_attention: False: dot-product attention.
MAXTEXT_2023_ATTENTION = ("standard", "2023 MaxText base.yml: enable_flash_attention False; the v4 scripts name no kernel")
#: PaLM (Chowdhery et al. 2022, sec. 2: multi-query attention) trained before TPU flash kernels existed
#: (JAX's Pallas TPU flash attention, jax.experimental.pallas.ops.tpu, dates from 2023).
PALM_ATTENTION = ("standard", "PaLM 2022 predates TPU flash-attention kernels")

#: The model MaxText's base.yml defined when its v4 results were published (MaxText repository,
#: MaxText/configs/base.yml @ 28816574b, 2023-12-08, the README commit the v4 entries cite): head_dim
#: 256, mlp_activations ["relu"] (two matrices: the engine's two-matrix "gelu" MLP has the same
#: matmuls), logits_via_embedding True (the output layer reuses the input embedding) and vocab 32,768;
#: its decoder layer (MaxText/layers.py DecoderLayer) runs attention and MLP side by side on one layer
#: norm and sums them: a parallel block. The v4 scripts of that commit (MaxText/configs/1xv4-128.sh,
#: 1xv4-384.sh) override only emb, heads, mlp and layers, which the entries give. These defaults give
#: the models the README names: 22.1B and 52.3B parameters.
MAXTEXT_2023_BASE = {"head_dim": 256, "mlp": "gelu", "tied_embeddings": True, "vocab": 32768, "parallel_block": True}

#: MaxText remat_policy -> the engine's remat policy with the same saved/recomputed split
_MAXTEXT_REMAT = {"full": "full", "minimal": "minimal", "none": "none"}


def _map_maxtext(e: Entry) -> Case | Skipped | None:
    inp = e["inputs"]
    if str(inp.get("framework", "")).lower() != "maxtext" or "benchmark" in inp:
        return None  # MLPerf submissions run on MaxText too; _map_mlperf reads those
    text = str(inp.get("model", ""))
    if "moe" in text.lower() or "experts" in text.lower():
        return _map_maxtext_moe(e)
    chip = chip_key(str(inp.get("chip", "")))
    if chip is None:
        return Skipped(e["id"], e["kind"], f"chip {inp.get('chip')!r} is not in the catalog")
    chips = _int(inp.get("chips", inp.get("chips_total")))
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
        assumed = ("head_dim 256, a two-matrix (relu) MLP, tied embeddings, vocab 32768 and a parallel block from "
                   "MaxText's 2023 base.yml and decoder layer (not given in the entry)")
        attention, kernel_src = MAXTEXT_2023_ATTENTION
    else:
        return Skipped(e["id"], e["kind"], "MaxText entry without structured model dims, sequence length or per-device "
                       "batch (configs-README rows, free-text model descriptions): no scenario can be built from its inputs")  # fmt: skip
    seq = _int(inp.get("seq"))
    if not (chips and pdb and seq) or "tflops_per_chip" not in e["expected"]:
        return Skipped(e["id"], e["kind"], "MaxText entry missing chips, seq or per-device batch, or no TFLOP/s/chip figure")
    m.update(kind="transformer", seq_len=seq, attention=attention)
    topo, slices = default_topology(chip, chips)
    if slices > 1:
        return Skipped(e["id"], e["kind"], f"{chips} chips exceed one {chip} slice; the entry gives no multislice layout")
    batch = int(pdb * chips)
    fsdp = chips // tp
    params = _transformer_params({k: v for k, v in m.items() if k != "kind"})
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
        how="work_per_step", scenarios=(_scenario(e["id"], chip, topo, 1, m, batch, remat=remat_engine, fsdp=fsdp, tensor=tp),),
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


def _map_maxtext_multislice(e: Entry, entries: list[Entry]) -> Case | Skipped | None:
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
    base = _map_maxtext(dims) if dims is not None else None
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


def _map_mlperf(e: Entry) -> Case | Skipped | None:
    inp = e["inputs"]
    bench = str(inp.get("benchmark", ""))
    if not bench or "system" not in inp:
        return None
    exp = e["expected"]
    chip = chip_key(str(inp.get("chip", "")))
    if chip is None:
        return Skipped(e["id"], e["kind"], f"chip {inp.get('chip')!r} is not in the catalog")
    chips, batch = _int(inp.get("chips")), _int(inp.get("global_batch"))
    if "resnet-50" in bench.lower() and "steady_images_per_s_per_chip" in exp:
        if "LOW TRUST" in str(e.get("tolerance_note", "")):
            return Skipped(e["id"], e["kind"], "the entry flags its steady-state throughput as low trust; time-to-train "
                           "needs the epochs to converge, which the entry does not give")  # fmt: skip
        topo, slices = default_topology(chip, chips)
        per_chip = batch / chips
        return Case(
            id=e["id"], kind=e["kind"], family="MLPerf ResNet-50", chip=chip, model="ResNet-50",
            metric="images/s per chip (steady state)", unit="images/s", published=float(exp["steady_images_per_s_per_chip"]),
            how="work_per_step", scenarios=(_with_sharded_update(_scenario(e["id"], chip, topo, slices, {"kind": "resnet50"}, batch, optimizer="momentum")),),
            work_per_step=per_chip,
            note=f"{topo} x {slices} slice(s), {per_chip:g} images/chip, momentum (LARS-like) optimizer, weight update sharded "
                 "across replicas (Kumar et al. 2019, 2021: the TPU MLPerf ResNet-50 submissions); published "
                 "steady state includes the eval share of each epoch block, which Podscope does not model",
        )  # fmt: skip
    arch = next((a for name, a in KNOWN_ARCHITECTURES.items() if name.lower() in bench.lower()), None)
    if arch is not None and "derived_s_per_step_incl_eval_share" in exp:
        cfg = str(inp.get("config", ""))
        fsdp = int(re.search(r"fsdp(\d+)", cfg).group(1)) if "fsdp" in cfg else chips
        tp = int(re.search(r"tp(\d+)", cfg).group(1)) if re.search(r"tp(\d+)", cfg) else 1
        topo_m = re.search(r"topology (\d+x\d+x\d+)", cfg)
        topo = topo_m.group(1) if topo_m else default_topology(chip, chips)[0]
        seq = _int(inp.get("seq_len")) or 2048
        precision = "int8" if "int8" in str(inp.get("precision", "")).lower() else "bf16"
        remat = "full" if "remat full" in cfg else "none"
        attention, kernel_src = MAXTEXT_V5P_ATTENTION if "maxtext" in str(inp.get("framework", "")).lower() else ("standard", "framework names no kernel")
        model = {"kind": "transformer", "seq_len": seq, **arch, "attention": attention}
        return Case(
            id=e["id"], kind=e["kind"], family="MLPerf GPT-3", chip=chip, model="GPT-3 175B",
            metric="step time (s)", unit="s", published=float(exp["derived_s_per_step_incl_eval_share"]),
            how="step_time", scenarios=(_scenario(e["id"], chip, topo, 1, model, batch, precision=precision, remat=remat, fsdp=fsdp, tensor=tp),),
            note=f"{topo}, fsdp {fsdp} x tp {tp}, {precision}, remat {remat}, {attention} attention ({kernel_src}); "
                 "architecture from Brown et al. 2020 Table 2.1; "
                 "published step includes its share of eval time, which Podscope does not model",
        )  # fmt: skip
    reason = "only time-to-train is given; predicting it needs the samples to converge, which the entry does not give"
    if "ssd" in bench.lower():
        reason += ", and SSD-ResNet34 is not an engine model"
    elif "bert" in bench.lower() or "transformer" in bench.lower():
        reason += " (BERT-Large / WMT Transformer would map to the transformer model)"
    return Skipped(e["id"], e["kind"], reason)


def _palm_model(inp: dict[str, Any]) -> dict[str, Any] | None:
    text = str(inp.get("model", ""))
    nums = {
        "layers": re.search(r"(\d+) layers", text),
        "heads": re.search(r"(\d+) heads", text),
        "d_model": re.search(r"d_model (\d+)", text),
        "vocab": re.search(r"vocab (\d+)k", text),
    }
    if not all(nums.values()) or "params" not in inp:
        return None
    m = {k: int(v.group(1)) for k, v in nums.items()}
    m["vocab"] *= 1000
    m["kv_heads"] = 1 if "multi-query" in text else m["heads"]
    m["mlp"] = "swiglu" if "swiglu" in text.lower() else "gelu"
    m["parallel_block"] = "parallel layers" in text.lower()  # PaLM sec. 2: attention and MLP side by side
    m["seq_len"] = int(inp.get("seq_len", 2048))
    m["attention"] = PALM_ATTENTION[0]
    # d_ff is not given: solve the engine's parameter count for it from the stated total (rounded to 256).
    base = {**m, "d_ff": 256}
    per_dff = (_transformer_params({**base, "d_ff": 512}) - _transformer_params(base)) / 256
    d_ff = (float(inp["params"]) - _transformer_params(base)) / per_dff + 256
    m["d_ff"] = int(round(d_ff / 256) * 256)
    return {"kind": "transformer", **m}


def _palm_scenarios(inp: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(one pod, whole job) scenarios for the PaLM entry's inputs; weak scaling keeps per-pod batch."""
    m = _palm_model(inp)
    chip = chip_key(str(inp.get("chip", "")))
    par = str(inp.get("parallelism", ""))
    mp, dp = re.search(r"(\d+)-way model", par), re.search(r"(\d+)-way fully-sharded", par)
    if m is None or chip is None or not (mp and dp):
        return None
    pods, chips = int(inp.get("pods", 1)), int(inp["chips"])
    topo, _ = default_topology(chip, chips // pods)
    tp, fsdp = int(mp.group(1)), int(dp.group(1))
    remat = "full" if str(inp.get("remat", "")).startswith("yes") else "none"
    batch = int(inp["global_batch_seqs"])
    kw = dict(remat=remat, fsdp=fsdp, tensor=tp, optimizer="adafactor")
    one = _scenario(f"{name} (1 pod)", chip, topo, 1, m, batch // pods, **kw)
    job = _scenario(name, chip, topo, pods, m, batch, **kw)
    return one, job


def _find(entries: list[Entry], pred) -> Entry | None:
    return next((x for x in entries if pred(x)), None)


def _is_palm(x: Entry) -> bool:
    return x["kind"] == "end_to_end" and str(x["inputs"].get("model", "")).startswith("PaLM") and "params" in x["inputs"]


def _map_palm(e: Entry, entries: list[Entry]) -> Case | Skipped | None:
    inp = e["inputs"]
    if _is_palm(e) and "tokens_per_s" in e["expected"]:
        sc = _palm_scenarios(inp, e["id"])
        if sc is None:
            return Skipped(e["id"], e["kind"], "PaLM entry without parseable dims or parallelism")
        job = sc[1]
        chips = int(inp["chips"])
        return Case(
            id=e["id"], kind=e["kind"], family="PaLM", chip=job["pod"]["chip"], model="PaLM 540B",
            metric="tokens/s per chip", unit="tokens/s", published=float(e["expected"]["tokens_per_s"]) / chips,
            how="work_per_step", scenarios=(job,), work_per_step=float(inp["global_batch_tokens"]) / chips,
            note=f"{job['pod']['slices']} x {job['pod']['topology']} over DCN, fsdp {job['parallelism']['fsdp']} x tp "
                 f"{job['parallelism']['tensor']}, remat full (paper: 75% of non-attention forward), Adafactor, "
                 f"{PALM_ATTENTION[0]} attention ({PALM_ATTENTION[1]}); "
                 f"head_dim = d_model/heads and d_ff = {job['model']['d_ff']} solved from the stated parameter count",
        )  # fmt: skip
    if "two_pod_throughput_vs_one_pod" in e["expected"] and "pod" in str(inp.get("system", "")).lower():
        palm = _find(entries, _is_palm)
        sc = _palm_scenarios(palm["inputs"], e["id"]) if palm else None
        if sc is None:
            return Skipped(e["id"], e["kind"], "needs the PaLM model entry's inputs, which this file does not have")
        return Case(
            id=e["id"], kind=e["kind"], family="PaLM", chip=sc[1]["pod"]["chip"], model="PaLM 540B",
            metric="throughput ratio, 2 pods vs 1 (weak scaling)", unit="x", published=float(e["expected"]["two_pod_throughput_vs_one_pod"]),
            how="weak_scaling", scenarios=sc, scale=float(sc[1]["pod"]["slices"]),
            note=f"model and parallelism from {palm['id']}'s inputs; per-pod batch held fixed; ratio = pods x step(1 pod) / step(2 pods)",
        )  # fmt: skip
    if "mfu_with_attention" in e["expected"] and "tokens_per_s" in inp and "P_per_chip" in inp:
        palm = _find(entries, _is_palm)
        m = _palm_model(palm["inputs"]) if palm else None
        if m is None or abs(float(palm["inputs"]["params"]) - float(inp.get("N", 0))) > 0.01 * float(inp.get("N", 1)):
            return Skipped(e["id"], e["kind"], "MFU formula for a model whose dims this file does not give")
        per_s = float(inp["tokens_per_s"]) / (float(inp["P_per_chip"]) * int(inp["chips"]))
        return Case(
            id=e["id"], kind=e["kind"], family="PaLM", chip="tpu-v4", model="PaLM 540B",
            metric="MFU with attention (Podscope FLOP count)", unit="fraction", published=float(e["expected"]["mfu_with_attention"]),
            how="flops_per_token", scenarios=(_scenario(e["id"], "tpu-v4", "4x4x4", 1, m, 64),), work_per_step=per_s,
            note="the entry's tokens/s and peak with Podscope's training FLOPs per token (3x forward GEMMs incl. full "
                 "attention score/value matmuls, PaLM App. B counts 6N + 12LHQT): checks the FLOP convention, not timing",
        )  # fmt: skip
    return None


def _map_formula(e: Entry) -> Case | Skipped | None:
    inp = e["inputs"]
    op = str(inp.get("op", ""))
    if not (op.startswith(("AllGather", "AllReduce")) and "time_us" in e["expected"] and "W_ici_bidi_Bps" in inp):
        return None
    chip = chip_key(str(inp.get("chip", "")))
    mesh = inp.get("mesh") or {"X": 4, "Y": 4, "Z": 4}
    axis = re.search(r"_(\w)\(", op).group(1)
    n = int(mesh.get(axis, 4))
    elem = 2 if inp.get("dtype") == "bf16" else 4
    full = float(inp["B"]) * float(inp["D"]) * elem
    # Bytes each ring moves: the gathered array is sharded over the other mesh axis named in the op ([B_X, D_Y]).
    other = [a for a in re.findall(r"_(\w)", op.split("(", 1)[1]) if a != axis and a != "U"]
    if op.startswith("AllGather"):
        shard = math.prod(int(mesh.get(a, 1)) for a in other)
        formula = {"op": "all_gather", "bytes": full / shard, "n": n, "link_bytes_per_s": float(inp["W_ici_bidi_Bps"]) / 2}
    else:
        formula = {"op": "all_reduce", "bytes": full, "n": n, "link_bytes_per_s": float(inp["W_ici_bidi_Bps"]) / 2}
    return Case(
        id=e["id"], kind=e["kind"], family="Scaling book", chip=chip or "", model="collective",
        metric=f"{formula['op'].replace('_', '-')} time (us)", unit="us", published=float(e["expected"]["time_us"]),
        how="collective", formula=formula,
        note=f"engine ring cost on a {n}-chip wraparound axis at the entry's bandwidth, ideal link efficiency, calibrated hop latency",
    )  # fmt: skip


_SKIP_HINTS = (
    (lambda e: "TPU7x" in str(e["inputs"].get("chip", "")) or "Ironwood" in str(e["inputs"].get("chip", "")),
     "a TPU7x (Ironwood) microbenchmark counted per device (two per chip): its device-to-chip mapping is ambiguous"),
    (lambda e: "type not stated" in str(e["inputs"].get("chip", "")), "the source does not say which chip ran it"),
    (lambda e: "rows" in e["inputs"] and any("V100" in str(r) or "A100" in str(r) for r in e["inputs"]["rows"]),
     "mostly GPU systems; the TPU rows lack model dims and batch"),
    (lambda e: "gpu" in e["inputs"] or "A100" in json.dumps(e["inputs"]), "a GPU figure; Podscope models TPUs"),
    (lambda e: "note" in e["inputs"] and "vendor" in str(e["inputs"]["note"]).lower(),
     "a vendor aggregate bandwidth with no stated measurement method (message size, algorithm)"),
    (lambda e: "what" in e["inputs"] and "init" in str(e["inputs"]["what"]).lower(),
     "initialisation (compile + checkpoint + pipeline setup) time; Podscope does not predict a job's initialisation time"),
    (lambda e: set(e["inputs"]) <= {"system", "benchmarks", "models"}, "abstract-level figure without a configuration"),
)  # fmt: skip


def _skip_reason(e: Entry) -> str:
    for test, reason in _SKIP_HINTS:
        try:
            if test(e):
                return reason
        except (TypeError, KeyError):
            continue
    if e["kind"] == "formula_example":
        return "book arithmetic on the entry's own constants (no engine quantity to predict), or an op the engine lacks"
    return "no mapping from this entry's inputs to a scenario"


def map_entries(entries: list[Entry]) -> tuple[list[Case], list[Skipped]]:
    """Split reference entries into expressible cases and skipped entries (with reasons), in file order."""
    cases: list[Case] = []
    skipped: list[Skipped] = []
    for e in entries:
        if e["kind"] not in PREDICTED_KINDS:
            skipped.append(Skipped(e["id"], e["kind"], "chip spec: an input to data/chips.toml, not a prediction"))
            continue
        out = _map_maxtext_multislice(e, entries) or _map_maxtext(e) or _map_mlperf(e) or _map_palm(e, entries) or _map_formula(e)
        if out is None:
            out = Skipped(e["id"], e["kind"], _skip_reason(e))
        (cases if isinstance(out, Case) else skipped).append(out)
    return cases, skipped
