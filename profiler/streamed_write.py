"""Simulating and storing a run at once: each chunk of events is inserted while the next is laid out.

The engine lays a full trace out block by block (:func:`engine.model.step.assemble`). Here it does so
on a worker thread and hands every block to this process's writer through a bounded buffer
(:class:`_EventStream`): the engine runs at most ``EVENT_CHUNK_ROWS`` events ahead of the
writer, so memory holds about two chunks of events, not the whole run. DuckDB releases the GIL
while it inserts, so one chunk's insert and the next chunk's layout run side by side.

The run is written as :mod:`profiler.store` and :mod:`profiler.chunked_write` write any run: a
run of at most ``EVENT_CHUNK_ROWS`` events is one transaction, a larger one is a pending run,
chunk transactions of exactly ``EVENT_CHUNK_ROWS`` events, and its ``runs`` row last. Nothing
is written before the first chunk is laid out, so a scenario the engine refuses writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa

from engine import simulate
from engine.hlo.bundle import XlaHbm
from engine.scenario import Scenario
from engine.scenario.calibration import Calibration
from engine.trace import EVENTS_SCHEMA, RunResult

from . import chunked_write
from .chunked_write import write_chunked
from .staging import StagedRun, stage, summarise
from .store import Database, run_name_of, write_run

__all__ = ["simulate_and_write"]


class _Stopped(Exception):
    """The writer has gone (it failed or was interrupted): the engine's thread stops laying out."""


class _EventStream:
    """A simulation on a worker thread, its events handed over block by block through a bounded buffer."""

    def __init__(self, scenario: Scenario, calibration: Calibration | None, xla_memory: XlaHbm | None = None):
        self._ready = threading.Condition()
        self._blocks: list[pa.RecordBatch] = []
        self._rows = 0  # rows in _blocks
        self._stopped = False
        self._done = False
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self.rows = 0  # rows handed to the writer so far
        self._thread = threading.Thread(
            target=self._run, args=(scenario, calibration, xla_memory), name="podscope-simulate", daemon=True
        )
        self._thread.start()

    def _run(self, scenario: Scenario, calibration: Calibration | None, xla_memory: XlaHbm | None) -> None:
        try:
            result = simulate(scenario, calibration, on_events=self._put, xla_memory=xla_memory)
        except BaseException as e:  # handed to the writer's thread, which raises it
            with self._ready:
                self._error, self._done = e, True
                self._ready.notify_all()
            return
        with self._ready:
            self._result, self._done = result, True
            self._ready.notify_all()

    def _put(self, batch: pa.RecordBatch) -> None:
        with self._ready:
            # one chunk ahead of the writer at most (and always room for one block, however large)
            while not self._stopped and self._blocks and self._rows + batch.num_rows > chunked_write.EVENT_CHUNK_ROWS:
                self._ready.wait()
            if self._stopped:
                raise _Stopped
            self._blocks.append(batch)
            self._rows += batch.num_rows
            self._ready.notify_all()

    def take(self, rows: int) -> pa.Table:
        """The next ``rows`` events (fewer at the end of the run; none when every event is taken).

        Raises
        ------
        PodscopeError
            What the simulation raised.
        """
        out: list[pa.RecordBatch] = []
        need = rows
        while need > 0:
            with self._ready:
                while not self._blocks and not self._done:
                    self._ready.wait()
                if not self._blocks:
                    if self._error is not None:
                        raise self._error
                    break
                batch = self._blocks.pop(0)
                if batch.num_rows > need:  # the rest starts the next chunk
                    self._blocks.insert(0, batch.slice(need))
                    batch = batch.slice(0, need)
                self._rows -= batch.num_rows
                self._ready.notify_all()
            out.append(batch)
            need -= batch.num_rows
        self.rows += rows - need
        return pa.Table.from_batches(out, schema=EVENTS_SCHEMA)

    def more(self) -> bool:
        """Are there events left to take? Waits until a block is laid out or the simulation ends."""
        with self._ready:
            while not self._blocks and not self._done:
                self._ready.wait()
            if not self._blocks and self._error is not None:
                raise self._error
            return bool(self._blocks)

    def result(self) -> RunResult:
        """The simulation's result once every event is taken (its ``trace.events`` is empty)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None and not self._blocks
        return self._result

    def close(self) -> None:
        """Stop the simulation if it is still running (the writer failed) and wait for its thread."""
        with self._ready:
            self._stopped = True
            self._ready.notify_all()
        self._thread.join()


def simulate_and_write(
    db: Database,
    scenario: Scenario,
    *,
    name: str | None = None,
    calibration: Calibration | None = None,
    xla_memory: XlaHbm | None = None,
) -> tuple[int, RunResult]:
    """Simulate a scenario and store it, inserting its events while later steps are laid out.

    Stores the same rows as ``write_run(db, simulate(scenario))``, with the same transactions.
    ``xla_memory`` is passed to :func:`engine.simulate` (the run's HBM as the TPU compiler gave it).

    Returns
    -------
    run_id, result
        The stored run's id, and the simulation's result with the events stored, not kept
        (``result.trace.events`` is empty unless the run fits one transaction).

    Raises
    ------
    PodscopeError
        What :func:`engine.simulate` raises (nothing is then stored), or a ``ProfilerError`` from
        the store.
    """
    run_name = run_name_of(scenario, name)
    stream = _EventStream(scenario, calibration, xla_memory)
    try:
        first = stream.take(chunked_write.EVENT_CHUNK_ROWS)
        if not stream.more():  # the whole run fits one transaction: written as write_run writes it
            result = stream.result()
            result = replace(result, trace=replace(result.trace, events=first))
            return write_run(db, result, name=name), result

        def chunks() -> Iterator[pa.Table]:
            chunk = first
            while chunk.num_rows:
                yield chunk
                chunk = stream.take(chunked_write.EVENT_CHUNK_ROWS)

        def finish() -> StagedRun:
            staged = replace(stage(stream.result(), run_name, "simulated"), events=stream.rows)
            return summarise([staged])[0]

        return write_chunked(db, chunks(), finish), stream.result()
    finally:
        stream.close()
