"""Staging a run for storage: everything but its events, computed without the database file.

A run's ``runs`` row, its small per-run tables (cast to their stored column types) and
its summary JSON are prepared before any lock is taken, so a writer holds the file only
for the inserts. The engine hands over exact per-step and per-chip aggregates by kind;
a trace without them (an import) gets them derived from its events in this process's
private in-memory DuckDB. Summaries are computed for a whole batch of runs at once
(:func:`summarise`): one query per table for the batch instead of one per run.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from engine.errors import ProfilerError
from engine.jsonable import json_default
from engine.trace import TABLES, RunFacts, RunResult

from .schema import declared_extra, extra_table_name
from .summary import BATCH_VIEWS, batch_aggregates, summary_from

__all__ = [
    "CHIP_KIND_FROM_EVENTS_SQL",
    "STEP_KIND_FROM_EVENTS_SQL",
    "StagedRun",
    "stage",
    "summarise",
]

#: step_kind of the run ``$run_id`` derived from its events (for traces that arrive without aggregates)
STEP_KIND_FROM_EVENTS_SQL = """
SELECT step, kind, CAST(sum(ns) AS BIGINT) AS chip_ns, CAST(max(ns) AS BIGINT) AS max_chip_ns
FROM (SELECT step, chip, kind, sum(dur_ns) AS ns FROM events WHERE run_id = $run_id GROUP BY step, chip, kind)
GROUP BY step, kind
"""
#: chip_kind of the run ``$run_id`` derived from its events
CHIP_KIND_FROM_EVENTS_SQL = (
    "SELECT chip, kind, CAST(sum(dur_ns) AS BIGINT) AS ns FROM events WHERE run_id = $run_id GROUP BY chip, kind"
)
_STAGED_EVENTS_VIEW = """
CREATE TEMP VIEW events AS
SELECT CAST(0 AS INTEGER) AS run_id, chip, step, CAST(kind AS VARCHAR) AS kind, start_ns, dur_ns FROM _podscope_staged_events
"""
#: the small per-run tables in their stored column types (as DuckDB returns them: kind as text); a
#: staged run's tables are cast to these, so the tables of a batch's runs concatenate
_SMALL_SCHEMAS = {
    name: pa.schema([(c.name, c.type.value_type if pa.types.is_dictionary(c.type) else c.type) for c in TABLES[name].columns])
    for name in ("chips", "steps", "step_kind", "chip_kind")
}
#: the columns of the small tables the summary reads, per batch view (see summary.BATCH_VIEWS)
_SUMMARY_INPUTS = {"steps": ["step", "step_ns"], "step_kind": ["step", "kind", "chip_ns"], "chip_kind": ["kind", "ns"]}


@dataclass(frozen=True)
class StagedRun:
    """A run ready to publish: its runs-row values, small tables and summary, all computed without the file."""

    runs_row: dict[str, Any]
    small: dict[str, pa.Table]  # table -> rows without run_id, in _SMALL_SCHEMAS (chips, steps, step_kind, chip_kind)
    extra: dict[str, pa.Table]  # stored name (extra_<key>) -> rows without run_id, in the declared columns and types
    events: int  # event rows
    summary: dict[str, Any] | None = None  # None until summarise


_stage_db: tuple[int, duckdb.DuckDBPyConnection] | None = None  # (pid, connection): not reused across fork
_stage_db_lock = threading.Lock()


@contextmanager
def _stage_cursor() -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor on this process's private in-memory DuckDB, for the SQL of staging.

    One connection per process: opening one costs ~30 ms, more than staging a summary-mode
    run; a cursor costs microseconds and keeps its registered views and temp objects to itself,
    so threads may stage at once.
    """
    global _stage_db
    with _stage_db_lock:
        if _stage_db is None or _stage_db[0] != os.getpid():
            _stage_db = (os.getpid(), duckdb.connect(":memory:"))
        cur = _stage_db[1].cursor()
    try:
        yield cur
    finally:
        cur.close()


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value DuckDB would return for it."""
    return value.item() if hasattr(value, "item") else value


def _facts_json(facts: RunFacts) -> str:
    """``json.dumps(asdict(facts))`` without asdict's deep copy (~2 ms a run, a tenth of a summary-mode run)."""
    try:
        return json.dumps({f.name: getattr(facts, f.name) for f in fields(facts)}, default=json_default)
    except TypeError:  # a dataclass nested in the facts: asdict converts it
        return json.dumps(asdict(facts), default=json_default)


