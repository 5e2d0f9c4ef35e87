"""Bad scenarios: each names the file, the dotted key and what would be valid; only Podscope errors escape.

The parametrised cases cover the kinds of bad input (malformed TOML, unknown keys, wrong types,
out-of-range values, mesh mismatch, unknown chip, unsupported slice shape). The
hypothesis tests throw random TOML text, random tables and random edits of a valid
scenario at the loader and the simulator and accept exactly two outcomes: a result,
or a :class:`PodscopeError`.
"""

from __future__ import annotations

import copy
import math
import tomllib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import PodscopeError, ScenarioError, SimulationError, load_scenario, scenario_from_dict, simulate
from engine.pod.catalog import load_catalog
from engine.scenario import MAX_CHIP_STEPS
from engine.trace import EVENT_KINDS
from tests.conftest import SMALL_TOML

BASE = tomllib.loads(SMALL_TOML)


def _problems(path, overrides=None) -> tuple[list[tuple[str, str]], str]:
    with pytest.raises(ScenarioError) as err:
        load_scenario(path, overrides=overrides)
    return err.value.problems, str(err.value)


@pytest.mark.parametrize(
    "edit, key, valid",
    [
        # unknown keys: the message lists the keys the table accepts
        ({"pod.bogus": 1}, "pod.bogus", "valid keys here: chip, topology, slices"),
        ({"trainig.steps": 1}, "trainig", "valid keys here: name, pod, model, training"),
        ({"model.layers": 3}, "model.layers", "valid keys here: kind, layer_sizes"),
        ({"interconnect.failed_links": [{"a": [0, 0, 0], "b": [1, 0, 0], "bw": 1}]}, "interconnect.failed_links.0.bw",
         "valid keys here: a, b, slice"),
        # wrong types: the expected type and the value given
        ({"training.steps": "many"}, "training.steps", 'expected an integer, e.g. 8; got "many" (a string)'),
        ({"training.global_batch": 1.5}, "training.global_batch", "expected an integer, e.g. 8; got 1.5 (a float)"),
        ({"training": "fast"}, "training", "expected a table ([training]"),
        ({"model.kind": "cnn"}, "model", "'mlp', 'resnet50', 'transformer'"),
        ({"training.precision": "fp4"}, "training.precision", "'bf16', 'int8', 'fp32' or 'fp8'"),
        ({"training.precision": "fp8"}, "training.precision", "valid: bf16, int8 or fp32 on tpu-v4, or fp8 on tpu7x"),
        # out of range: the bound and the value given
        ({"training.global_batch": 0}, "training.global_batch", "greater than 0 (got 0)"),
        ({"training.global_batch": -256}, "training.global_batch", "greater than 0 (got -256)"),
        ({"training.steps": 0}, "training.steps", "greater than 0 (got 0)"),
        ({"training.steps": -5}, "training.steps", "greater than 0 (got -5)"),
        ({"pod.slices": 0}, "pod.slices", "greater than 0"),
        ({"sim.jitter_frac": 1.5}, "sim.jitter_frac", "less than or equal to 1 (got 1.5)"),
        ({"sim.seed": -1}, "sim.seed", "greater than or equal to 0"),
        ({"model.layer_sizes": [1024, -1]}, "model.layer_sizes.1", "greater than 0"),
        ({"training.steps": MAX_CHIP_STEPS}, "training.steps", f"at most {MAX_CHIP_STEPS:,}"),
        # sampled traces: a positive count of the pod's chips, and only with trace = "sampled"
        ({"sim.trace": "sampled", "sim.sample_chips": 0}, "sim.sample_chips", "greater than 0 (got 0)"),
        ({"sim.trace": "sampled", "sim.sample_chips": -3}, "sim.sample_chips", "greater than 0 (got -3)"),
        ({"sim.trace": "sampled", "sim.sample_chips": 2.5}, "sim.sample_chips", "expected an integer, e.g. 8; got 2.5"),
        ({"sim.trace": "sampled", "sim.sample_chips": "all"}, "sim.sample_chips", 'expected an integer, e.g. 8; got "all"'),
        ({"sim.trace": "sampled", "sim.sample_chips": 9}, "sim.sample_chips", "the pod has 8; valid: 1 to 8"),
        ({"sim.sample_chips": 4}, "sim.sample_chips", 'valid: set sim.trace = "sampled", or remove sim.sample_chips'),
        ({"sim.trace": "summary", "sim.sample_chips": 4}, "sim.sample_chips", "sim.trace = 'summary' stores no chip's events"),
        ({"sim.trace": "sampled", "training.steps": MAX_CHIP_STEPS}, "sim.sample_chips", f"valid: at most {MAX_CHIP_STEPS:,}"),
        ({"sim.trace": "sampling"}, "sim.trace", "'full', 'summary' or 'sampled'"),
        # semantic problems
        ({"parallelism.data": 3}, "parallelism", "valid: axes whose product is 8"),
        ({"parallelism.tensor": 3}, "parallelism", "valid: a divisor of 8"),
        ({"training.global_batch": 100}, "training.global_batch", "valid: a multiple of 8, e.g. 96"),
        ({"pod.chip": "tpu-v99"}, "pod.chip", "valid: tpu-v2, tpu-v3, tpu-v4"),
        ({"pod.topology": "2by2"}, "pod.topology", "e.g. '16x16'"),
        ({"pod.topology": "2x2x2x2"}, "pod.topology", "1 to 3 positive integers"),
        ({"pod.topology": "0x4"}, "pod.topology", "positive integers"),
        ({"pod.topology": "32x32x32"}, "pod.topology", "holds at most 4096"),
        ({"pod.chip": "tpu-v3"}, "pod.topology", "give at most 2 axes, e.g. '4x4'"),  # 2x2x2 on a 2D torus
    ],
)
def test_each_problem_names_file_key_and_what_is_valid(small_scenario_path, edit, key, valid):
    problems, text = _problems(small_scenario_path, edit)
    assert key in [k for k, _ in problems], problems
    assert str(small_scenario_path) in text
    assert valid in text, text


