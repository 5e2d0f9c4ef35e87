"""Turn pydantic validation errors into messages that say what would be valid.

pydantic's own messages name the problem ("Extra inputs are not permitted",
"Field required") but not the fix. A scenario author needs the fix: the keys a
table accepts, the section that is missing, the value that was given. This module
walks the scenario's model classes along an error's location to find them, so
every section another feature adds to :class:`~engine.scenario.Scenario` gets the
same messages without further code.
"""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

__all__ = ["problem_from_error", "model_at"]

_SCALARS = (int, float, str, bool)

#: how every unknown-key problem message starts (tools that pre-check keys match on it)
UNKNOWN_KEY = "unknown key"

#: strict-mode type errors: what the key takes, in TOML's words
_EXPECTED = {
    "int_type": "an integer, e.g. 8",
    "float_type": "a number, e.g. 0.5 or 2",
    "bool_type": "true or false",
    "string_type": "a string in quotes",
}


def _model_classes(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model class inside a type annotation (through Optional, Union, Annotated, list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out.extend(_model_classes(arg))
    return out


def _tag_of(cls: type[BaseModel]) -> str | None:
    """The ``kind`` literal of a tagged-union member (``model.kind = "mlp"``)."""
    field = cls.model_fields.get("kind")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    return args[0] if len(args) == 1 and isinstance(args[0], str) else None


def model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that validates the table at ``loc`` (None if ``loc`` is not a table).

    Tagged-union tags that pydantic inserts in locations (``("model", "mlp")``) are followed.
    """
    cls: type[BaseModel] | None = root
    pending: list[type[BaseModel]] = []  # union members waiting for their tag in the next part
    for part in loc:
        if pending:
            match = [c for c in pending if _tag_of(c) == part]
            pending = []
            if match:
                cls = match[0]
                continue
        if isinstance(part, int) and cls is not None:
            continue  # an item of a list of tables: same model as the list
        if cls is None or part not in cls.model_fields:
            return None
        classes = _model_classes(cls.model_fields[part].annotation)
        if len(classes) == 1:
            cls = classes[0]
        elif classes:
            cls, pending = None, classes
        else:
            cls = None
    if pending:
        return None
    return cls


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _toml(value: Any) -> str:
    """A given value as it was written in TOML, and what TOML made of it."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        hint = ""
        try:
            float(value)
            hint = "; write the number without quotes"
        except ValueError:
            pass
        quoted = '"' + (value if len(value) <= 40 else value[:37] + "...") + '"'
        return f"{quoted} (a string{hint})"
    if isinstance(value, float):
        return f"{value!r} (a float)"
    return _show(value)


def _is_tag(root: type[BaseModel], loc: tuple[Any, ...], i: int) -> bool:
    """Is ``loc[i]`` a union tag that pydantic inserted (not a key the user wrote)?"""
    if i == 0:
        return False
    parent = model_at(root, loc[: i - 1])
    if parent is None or loc[i - 1] not in parent.model_fields:
        return False
    classes = _model_classes(parent.model_fields[loc[i - 1]].annotation)
    return len(classes) > 1 and any(_tag_of(c) == loc[i] for c in classes)


def problem_from_error(root: type[BaseModel], err: dict[str, Any]) -> tuple[str, str]:
    """One pydantic error (from ``ValidationError.errors()``) as ``(dotted_key, message)``.

    The message names what would be valid: the accepted keys for an unknown key,
    the accepted tags for a missing ``kind``, the expected table for a scalar given
    where a section belongs; value errors keep pydantic's bound ("greater than 0")
    and add the value that was given.
    """
    loc = tuple(err["loc"])
    key = ".".join(str(p) for i, p in enumerate(loc) if not _is_tag(root, loc, i))
    kind = err["type"]
    msg = err["msg"]
    if kind == "extra_forbidden":
        parent = model_at(root, loc[:-1])
        if parent is not None:
            return key, f"{UNKNOWN_KEY}; valid keys here: {', '.join(parent.model_fields)}"
        return key, UNKNOWN_KEY
    if kind == "missing":
        return key, "required key is missing"
    if kind == "union_tag_not_found":
        parent = model_at(root, loc[:-1])
        classes = _model_classes(parent.model_fields[loc[-1]].annotation) if parent and loc[-1] in parent.model_fields else []
        tags = ", ".join(repr(t) for t in (_tag_of(c) for c in classes) if t)
        return key, f"missing 'kind'; valid: {tags}"
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return key, f"expected a table ([{key}] or {key} = {{...}}), got {_show(err.get('input'))}"
    given = err.get("input")
    if kind in _EXPECTED and (isinstance(given, _SCALARS) or given is None):
        return key, f"expected {_EXPECTED[kind]}; got {_toml(given)}"
    if isinstance(given, _SCALARS) or given is None:
        return key, f"{msg} (got {_show(given)})"
    return key, msg
