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
of a known shape is picked up without code changes. MaxText's runs are mapped in
:mod:`profiler.maxtext_cases`; MLPerf, PaLM and the worked formula examples here.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from engine.convergence.time_to_train import FORWARD_SHARE_OF_STEP
from engine.errors import ReferenceFileError
from engine.model.batch_norm import POOLED_SPAN_IMAGES
from engine.pod.catalog import DATA_DIR, load_catalog
from engine.units import gradient_wire_dtype

from .maxtext_cases import (
    MAXTEXT_V5P_ATTENTION,
    map_maxtext,
    map_maxtext_multislice,
    maxtext_flops_per_chip_per_step,
    maxtext_scale_dims,
)
from .reference_cases import Case, Entry, Skipped, chip_key, default_topology, scenario_dict, to_int, transformer_params

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
    "TTT_KEY",
]

DEFAULT_REFERENCE_PATH = DATA_DIR / "reference" / "published.json"

#: kinds that are outcomes to predict; ``chip_spec`` entries are inputs (data/chips.toml)
PREDICTED_KINDS = ("end_to_end", "collective", "formula_example")

#: Published architectures named (not dimensioned) by some entries. Inputs, not outcomes.
#: GPT-3 175B: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1
#: (96 layers, d_model 12288, 96 heads of 128, d_ff = 4 d_model, context 2048; GPT-2 BPE vocab 50257).
KNOWN_ARCHITECTURES = {
    "GPT-3 175B": {"layers": 96, "d_model": 12288, "heads": 96, "d_ff": 49152, "vocab": 50257, "mlp": "gelu"},
}
#: BERT-Large: Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers", sec. 3 (L = 24,
#: H = 1024, A = 16, feed-forward 4H) with its 30,522-token WordPiece vocabulary. MLPerf trains it at seq 512 with
#: 76 masked positions per sequence, and the masked-LM head projects only those onto the vocabulary through the input
#: embedding's table: mlcommons/training_results_v0.7 Google/benchmarks/bert/tpu-v4-16-TF/run_and_time.sh
#: (``--max_seq_length=512 --max_predictions_per_seq=76``) and its implementation's run_pretraining.py
#: (``get_masked_lm_output``: ``gather_indexes(input_tensor, positions)``, "The output weights are the same as the
#: input embeddings").
BERT_LARGE = {"layers": 24, "d_model": 1024, "heads": 16, "d_ff": 4096, "vocab": 30522, "mlp": "gelu", "seq_len": 512,
              "loss_positions": 76, "tied_embeddings": True}
#: ImageNet-1k training images (Russakovsky et al. 2015, table 2) and validation images
IMAGENET_TRAIN_IMAGES, IMAGENET_VAL_IMAGES = 1_281_167, 50_000
#: MLPerf BERT's evaluation set: the reference's ``eval_10k``, 10,000 samples (mlcommons/training
#: language_model/tensorflow/bert README: ``pick_eval_samples.py --num_examples_to_pick=10000``)
BERT_EVAL_SAMPLES = 10_000


def _mlperf_round(e: Entry) -> tuple[int, ...] | None:
    """The MLPerf Training round whose rules an entry ran under, from the results repository its source names
    (``training_results_v0.7`` -> (0, 7)); None when the source names none."""
    m = re.search(r"training_results_v(\d+)\.(\d+)", json.dumps(e.get("source", {})))
    return (int(m.group(1)), int(m.group(2))) if m else None


def bert_eval_every_samples(global_batch: int, mlperf_round: tuple[int, ...]) -> float:
    """Training samples between two evaluations of MLPerf BERT under a round's rules (mlcommons/training_policies
    training_rules.adoc, "Evaluation frequency"): from v1.0 on ``FLOOR(0.05 * (230.23 * GBS + 3,000,000), 25000)``
    (commit c5f9e48, 2021-04-26); in v0.7 every 500K samples after the first at 3M (:func:`bert_eval_first_samples`)."""
    if mlperf_round < (1, 0):
        return 500_000.0
    return float(math.floor(0.05 * (230.23 * global_batch + 3_000_000) / 25_000) * 25_000)


