"""docs/hlo.md quotes the tables scripts/hlo_table.py prints; regenerate them and compare."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_docs_tables_match_the_script():
    spec = importlib.util.spec_from_file_location("hlo_table", ROOT / "scripts" / "hlo_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = (ROOT / "docs" / "hlo.md").read_text()
    missing = [row for row in mod.fixture_rows() + mod.cross_check_rows() if row not in doc]
    assert not missing, "docs/hlo.md is out of date; rerun python -m scripts.hlo_table:\n" + "\n".join(missing)
