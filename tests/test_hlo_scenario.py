"""``[model] kind = "hlo"`` end to end: validation, simulation, storage, and the built-in cross-check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine import load_scenario, scenario_from_dict, simulate
from engine.errors import ScenarioError
from engine.hlo import load_hlo
from profiler.cli import main
from profiler.store import Database

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "data" / "scenarios" / "jax-transformer-hlo-v5p-8.toml"
FIXTURES = Path(__file__).parent / "fixtures" / "hlo"

HLO_TOML = """
name = "hlo-test"
[pod]
chip = "tpu-v5p"
topology = "{topology}"
[model]
kind = "hlo"
path = "{path}"
{model_extra}
[training]
global_batch = 16
steps = 6
{training_extra}
[sim]
jitter_frac = 0.0
{more}
"""


def write_scenario(tmp_path, path="transformer_dp8.hlo.txt.gz", topology="2x2x2", model_extra="", training_extra="", more=""):
    if not Path(path).is_absolute() and (FIXTURES / path).exists():
        shutil.copy(FIXTURES / path, tmp_path / path)
    p = tmp_path / "s.toml"
    p.write_text(HLO_TOML.format(topology=topology, path=path, model_extra=model_extra, training_extra=training_extra, more=more))
    return p


def problems_of(path) -> dict[str, str]:
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    return dict(e.value.problems)


class TestValidation:
    def test_path_is_relative_to_the_scenario_file(self, tmp_path):
        s = load_scenario(write_scenario(tmp_path))
        assert Path(s.model.path) == (tmp_path / "transformer_dp8.hlo.txt.gz").resolve()

    def test_keys_the_module_fixes_are_errors_naming_them(self, tmp_path):
        p = write_scenario(tmp_path, model_extra="layers = 2", training_extra='precision = "bf16"\noptimizer = "adam"\nweight_dtype = "bf16"',
                           more="[parallelism]\ndata = 8")  # fmt: skip
        probs = problems_of(p)
        assert set(probs) == {"model.layers", "training.precision", "training.optimizer", "training.weight_dtype", "parallelism"}
        assert "HLO module fixes" in probs["model.layers"]

    def test_device_count_must_equal_chips(self, tmp_path):
        probs = problems_of(write_scenario(tmp_path, topology="2x2x4"))
        assert "compiled for 8 devices but the pod has 16 chips" in probs["model.path"]

    def test_not_hlo(self, tmp_path):
        (tmp_path / "model.txt").write_text("not a module\n")
        assert "not HLO text" in problems_of(write_scenario(tmp_path, path="model.txt"))["model.path"]

    def test_missing_file(self, tmp_path):
        assert "no such HLO file" in problems_of(write_scenario(tmp_path, path="nope.hlo.txt"))["model.path"]

    def test_cli_bad_module_exits_2_and_writes_nothing(self, tmp_path, capsys):
        (tmp_path / "model.txt").write_text("HloModule m\n\nENTRY %main () -> f32[] {\n  %c = f32[] constant(1)\n")
        db = tmp_path / "runs.duckdb"
        assert main(["run", str(write_scenario(tmp_path, path="model.txt")), "--db", str(db)]) == 2
        assert "truncated" in capsys.readouterr().err
        with Database(db).read() as con:
            assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_bundled_example_runs_and_stores(tmp_path, capsys):
    db = tmp_path / "runs.duckdb"
    assert main(["run", str(EXAMPLE), "--db", str(db), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["chips"] == 8 and s["steps"] == 100
    assert 0 < s["mfu"] < s["hfu"] < 1  # the module's FLOPs include elementwise work the model count leaves out
    assert s["breakdown"]["compute"] > 0.5 and s["breakdown"]["collective"] > 0
    assert s["hlo_collectives"] == {"all-reduce": {"count": 1, "bytes": 10490880.0}}
    assert s["hlo_unknown_ops"] == {} and s["peak_hbm_bytes"] > 0
    with Database(db).read() as con:
        rows = con.execute("SELECT op, group_size, torus_axes FROM extra_hlo_collectives").fetchall()
    assert rows == [("all-reduce", 8, "zyx")]


def test_unknown_opcode_is_listed_in_the_summary(tmp_path, capsys):
    text = (
        "HloModule m, num_partitions=8\n\nENTRY %main (a: f32[1024]) -> f32[1024] {\n"
        "  %a = f32[1024] parameter(0)\n  ROOT %b = f32[1024] mystery-op(%a)\n}\n"
    )
    (tmp_path / "m.hlo.txt").write_text(text)
    assert main(["run", str(write_scenario(tmp_path, path="m.hlo.txt")), "--db", str(tmp_path / "r.duckdb"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hlo_unknown_ops"] == {"mystery-op": 1}


def test_same_seed_same_trace(tmp_path):
    p = write_scenario(tmp_path, more="seed = 3").read_text().replace("jitter_frac = 0.0", "jitter_frac = 0.05")
    (tmp_path / "j.toml").write_text(p)
    a, b = simulate(load_scenario(tmp_path / "j.toml")), simulate(load_scenario(tmp_path / "j.toml"))
    assert a.trace.events.equals(b.trace.events)


# -- the same transformer as an HLO module and as the built-in family -----------------------------

BUILTIN = {
    "name": "builtin",
    "pod": {"chip": "tpu-v5p", "topology": "2x2x2"},
    # the CPU-compiled module all-reduces its gradients in f32 (one all-reduce of f32 operands): the weights' dtype
    "training": {"global_batch": 16, "steps": 6, "precision": "bf16", "optimizer": "sgd", "gradient_reduce_dtype": "weights"},
    "parallelism": {"data": 8},
    "sim": {"jitter_frac": 0.0},
}


def test_hlo_and_builtin_transformer_agree():
    """The JAX transformer of the fixture against ``kind = "transformer"`` with its dims, data parallel on 8 v5p chips.

    FLOPs: the module's matmuls are the built-in family's GEMMs one for one (its forward, and
    two products per GEMM backward), so matmul FLOPs agree to rounding; XLA's count adds ~3%
    of elementwise work (GELU, softmax, LayerNorm, the SGD update) the family does not count.
    Step time: both pay the same MXU kernels and launches and the same gradient all-reduce;
    the module is slower by its HBM traffic, since XLA:CPU keeps the activations in f32 and
    splits elementwise work into separate loop fusions that re-read them (a TPU module would
    fuse them).
    """
    meta = json.loads((FIXTURES / "transformer_dp8.cpu.json").read_text())["describes"]
    dims = {k: meta[k] for k in ("layers", "d_model", "heads", "d_ff", "vocab", "seq_len")}
    builtin = simulate(scenario_from_dict({**BUILTIN, "model": {"kind": "transformer", **dims}}))
    hlo = simulate(load_scenario(EXAMPLE, overrides={"training.steps": 6, "sim.jitter_frac": 0.0}))
    module = load_hlo(FIXTURES / "transformer_dp8.hlo.txt.gz")
    chips = 8
    assert module.dot_flops_per_device * chips == pytest.approx(builtin.facts.model_flops_per_step, rel=0.001)
    assert hlo.facts.hardware_flops_per_step == pytest.approx(builtin.facts.hardware_flops_per_step, rel=0.05)

    def step_s(run):
        return float(np.median(run.trace.steps.column("step_ns").to_numpy())) / 1e9

    assert step_s(hlo) == pytest.approx(step_s(builtin), rel=0.15)
    assert step_s(hlo) > step_s(builtin)  # the CPU module's extra HBM passes, as the docstring says


def test_stored_scenario_reloads_and_the_what_if_form_can_change_the_pod(tmp_path):
    """A run's stored scenario (to_dict) validates again, also with the what-if form's overrides."""
    from engine.scenario import apply_overrides

    s = load_scenario(write_scenario(tmp_path))
    again = scenario_from_dict(s.to_dict())
    assert again == s
    what_if = apply_overrides(s.to_dict(), {"pod.chip": "tpu-v4", "parallelism.data": None, "training.global_batch": 32})
    assert scenario_from_dict(what_if).pod.chip == "tpu-v4"
