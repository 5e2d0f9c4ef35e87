"""Mixture-of-experts routing in a step: load across experts, capacity, dropped tokens.

A router sends each token to its top-k experts. Its load across experts is never
exactly even: per step, the share of the routed tokens each expert receives is
drawn from a symmetric Dirichlet distribution (mean ``1 / experts``; the
concentration below sets how uneven), seeded from the scenario. Each expert takes
at most its capacity, ``capacity_factor x tokens x k / experts`` tokens (GShard,
Lepikhin et al. 2020, sec. 2.2; Switch Transformer, Fedus et al. 2022, sec. 2.2);
the rest are dropped (they skip the layer through the residual connection). A capacity
factor of 0 is dropless routing (MegaBlocks, Gale et al. 2023): no expert has a capacity.

Expert parallelism lays the experts in contiguous groups of ``experts / expert``
over the ``expert`` mesh axis. The expert GEMMs of a group's chips run on the
tokens it kept (a grouped matmul over the routed tokens, as MaxText's megablox
kernels do), so the chips of the busiest group finish their MoE layers last and
the others wait for them at the step's barrier (``sync_wait``). Without expert
parallelism every chip holds every expert and only dropping changes its work.

Under GShard's dense dispatch (``moe_dispatch = "dense"``; Lepikhin et al. 2020, appendix A.2)
every expert computes its whole capacity buffer, ``capacity_factor`` times an even share, whether
its slots are filled or not: every group's work is that, whatever the load, and no group waits
for another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ROUTER_CONCENTRATION", "RoutingPlan", "plan_routing"]

#: Dirichlet concentration per expert of the per-step routed shares. Not a measured figure: an
#: assumption for a router trained with a load-balancing loss. With 8 experts it gives a busiest
#: expert ~1.2x the mean share per step (coefficient of variation ~0.09 per expert).
ROUTER_CONCENTRATION = 100.0


@dataclass(frozen=True)
class RoutingPlan:
    """Per-step routing outcome for a run."""

    group_factor: np.ndarray  # (steps, expert groups): tokens a group's chips compute / an even share
    dropped_frac: np.ndarray  # (steps,): routed tokens over capacity, as a fraction of all routed
    busiest_over_mean: np.ndarray  # (steps,): the busiest expert's routed share over the mean share

    def chip_factor(self, group_of_chip: np.ndarray) -> np.ndarray:
        """(steps, chips) work factor of each chip's expert GEMMs."""
        return self.group_factor[:, group_of_chip]


def plan_routing(experts: int, capacity_factor: float, groups: int, steps: int, rng: np.random.Generator,
                 dense: bool = False) -> RoutingPlan:  # fmt: skip
    """Draw each step's load across experts and what each expert group computes.

    Parameters
    ----------
    experts
        Routed experts per MoE layer.
    capacity_factor
        An expert takes at most ``capacity_factor / experts`` of the routed tokens; 0: no limit (dropless).
    groups
        Expert-parallel degree: experts are split into this many contiguous groups.
    steps
        Steps of the run; ``rng`` is the run's routing stream.
    dense
        GShard's dense dispatch: each group computes its experts' whole buffers (``capacity_factor``
        times an even share) instead of the tokens they kept.

    Returns
    -------
    RoutingPlan
        A group factor of 1.0 is an even share with nothing dropped.
    """
    share = rng.dirichlet(np.full(experts, ROUTER_CONCENTRATION), size=steps)  # (steps, experts), rows sum to 1
    capacity = capacity_factor / experts if capacity_factor > 0 else np.inf
    kept = np.minimum(share, capacity)
    per_group = kept.reshape(steps, groups, experts // groups).sum(axis=2)
    return RoutingPlan(
        group_factor=np.full((steps, groups), capacity_factor) if dense else per_group * groups,
        dropped_frac=np.maximum(share - capacity, 0.0).sum(axis=1),
        busiest_over_mean=share.max(axis=1) * experts,
    )
