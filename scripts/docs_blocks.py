"""Generated blocks in the docs: text between two marker comments that a script owns.

A block in a Markdown page looks like::

    <!-- begin generated: idle-table (python -m scripts.idle_table --write) -->
    | ... the table ... |
    <!-- end generated: idle-table -->

The script that measures the numbers renders the block's text; ``--write`` puts it into the
page, and ``tests/test_docs_generated.py`` fails when a page's block differs from what the
script renders from the current code.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

__all__ = ["DOCS", "read_block", "write_block", "block_main"]

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(
        r"(<!-- begin generated: " + re.escape(name) + r" [^\n]*-->\n)(.*?)(<!-- end generated: " + re.escape(name) + r" -->)",
        re.S,
    )


def read_block(page: Path, name: str) -> str:
    """The text of block ``name`` in ``page`` (without the markers)."""
    m = _pattern(name).search(page.read_text())
    if m is None:
        raise KeyError(f"{page}: no generated block {name!r}")
    return m.group(2)


def write_block(page: Path, name: str, text: str) -> None:
    """Replace block ``name`` in ``page`` with ``text`` (a trailing newline is added if missing)."""
    body = text if text.endswith("\n") else text + "\n"
    old = page.read_text()
    if _pattern(name).search(old) is None:
        raise KeyError(f"{page}: no generated block {name!r}")
    page.write_text(_pattern(name).sub(lambda m: m.group(1) + body + m.group(3), old, count=1))
    print(f"wrote {name} into {page}")


def block_main(page: Path, name: str, render: Callable[[], str], doc: str) -> None:
    """The command line of a script that owns block ``name`` of ``page``: print what ``render``
    measures, or with ``--write`` put it into the page. ``doc`` is the script's docstring."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write the block into {page.name}")
    write = parser.parse_args().write
    text = render()
    if write:
        write_block(page, name, text)
    else:
        print(text, end="")
