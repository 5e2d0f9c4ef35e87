"""What a run assumed about how the job runs: attention kernel, remat policy, precision recipe,
whether the data-parallel gradient all-reduce overlaps the backward pass, whether
tensor-parallel collectives overlap their matmuls, and whether a ResNet's batch norm pools its
statistics over chips.

These choices move a transformer's step time by tens of percent, and a scenario may
leave them out. Each is stated in the run's facts (and so in ``run --json`` and on the
Overview page) with whether the scenario named it or the engine's default filled it in,
so a reader sees what the prediction rests on.
"""

from __future__ import annotations

from typing import Any

from ..scenario import ResNet50Model, Scenario, TransformerModel
from ..units import gradient_wire_dtype
from .batch_norm import POOLED_SPAN_IMAGES

__all__ = ["PRECISION_RECIPES", "precision_recipe", "run_assumptions"]

#: what each ``training.precision`` means for the chip's work (engine/model/compute.py, engine/units.py); the
#: model states' dtypes (``training.weight_dtype``, ``training.optimizer_state``) complete the recipe
PRECISION_RECIPES = {
    "bf16": "bf16 matmuls and activations",
    "int8": "int8 weight matmuls (AQT); bf16 attention einsums and activations",
    "fp32": "fp32 matmuls as 3 bf16 MXU passes; fp32 activations",
    "fp8": "fp8 weight matmuls at the chip's fp8 peak with fp32 accumulation, fp8 weights and activations in HBM and on the "
           "wire; bf16 attention einsums",
}  # fmt: skip


def precision_recipe(precision: str, weight_dtype: str = "fp32", optimizer_state: str = "fp32",
                     gradient_reduce_dtype: str = "compute") -> str:
    """The run's precision recipe: its compute (:data:`PRECISION_RECIPES`), its model states' dtypes
    (engine/memory/hbm.py) and the dtype its gradients are reduced in (:func:`~engine.units.gradient_wire_dtype`)."""
    if weight_dtype == "bf16":
        weights = "bf16 weights and gradients (no fp32 master copy)"
    else:
        weights = "fp32 weights and gradients" if precision == "fp32" else "fp32 master weights and gradients"
    reduced = gradient_wire_dtype(precision, weight_dtype, gradient_reduce_dtype)
    return f"{precision}: {PRECISION_RECIPES[precision]}; {weights}, {optimizer_state} optimizer state; gradients reduced in {reduced}"


def run_assumptions(scenario: Scenario) -> dict[str, Any]:
    """The run-level facts ``attention_kernel``, ``remat_policy``, ``precision_recipe`` and ``defaults_assumed``.

    ``attention_kernel`` is None for models without attention. ``defaults_assumed`` lists
    the scenario keys among ``model.attention``, ``training.remat`` and
    ``training.precision`` that the scenario left out, each with the value taken, and
    ``interconnect.overlap`` when the run all-reduces gradients across data-parallel
    replicas (a ``data`` axis, or slices over the DCN) and the scenario does not say
    whether that overlaps the backward pass, ``parallelism.collective_matmul`` when the run is tensor
    parallel and the scenario does not say, and ``model.batch_norm_group`` when a data-parallel
    ResNet holds fewer than :data:`~engine.model.batch_norm.POOLED_SPAN_IMAGES` images per chip and the scenario does not say.
    """
    model, tr = scenario.model, scenario.training
    assumed: dict[str, str] = {}
    kernel = None
    if isinstance(model, TransformerModel):
        kernel = model.attention_kernel
        if model.attention == "autoselected":
            assumed["model.attention"] = f"autoselected -> {kernel} (MaxText's default on TPU)"
    for key in ("remat", "precision"):
        if key not in tr.model_fields_set:
            assumed[f"training.{key}"] = str(getattr(tr, key))
    replicas = scenario.data_parallel * scenario.dcn_data_parallel
    if isinstance(model, ResNet50Model) and "batch_norm_group" not in model.model_fields_set and replicas > 1:
        if scenario.per_chip_batch < POOLED_SPAN_IMAGES:
            assumed["model.batch_norm_group"] = (f"1 (each chip normalises over its own {scenario.per_chip_batch} images; "
                                                 "large-batch TPU runs pool statistics over chips: set batch_norm_group)")  # fmt: skip
    if replicas > 1 and "overlap" not in scenario.interconnect.model_fields_set:
        # PaLM (Chowdhery et al. 2022, sec. 4) ran its cross-pod gradient reduction after the backward pass;
        # XLA can overlap it with compute (Cloud TPU Multislice overview; MaxText's v5p scripts turn on its
        # data-parallel all-reduce flags), which a scenario says with interconnect.overlap = true
        assumed["interconnect.overlap"] = ("false (the gradient all-reduce runs after the backward pass, exposed; "
                                           "true if XLA overlaps it with compute)")
    par = scenario.parallelism
    reduces = replicas > 1 or (par.fsdp > 1 and par.fsdp_shard != "optimizer") or par.context > 1
    if reduces and "gradient_reduce_dtype" not in tr.model_fields_set and gradient_wire_dtype(
            tr.precision, tr.weight_dtype, "compute") != gradient_wire_dtype(tr.precision, tr.weight_dtype, "weights"):
        assumed["training.gradient_reduce_dtype"] = ("compute (gradients reduced as their matmul writes them, as XLA's SPMD "
                                                     "partitioner does for a jit program; weights if the program reduces "
                                                     "them itself after autodiff: pmap's psum, TF's CrossShardOptimizer)")
    if par.tensor > 1 and "collective_matmul" not in par.model_fields_set:
        # Wang et al. 2023: the overlap a compile tuned for it aims at (MaxText's XLA options); xla-check shows a program's
        assumed["parallelism.collective_matmul"] = ("true (tensor-parallel collectives overlap the matmuls beside them, as a "
                                                    "compile tuned for it schedules them; with the compiler's default options "
                                                    "XLA runs many synchronously: false prices them so)")
    return {
        "attention_kernel": kernel,
        "remat_policy": tr.remat,
        "precision_recipe": precision_recipe(tr.precision, tr.weight_dtype, tr.optimizer_state, tr.gradient_reduce_dtype),
        "defaults_assumed": assumed,
    }