def test_missing_kind_lists_the_model_kinds(write_toml):
    path = write_toml(SMALL_TOML.replace('kind = "mlp"\n', ""), "nokind.toml")
    problems, _ = _problems(path)
    assert problems == [("model", "missing 'kind'; valid: 'mlp', 'resnet50', 'transformer', 'hlo'")]


def test_missing_section_is_named(write_toml):
    path = write_toml(SMALL_TOML.replace("[training]\nglobal_batch = 256\nsteps = 20\n", ""), "notrain.toml")
    problems, _ = _problems(path)
    assert problems == [("training", "required key is missing")]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("[pod\nchip = 'x'", "malformed TOML"),
        ("name = 'a'\nname = 'b'", "malformed TOML"),  # duplicate key
        ("", "required key is missing"),
        ("= 3", "malformed TOML"),
    ],
)
def test_unparseable_or_empty_files(write_toml, text, fragment):
    path = write_toml(text, "broken.toml")
    _, message = _problems(path)
    assert "broken.toml" in message and fragment in message


def test_binary_file_is_not_utf8(tmp_path):
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    _, message = _problems(path)
    assert "binary.toml" in message and "UTF-8" in message


def test_non_table_root_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="expected a table of sections"):
        scenario_from_dict([1, 2, 3])  # type: ignore[arg-type]


def test_absurd_but_valid_sizes_are_a_simulation_error_not_garbage(small_scenario):
    """A 10^12-wide MLP validates field by field but its step overflows int64 nanoseconds."""
    huge = scenario_from_dict({**BASE, "model": {"kind": "mlp", "layer_sizes": [10**12, 10**12]}})
    with pytest.raises(SimulationError, match="implausibly large"):
        simulate(huge)


