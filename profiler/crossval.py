"""Cross-validation folds that test generalisation: a whole chip generation or family held out.

A held-out error says something about a job Podscope has not seen only if the held-out case
shares nothing with the fit. Two rules make the folds honest:

* **Grouped folds.** A fold is every case with one value of a grouping key: the chip
  generation (:func:`generation`, the headline: "a chip the fit never saw") or the source
  family (MaxText, MLPerf ResNet-50, PaLM, ...).
* **Identical configurations never straddle.** Cases that simulate the same configuration
  (same chip, chip count, model and global batch: one MLPerf system submitted to two MLPerf versions)
  form one block (:func:`identical_blocks`). When a block's cases carry different keys, the
  folds of those keys are merged (union-find), so a configuration is always on one side of a
  fold. With the bundled reference no merge happens (identical configurations share chip and
  family), but the rule holds for any reference file.

The expensive part, refitting without each fold, is :func:`held_out_errors`; ``profiler
calibrate`` runs it once and records the per-case errors, which ``validate`` reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from engine.scenario import parse_topology

from .reference import Case

__all__ = [
    "generation",
    "family",
    "configuration_keys",
    "identical_blocks",
    "grouped_folds",
    "held_out_errors",
]


def generation(case: Case) -> str:
    """The case's chip generation: its catalog key (``tpu-v3``, ``tpu-v4``, ``tpu-v5p``, ...).

    v5e and v5p count as two generations: they are different chip designs (MXUs per core,
    HBM, torus dimensions in ``data/chips.toml``), so one does not vouch for the other.
    """
    return case.chip


def family(case: Case) -> str:
    """The case's source family (``Case.family``: MaxText, MLPerf ResNet-50, PaLM, ...)."""
    return case.family


def configuration_keys(case: Case) -> set[str]:
    """What makes two cases the same configuration: chip, chips, model and global batch of each scenario.

    The scenario's name and step count are left out (they differ between copies of one system).
    A case without scenarios (a collective formula) is a configuration of its own.
    """
    keys = set()
    for raw in case.scenarios:
        pod = raw["pod"]
        chips = math.prod(parse_topology(str(pod["topology"]))) * int(pod.get("slices", 1))
        model = json.dumps(raw["model"], sort_keys=True)
        keys.add(f"{pod['chip']}|{chips}|{model}|{raw['training']['global_batch']}")
    return keys or {f"case:{case.id}"}


def _find(parent: dict[Any, Any], x: Any) -> Any:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def _union(parent: dict[Any, Any], a: Any, b: Any) -> None:
    ra, rb = _find(parent, a), _find(parent, b)
    if ra != rb:
        parent[max(ra, rb)] = min(ra, rb)


def identical_blocks(cases: Sequence[Case]) -> list[list[Case]]:
    """Cases grouped by shared configuration (transitively), in the order of their first case."""
    parent: dict[Any, Any] = {i: i for i in range(len(cases))}
    first: dict[str, int] = {}
    for i, case in enumerate(cases):
        for key in configuration_keys(case):
            if key in first:
                _union(parent, first[key], i)
            else:
                first[key] = i
    blocks: dict[int, list[Case]] = {}
    for i, case in enumerate(cases):
        blocks.setdefault(_find(parent, i), []).append(case)
    return list(blocks.values())


def grouped_folds(cases: Sequence[Case], key: Callable[[Case], str]) -> dict[str, list[Case]]:
    """Folds by ``key`` (e.g. :func:`generation`), merged where an identical configuration spans keys.

    Returns
    -------
    dict fold label -> cases, sorted by label. A merged fold's label joins its keys with ``+``.
    """
    labels = sorted({key(c) for c in cases})
    parent: dict[Any, Any] = {k: k for k in labels}
    for block in identical_blocks(cases):
        keys = sorted({key(c) for c in block})
        for other in keys[1:]:
            _union(parent, keys[0], other)
    members: dict[str, list[str]] = {}
    for k in labels:
        members.setdefault(_find(parent, k), []).append(k)
    label_of = {k: "+".join(ks) for ks in members.values() for k in ks}
    folds: dict[str, list[Case]] = {}
    for case in cases:
        folds.setdefault(label_of[key(case)], []).append(case)
    return dict(sorted(folds.items()))


def held_out_errors(
    folds: dict[str, list[Case]],
    cases: Sequence[Case],
    fitter: Callable[[list[Case]], Any],
    predict: Callable[[Case, Any], float],
) -> dict[str, float]:
    """% error of every case in a fold, predicted by a fit on all cases outside that fold.

    ``fitter(train)`` returns an object with a ``.calibration``; ``predict(case, calibration)``
    gives the case's metric. A fold that leaves nothing to fit on is not predicted.

    Returns
    -------
    dict case id -> 100 * (predicted - published) / published, sorted by id.
    """
    out: dict[str, float] = {}
    for test in folds.values():
        test_ids = {c.id for c in test}
        train = [c for c in cases if c.id not in test_ids]
        if not train:
            continue
        cal = fitter(train).calibration
        for c in test:
            out[c.id] = 100.0 * (predict(c, cal) - c.published) / c.published
    return dict(sorted(out.items()))
