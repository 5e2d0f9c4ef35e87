"""Capturing a train step compiled for a TPU target: target names, the bundle, OOM, the CLI, no-JAX installs.

The live tests compile with libtpu on this CPU (``jax[tpu]``, requirements-tpu.txt). Locally
they skip when JAX or libtpu is missing; in CI (``CI=true``) a missing install is a failure.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine import load_scenario, simulate

from engine.errors import InputError
from engine.hlo import bundle_format as bf
from engine.hlo.live_range import LivePeak, peak_sources
from profiler import tpu_capture
from profiler.tpu_capture import parse_oom, tpu_target

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "tpu"
GIB = 2**30

#: the devices per chip a target compiles for: one per TensorCore on tpu7x, one per chip elsewhere (v4 and v5p as
#: megacore devices, as JAX runs them)
DEVICES_PER_CHIP = {"v4": 1, "v5e": 1, "v5p": 1, "v6e": 1, "tpu7x": 2}


# --- target names (pure Python) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name, topology, chip, chips",
    [
        ("v5p-128", "v5p:4x4x4", "tpu-v5p", 64),
        ("v5p-8", "v5p:2x2x1", "tpu-v5p", 4),
        ("v5p-16", "v5p:2x2x2", "tpu-v5p", 8),
        ("v5p-1024", "v5p:8x8x8", "tpu-v5p", 512),
        ("v4-8", "v4:2x2x1", "tpu-v4", 4),
        ("v4-32", "v4:2x2x4", "tpu-v4", 16),
        ("v4-64", "v4:2x4x4", "tpu-v4", 32),
        ("v5e-256", "v5e:16x16", "tpu-v5e", 256),
        ("v5e-8", "v5e:2x4", "tpu-v5e", 8),
        ("v5e-1", "v5e:1x1", "tpu-v5e", 1),
        ("v5litepod-16", "v5e:4x4", "tpu-v5e", 16),
        ("v6e-8", "v6e:2x4", "tpu-v6e", 8),
        ("v6e-32", "v6e:4x8", "tpu-v6e", 32),
        ("v5p:4x4x4", "v5p:4x4x4", "tpu-v5p", 64),
        ("v5p:8x8x12", "v5p:8x8x12", "tpu-v5p", 768),
        ("v5e:16x16", "v5e:16x16", "tpu-v5e", 256),
        ("v5e:8x8x1", "v5e:8x8", "tpu-v5e", 64),
        ("tpu7x:2x2x1", "tpu7x:2x2x1", "tpu7x", 4),
    ],
)
def test_target_names_map_to_cloud_tpu_slices(name, topology, chip, chips):
    t = tpu_target(name)
    assert (t.name, t.topology, t.chip, t.chips, t.slices) == (name, topology, chip, chips, 1)


def test_slices_multiply_the_chips():
    t = tpu_target("v5e-256", slices=4)
    assert (t.topology, t.slices, t.chips) == ("v5e:16x16", 4, 1024)


@pytest.mark.parametrize(
    "name, says",
    [
        ("v5p-12", "power of two"),  # 6 chips
        ("v5p-7", "TensorCores"),  # half a chip
        ("v5p-4", "power of two"),  # 2 chips: no such v5p slice
        ("v5e-2", "no 1x2 slice"),
        ("v5e-512", "256 chips"),
        ("v5e:3x3", "valid shapes: 1x1, 2x2"),
        ("v5p:3x3x3", "valid shapes: 2x2x1"),
        ("tpu7x-8", "topology form only"),
        ("v3-8", "unknown TPU target"),
        ("h100-8", "unknown TPU target"),
        ("", "unknown TPU target"),
    ],
)
def test_bad_target_names_say_what_is_valid(name, says):
    with pytest.raises(InputError) as e:
        tpu_target(name)
    assert says in str(e.value) and repr(name) in str(e.value)
    if "unknown" in says:
        assert "v5p-128" in str(e.value) and "v5p:4x4x4" in str(e.value)


@pytest.mark.parametrize("slices", [0, -1, 1.5, True])
def test_slices_must_be_a_positive_integer(slices):
    with pytest.raises(InputError, match="slices"):
        tpu_target("v5p-8", slices=slices)


# --- XLA's out-of-HBM messages, atomic writes (pure Python) -----------------------------------


def test_parse_oom_reads_both_phrasings_in_gib():
    a = parse_oom(
        "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (24.41G) "
        "exceeds available HBM (15.75G)."
    )
    assert a["required_bytes"] == round(24.41 * GIB) and a["available_bytes"] == round(15.75 * GIB)
    b = parse_oom("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 30.21G of 15.48G hbm.")
    assert b["required_bytes"] == round(30.21 * GIB) and b["available_bytes"] == round(15.48 * GIB)
    c = parse_oom("RESOURCE_EXHAUSTED: Used 900.00M of 15.48G hbm")
    assert c["required_bytes"] == 900 * 2**20


def test_parse_oom_keeps_an_unparseable_message_without_sizes():
    out = parse_oom("RESOURCE_EXHAUSTED: something new" + "x" * 10_000)
    assert out["required_bytes"] is None and out["available_bytes"] is None
    assert len(out["message"]) == tpu_capture.OOM_MESSAGE_CHARS and tuple(out) == bf.OOM_KEYS


def test_a_failed_write_leaves_neither_the_file_nor_a_temporary(tmp_path, monkeypatch):
    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(tpu_capture.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        tpu_capture._write_atomic(tmp_path / "a.xla.json", b"{}")
    assert list(tmp_path.iterdir()) == []


# --- without JAX --------------------------------------------------------------------------------

#: prepended to a child's code: JAX, jaxlib and libtpu cannot be imported there (a machine without jax[tpu])
BLOCK_JAX = """
import sys
class _NoJax:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("jax", "jaxlib", "libtpu"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoJax())
"""


def _without_jax(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_JAX + code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_without_jax_the_module_imports_and_capture_says_what_to_install(tmp_path):
    p = _without_jax(f"""