@pytest.mark.parametrize(
    "edit, fragment",
    [
        ({"ici_link_gbytes_per_s": -45.0}, "must be greater than 0"),
        ({"ici_link_gbytes_per_s": 0}, "must be greater than 0"),
        ({"hbm_gbytes_per_s": "fast"}, "expected a number"),
        ({"wraparound": "some"}, "valid: all, cube, axis16, none"),
        ({"host_shape": [2, 0]}, "list of positive integers"),
        ({"bogus_gbps": 1.0}, "unknown key; valid keys: display_name"),
        ({"peak_fp8_tflops": -1.0}, "expected a number >= 0"),
        ({"peak_fp8_tflops": "big"}, "expected a number >= 0"),
        ({"cmem_mib": 128.0}, "unknown key; valid keys: display_name"),
        ({"hbm_program_limit_gib": 40.0}, "more than the chip's hbm_gib 32.0; valid: 0 (no limit on record) up to hbm_gib"),
        ({"hbm_program_limit_gib": -1.0}, "expected a number >= 0"),
        ({"xla_async_all_gather": "yes"}, "expected true or false, got 'yes'"),
        ({"xla_async_all_gather": 1}, "expected true or false, got 1"),
        ({"xla_async_all_reduce": "no"}, "expected true or false, got 'no'"),
    ],
)
def test_catalog_rejects_bad_chip_tables(tmp_path, edit, fragment):
    from engine.pod.catalog import DEFAULT_CATALOG_PATH

    raw = tomllib.loads(DEFAULT_CATALOG_PATH.read_text())
    raw["tpu-v4"].update(edit)
    lines = []
    for chip, table in raw.items():
        lines.append(f"[{chip}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    path = tmp_path / "chips.toml"
    path.write_text("\n".join(lines))
    with pytest.raises(ScenarioError) as err:
        load_catalog(path)
    assert "chips.toml" in str(err.value) and fragment in str(err.value)
    assert any(k.startswith("tpu-v4.") for k, _ in err.value.problems)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


# ---------------------------------------------------------------------------------------------
# Property tests: only Podscope's own errors ever come out.

_KEYS = [
    "name", "pod", "pod.chip", "pod.topology", "pod.slices", "model", "model.kind", "model.layer_sizes",
    "model.image_size", "model.classes", "model.layers", "model.d_model", "model.heads", "model.d_ff",
    "model.vocab", "model.seq_len", "model.kv_heads", "model.head_dim", "model.mlp", "training",
    "training.global_batch", "training.steps", "training.precision", "training.optimizer", "training.remat",
    "parallelism", "parallelism.data", "parallelism.fsdp", "parallelism.tensor", "sim", "sim.seed",
    "sim.jitter_frac", "sim.trace", "interconnect", "interconnect.schedule", "interconnect.overlap",
    "interconnect.buckets", "interconnect.failed_links", "interconnect.degraded_links", "pod.bogus", "bogus",
]  # fmt: skip

_scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 3, 4, 7, 8, 16, 64, 256, -1, 2**31, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=12),
    st.sampled_from(["tpu-v4", "tpu-v5e", "tpu-v3", "2x2x2", "4x4", "16x16", "8", "mlp", "transformer", "resnet50",
                     "bf16", "fp32", "adam", "full", "swiglu", "x", "", "0x0", "1x1x1x1", "１２"]),
)  # fmt: skip
_values = st.recursive(
    _scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_random_toml_text_gives_a_scenario_or_a_scenario_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass") if _encodable(text) else path.write_bytes(b"\xff")
    try:
        load_scenario(path)
    except ScenarioError as e:
        assert str(path) in str(e)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["name", "pod", "model", "training", "parallelism", "sim", "x"]), _values, max_size=7))
def test_random_tables_give_a_scenario_or_a_scenario_error(raw):
    try:
        scenario_from_dict(raw, "fuzz.toml")
    except ScenarioError as e:
        assert e.problems and all(isinstance(k, str) and isinstance(m, str) and m for k, m in e.problems)
        assert "fuzz.toml" in str(e)


def _set(raw: dict, dotted: str, value) -> dict:
    out = copy.deepcopy(raw)
    node = out
    *parents, leaf = dotted.split(".")
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[leaf] = value
    return out


_SMALL_SIMULATION_CHIP_STEPS = 4096  # keep each simulated example to milliseconds


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(_KEYS), _values), min_size=1, max_size=3))
def test_edited_scenarios_load_and_simulate_or_raise_podscope_errors(edits):
    raw = BASE
    for key, value in edits:
        raw = _set(raw, key, value)
    try:
        scenario = scenario_from_dict(raw, "fuzz.toml")
    except ScenarioError:
        return
    if scenario.total_chips * scenario.training.steps > _SMALL_SIMULATION_CHIP_STEPS:
        return  # valid; too big to simulate hundreds of times in a unit test
    try:
        result = simulate(scenario)
    except PodscopeError:
        return
    durs = result.trace.events.column("dur_ns").to_numpy()
    assert (durs > 0).all()
    step_ns = result.trace.steps.column("step_ns").to_numpy()
    assert (step_ns > 0).all() and math.isfinite(float(step_ns.sum()))
    assert set(result.trace.events.column("kind").to_pylist()) <= set(EVENT_KINDS)


