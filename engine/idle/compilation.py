"""XLA compilation: a compile-cost model and a cache keyed by input-shape signature.

A jitted step is compiled once per distinct input shape. Each step's shape is
its per-chip batch (a partial last batch of an epoch is smaller) and, for
sequence models with variable lengths, its padded sequence length (uniform
between ``seq_len_min`` and the model's ``seq_len``). The first step with a new
signature pays a compile on every chip (a ``recompile`` event, cause ``first``
or ``new_shape``); repeats are cache hits. The usual fixes change the shapes:
``drop_remainder`` drops partial batches; ``pad_to_max`` pads every sequence to
the model's ``seq_len``; ``buckets = N`` pads up to the nearest of N evenly spaced
lengths; ``fixed_input_signature`` compiles one program for the bounded shape
(XLA on TPU needs static shapes, so a relaxed signature runs padded to the bound).
Padding trades compiles for compute: steps run at the padded shape.

Compile cost: ``per_op_s x program_ops + per_chip_s x chips`` (parameters and
their calibration in ``data/compile_cost.toml``).

Without ``jit`` nothing is compiled, but each op is dispatched from the host
(``op_dispatch_us`` per op per pass instead of the fused per-op overhead) and,
with no fusion, memory-bound time grows by ``unfused_memory_factor``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ScenarioError
from ..pod.catalog import DATA_DIR
from ..trace import TABLES
from ..units import NS_PER_S

__all__ = [
    "CompileSection",
    "CompileCostParams",
    "CompilePlan",
    "load_compile_cost",
    "compile_time_s",
    "step_signatures",
    "plan_compiles",
    "eager_fwd_bwd_s",
]

COMPILE_COST_PATH = DATA_DIR / "compile_cost.toml"
COMPILES = TABLES["extra_compiles"]


class CompileSection(BaseModel):
    """``[compile]``: is the step jitted, and how do its input shapes vary. Absent: no compiles modelled."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # as engine/scenario/sections.py Section

    jit: bool = True
    shapes: Literal["fixed", "variable_seq_len"] = "fixed"
    seq_len_min: Annotated[int, Field(gt=0)] | None = None  # variable_seq_len: shortest padded length
    drop_remainder: bool = False
    pad_to_max: bool = False
    buckets: Annotated[int, Field(ge=0)] = 0  # 0: no bucketing
    fixed_input_signature: bool = False


@dataclass(frozen=True)
class CompileCostParams:
    per_op_s: float
    per_chip_s: float
    op_dispatch_s: float
    unfused_memory_factor: float


