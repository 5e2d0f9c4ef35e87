"""Every table the engine and the importer emit is declared in engine.trace.TABLES and matches it exactly."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from engine import load_scenario, simulate
from engine.trace import EXTRA_PREFIX, TABLES, Trace, extra_table_name
from profiler.trace_import import read_trace

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = sorted((ROOT / "data" / "scenarios").rglob("*.toml"))
TORCH_TRACE = ROOT / "tests" / "fixtures" / "torch_cpu_mlp.trace.json.gz"


def _emitted(trace: Trace) -> dict[str, pa.Table]:
    tables = {"events": trace.events, "steps": trace.steps, "chips": trace.chips}
    if trace.step_kind is not None:
        tables["step_kind"] = trace.step_kind
    if trace.chip_kind is not None:
        tables["chip_kind"] = trace.chip_kind
    tables.update({extra_table_name(k): t for k, t in trace.extra.items()})
    return tables


def _assert_conforms(tables: dict[str, pa.Table]) -> None:
    undeclared = sorted(set(tables) - set(TABLES))
    assert not undeclared, f"tables emitted but not declared in engine.trace.TABLES: {undeclared}"
    for name, table in tables.items():
        assert table.schema.equals(TABLES[name].schema), f"{name}: emitted {table.schema} != declared {TABLES[name].schema}"


def test_every_spec_is_well_formed():
    for name, spec in TABLES.items():
        assert spec.name == name
        assert spec.doc and all(c.doc for c in spec.columns), f"{name}: every table and column says what it means"
        names = [c.name for c in spec.columns]
        assert len(names) == len(set(names)), f"{name}: duplicate column"
        assert "run_id" not in names, f"{name}: run_id is the store's column"
        assert spec.schema.names == names
    assert {"events", "steps", "chips", "step_kind", "chip_kind"} <= set(TABLES)
    assert extra_table_name("compiles") == EXTRA_PREFIX + "compiles"
    assert extra_table_name("compiles") in TABLES


def test_spec_table_rejects_drift():
    spec = TABLES["extra_chip_memory"]
    with pytest.raises(ValueError, match="differ from the declared"):
        spec.table({"chip": [0], "peak_bytes": [1.0], "unit": [1]})
    with pytest.raises(ValueError, match="differ from the declared"):
        spec.table({"chip": [0]})
    assert spec.table({"peak_bytes": [2.0], "chip": [3]}).column_names == ["chip", "peak_bytes"]


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.stem)
def test_bundled_scenarios_emit_declared_tables(path):
    _assert_conforms(_emitted(simulate(load_scenario(path)).trace))


def test_import_emits_declared_tables():
    trace, _ = read_trace(TORCH_TRACE)
    tables = _emitted(trace)
    assert "extra_import_events" in tables
    _assert_conforms(tables)


def test_every_extra_table_is_emitted_somewhere():
    """A declared extra table nothing emits is dead contract."""
    emitted = set()
    for path in BUNDLED:
        emitted |= set(_emitted(simulate(load_scenario(path)).trace))
    emitted |= set(_emitted(read_trace(TORCH_TRACE)[0]))
    assert emitted == set(TABLES)
