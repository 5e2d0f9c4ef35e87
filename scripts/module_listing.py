"""The module listing in docs/architecture.md: one line per module, from its docstring.

Each line is the module's path and the first sentence of its docstring, so
the listing says what the code itself says and cannot drift from it. ``--write`` puts it into the
page; ``tests/test_docs_generated.py`` fails when the page no longer matches.

    python -m scripts.module_listing [--write]
"""

from __future__ import annotations

import ast
from pathlib import Path

from scripts.docs_blocks import DOCS, block_main

ROOT = Path(__file__).resolve().parent.parent
PAGE = DOCS / "architecture.md"
BLOCK = "module-listing"
PACKAGES = ("engine", "profiler", "views")
EXTRA = ("app.py",)


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring (its first paragraph, joined onto one line)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    return first or "(no docstring)"


def modules() -> list[Path]:
    found = [ROOT / name for name in EXTRA]
    for package in PACKAGES:
        found += sorted((ROOT / package).rglob("*.py"))
    return [p for p in found if "__pycache__" not in p.parts]


def render() -> str:
    lines = ["| module | what it holds |", "| --- | --- |"]
    for path in modules():
        rel = path.relative_to(ROOT).as_posix()
        lines.append(f"| `{rel}` | {_summary(path).replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    block_main(PAGE, BLOCK, render, __doc__)
