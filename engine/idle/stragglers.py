"""Stragglers: chips slower than the rest, and why healthy chips wait for them.

Stragglers are persistent per-chip slowdown factors on compute (a listed chip or
host at a fixed ``slowdown``, and/or a random fraction of chips with a factor
drawn uniformly in ``[1, random_slowdown_max]``). At the step's barriers the
other chips wait for them (``sync_wait``); the run names them.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ScenarioError

__all__ = ["StragglerSection", "straggler_factors"]


class StragglerSection(BaseModel):
    """``[stragglers]``: chips or hosts slower than the rest."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # as engine/scenario/sections.py Section

    chips: list[Annotated[int, Field(ge=0)]] = []
    hosts: list[Annotated[int, Field(ge=0)]] = []
    slowdown: Annotated[float, Field(ge=1.0)] = 1.5  # compute time factor of listed chips/hosts
    random_fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    random_slowdown_max: Annotated[float, Field(ge=1.0)] = 1.5


def straggler_factors(section: StragglerSection | None, host_of_chip: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(chips,) compute-time factor of every chip (1.0 = healthy).

    Raises
    ------
    ScenarioError
        If a listed chip or host does not exist.
    """
    chips = len(host_of_chip)
    factor = np.ones(chips)
    if section is None:
        return factor
    hosts = int(host_of_chip.max()) + 1
    problems = [("stragglers.chips", f"chip {c} does not exist (0..{chips - 1})") for c in section.chips if c >= chips]
    problems += [("stragglers.hosts", f"host {h} does not exist (0..{hosts - 1})") for h in section.hosts if h >= hosts]
    if problems:
        raise ScenarioError("scenario", problems)
    if section.random_fraction > 0:
        picked = rng.random(chips) < section.random_fraction
        factor = np.where(picked, rng.uniform(1.0, section.random_slowdown_max, chips), factor)
    listed = np.isin(np.arange(chips), section.chips) | np.isin(host_of_chip, section.hosts)
    return np.where(listed, np.maximum(factor, section.slowdown), factor)