def bert_eval_first_samples(mlperf_round: tuple[int, ...]) -> float | None:
    """The first evaluation's point of MLPerf BERT under a round's rules, in training samples: in v0.7 at 3M, so no run
    stops before 3M samples (the v0.7 Google submissions' logs: every run of a batch up to 3,072 stops at 2,999,808 to
    3,000,000 samples); None from v1.0 on (the first after one interval)."""
    return 3_000_000.0 if mlperf_round < (1, 0) else None


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

#: MLPerf ResNet-50 evaluates the 50,000 validation images every 4 epochs (training_rules.adoc, "Evaluation
#: frequency": every 4 epochs); the entries' steady state is measured over such blocks
RESNET_EVAL_EVERY_EPOCHS = 4


def _eval_share(eval_samples: float, every_samples: float) -> float:
    """Evaluation time over training time when ``eval_samples`` forward passes follow every ``every_samples``
    training samples (an evaluation sample costs a forward pass: :data:`FORWARD_SHARE_OF_STEP` of a training one)."""
    return eval_samples * FORWARD_SHARE_OF_STEP / every_samples


def _gpt3_eval(e: Entry) -> tuple[float, float] | None:
    """(training samples between evaluations, samples per evaluation) of an MLPerf GPT-3 entry, from its evaluation
    interval in tokens and the evaluation set its note names; None when the entry gives either not."""
    every_tokens = float(e["expected"].get("eval_interval_tokens", 0))
    evals = re.search(r"eval pass over ([\d,]+) sequences", str(e.get("tolerance_note", "")))
    seq = to_int(e["inputs"].get("seq_len")) or 2048
    if not every_tokens or not evals:
        return None
    return every_tokens / seq, float(evals.group(1).replace(",", ""))


def _with_sharded_update(scenario: dict[str, Any]) -> dict[str, Any]:
    """The Google MLPerf submissions shard the weight update across replicas: "Scale MLPerf-0.6 models on
    Google TPU-v3 Pods" (Kumar et al. 2019, arXiv:1909.09756) and "Exploring the limits of concurrency in
    ML training on Google TPUs" (Kumar et al. 2021) name weight-update sharding among the techniques of
    those runs. Xu et al. 2020 ("Automatic Cross-Replica Sharding of Weight Update in Data-Parallel
    Training", arXiv:2004.13336, abstract) describe it as an automatic transformation of the TPU compiler
    for data-parallel training, "requiring no change to model code", that speeds up image and language
    models and makes an Adam-like optimizer's update "a small part of training step time": the
    ResNet-50 (LARS) and BERT (LAMB) submissions both train data parallel."""
    scenario["parallelism"]["shard_weight_update"] = True
    return scenario

def mlperf_gradient_reduce_dtype(framework: str, benchmark: str, mlperf_round: tuple[int, ...] | None, replicas: int) -> str:
    """``training.gradient_reduce_dtype`` of a Google MLPerf submission, from its code and flags (mlcommons/training_results_*,
    Google/benchmarks/.../implementations):

    - ResNet-50 in TF before v1.0 wraps its optimizer in ``CrossShardOptimizer`` (v0.6 ``tpu-v3-*-resnet/resnet_main.py``,
      v0.7 ``resnet-research-TF-*/resnet_main.py``), which sums the fp32 gradients across replicas: ``"weights"``;
    - ResNet-50 in TF from v1.0 sums them in bf16 when ``num_replicas <= bfloat16_replica_threshold`` (v1.0
      ``resnet-preview-TF-tpu-v4-128/resnet_main.py``), and every v1.0 and v2.0 run script sets the threshold to 8192;
    - BERT in TF (v0.7 to v2.0) runs with ``--use_bfloat16_all_reduce`` (every ``tpu-v4-*-TF`` / ``tpu-v3-8192-TF``
      ``run_and_time.sh``), and BERT in JAX (v0.7) psums bf16 gradients (``run_pretraining.py``:
      ``reduce_gradients_in_bf16`` defaults to True): ``"compute"``;
    - TF 2.0 programs all-reduce explicitly in fp32 on TPU (v0.7 ``tf2_common/training/grad_utils.py``, "TPU or FP32 GPU
      code path": ``allreduce_precision="float32"``): ``"weights"``.
    """
    fw = framework.lower()
    if fw.startswith("tf2"):
        return "weights"
    if "resnet" in benchmark.lower() and fw == "tf":
        return "compute" if mlperf_round is not None and mlperf_round >= (1, 0) and replicas <= 8192 else "weights"
    return "compute"


