"""Podscope's one exception hierarchy.

Every error Podscope raises on purpose derives from :class:`PodscopeError`, so a
front end (CLI, dashboard, sweep worker) can catch exactly Podscope's own failures
and let real bugs surface as tracebacks. The profiler's storage errors live here
too (``ProfilerError``) so that both packages share one base without ``engine``
importing ``profiler``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "PodscopeError",
    "ScenarioError",
    "TopologyError",
    "ProfilerError",
    "RunNotFoundError",
    "TraceImportError",
    "InputError",
]


class PodscopeError(Exception):
    """Base class of every error Podscope raises deliberately."""


class ScenarioError(PodscopeError):
    """A scenario (or override) is invalid.

    Carries every problem found, each as ``(dotted_key, message)``, so the user
    can fix them all in one edit rather than one per run.
    """

    def __init__(self, source: str, problems: Sequence[tuple[str, str]]):
        self.source = source
        self.problems = list(problems)
        lines = [f"{source}: {key}: {msg}" if key else f"{source}: {msg}" for key, msg in self.problems]
        super().__init__("invalid scenario\n  " + "\n  ".join(lines))


class TopologyError(PodscopeError):
    """A slice shape, mesh mapping or routing request the interconnect cannot serve."""


class ProfilerError(PodscopeError):
    """Storage, query or export failure (DuckDB errors are wrapped into this)."""


class RunNotFoundError(ProfilerError):
    """No run with the given id or name exists in the database."""


class TraceImportError(PodscopeError):
    """A trace file to import is malformed, too large or otherwise unusable."""


class InputError(PodscopeError):
    """A command-line argument or input file (export window, sweep file) is invalid; nothing was written."""
