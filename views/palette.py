"""Every colour the dashboard uses, in one place: one colour per event kind and per memory term.

A figure never picks its own colour for a category: "input wait" is the same orange on the
Overview, Idle time, Timeline and Compare pages, and "activations" the same green in every
Memory chart. Colour scales are named here too, so "how much" reads the same on every page.
"""

from __future__ import annotations

__all__ = [
    "INFEASIBLE",
    "KIND_COLORS",
    "KIND_LABELS",
    "MEMORY_COLORS",
    "MEMORY_LABELS",
    "kind_color",
    "kind_label",
    "memory_color",
    "memory_label",
    "FALLBACK",
    "CAPACITY",
    "IDEAL",
    "PUBLISHED",
    "WORSE",
    "BETTER",
    "TOTAL",
    "SEQUENTIAL",
    "DIVERGING",
    "LINK_BANDS",
]

#: event kinds in drawing order (bottom of a stack first)
KIND_COLORS = {
    "compute": "#4C78A8",
    "collective": "#72B7B2",
    "input_wait": "#F58518",
    "sync_wait": "#E45756",
    "recompile": "#B279A2",
    "other": "#9D9D9D",
}
KIND_LABELS = {
    "compute": "Compute",
    "collective": "Collective (exposed)",
    "input_wait": "Input wait",
    "sync_wait": "Sync wait",
    "recompile": "Recompile",
    "other": "Other",
}

#: HBM terms in stacking order (what is resident all step first, what comes and goes last)
MEMORY_COLORS = {
    "params": "#1F5A99",
    "grads": "#6FA8DC",
    "optimizer": "#8E6BBF",
    "activations": "#54A24B",
    "temporary": "#EECA3B",
    "other": "#BAB0AC",
}
MEMORY_LABELS = {
    "params": "Parameters",
    "grads": "Gradients",
    "optimizer": "Optimizer state",
    "activations": "Activations",
    "temporary": "Temporaries",
    "other": "Other",
}

FALLBACK = "#BBBBBB"
CAPACITY = "#D62728"  # HBM capacity lines
IDEAL = "#888888"  # perfect-scaling and y = x reference lines
PUBLISHED = "#222222"  # published measurements
WORSE = "#E45756"  # a change that makes the step slower
BETTER = "#54A24B"  # a change that makes it faster
TOTAL = "#4C78A8"  # totals in a waterfall

#: how much of a non-negative quantity (fixed 0-100% scales, bytes)
SEQUENTIAL = "Blues"
#: above or below a centre (the median chip): red above, blue below
DIVERGING = "RdBu_r"
#: link utilisation bands: (low, high, colour)
LINK_BANDS = ((0.0, 0.25, "#C6DBEF"), (0.25, 0.5, "#6BAED6"), (0.5, 0.75, "#2171B5"), (0.75, 10.0, "#08306B"))


#: configurations that do not fit or are not valid (the Plan page's scatter)
INFEASIBLE = "#BBBBBB"


def kind_color(kind: str) -> str:
    return KIND_COLORS.get(kind, FALLBACK)


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind.replace("_", " "))


def memory_color(term: str) -> str:
    return MEMORY_COLORS.get(term, MEMORY_COLORS["other"])


def memory_label(term: str) -> str:
    return MEMORY_LABELS.get(term, term.replace("_", " "))