@lru_cache(maxsize=4)
def load_compile_cost(path: Path = COMPILE_COST_PATH) -> CompileCostParams:
    """Read ``data/compile_cost.toml`` (units converted here, once)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
        return CompileCostParams(
            per_op_s=float(raw["compile"]["per_op_s"]),
            per_chip_s=float(raw["compile"]["per_chip_s"]),
            op_dispatch_s=float(raw["eager"]["op_dispatch_us"]) * 1e-6,
            unfused_memory_factor=float(raw["eager"]["unfused_memory_factor"]),
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as e:
        raise ScenarioError(str(path), [("", f"bad compile-cost file: {e}")]) from e


def compile_time_s(params: CompileCostParams, program_ops: int, chips: int) -> float:
    """Seconds to compile one step program of ``program_ops`` distinct ops for ``chips`` devices."""
    return params.per_op_s * program_ops + params.per_chip_s * chips


def eager_fwd_bwd_s(matmul_s: float, memory_s: float, ops_per_step: float, params: CompileCostParams) -> float:
    """Forward + backward seconds without jit: unfused memory-bound ops, host dispatch per op."""
    return matmul_s + memory_s * params.unfused_memory_factor + ops_per_step * params.op_dispatch_s


def step_signatures(
    section: CompileSection,
    *,
    steps: int,
    per_chip_batch: int,
    batch_shards: int,
    global_batch: int,
    seq_len: int | None,
    dataset_samples: int | None,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step (per-chip batch, sequence length) the step runs at; seq is 0 for non-sequence models.

    Raises
    ------
    ScenarioError
        If variable sequence lengths are asked of a model without a sequence.
    """
    batch = np.full(steps, per_chip_batch, dtype=np.int64)
    rem = dataset_samples % global_batch if dataset_samples else 0
    if rem and not section.drop_remainder:
        per_epoch = -(-dataset_samples // global_batch)  # the last step of each epoch is partial
        last = (np.arange(steps) % per_epoch) == per_epoch - 1
        partial = -(-rem // batch_shards)
        batch[last] = per_chip_batch if section.fixed_input_signature else partial
    seq = np.zeros(steps, dtype=np.int64)
    if section.shapes == "variable_seq_len":
        if seq_len is None:
            problem = ("compile.shapes", "variable_seq_len needs a sequence model (model.kind = 'transformer')")
            raise ScenarioError("scenario", [problem])
        lo = section.seq_len_min or seq_len
        if lo > seq_len:
            raise ScenarioError("scenario", [("compile.seq_len_min", f"{lo} exceeds model.seq_len {seq_len}")])
        seq = rng.integers(lo, seq_len, endpoint=True, size=steps)
        if section.pad_to_max or section.fixed_input_signature:
            seq[:] = seq_len
        elif section.buckets:
            edges = np.unique(np.ceil(np.linspace(lo, seq_len, section.buckets + 1)[1:]).astype(np.int64))
            seq = edges[np.searchsorted(edges, seq)]
    elif seq_len is not None:
        seq[:] = seq_len
    return batch, seq


@dataclass(frozen=True)
class CompilePlan:
    """Per-step forward/backward and compile seconds, and the compile log."""

    fwd_bwd_s: np.ndarray  # (steps,) at each step's shape
    compile_s: np.ndarray  # (steps,) compile time paid at the step start (0 on cache hits)
    program_compile_s: float  # one compile of the step program
    signatures: list[str]  # per step
    compiles: pa.Table  # TABLES["extra_compiles"]


def _signature(b: int, s: int) -> str:
    return f"batch={b},seq={s}" if s else f"batch={b}"


def plan_compiles(
    section: CompileSection,
    *,
    batch: np.ndarray,
    seq: np.ndarray,
    fwd_bwd_for: Callable[[int, int], float],
    program_ops: int,
    chips: int,
    params: CompileCostParams,
) -> CompilePlan:
    """Walk the steps through a compilation cache keyed by shape signature.

    Parameters
    ----------
    batch, seq
        (steps,) shape of each step (from :func:`step_signatures`).
    fwd_bwd_for
        Seconds of forward + backward at ``(per_chip_batch, seq_len)`` (jitted or eager).
    """
    steps = len(batch)
    one_compile_s = compile_time_s(params, program_ops, chips) if section.jit else 0.0
    shapes, first, inverse = np.unique(np.stack([batch, seq], axis=1), axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    per_shape_s = np.array([fwd_bwd_for(int(b), int(s)) for b, s in shapes])
    compile_s = np.zeros(steps)
    labels = [_signature(int(b), int(s)) for b, s in shapes]
    rows_step, rows_sig, rows_cause = [], [], []
    if section.jit:
        order = np.argsort(first)
        compile_s[first] = one_compile_s
        rows_step = first[order].astype(np.int32)
        rows_sig = [labels[i] for i in order]
        rows_cause = ["first" if s == 0 else "new_shape" for s in rows_step]
    compiles = COMPILES.table(
        {
            "step": np.asarray(rows_step, dtype=np.int32),
            "signature": pa.array(rows_sig, pa.string()),
            "cause": pa.array(rows_cause, pa.string()),
            "compile_ns": np.full(len(rows_sig), round(one_compile_s * NS_PER_S), dtype=np.int64),
        }
    )
    return CompilePlan(
        fwd_bwd_s=per_shape_s[inverse],
        compile_s=compile_s,
        program_compile_s=one_compile_s,
        signatures=[labels[i] for i in inverse],
        compiles=compiles,
    )