def stage(result: RunResult, run_name: str, source: str) -> StagedRun:
    """Everything of a run but its summary and events rows, without the file (see :func:`summarise`).

    The small tables are the engine's exact aggregates (the only per-step data in summary
    mode), or for traces without them (imports) derived from the events in SQL.

    Raises
    ------
    ProfilerError
        A table the store cannot hold (a missing column; an extra table that is not declared in
        ``engine.trace.TABLES`` or does not match its declaration).
    """
    scenario, facts, trace = result.scenario, result.facts, result.trace
    extra = {extra_table_name(key): declared_extra(key, data) for key, data in trace.extra.items()}
    row = {
        "name": run_name,
        "created_at": datetime.now(timezone.utc),
        "source": source,
        "chip": facts.chip,
        "chips": _plain(facts.chips),
        "hosts": _plain(facts.hosts),
        "slices": _plain(facts.slices),
        "topology": facts.topology,
        "steps": _plain(facts.steps),
        "scenario": json.dumps(scenario.to_dict() if scenario is not None else None),
        "facts": _facts_json(facts),
    }
    try:
        if trace.step_kind is not None and trace.chip_kind is not None:
            aggregates = {"step_kind": trace.step_kind, "chip_kind": trace.chip_kind}
        else:
            aggregates = _aggregates_from_events(trace.events)
        tables = {"chips": trace.chips, "steps": trace.steps, **aggregates}
        small = {t: tables[t].select(list(schema.names)).cast(schema) for t, schema in _SMALL_SCHEMAS.items()}
    except (duckdb.Error, pa.ArrowException, KeyError) as e:  # KeyError: a missing column
        raise ProfilerError(f"cannot prepare run {run_name!r} for storage: {e}") from e
    return StagedRun(runs_row=row, small=small, extra=extra, events=trace.events.num_rows)


def _aggregates_from_events(events: pa.Table) -> dict[str, pa.Table]:
    """step_kind and chip_kind of one run derived from its events."""
    with _stage_cursor() as cur:
        cur.register("_podscope_staged_events", events)
        cur.execute(_STAGED_EVENTS_VIEW)
        p = {"run_id": 0}
        return {
            "step_kind": cur.sql(STEP_KIND_FROM_EVENTS_SQL, params=p).to_arrow_table(),
            "chip_kind": cur.sql(CHIP_KIND_FROM_EVENTS_SQL, params=p).to_arrow_table(),
        }


def _with_index(table: pa.Table, i: int) -> pa.Table:
    return table.add_column(0, "i", pa.array(np.full(table.num_rows, i, dtype=np.int32)))


def summarise(staged: list[StagedRun]) -> list[StagedRun]:
    """The summaries of staged runs, all at once: each summary table concatenated over the
    runs (with the run's index) and aggregated in one query per batch (summary.batch_aggregates).

    A statement costs about as much as summarising one run's tables, so one set of queries
    per run cost more than simulating a summary-mode run; per batch it is a few ms in all.
    """
    try:
        with _stage_cursor() as cur:
            for key, view in BATCH_VIEWS.items():
                cols = _SUMMARY_INPUTS[key]
                cur.register(view, pa.concat_tables([_with_index(s.small[key].select(cols), i) for i, s in enumerate(staged)]))
            aggregates = batch_aggregates(cur, [s.events for s in staged])
    except (duckdb.Error, pa.ArrowException) as e:
        raise ProfilerError(f"cannot summarise runs for storage: {e}") from e
    return [replace(s, summary=summary_from(0, s.runs_row, agg)) for s, agg in zip(staged, aggregates)]
