"""XProf's own profile files (``*.xplane.pb``) in, trace-viewer JSON out, through the ``xprof`` package.

``jax.profiler`` and ``tf.profiler`` write an XSpace protobuf per host; XProf's
converter (``xprof.convert.raw_to_tool_data.xspace_to_tool_data(..., "trace_viewer", {})``)
turns it into the Chrome Trace Event JSON the importer reads. ``xprof`` is an
optional dependency (``pip install -r requirements-xprof.txt``): without it an
``.xplane.pb`` import stops with a message saying exactly what to install.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from engine.errors import TraceImportError

__all__ = ["XPROF_REQUIREMENT", "is_xplane", "xplane_as_trace_json"]

#: the converter version the importer's rules were checked against (tests/fixtures/traces)
XPROF_REQUIREMENT = "xprof==2.24.2"


def is_xplane(path: str | Path) -> bool:
    name = Path(path).name.lower()
    return name.endswith(".xplane.pb") or name.endswith(".xplane.pb.gz")


def _converter():
    try:
        from xprof.convert import raw_to_tool_data  # optional dependency
    except ImportError:
        return None
    return raw_to_tool_data


@contextmanager
def xplane_as_trace_json(path: str | Path, max_file_bytes: int) -> Iterator[Path]:
    """Convert an ``.xplane.pb`` (or ``.xplane.pb.gz``) to a temporary trace-viewer JSON file; yields its path.

    Raises
    ------
    TraceImportError
        ``xprof`` is not installed (the message names the package to install), the file
        is missing, too large, or XProf cannot convert it.
    """
    src = Path(path)
    try:
        size = src.stat().st_size
    except OSError as e:
        raise TraceImportError(f"{src}: cannot read file: {e.strerror or e}") from None
    if size > max_file_bytes:
        raise TraceImportError(f"{src}: {size:,} bytes is over the import limit of {max_file_bytes:,} bytes")
    convert = _converter()
    if convert is None:
        raise TraceImportError(
            f"{src}: an XProf .xplane.pb is converted by the optional xprof package, which is not installed; "
            f"install it with `pip install {XPROF_REQUIREMENT}` (or `pip install -r requirements-xprof.txt`), "
            "or import the trace JSON the profiler wrote beside it (*.trace.json.gz)"
        )
    with tempfile.TemporaryDirectory(prefix="podscope-xplane-") as tmp:
        pb = Path(tmp) / src.name.removesuffix(".gz")
        try:
            if src.name.lower().endswith(".gz"):
                with gzip.open(src, "rb") as fin, open(pb, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
            else:
                shutil.copyfile(src, pb)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceImportError(f"{src}: cannot read the profile: {e}") from None
        try:
            data, _content_type = convert.xspace_to_tool_data([str(pb)], "trace_viewer", {})
        except Exception as e:  # the converter is native code behind pybind; any failure means "not convertible"
            raise TraceImportError(f"{src}: XProf could not convert it to a trace: {e}") from None
        if not data:
            raise TraceImportError(f"{src}: XProf found no trace in it (not an XSpace profile?)")
        out = Path(tmp) / "trace.json"
        out.write_bytes(data.encode() if isinstance(data, str) else bytes(data))
        yield out