#: PaLM (Chowdhery et al. 2022, sec. 2: multi-query attention) trained before TPU flash kernels existed
#: (JAX's Pallas TPU flash attention, jax.experimental.pallas.ops.tpu, dates from 2023).
PALM_ATTENTION = ("standard", "PaLM 2022 predates TPU flash-attention kernels")

def resnet_batch_norm_group(per_chip_images: float) -> int:
    """Chips that pool batch-norm statistics so a group holds at least ``POOLED_SPAN_IMAGES`` images, as the
    Google MLPerf ResNet-50 submissions ran (their logs' ``model_bn_span``; engine/model/batch_norm.py)."""
    return max(1, math.ceil(POOLED_SPAN_IMAGES / per_chip_images))


def _resnet_scenario(name: str, chip: str, chips: int, batch: int, gradient_reduce_dtype: str) -> dict[str, Any]:
    """An MLPerf ResNet-50 system as a scenario: default slice shape, pooled batch norm, sharded update, momentum."""
    topo, slices = default_topology(chip, chips)
    model = {"kind": "resnet50", "batch_norm_group": resnet_batch_norm_group(batch / chips)}
    scenario = scenario_dict(name, chip, topo, slices, model, batch, optimizer="momentum")
    scenario["training"]["gradient_reduce_dtype"] = gradient_reduce_dtype
    return _with_sharded_update(scenario)


def _gradient_reduce_dtype(e: Entry) -> str:
    """:func:`mlperf_gradient_reduce_dtype` of an MLPerf entry (replicas: its chips, one replica each)."""
    inp = e["inputs"]
    return mlperf_gradient_reduce_dtype(str(inp.get("framework", "")), str(inp.get("benchmark", "")), _mlperf_round(e),
                                        to_int(inp.get("chips")) or 0)


