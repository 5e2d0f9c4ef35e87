"""The advisor: turn a run summary into plain advice, by rules kept in ``data/advice.toml``.

Rules are data so thresholds and wording can be tuned without code: each rule
has conditions on summary metrics, a severity, a message template and the
metrics quoted as its evidence. Within a group only the first firing rule is
kept (the file lists the most severe first), so a run that is highly
input-bound is not also told it is moderately so.
"""

from __future__ import annotations

import math
import operator
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import ScenarioError
from engine.pod.catalog import DATA_DIR

__all__ = ["Rule", "load_rules", "advice_metrics", "advise", "ADVICE_PATH", "SEVERITIES"]

ADVICE_PATH = DATA_DIR / "advice.toml"
SEVERITIES = ("info", "warning", "critical")
_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, Field(min_length=1)]
    group: Annotated[str, Field(min_length=1)]
    severity: Literal["info", "warning", "critical"]
    when: Annotated[list[tuple[str, Literal[">=", ">", "<=", "<", "=="], float]], Field(min_length=1)]
    message: Annotated[str, Field(min_length=1)]
    evidence: list[str] = []


class _RuleFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[Rule]


@lru_cache(maxsize=4)
def load_rules(path: Path = ADVICE_PATH) -> tuple[Rule, ...]:
    """Read and validate the rule file.

    Raises
    ------
    ScenarioError
        If the file is unreadable or a rule is malformed (problems named by dotted key).
    """
    try:
        raw = tomllib.loads(Path(path).read_text())
        return tuple(_RuleFile.model_validate(raw).rules)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ScenarioError(str(path), [("", str(e))]) from e
    except ValidationError as e:
        raise ScenarioError(str(path), [(".".join(map(str, err["loc"])), err["msg"]) for err in e.errors()]) from None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return value
    return None


def advice_metrics(summary: dict[str, Any]) -> dict[str, float]:
    """The numbers rules can test: numeric summary keys, breakdown fractions, derived ratios."""
    m: dict[str, float] = {}
    for key, value in summary.items():
        n = _number(value)
        if n is not None:
            m[key] = n
    for kind, frac in (summary.get("breakdown") or {}).items():
        m[f"breakdown_{kind}"] = float(frac)
    if isinstance(summary.get("stragglers"), list):
        m["stragglers_count"] = float(len(summary["stragglers"]))
    k = m.get("batch_over_b_crit")
    if k:
        # half the batch on half the chips (same per-chip batch and step): S = S_min (1 + B_crit / B) and
        # E = E_min (1 + B / B_crit) (McCandlish et al. 2018) give these ratios at B = k B_crit
        m["half_batch_time_ratio"] = (k + 2.0) / (k + 1.0)
        m["half_batch_chip_hours_saved"] = (k / 2.0) / (1.0 + k)
    band, usable = summary.get("peak_hbm_range_bytes"), m.get("hbm_usable_bytes")
    if band and usable:
        # the top of the 80% range of XLA's peak against the HBM a step may use (profiler.ranges.peak_hbm_range)
        m["hbm_range_top_frac"] = float(band[1]) / usable
    wall = m.get("wall_time_s")
    if wall:
        for key, name in (("compile_s", "compile_frac"), ("checkpoint_s", "checkpoint_frac")):
            if key in m:
                m[name] = m[key] / wall
    return m


def advise(summary: dict[str, Any], rules: tuple[Rule, ...] | None = None) -> list[dict[str, Any]]:
    """Advice for a run summary, most severe first.

    Returns
    -------
    list of dict
        ``{"rule", "severity", "message", "evidence": {metric: number}}`` per firing rule.
    """
    rules = load_rules() if rules is None else rules
    m = advice_metrics(summary)
    out: list[dict[str, Any]] = []
    fired_groups: set[str] = set()
    for rule in rules:
        if rule.group in fired_groups:
            continue
        if not all(metric in m and _OPS[op](m[metric], threshold) for metric, op, threshold in rule.when):
            continue
        try:
            message = rule.message.format(**m)
        except (KeyError, ValueError, IndexError):
            message = rule.message  # a metric the template quotes is missing: keep the plain text
        fired_groups.add(rule.group)
        out.append(
            {
                "rule": rule.id,
                "severity": rule.severity,
                "message": message,
                "evidence": {name: m[name] for name in rule.evidence if name in m},
            }
        )
    out.sort(key=lambda a: -SEVERITIES.index(a["severity"]))  # stable: file order within a severity
    return out
