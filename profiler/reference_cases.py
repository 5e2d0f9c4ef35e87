"""What a validation case is, and the helpers every source family's mapping builds one with.

A :class:`Case` is a published figure Podscope can predict: the scenario(s) built from the entry's
inputs, how the prediction is read from simulated step times, and the published value; a
:class:`Skipped` is an entry it cannot express, with the reason. The helpers turn what sources
write (chip names, chip counts, numbers in prose) into scenario keys. The mappings themselves
live with their source families (:mod:`profiler.maxtext_cases`, :mod:`profiler.reference`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from engine.pod.catalog import load_catalog

__all__ = ["Case", "Entry", "Skipped", "chip_key", "default_topology", "scenario_dict", "to_int", "transformer_params"]

#: one reference entry as read from the file (``id``, ``kind``, ``inputs``, ``expected``, ...)
Entry = dict[str, Any]


@dataclass(frozen=True)
class Case:
    """One comparable figure: scenario(s) built from inputs, how to read the prediction, the published value.

    ``how`` says how the prediction is read from simulated step times:

    * ``"work_per_step"``: ``work_per_step / step_s`` (a throughput: images, tokens or
      source-convention TFLOP per chip per step, divided by the predicted step time);
    * ``"step_time"``: the predicted step time itself, in seconds;
    * ``"weak_scaling"``: ``scale x step_s[0] / step_s[1]`` for two scenarios (throughput ratio);
    * ``"collective"``: an engine collective cost (``formula``) at the entry's constants, in us (at the
      calibrated link efficiency where ``formula["efficiency"]``: a measurement, not book arithmetic);
    * ``"hbm_copy"``: a copy's bytes over the HBM bandwidth at the calibrated efficiency, in us;
    * ``"flops_per_token"``: Podscope's training FLOPs per token of ``scenarios[0]`` times
      ``work_per_step`` (tokens/s / peak FLOP/s of the job): an MFU by Podscope's FLOP count;
    * ``"time_to_train"``: the run's time to train in seconds (its ``[convergence]`` plan priced at
      the predicted step, :func:`engine.convergence.time_to_train`); kind ``time_to_train``, never fitted.

    ``eval_share`` is the evaluation time a published step time or throughput includes, as a share of the
    training time (an MLPerf steady state is measured over blocks of training and one evaluation): the
    predicted step is the training step times ``1 + eval_share``. It comes from the entry's inputs (the
    benchmark's evaluation interval and set), an evaluation sample costing a forward pass, a third of a
    training sample's work (:data:`engine.convergence.FORWARD_SHARE_OF_STEP`).
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
    #: the reference entry a second figure of one entry comes from (its ``id`` is then derived); "" = ``id``
    from_entry: str = ""
    eval_share: float = 0.0

    @property
    def entry_id(self) -> str:
        """The id of the reference entry this case reads."""
        return self.from_entry or self.id

    @property
    def fit(self) -> bool:
        """End-to-end cases are what calibration fits; formula and collective checks are not tuned."""
        return self.kind == "end_to_end" and not self.never_fitted

@dataclass(frozen=True)
class Skipped:
    id: str
    kind: str
    reason: str


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

def transformer_params(m: dict[str, Any]) -> int:
    from engine.model.models import model_cost  # engine's count for the same architecture
    from engine.scenario import TransformerModel

    return model_cost(TransformerModel(kind="transformer", **m)).params

def to_int(value: Any) -> int | None:
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        m = re.match(r"\s*(\d+)", value)
        return int(m.group(1)) if m else None
    return None

def scenario_dict(name: str, chip: str, topology: str, slices: int, model: dict, batch: int, *, precision: str = "bf16",
              optimizer: str = "adam", remat: str = "none", fsdp: int = 1, tensor: int = 1, expert: int = 1,
                  weight_dtype: str = "fp32") -> dict[str, Any]:  # fmt: skip
    # Few steps are enough: with calibrated jitter the median steady step settles within a few.
    return {
        "name": name,
        "pod": {"chip": chip, "topology": topology, "slices": slices},
        "model": model,
        "training": {"global_batch": batch, "steps": 4, "precision": precision, "optimizer": optimizer, "remat": remat,
                     **({"weight_dtype": weight_dtype} if weight_dtype != "fp32" else {})},
        "parallelism": {"fsdp": fsdp, "tensor": tensor, **({"expert": expert} if expert > 1 else {})},
    }
