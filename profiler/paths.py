"""Resolve file paths typed by a dashboard user, refusing anything outside the allowed folder.

The dashboard may offer "load a scenario / trace from a path" boxes. A path typed there
is untrusted: ``../../etc/passwd``, an absolute path, or a symlink pointing out of the
data folder must not be read. :func:`resolve_user_path` resolves the path (following
symlinks) and accepts it only if the result lies inside the allowed root.

The allowed root is ``$PODSCOPE_DATA_DIR`` if set, else the repository's ``data/`` folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from engine.errors import PathNotAllowedError
from engine.pod.catalog import DATA_DIR

__all__ = ["allowed_data_dir", "resolve_user_path", "MAX_USER_PATH_CHARS"]

#: longer than any sensible path under the data folder; bounds the work done on hostile input
MAX_USER_PATH_CHARS = 1024


def allowed_data_dir() -> Path:
    """The folder dashboard users may read files from (``$PODSCOPE_DATA_DIR`` or ``data/``)."""
    env = os.environ.get("PODSCOPE_DATA_DIR")
    return Path(env).resolve() if env else DATA_DIR.resolve()


def resolve_user_path(
    text: str,
    root: str | os.PathLike[str] | None = None,
    *,
    suffixes: Iterable[str] | None = None,
    must_exist: bool = True,
) -> Path:
    """Resolve a user-typed path against ``root`` and return it only if it stays inside ``root``.

    Parameters
    ----------
    text
        The path as typed: relative paths are taken relative to ``root``; absolute paths
        are accepted only if they point inside ``root``.
    root
        The allowed folder (default: :func:`allowed_data_dir`).
    suffixes
        If given, the accepted file name endings (e.g. ``{".toml"}``, ``{".json", ".json.gz"}``).
    must_exist
        Require an existing regular file.

    Returns
    -------
    Path
        The absolute, symlink-free path.

    Raises
    ------
    PathNotAllowedError
        If the path is empty, too long, contains a NUL byte, escapes ``root`` (by ``..``,
        an absolute path or a symlink), has the wrong suffix, or (``must_exist``) is not a file.
    """
    base = Path(root).resolve() if root is not None else allowed_data_dir()
    shown = text if len(text) <= 80 else text[:77] + "..."
    if not text or not text.strip():
        raise PathNotAllowedError("no file path given")
    if len(text) > MAX_USER_PATH_CHARS:
        raise PathNotAllowedError(f"file path is longer than {MAX_USER_PATH_CHARS} characters")
    if "\x00" in text:
        raise PathNotAllowedError("file path contains a NUL character")
    try:
        # strict=False: resolve what exists (following symlinks) without requiring the leaf.
        candidate = (base / Path(text.strip()).expanduser()).resolve(strict=False)
    except (OSError, RuntimeError, ValueError) as e:  # RuntimeError: a symlink loop
        raise PathNotAllowedError(f"cannot resolve file path {shown!r}: {e}") from None
    if not candidate.is_relative_to(base):
        raise PathNotAllowedError(f"{shown!r} is outside the allowed folder {base}; give a path inside it")
    if suffixes is not None:
        allowed = tuple(suffixes)
        if not candidate.name.endswith(allowed):
            raise PathNotAllowedError(f"{shown!r} must end in one of: {', '.join(allowed)}")
    if must_exist and not candidate.is_file():
        raise PathNotAllowedError(f"{shown!r} is not a file in {base}")
    return candidate
