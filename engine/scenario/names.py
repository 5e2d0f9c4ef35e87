"""Run names: one rule wherever a name enters, and one way to show any stored text safely.

A name a person types (a scenario's ``name``, ``--name``, a sweep's ``name``) is checked by
:func:`name_problem` and refused if it breaks the rule: at most :data:`MAX_NAME_CHARS`
characters, not empty or blank, and no control characters (:func:`is_control`: C0/C1
controls and DEL, line and paragraph separators, bidirectional overrides). A name Podscope
builds from something else (a sweep point's overrides, an imported file's name) is made to
fit by :func:`derived_name`: control characters become their escapes and a long name is cut
to the cap, ending in an ellipsis.

Every output for a terminal goes through :func:`printable`, so text stored by an older
version (or written into the file directly) cannot move the cursor or recolour the screen.
"""

from __future__ import annotations

import unicodedata

__all__ = ["MAX_NAME_CHARS", "derived_name", "is_control", "name_problem", "printable"]

#: longest run name, in characters
MAX_NAME_CHARS = 200

#: bidirectional embedding, override and isolate controls: they reorder how following text is shown
_BIDI_CONTROLS = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


def is_control(ch: str) -> bool:
    """A character that controls a terminal or the layout of text rather than being shown."""
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in _BIDI_CONTROLS


def _escape(ch: str) -> str:
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if ch in named:
        return named[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character shown as its escape (``\\x1b``); newlines kept if asked."""
    s = str(text)
    if not any(is_control(c) for c in s):
        return s
    return "".join(c if (keep_newlines and c == "\n") or not is_control(c) else _escape(c) for c in s)


def name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as a run name, with what would be valid; None when it is fine."""
    if not isinstance(name, str):
        return f"a run name is text, got {type(name).__name__}"
    if not name.strip():
        return "a run name cannot be empty or blank"
    if len(name) > MAX_NAME_CHARS:
        return f"{len(name):,} characters is too long; valid: at most {MAX_NAME_CHARS}"
    bad = sorted({_escape(c) for c in name if is_control(c)})
    if bad:
        return f"contains control characters ({', '.join(bad)}); valid: printable text on one line"
    return None


def derived_name(text: str) -> str:
    """A valid run name made from ``text`` (a file name, a sweep point's label): escaped and cut to fit."""
    s = printable(text).strip() or "run"
    return s if len(s) <= MAX_NAME_CHARS else s[: MAX_NAME_CHARS - 1] + "\u2026"