@settings(max_examples=40, deadline=None)
@given(
    chip=st.sampled_from(sorted(load_catalog())),
    shape=st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=3),
    slices=st.integers(min_value=1, max_value=3),
    steps=st.integers(min_value=1, max_value=6),
    per_chip=st.integers(min_value=1, max_value=64),
    seed=st.integers(min_value=0, max_value=2**63),
)
def test_valid_scenarios_simulate_to_tiling_traces(chip, shape, slices, steps, per_chip, seed):
    """Valid generated scenarios always simulate; per chip, events tile each step exactly."""
    chips = math.prod(shape) * slices
    raw = {
        **BASE,
        "pod": {"chip": chip, "topology": "x".join(map(str, shape)), "slices": slices},
        "training": {"global_batch": per_chip * chips, "steps": steps},
        "sim": {"seed": seed},
    }
    try:
        scenario = scenario_from_dict(raw)
    except ScenarioError as e:  # only the slice-shape rules may refuse a generated pod
        assert all(k == "pod.topology" for k, _ in e.problems), e.problems
        return
    result = simulate(scenario)
    ev = result.trace.events
    per_chip_time = np.bincount(ev.column("chip").to_numpy(), weights=ev.column("dur_ns").to_numpy(), minlength=chips)
    assert (per_chip_time == result.trace.steps.column("step_ns").to_numpy().sum()).all()


# ---------------------------------------------------------------------------------------------
# The same through the real CLI: exit status 2, one message on stderr, nothing written.


@pytest.mark.parametrize(
    "text, key, valid",
    [
        (SMALL_TOML.replace("[pod]", "[pod"), "", "malformed TOML"),
        (SMALL_TOML.replace("steps = 20", "steps = 20\nsteps_per_epoch = 3"), "training.steps_per_epoch", "valid keys here"),
        (SMALL_TOML + "[parallelism]\ndata = 4\ntensor = 4\n", "parallelism", "axes whose product is 8"),
        (SMALL_TOML.replace('"tpu-v4"', '"tpu-v9"'), "pod.chip", "valid: tpu-v2"),
        (SMALL_TOML.replace("[1024, 4096, 1024]", "[1000000000000, 1000000000000]"), "", "implausibly large"),
    ],
    ids=["malformed", "unknown-key", "mesh", "chip", "absurd-size"],
)
def test_cli_bad_input_exits_2_with_one_message_and_writes_nothing(tmp_path, text, key, valid):
    from tests.test_cli import cli

    path = tmp_path / "bad.toml"
    path.write_text(text)
    db = tmp_path / "db.duckdb"
    p = cli("run", str(path), "--json", db=db)
    assert p.returncode == 2, p.stderr
    assert p.stdout == "" and not db.exists()
    assert p.stderr.count("error:") == 1 and "Traceback" not in p.stderr
    assert f"{path}: {key}: " in p.stderr if key else str(path) in p.stderr
    assert valid in p.stderr


def test_oversized_or_endless_files_are_refused_after_a_bounded_read(tmp_path):
    big = tmp_path / "big.toml"
    big.write_text("# padding\n" * 200_000)  # 2 MB of comments: valid TOML, absurd scenario
    _, message = _problems(big)
    assert "big.toml" in message and "larger than 1024 KiB" in message
    _, message = _problems("/dev/zero")  # never ends: read stops at the bound
    assert "larger than" in message
    _, message = _problems(tmp_path)  # a folder
    assert "cannot read file" in message


def test_calibration_file_rejects_a_boolean_for_a_number(tmp_path):
    """TOML's `true` is not 1.0: the calibration loader names the key, like the scenario loader."""
    from engine.errors import ScenarioError
    from engine.scenario.calibration import load_calibration

    path = tmp_path / "calibration.toml"
    path.write_text("[compute]\nmxu_efficiency = true\n")
    with pytest.raises(ScenarioError) as e:
        load_calibration(path)
    assert str(path) in str(e.value)
    assert [k for k, _ in e.value.problems] == ["compute.mxu_efficiency"]