def _map_mlperf(e: Entry) -> Case | Skipped | None:
    inp = e["inputs"]
    bench = str(inp.get("benchmark", ""))
    if not bench or "system" not in inp:
        return None
    exp = e["expected"]
    chip = chip_key(str(inp.get("chip", "")))
    if chip is None:
        return Skipped(e["id"], e["kind"], f"chip {inp.get('chip')!r} is not in the catalog")
    chips, batch = to_int(inp.get("chips")), to_int(inp.get("global_batch"))
    if "resnet-50" in bench.lower() and "steady_images_per_s_per_chip" in exp:
        if "LOW TRUST" in str(e.get("tolerance_note", "")):
            return Skipped(e["id"], e["kind"], "the entry flags its steady-state throughput as low trust (its time to "
                           "train is predicted in the time_to_train group)")  # fmt: skip
        topo, slices = default_topology(chip, chips)
        per_chip = batch / chips
        bn_group = resnet_batch_norm_group(per_chip)
        reduce_dtype = _gradient_reduce_dtype(e)
        model = {"kind": "resnet50", "batch_norm_group": bn_group}
        return Case(
            id=e["id"], kind=e["kind"], family="MLPerf ResNet-50", chip=chip, model="ResNet-50",
            metric="images/s per chip (steady state)", unit="images/s", published=float(exp["steady_images_per_s_per_chip"]),
            how="work_per_step", scenarios=(_resnet_scenario(e["id"], chip, chips, batch, reduce_dtype),),
            work_per_step=per_chip,
            eval_share=_eval_share(IMAGENET_VAL_IMAGES, RESNET_EVAL_EVERY_EPOCHS * IMAGENET_TRAIN_IMAGES),
            note=f"{topo} x {slices} slice(s), {per_chip:g} images/chip, batch norm pooled over {bn_group} chip(s), "
                 f"momentum (LARS-like) optimizer, gradients summed in {gradient_wire_dtype('bf16', 'fp32', reduce_dtype)}, weight update sharded "
                 "across replicas (Kumar et al. 2019, 2021: the TPU MLPerf ResNet-50 submissions); the published "
                 "steady state includes each 4-epoch block's evaluation of the 50,000 validation images (forward "
                 "only), and so does the prediction",
        )  # fmt: skip
    arch = next((a for name, a in KNOWN_ARCHITECTURES.items() if name.lower() in bench.lower()), None)
    if arch is not None and "derived_s_per_step_incl_eval_share" in exp:
        cfg = str(inp.get("config", ""))
        fsdp = int(re.search(r"fsdp(\d+)", cfg).group(1)) if "fsdp" in cfg else chips
        tp = int(re.search(r"tp(\d+)", cfg).group(1)) if re.search(r"tp(\d+)", cfg) else 1
        topo_m = re.search(r"topology (\d+x\d+x\d+)", cfg)
        topo = topo_m.group(1) if topo_m else default_topology(chip, chips)[0]
        seq = to_int(inp.get("seq_len")) or 2048
        precision = "int8" if "int8" in str(inp.get("precision", "")).lower() else "bf16"
        remat = "full" if "remat full" in cfg else "none"
        attention, kernel_src = MAXTEXT_V5P_ATTENTION if "maxtext" in str(inp.get("framework", "")).lower() else ("standard", "framework names no kernel")
        model = {"kind": "transformer", "seq_len": seq, **arch, "attention": attention}
        ev = _gpt3_eval(e)
        share = _eval_share(ev[1], ev[0]) if ev else 0.0
        eval_note = (f"the published step includes its share of the evaluation of {ev[1]:,.0f} sequences (forward only) "
                     f"every {ev[0]:,.0f} training sequences, and so does the prediction (+{share:.0%})"
                     if ev else "the published step includes its share of eval time, which the entry does not size")  # fmt: skip
        return Case(
            id=e["id"], kind=e["kind"], family="MLPerf GPT-3", chip=chip, model="GPT-3 175B",
            metric="step time (s)", unit="s", published=float(exp["derived_s_per_step_incl_eval_share"]),
            how="step_time", scenarios=(scenario_dict(e["id"], chip, topo, 1, model, batch, precision=precision, remat=remat, fsdp=fsdp, tensor=tp),),
            eval_share=share,
            note=f"{topo}, fsdp {fsdp} x tp {tp}, {precision}, remat {remat}, {attention} attention ({kernel_src}); "
                 f"architecture from Brown et al. 2020 Table 2.1; {eval_note}",
        )  # fmt: skip
    reason = "only time-to-train is given; predicting it needs the samples to converge, which the entry does not give"
    if "ssd" in bench.lower():
        reason += ", and SSD-ResNet34 is not an engine model"
    elif "bert" in bench.lower() or "transformer" in bench.lower():
        reason += " (BERT-Large / WMT Transformer would map to the transformer model)"
    return Skipped(e["id"], e["kind"], reason)

#: the score an MLPerf entry states (its tolerance note: mean after dropping the fastest and slowest run)
TTT_KEY = "ttt_s_olympic"


