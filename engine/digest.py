"""A fingerprint of a simulated run, to check that the same scenario and seed reproduce it exactly.

The digest is SHA-256 over the Arrow IPC stream bytes of every trace table (events,
steps, chips, the engine's step_kind and chip_kind aggregates, then the extra tables in
name order) and the run facts as canonical
JSON. Equal digests mean byte-identical traces, including column types and batch
layout, not merely equal values.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
import pyarrow as pa

from .jsonable import json_default
from .trace import RunResult

__all__ = ["run_digest"]


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def run_digest(result: RunResult) -> str:
    """Hex SHA-256 of a run's trace tables (Arrow IPC bytes) and facts."""
    h = hashlib.sha256()
    trace = result.trace
    tables = [("events", trace.events), ("steps", trace.steps), ("chips", trace.chips)]
    tables += [(name, t) for name, t in (("step_kind", trace.step_kind), ("chip_kind", trace.chip_kind)) if t is not None]
    tables += sorted((f"extra_{name}", t) for name, t in trace.extra.items())
    for name, table in tables:
        data = _ipc_bytes(table)
        h.update(f"{name}:{len(data)}:".encode())
        h.update(data)
    h.update(json.dumps(asdict(result.facts), sort_keys=True, default=json_default).encode())
    return h.hexdigest()
