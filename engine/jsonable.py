"""``json.dumps(..., default=json_default)``: numpy scalars in facts and scenarios written as plain JSON numbers."""

from __future__ import annotations

from typing import Any

__all__ = ["json_default"]


def json_default(o: Any) -> Any:
    """A numpy scalar (anything with ``.item()``) as its Python value; anything else is not JSON.

    Raises
    ------
    TypeError
        ``o`` has no ``.item()`` (what ``json.dumps`` expects a ``default`` to raise).
    """
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
