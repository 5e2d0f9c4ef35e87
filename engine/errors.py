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
    "InputProblems",
    "ScenarioError",
    "TopologyError",
    "SimulationError",
    "ProfilerError",
    "RunNotFoundError",
    "TraceImportError",
    "ReferenceFileError",
    "PathNotAllowedError",
    "InputError",
    "PlanError",
    "HloError",
    "TpuCompileError",
]


class PodscopeError(Exception):
    """Base class of every error Podscope raises deliberately."""


class InputProblems(PodscopeError):
    """An input file with problems, each ``(dotted_key, message)``, reported all at once.

    So the user can fix them all in one edit rather than one per run.
    """

    what = "input"

    def __init__(self, source: str, problems: Sequence[tuple[str, str]]):
        self.source = source
        self.problems = list(problems)
        lines = [f"{source}: {key}: {msg}" if key else f"{source}: {msg}" for key, msg in self.problems]
        super().__init__(f"invalid {self.what}\n  " + "\n  ".join(lines))


class ScenarioError(InputProblems):
    """A scenario (or override) is invalid."""

    what = "scenario"


class PlanError(InputProblems):
    """A plan file (what configurations to search) is invalid."""

    what = "plan"


class TopologyError(PodscopeError):
    """A slice shape, mesh mapping or routing request the interconnect cannot serve."""


class SimulationError(PodscopeError):
    """A valid scenario whose simulated times the trace cannot represent.

    Trace times are int64 nanoseconds (about 292 years per run); a scenario with
    absurd sizes (a 10^30-sample batch) validates field by field but overflows them.
    """


class ProfilerError(PodscopeError):
    """Storage, query or export failure (DuckDB errors are wrapped into this)."""


class RunNotFoundError(ProfilerError):
    """No run with the given id or name exists in the database."""


class TraceImportError(PodscopeError):
    """A trace file to import is malformed, too large or otherwise unusable."""


class ReferenceFileError(InputProblems):
    """A published-reference file (validation input) is unreadable or malformed."""

    what = "reference file"


class PathNotAllowedError(PodscopeError):
    """A user-supplied file path that is empty, malformed or outside the allowed folder."""


class InputError(PodscopeError):
    """A command-line argument or input file (export window, sweep file) is invalid; nothing was written."""


class HloError(InputError):
    """An HLO module file that is missing, not HLO text, truncated, too large or inconsistent."""


class TpuCompileError(PodscopeError):
    """XLA could not compile a program for a TPU target, for a reason other than running out of HBM."""
