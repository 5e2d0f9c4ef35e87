"""The Python API for scripted runs: load, override, simulate, store, query, export, import, sweep.

Everything the CLI does is a function here; see ``examples/scripted_run.py`` for a
complete script.

Example
-------
>>> from profiler import api
>>> db = api.Database("my.duckdb")
>>> summary = api.run_file("data/scenarios/resnet50-v3-32.toml", db, overrides={"training.global_batch": 8192})
>>> summary["step_time_s"], summary["mfu"]
>>> api.breakdown(db, summary["run_id"])                      # chip time by kind (DataFrame)
>>> api.export_run(db, summary["run_id"], "perfetto", "run.json.gz").message()
>>> run_id = api.import_trace(db, "tests/fixtures/torch_cpu_mlp.trace.json.gz")
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine import Scenario, ScenarioError, SimulationError, load_scenario
from engine.errors import InputError
from engine.data_files import DATA_DIR

import pandas as pd

from . import queries
from .export import export_run
from .store import Database, check_run_name, resolve_run
from .streamed_write import simulate_and_write
from .sweep import make_executor, run_sweep
from .trace_import import import_trace

__all__ = [
    "Database",
    "run_scenario",
    "run_file",
    "summary",
    "breakdown",
    "export_run",
    "import_trace",
    "run_sweep",
    "make_executor",
    "BUNDLED_SCENARIOS_DIR",
    "bundled_scenarios",
    "scenario_path",
    "seed_examples",
]

BUNDLED_SCENARIOS_DIR = DATA_DIR / "scenarios"


def run_scenario(scenario: Scenario, db: Database, *, name: str | None = None) -> dict[str, Any]:
    """Simulate a validated scenario, store it, and return its summary."""
    run_id, _ = simulate_and_write(db, scenario, name=name)
    with db.read() as con:
        return queries.run_summary(con, run_id)


def run_file(
    path: str | Path,
    db: Database,
    *,
    name: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    xla: bool = False,
    xla_flags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Load a scenario file (with optional dotted-key overrides), simulate, store; return the summary.

    ``xla`` compiles the scenario's JAX program for its chip and topology with the TPU compiler first
    (:func:`profiler.xla_check.compile_numbers`, needs ``podscope[tpu]``) and takes XLA's HBM peak and
    verdict for the run (``hbm_source = "xla"``), compiled with ``xla_flags`` (XLA options beyond libtpu's defaults,
    :func:`profiler.tpu_capture.parse_xla_flags`; the run records them as ``hbm_xla_flags``).

    Raises
    ------
    ScenarioError
        If the file is invalid, or valid but too large to simulate (names the file; nothing is stored).
    InputError
        ``xla`` for a scenario with no JAX program (it says why), or without jax[tpu]; ``xla_flags`` without ``xla``.
    """
    if name is not None:
        check_run_name(name)
    if xla_flags and not xla:
        from .tpu_capture import FLAGS_WITHOUT_COMPILE

        raise InputError(FLAGS_WITHOUT_COMPILE)
    scenario = load_scenario(path, overrides)
    memory = None
    if xla:
        from . import xla_check, xla_reference

        why = xla_reference.refusal(scenario)
        if why:
            raise InputError(f"{path}: --xla: {why}")
        memory = xla_check.compiled_hbm(scenario, xla_flags)
    try:
        run_id, _ = simulate_and_write(db, scenario, name=name, xla_memory=memory)
    except SimulationError as e:
        raise ScenarioError(str(path), [("", str(e))]) from None
    with db.read() as con:
        return queries.run_summary(con, run_id)


def summary(db: Database, ref: str | int) -> dict[str, Any]:
    """The stored summary of a run, by id or name."""
    with db.read() as con:
        return queries.run_summary(con, resolve_run(con, ref))


def breakdown(db: Database, ref: str | int) -> pd.DataFrame:
    """Chip time by kind of a run (kind, chip_s, frac), by id or name."""
    with db.read() as con:
        return queries.breakdown(con, resolve_run(con, ref))


def scenario_path(text: str | Path) -> Path:
    """The scenario file ``text`` names: a path, or else a bundled scenario by name (``resnet50-v3-32``).

    An existing file always wins, so a bundled name only fills in where the path does not exist
    (``podscope run resnet50-v3-32`` from any folder, ``oom/gpt3-175b-no-remat-v5p-128`` too).
    """
    path = Path(text)
    if path.exists():
        return path
    bundled = BUNDLED_SCENARIOS_DIR / (path if path.suffix == ".toml" else path.with_name(path.name + ".toml"))
    return bundled if bundled.is_file() else path


def bundled_scenarios() -> list[Path]:
    """The example scenarios shipped in data/scenarios/, sorted by name."""
    return sorted(BUNDLED_SCENARIOS_DIR.glob("*.toml"))


def seed_examples(db: Database, progress: Any = None) -> list[dict[str, Any]]:
    """Simulate and store every bundled scenario; ``progress(i, n, path)`` is called before each."""
    paths = bundled_scenarios()
    out = []
    for i, path in enumerate(paths):
        if progress is not None:
            progress(i, len(paths), path)
        out.append(run_file(path, db))
    return out