def _map_time_to_train(e: Entry, step_case: Case | Skipped | None) -> Case | Skipped | None:
    """An MLPerf entry's measured time to train (``ttt_s_olympic``) as a ``time_to_train`` case, or why not.

    The scenario is the entry's system as the step-time mapping builds it, plus a ``[convergence]``
    task fitted to MLPerf's reference convergence points (engine/convergence), never to these
    entries: nothing in the prediction is tuned on a time to train. MLPerf's clock starts after
    initialisation (run_start), so no compile is counted.
    """
    inp, exp = e["inputs"], e["expected"]
    bench = str(inp.get("benchmark", "")).lower()
    if TTT_KEY not in exp or "system" not in inp:
        return None
    chip = chip_key(str(inp.get("chip", "")))
    chips, batch = to_int(inp.get("chips")), to_int(inp.get("global_batch"))
    if chip is None or not chips or not batch:
        return None
    eval_note = ""
    if "resnet-50" in bench:
        task, family, label = "mlperf-resnet50", "MLPerf ResNet-50", "ResNet-50"
        scenario = _resnet_scenario(e["id"], chip, chips, batch, _gradient_reduce_dtype(e))
        # the entry's note: each block is 4 epochs of training and one evaluation on the 50,000 validation images
        convergence = {"eval_every_samples": 4 * IMAGENET_TRAIN_IMAGES, "eval_samples": IMAGENET_VAL_IMAGES}
        eval_note = "an evaluation of the 50,000 validation images every 4 epochs (forward only)"
    elif "bert" in bench:
        task, family, label = "mlperf-bert", "MLPerf BERT", "BERT-Large"
        topo, slices = default_topology(chip, chips)
        model = {"kind": "transformer", **BERT_LARGE, "attention": "standard"}
        scenario = _with_sharded_update(scenario_dict(e["id"], chip, topo, slices, model, batch))
        scenario["training"]["gradient_reduce_dtype"] = _gradient_reduce_dtype(e)
        rnd = _mlperf_round(e)
        convergence = {}
        eval_note = "no evaluation time (the source names no MLPerf round)"
        if rnd is not None:
            every, first = bert_eval_every_samples(batch, rnd), bert_eval_first_samples(rnd)
            convergence = {"eval_every_samples": every, "eval_samples": BERT_EVAL_SAMPLES}
            eval_note = (f"an evaluation of {BERT_EVAL_SAMPLES:,} samples every {every:,.0f} training samples (MLPerf "
                         f"v{rnd[0]}.{rnd[1]}'s rule)")
            if first is not None:
                convergence["eval_first_samples"] = first
                eval_note += f", the first at {first:,.0f}: the earliest a run can stop"
        reduced = gradient_wire_dtype("bf16", "fp32", scenario["training"]["gradient_reduce_dtype"])
        eval_note += (f"; Adam's state for LAMB; gradients summed in {reduced}; weight update "
                      "sharded across replicas (Xu et al. 2020)")
    elif isinstance(step_case, Case) and step_case.family == "MLPerf GPT-3":
        task, family, label = "mlperf-gpt3-175b", "MLPerf GPT-3", "GPT-3 175B"
        scenario = {k: (dict(v) if isinstance(v, dict) else v) for k, v in step_case.scenarios[0].items()}
        ev = _gpt3_eval(e)
        convergence = {"eval_every_samples": ev[0], "eval_samples": ev[1]} if ev else {}
        eval_note = "the benchmark's evaluation interval and eval-set size as the entry's note states them"
    else:
        why = "SSD-ResNet34 is not an engine model" if "ssd" in bench else "no bundled convergence task for this benchmark"
        return Skipped(e["id"], "time_to_train", f"time to train: {why}")
    scenario["name"] = f"{e['id']} (time to train)"
    scenario["convergence"] = {"task": task, **convergence}
    return Case(
        id=f"{e['id']}_time_to_train", kind="time_to_train", family=family, chip=chip, model=label,
        metric="time to train (s)", unit="s", published=float(exp[TTT_KEY]), how="time_to_train", scenarios=(scenario,),
        from_entry=e["id"],
        note=f"steps from the {task} fit (data/convergence.toml) at batch {batch:,} x the predicted step, plus {eval_note}; "
             "MLPerf's clock starts after initialisation, so no compile",
    )  # fmt: skip


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
    per_dff = (transformer_params({**base, "d_ff": 512}) - transformer_params(base)) / 256
    d_ff = (float(inp["params"]) - transformer_params(base)) / per_dff + 256
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
    one = scenario_dict(f"{name} (1 pod)", chip, topo, 1, m, batch // pods, **kw)
    job = scenario_dict(name, chip, topo, pods, m, batch, **kw)
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
            how="flops_per_token", scenarios=(scenario_dict(e["id"], "tpu-v4", "4x4x4", 1, m, 64),), work_per_step=per_s,
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

#: the accelerator-microbenchmarks' chip name -> catalog key
_MICROBENCH_CHIPS = {"TPU7x (Ironwood)": "tpu7x"}


def _map_microbench(e: Entry) -> tuple[Case, ...] | Case | None:
    """Google's accelerator-microbenchmarks on TPU7x as checks of the link and HBM efficiencies.

    TPU7x presents each TensorCore as a JAX device (``devices_per_chip = 2`` in data/chips.toml,
    JAX's ``ChipVersion`` table: no megacore), and the benchmark runs its replica groups side by
    side ("parallel" groups): the all-gather's 4-rank rings are as many per chip as it has devices,
    so each ring has ``1 / devices_per_chip`` of a link. Its time is the benchmark's transferred
    bytes over its achieved bandwidth, per row. The HBM copy runs on one device: the chip's
    bandwidth over its devices, reading and writing the tensor.
    """
    inp, exp = e["inputs"], e["expected"]
    chip = _MICROBENCH_CHIPS.get(str(inp.get("chip", "")))
    if chip is None:
        return None
    spec = load_catalog()[chip]
    if "rows" in exp and inp.get("dtype") == "f32" and "participants_rank" in inp:
        rank = int(inp["participants_rank"])
        cases = []
        for row in exp["rows"]:
            shard = float(row["elements_per_device"]) * 4
            cases.append(Case(
                id=f"{e['id']}_{row['topology']}_{row['elements_per_device']}", from_entry=e["id"], kind=e["kind"],
                family="accelerator-microbenchmarks", chip=chip, model="collective",
                metric=f"all-gather time (us), {row['elements_per_device']:,} f32 per device on {row['topology']}",
                unit="us", published=float(row["derived_time_us"]), how="collective",
                formula={"op": "all_gather", "bytes": shard * rank, "n": rank, "efficiency": True,
                         "link_bytes_per_s": spec.ici_link_bytes_per_s / spec.devices_per_chip},
                note=f"engine ring over {rank} devices, {spec.devices_per_chip} rings sharing each link, calibrated link efficiency",
            ))  # fmt: skip
        return tuple(cases)
    if "tensor_bytes" in inp and "time_ms_8GiB" in exp:
        return Case(
            id=e["id"], kind=e["kind"], family="accelerator-microbenchmarks", chip=chip, model="HBM copy",
            metric="HBM copy time (us), 8 GiB on one device", unit="us", published=float(exp["time_ms_8GiB"]) * 1e3,
            how="hbm_copy", formula={"bytes": 2.0 * float(inp["tensor_bytes"]), "bytes_per_s": spec.hbm_bytes_per_s / spec.devices_per_chip},
            note="read and write at the device's share of the chip's HBM bandwidth, calibrated HBM efficiency",
        )  # fmt: skip
    return None


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
        out = map_maxtext_multislice(e, entries) or map_maxtext(e) or _map_mlperf(e) or _map_palm(e, entries) or _map_formula(e) or _map_microbench(e)
        ttt = _map_time_to_train(e, out)
        if isinstance(ttt, Case):
            cases.append(ttt)
            if isinstance(out, Skipped):  # predicted through its time to train; nothing of the entry is left unused
                continue
        elif isinstance(ttt, Skipped) and isinstance(out, Skipped):
            out = Skipped(out.id, out.kind, f"{out.reason}; {ttt.reason}")
        if out is None:
            out = Skipped(e["id"], e["kind"], _skip_reason(e))
        if isinstance(out, tuple):  # an entry with several comparable figures (a MoE run's 1-pod MFU and its multi-pod ratio)
            cases.extend(out)
        else:
            (cases if isinstance(out, Case) else skipped).append(out)
    return cases, skipped
