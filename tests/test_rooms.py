"""engine/ is a house of rooms: each room a package stating its API, few modules at the top, none past 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
ROOMS = ("comm", "convergence", "hlo", "idle", "memory", "model", "planning", "pod", "scenario")
MAX_MODULE_LINES = 600


def test_every_room_states_what_it_holds_and_exports():
    assert sorted(p.parent.name for p in ENGINE.glob("*/__init__.py")) == sorted(ROOMS)
    for room in ROOMS:
        tree = ast.parse((ENGINE / room / "__init__.py").read_text())
        assert ast.get_docstring(tree), f"engine/{room}/__init__.py has no docstring"
        assert any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets) for n in tree.body), room


def test_the_top_of_engine_holds_only_a_few_modules():
    assert len(list(ENGINE.glob("*.py"))) <= 10


def test_no_engine_module_passes_600_lines():
    long = {str(p.relative_to(ENGINE)): n for p in ENGINE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}