import profiler.tpu_capture as tc, profiler.cli
from engine.errors import InputError
assert not any(m.split(".")[0] == "jax" for m in sys.modules)
t = tc.tpu_target("v5p-128")
try:
    tc.capture(lambda x: x, 1.0, target=t, name="x", out_dir={str(tmp_path)!r})
except InputError as e:
    print("InputError:", e)
""")
    assert p.returncode == 0, p.stderr
    assert "InputError:" in p.stdout and "pip install 'podscope[tpu]'" in p.stdout and "requirements-tpu.txt" in p.stdout
    assert list(tmp_path.iterdir()) == []


def test_without_jax_the_compile_command_exits_2_with_the_install_hint(tmp_path):
    p = _without_jax(f"""
from profiler.cli import main
sys.exit(main(["compile", "tests/fixtures/tpu/example_step.py:make_step", "--target", "v5p-8", "-o", {str(tmp_path)!r}]))
""")
    assert p.returncode == 2, p.stderr
    assert "podscope[tpu]" in p.stderr and "requirements-tpu.txt" in p.stderr


# --- live: libtpu compiles on this CPU ---------------------------------------------------------


def _tiny_step(jax, target, width=256):
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = len(target.devices)
    mesh = target.mesh({"data": n})
    w = jax.ShapeDtypeStruct((width, width), jnp.float32, sharding=NamedSharding(mesh, P()))
    x = jax.ShapeDtypeStruct((8 * n, width), jnp.float32, sharding=NamedSharding(mesh, P("data")))

    def step(w, x):
        return w - 0.1 * jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)

    return jax.jit(step, donate_argnums=0), (w, x)


def _check_sidecar(side: dict) -> None:
    assert tuple(k for k in side if k not in bf.OPTIONAL_KEYS) == bf.TOP_KEYS
    assert side["format"] == bf.FORMAT and side["format_version"] == bf.FORMAT_VERSION
    for key in ("name", "target", "topology", "chip", "device_kind", "jax_version"):
        assert isinstance(side[key], str) and side[key], key
    assert side["libtpu_version"] is None or isinstance(side["libtpu_version"], str)
    assert isinstance(side["slices"], int) and isinstance(side["devices"], int) and side["devices"] > 0
    assert isinstance(side["compile_s"], float) and side["compile_s"] >= 0
    if side["oom"] is None:
        assert side["module"] == side["name"] + bf.MODULE_SUFFIX
        assert tuple(side["memory"]) == bf.MEMORY_KEYS
        assert all(isinstance(v, int) and v >= 0 for v in side["memory"].values())
        assert side["cost"]["flops"] > 0 and all(isinstance(v, float) for v in side["cost"].values())
    else:
        assert side["module"] is None and side["memory"] is None and side["cost"] is None
        assert tuple(side["oom"]) == bf.OOM_KEYS


@pytest.mark.slow
@pytest.mark.parametrize("topology", ["v4:2x2x1", "v5e:2x2", "v5p:2x2x1", "v6e:2x2", "tpu7x:2x2x1"])
def test_capture_writes_a_bundle_for_every_generation(live, tmp_path, topology):
    target = tpu_target(topology)
    fn, args = _tiny_step(live, target)
    r = tpu_capture.capture(fn, *args, target=target, name="tiny", out_dir=tmp_path, progress=False, describes={"model": "tiny"})
    assert r.sidecar_path == tmp_path / "tiny.xla.json" and r.module_path == tmp_path / "tiny.hlo.txt.gz" and not r.oom
    side = json.loads(r.sidecar_path.read_text())
    _check_sidecar(side)
    assert side["target"] == side["topology"] == topology and side["describes"] == {"model": "tiny"}
    assert side["devices"] == target.chips * DEVICES_PER_CHIP[topology.split(":")[0]]
    assert side["jax_version"] == live.__version__ and side["memory"] == r.memory and side["cost"] == r.cost
    # the donated weights are aliased to the output
    assert r.memory["alias_bytes"] == 256 * 256 * 4
    text = gzip.decompress(r.module_path.read_bytes()).decode()
    assert text.startswith("HloModule") and "T(8,128)" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.hlo.txt.gz", "tiny.xla.json"]  # no temporaries left
    # and the bundle runs on the pod it was compiled for, with XLA's HBM and cycle estimates
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(
        f'[pod]\nchip = "{target.chip}"\ntopology = "{topology.split(":")[1]}"\n[model]\nkind = "hlo"\npath = "tiny.xla.json"\n'
        "[training]\nglobal_batch = 64\nsteps = 3\n"
    )
    run = simulate(load_scenario(scenario))
    m = r.memory
    per_device = m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"]
    assert run.facts.peak_hbm_bytes == per_device * DEVICES_PER_CHIP[topology.split(":")[0]]
    assert run.facts.extra["hbm_source"] == "xla" and run.facts.extra["compute_source"] == "xla"
    assert run.trace.steps.num_rows == 3 and not run.facts.oom


@pytest.mark.slow
def test_a_program_too_big_for_hbm_gives_an_oom_bundle(live, tmp_path):
    target = tpu_target("v5e:2x2")
    (tmp_path / "big.hlo.txt.gz").write_bytes(b"an older module of the same name")
    fn, args = _tiny_step(live, target, width=64 * 1024)  # 16 GiB of f32 weights, replicated
    r = tpu_capture.capture(fn, *args, target=target, name="big", out_dir=tmp_path, progress=False)
    assert r.oom and r.module_path is None and r.memory is None and r.cost is None
    side = json.loads(r.sidecar_path.read_text())
    _check_sidecar(side)
    assert "RESOURCE_EXHAUSTED" in side["oom"]["message"]
    assert side["oom"]["required_bytes"] > side["oom"]["available_bytes"] > 15 * GIB  # a v5e chip's 16 GiB
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.xla.json"]


@pytest.mark.slow
@pytest.mark.parametrize("width", [256, 64 * 1024])  # compiled, and refused for 16 GiB of replicated f32 weights
def test_capture_keeps_what_xla_holds_live_at_its_peak(live, tmp_path, width):
    target = tpu_target("v5e:2x2")
    fn, args = _tiny_step(live, target, width=width)
    r = tpu_capture.capture(fn, *args, target=target, name="s", out_dir=tmp_path, progress=False, live_range=True)
    assert r.live_peak_path == tmp_path / f"s{bf.LIVE_PEAK_SUFFIX}" and r.live_peak_error is None
    peak = LivePeak.from_json(json.loads(r.live_peak_path.read_text()), str(r.live_peak_path))
    s = peak_sources(peak)
    # both arguments are live at the peak, by their names in the step's signature, at their size per device
    assert s["by_argument"] == {"w": width * width * 4, "x": 8 * width * 4}
    if r.oom:  # what XLA's message says the program needs: the weights and their gradient, made by the backward
        oom = json.loads(r.sidecar_path.read_text())["oom"]
        assert s["live_bytes"] == pytest.approx(oom["required_bytes"], rel=1e-3) and s["backward"] >= width * width * 4
    else:  # XLA's peak also counts what a program this small keeps on chip
        assert s["arguments"] <= s["live_bytes"] <= r.memory["peak_bytes"]
    assert not any(p.name.startswith("module_") for p in tmp_path.iterdir())  # the dumps stay in a temporary folder
    # a capture that does not ask for it leaves no older program's peak beside its bundle
    r = tpu_capture.capture(fn, *args, target=target, name="s", out_dir=tmp_path, progress=False)
    assert r.live_peak_path is None and not (tmp_path / f"s{bf.LIVE_PEAK_SUFFIX}").exists()


@pytest.mark.slow
def test_an_error_in_the_step_is_raised_as_it_is_and_writes_nothing(live, tmp_path):
    target = tpu_target("v5e:2x2")
    fn, (w, x) = _tiny_step(live, target)
    short = live.ShapeDtypeStruct((7, 5), w.dtype, sharding=w.sharding)
    with pytest.raises(TypeError):
        tpu_capture.capture(fn, short, x, target=target, name="bad", out_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_xla_failures_other_than_hbm_are_podscope_errors(live, tmp_path):
    from engine.errors import TpuCompileError

    target = tpu_target("v5e:2x2")
    fn, args = _tiny_step(live, target)

    class Lowered:
        def compile(self):
            raise RuntimeError("INTERNAL: something else went wrong")

    class Step:
        def lower(self, *a, **k):
            return Lowered()

    with pytest.raises(TpuCompileError, match="XLA could not compile bad for v5e:2x2: INTERNAL: something else"):
        tpu_capture.capture(Step(), *args, target=target, name="bad", out_dir=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_mesh_axes_must_hold_every_device(live):
    target = tpu_target("v5p-16")
    assert target.mesh({"data": 2, "fsdp": 4}).shape == {"data": 2, "fsdp": 4}
    with pytest.raises(InputError, match="hold 4 devices; v5p-16 .* has 8"):
        target.mesh({"data": 4})


@pytest.mark.slow
def test_two_slices_give_the_devices_of_both(live):
    target = tpu_target("v5p-8", slices=2)
    assert len(target.devices) == 8 and sorted({d.slice_index for d in target.devices}) == [0, 1]


@pytest.mark.slow
def test_compile_command_writes_the_bundle(live, tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "profiler", "compile", "tests/fixtures/tpu/example_step.py:make_step", "--target", "v5p-8",
         "-o", str(tmp_path), "--name", "example"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert str(tmp_path / "example.xla.json") in p.stdout and "fits on v5p:2x2x1" in p.stdout and "GiB per device" in p.stdout
    side = json.loads((tmp_path / "example.xla.json").read_text())
    _check_sidecar(side)
    assert side["target"] == "v5p-8" and side["topology"] == "v5p:2x2x1" and side["devices"] == 4
    assert (tmp_path / "example.hlo.txt.gz").is_file()


def test_compile_command_refuses_a_missing_function(live, tmp_path):
    p = subprocess.run([sys.executable, "-m", "profiler", "compile", "tests/fixtures/tpu/example_step.py:nope", "--target", "v5p-8",
                        "-o", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2 and "defines no function 'nope'" in p.stderr and "make_step" in p.stderr


def test_compile_command_refuses_a_bad_target_and_a_missing_file(tmp_path):
    for argv, says in ((["example_step.py:make_step", "--target", "v5p-9"], "v5p-9"), (["missing.py:f", "--target", "v5p-8"], "no such file")):
        p = subprocess.run([sys.executable, "-m", "profiler", "compile", *argv, "-o", str(tmp_path)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
        assert p.returncode == 2 and says in p.stderr, p.stderr


# --- the committed fixtures --------------------------------------------------------------------

COMMITTED = sorted(FIXTURES.glob("*" + bf.SIDE_SUFFIX))


def test_every_generation_has_a_committed_fixture():
    chips = {json.loads(p.read_text())["chip"] for p in COMMITTED}
    assert chips == {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"}


@pytest.mark.parametrize("sidecar", COMMITTED, ids=lambda p: p.name)
def test_committed_fixtures_carry_every_key_the_versions_and_what_they_describe(sidecar):
    side = json.loads(sidecar.read_text())
    _check_sidecar(side)
    assert side["name"] + bf.SIDE_SUFFIX == sidecar.name
    assert side["jax_version"] == "0.10.2" and side["libtpu_version"] == "0.0.42.1"
    assert side["describes"]["generator"] == "scripts/fixtures/make_tpu_bundles.py" and "model" in side["describes"]
    assert side["devices"] == tpu_target(side["target"]).chips * DEVICES_PER_CHIP[side["topology"].split(":")[0]]
    if side["module"]:
        module = sidecar.parent / side["module"]
        assert module.stat().st_size < 300 * 1024
        assert gzip.decompress(module.read_bytes()).startswith(b"HloModule")
    else:
        assert not (sidecar.parent / (side["name"] + bf.MODULE_SUFFIX)).exists()


def test_the_fsdp_fixture_has_while_loops_and_asynchronous_collectives():
    text = gzip.decompress((FIXTURES / "transformer_fsdp_v5p8.hlo.txt.gz").read_bytes()).decode()
    assert " while(" in text and " collective-permute-start(" in text and " collective-permute-done(" in text


def test_the_unrolled_fixture_has_no_loops():
    text = gzip.decompress((FIXTURES / "transformer_dp_v5e4.hlo.txt.gz").read_bytes()).decode()
    assert " while(" not in text and " all-reduce(" in text


def test_the_oom_fixture_records_what_xla_said():
    side = json.loads((FIXTURES / "oom_v5e4.xla.json").read_text())
    assert side["oom"]["required_bytes"] > side["oom"]["available_bytes"] and side["module"] is None


def test_the_bundled_example_is_the_fsdp_fixture():
    for suffix in (bf.MODULE_SUFFIX, bf.SIDE_SUFFIX):
        bundled = ROOT / "data" / "hlo" / f"transformer_fsdp_v5p8{suffix}"
        assert bundled.read_bytes() == (FIXTURES / f"transformer_fsdp_v5p8{suffix}").read_bytes()
        assert bundled.stat().st_size < 2**20
