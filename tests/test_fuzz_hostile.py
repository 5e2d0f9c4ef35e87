"""Structure-aware fuzzing: valid Chrome trace JSON with hostile values, and hostile CLI arguments.

Properties: a trace either imports (every stored name within the name rule's printable
form, every pid/tid short) or fails with TraceImportError; the CLI returns one of its exit
codes (0, 1, 2, 3) and never raises anything but its own exit.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import TraceImportError
from profiler.cli import main
from profiler.trace_file import MAX_ID_CHARS
from profiler.trace_import import ImportLimits, read_trace

_hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8", categories=("Cc", "Cf", "Zl", "Zp", "Co")), max_size=20),
    st.just("x" * 5000),
    st.sampled_from(["", "\x00", "\x1b[2J", "\u202e", "ProfilerStep#1", "ProfilerStep#-1", "all-reduce", "/device:TPU:0"]),
)
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                       st.floats(allow_nan=False, allow_infinity=False), _hostile_text)  # fmt: skip
_json_value = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=12)
_number = st.one_of(st.integers(min_value=-(2**64), max_value=2**64), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0, 1, 1e17, 1e18, -1, 1e300]), _json_value)  # fmt: skip
_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "B", "E", "M", "i", "C", "b", ""])},
    optional={"pid": _json_value, "tid": _json_value, "ts": _number, "dur": _number, "name": _json_value,
              "cat": _json_value, "args": _json_value},
)  # fmt: skip
_trace = st.one_of(
    st.lists(_event, max_size=25),
    st.fixed_dictionaries({"traceEvents": st.lists(_event, max_size=25)}, optional={"otherData": _json_value, "displayTimeUnit": _hostile_text}),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=_trace, gz=st.booleans())
def test_hostile_valid_json_traces_import_or_fail_cleanly(trace, gz):
    import gzip

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("t.json.gz" if gz else "t.json")
        data = json.dumps(trace).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        try:
            result, _facts = read_trace(path, limits=ImportLimits(max_events=1000))
        except TraceImportError as e:
            assert str(path) in str(e)
            return
        raw = result.extra["import_events"].to_pydict()
        assert all(len(p) <= MAX_ID_CHARS for p in raw.get("pid", []))


_words = st.sampled_from(["run", "runs", "delete", "export", "import", "sweep", "check", "--db", "--name", "--set", "--json",
                          "--format", "perfetto", "csv", "-o", "--steps", "--chips", "--force", "--max-events", "resnet50-v3-32",
                          "training.steps=2", "training.steps=-1", "sim.trace=summary", "1", "0", "-1", "0:1", "9:3", "--"])  # fmt: skip
_arg = st.one_of(_words, st.text(alphabet=st.characters(blacklist_characters="\x00", codec="utf-8"), max_size=30))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(argv=st.lists(_arg, min_size=1, max_size=7))
def test_hostile_cli_arguments_give_an_exit_code_never_a_traceback(argv, tmp_path_factory, capsys):
    d = tmp_path_factory.mktemp("cli")
    argv = [a.replace("{D}", str(d)) for a in argv]
    if argv[0] in ("run",) and "--set" not in argv:
        argv += ["--set", "training.steps=2"]  # keep a valid run quick
    argv += ["--db", str(d / "f.duckdb")] if argv[0] in ("run", "runs", "delete", "export", "import", "sweep", "check") else []
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    capsys.readouterr()
    assert code in (0, 1, 2, 3), (argv, code)
