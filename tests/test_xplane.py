"""XProf .xplane.pb files: converted through the optional xprof package, or a message naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import TraceImportError
from profiler import xplane

XPLANE = Path(__file__).parent / "fixtures" / "traces" / "jax_mlp_dp8.xplane.pb.gz"


def test_without_xprof_the_message_says_what_to_install(monkeypatch):
    monkeypatch.setattr(xplane, "_converter", lambda: None)
    with pytest.raises(TraceImportError, match=r"pip install xprof==2\.24\.2"):
        with xplane.xplane_as_trace_json(XPLANE, 1 << 30):
            pass


def test_over_the_size_limit():
    with pytest.raises(TraceImportError, match="over the import limit"):
        with xplane.xplane_as_trace_json(XPLANE, 1000):
            pass


def test_is_xplane():
    assert xplane.is_xplane("host.xplane.pb") and xplane.is_xplane("run/HOST.XPLANE.PB.GZ")
    assert not xplane.is_xplane("host.trace.json.gz")


def test_real_conversion():
    pytest.importorskip("xprof", reason="the optional xprof package converts .xplane.pb (requirements-xprof.txt)")
    with xplane.xplane_as_trace_json(XPLANE, 1 << 30) as path:
        trace = json.loads(path.read_text())
    steps = [e for e in trace["traceEvents"] if "step_num" in (e.get("args") or {})]
    assert [e["args"]["step_num"] for e in steps] == ["0", "1", "2", "3", "4"]
