"""TPU-compiled module bundles (NAME.hlo.txt.gz + NAME.xla.json) in the reader, the ``hlo`` command and runs.

The fixtures are real libtpu AOT compiles (scripts/fixtures/make_tpu_bundles.py, jax[tpu] 0.10.2,
libtpu 0.0.42.1); these tests need neither JAX nor a TPU.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine import load_scenario, simulate
from engine.errors import HloError, ScenarioError
from engine.hlo import load_hlo
from engine.hlo.bundle import read_bundle
from engine.hlo.module_file import cached_program
from profiler.cli import EXIT_BAD_INPUT, EXIT_OOM, main
from profiler.store import Database

TPU = Path(__file__).parent / "fixtures" / "tpu"
BUNDLES = sorted(p.name.removesuffix(".xla.json") for p in TPU.glob("*.xla.json"))
COMPILED = [n for n in BUNDLES if (TPU / f"{n}.hlo.txt.gz").exists()]
CHIP_OF = {"v4": "tpu-v4", "v5e": "tpu-v5e", "v5p": "tpu-v5p", "v6e": "tpu-v6e", "tpu7x": "tpu7x"}


def sidecar(name: str) -> dict:
    return json.loads((TPU / f"{name}.xla.json").read_text())


def scenario_toml(name: str, steps: int = 5, **extra) -> str:
    side = sidecar(name)
    gen, shape = side["topology"].split(":")
    lines = [f'name = "{name}"', "[pod]", f'chip = "{CHIP_OF[gen]}"', f'topology = "{shape}"', "[model]", 'kind = "hlo"',
             f'path = "{TPU / (name + ".xla.json")}"', *(f"{k} = {json.dumps(v)}" for k, v in extra.items()),
             "[training]", f"global_batch = {side['describes'].get('global_batch', 8)}", f"steps = {steps}",
             "[sim]", "jitter_frac = 0.0"]  # fmt: skip
    return "\n".join(lines) + "\n"


def run_scenario(tmp_path, name: str, **extra):
    p = tmp_path / f"{name}.toml"
    p.write_text(scenario_toml(name, **extra))
    return simulate(load_scenario(p))


def matmul_flops(d: dict) -> float:
    """The matmul FLOPs per device of the fixtures' transformer train step, by hand (no remat: 3x the forward)."""
    tokens = d["global_batch"] * d["seq_len"] / math.prod(d["mesh"].values())
    per_layer_params = 4 * d["d_model"] ** 2 + 2 * d["d_model"] * d["d_ff"]  # qkv (3 d^2), out (d^2), the two MLP matrices
    attention = 2 * 2 * tokens * d["seq_len"] * d["d_model"]  # scores and values, every head
    forward = d["layers"] * (2 * tokens * per_layer_params + attention) + 2 * tokens * d["d_model"] * d["vocab"]
    return 3 * forward


class TestReader:
    @pytest.mark.parametrize("name", COMPILED)
    def test_flops_bodies_once_are_xla_cost_analysis(self, name):
        once = load_hlo(TPU / f"{name}.hlo.txt.gz", count_trip_counts=False)
        assert once.flops_per_device == pytest.approx(sidecar(name)["cost"]["flops"], rel=0.01)

    @pytest.mark.parametrize("name", [n for n in COMPILED if n.startswith(("mlp", "matmul", "transformer_dp"))])
    def test_loop_free_modules_match_xla_within_one_percent(self, name):
        prog = cached_program(TPU / f"{name}.xla.json")
        assert not prog.cost.while_loops
        assert prog.cost.flops_per_device == pytest.approx(prog.bundle.cost["flops"], rel=0.01)

    def test_every_loop_trip_counts_the_programs_whole_matmul_work(self):
        # XLA's cost analysis takes each while body once: on the scanned FSDP step it is 27% short of the dots the
        # program runs; Podscope reads each loop's trips from its condition and matches the hand count
        scan = cached_program(TPU / "transformer_fsdp_v5p8.xla.json").cost
        true = matmul_flops(sidecar("transformer_fsdp_v5p8")["describes"])
        assert scan.dot_flops_per_device == pytest.approx(true, rel=0.03)
        assert sidecar("transformer_fsdp_v5p8")["cost"]["flops"] < 0.8 * true
        assert scan.while_loops and not scan.unknown_trip_counts
        unrolled = cached_program(TPU / "transformer_fsdp_unrolled_v5p8.xla.json").cost
        assert scan.dot_flops_per_device == pytest.approx(unrolled.dot_flops_per_device, rel=1e-6)

    @pytest.mark.parametrize("name", COMPILED)
    def test_parameters_in_their_tiles_are_xlas_argument_bytes(self, name):
        prog = cached_program(TPU / f"{name}.xla.json")
        assert prog.cost.padded_parameter_bytes_per_device == prog.bundle.memory.argument_bytes

    def test_asynchronous_collectives_and_their_algorithms(self):
        fsdp = cached_program(TPU / "transformer_fsdp_v5p8.xla.json").cost
        assert any(c.asynchronous for c in fsdp.collectives)
        assert all(c.algorithm for c in fsdp.collectives if c.op == "all-reduce")
        # tpu7x runs the MLP's gradient all-reduce as an asynchronous call on a SparseCore
        (ar,) = cached_program(TPU / "mlp_dp_tpu7x_2x2x1.xla.json").cost.collectives
        assert ar.op == "all-reduce" and ar.asynchronous

    def test_a_module_is_read_with_the_sidecar_beside_it(self):
        prog = cached_program(TPU / "transformer_dp_v5e4.hlo.txt.gz")
        assert prog.bundle is not None and prog.bundle.topology == "v5e:2x2"

    def test_v4_compiles_one_megacore_device_per_chip_and_tpu7x_one_per_tensorcore(self):
        for name, devices in (("mlp_dp_v4_2x2x1", 4), ("mlp_dp_tpu7x_2x2x1", 8)):
            b = cached_program(TPU / f"{name}.xla.json").bundle
            assert (b.chips, b.devices, b.devices_per_chip) == (4, devices, devices // 4)


class TestRuns:
    def test_the_runs_hbm_is_xlas(self, tmp_path):
        r = run_scenario(tmp_path, "transformer_fsdp_v5p8")
        m = sidecar("transformer_fsdp_v5p8")["memory"]
        assert r.facts.peak_hbm_bytes == m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"]
        assert r.facts.extra["hbm_source"] == "xla" and not r.facts.oom
        assert r.facts.extra["compute_source"] == "xla"
        assert r.facts.extra["xla_optimal_s"] == sidecar("transformer_fsdp_v5p8")["cost"]["optimal_seconds"]

    def test_a_chip_of_two_devices_holds_both_programs(self, tmp_path):
        r = run_scenario(tmp_path, "mlp_dp_tpu7x_2x2x1")
        m = sidecar("mlp_dp_tpu7x_2x2x1")["memory"]
        assert r.facts.peak_hbm_bytes == 2 * (m["argument_bytes"] + m["output_bytes"] - m["alias_bytes"] + m["temp_bytes"])

    def test_hidden_collective_time_is_not_charged(self, tmp_path):
        f = run_scenario(tmp_path, "transformer_fsdp_v5p8").facts.extra
        assert f["hlo_collective_s"] <= f["hlo_collective_total_s"]
        assert f["hlo_collective_hidden_s"] == pytest.approx(f["hlo_collective_total_s"] - f["hlo_collective_s"])
        assert f["hlo_collective_hidden_s"] > 0

    def test_podscope_compute_is_a_what_if(self, tmp_path):
        xla = run_scenario(tmp_path, "transformer_dp_v5e4").facts.extra
        ours = run_scenario(tmp_path, "transformer_dp_v5e4", compute_source="podscope").facts.extra
        assert ours["compute_source"] == "podscope" and ours["hlo_compute_s"] == pytest.approx(ours["hlo_podscope_compute_s"])
        assert xla["hlo_compute_s"] != pytest.approx(ours["hlo_compute_s"])

    def test_per_op_table_sets_the_compilers_estimate_beside_podscopes(self, tmp_path):
        ops = run_scenario(tmp_path, "transformer_dp_v5e4").trace.extra["hlo_ops"].to_pylist()
        est = [o for o in ops if o["xla_ns"] is not None]
        assert len(est) > 0.9 * len(ops) and all(o["podscope_ns"] >= 0 for o in ops)

    def test_oom_bundle_is_an_out_of_memory_run(self, tmp_path, capsys):
        p = tmp_path / "oom.toml"
        p.write_text(scenario_toml("oom_v5e4"))
        db = tmp_path / "runs.duckdb"
        assert main(["run", str(p), "--db", str(db), "--json"]) == EXIT_OOM
        out = json.loads(capsys.readouterr().out)
        assert out["oom"] and out["hbm_source"] == "xla"
        d = out["oom_detail"]
        assert d["source"] == "xla" and "RESOURCE_EXHAUSTED" in d["message"]
        assert d["peak_bytes"] == sidecar("oom_v5e4")["oom"]["required_bytes"] > d["usable_bytes"]
        with Database(db).read() as con:
            assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1

    def test_hlo_command_on_an_oom_bundle_exits_3(self, capsys):
        assert main(["hlo", str(TPU / "oom_v5e4.xla.json")]) == EXIT_OOM
        assert "RESOURCE_EXHAUSTED" in capsys.readouterr().out

    def test_hlo_command_json_counts_a_start_done_pair_once(self, capsys):
        assert main(["hlo", str(TPU / "transformer_fsdp_v5p8.xla.json"), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        cost = cached_program(TPU / "transformer_fsdp_v5p8.xla.json").cost
        starts = sum(c.executions for c in cost.collectives if c.asynchronous)
        assert out["async_collectives"] == starts
        assert sum(t["count"] for t in out["collectives"].values()) == sum(c.executions for c in cost.collectives)
        assert out["xla"]["topology"] == "v5p:2x2x2" and out["estimated_cycles_per_device"] > 0


class TestAgainstThePod:
    def _problems(self, tmp_path, text: str) -> dict[str, str]:
        p = tmp_path / "s.toml"
        p.write_text(text)
        with pytest.raises(ScenarioError) as e:
            load_scenario(p)
        return dict(e.value.problems)

    def test_another_chip_is_an_error_naming_both(self, tmp_path):
        text = scenario_toml("transformer_dp_v5e4").replace('chip = "tpu-v5e"', 'chip = "tpu-v6e"')
        msg = self._problems(tmp_path, text)["pod.chip"]
        assert "tpu-v5e" in msg and "tpu-v6e" in msg

    def test_another_topology_is_an_error_naming_both(self, tmp_path):
        text = scenario_toml("transformer_fsdp_v5p8").replace('topology = "2x2x2"', 'topology = "2x2x4"')
        msg = self._problems(tmp_path, text)["pod.topology"]
        assert "v5p:2x2x2" in msg and "2x2x4" in msg

    def test_nothing_is_written_for_a_mismatch(self, tmp_path):
        p = tmp_path / "s.toml"
        p.write_text(scenario_toml("transformer_dp_v5e4").replace('chip = "tpu-v5e"', 'chip = "tpu-v6e"'))
        db = tmp_path / "runs.duckdb"
        assert main(["run", str(p), "--db", str(db)]) == EXIT_BAD_INPUT
        assert not db.exists() or Database(db).read().__enter__().execute("SELECT count(*) FROM runs").fetchone()[0] == 0


class TestBadSidecars:
    """Each broken sidecar is an HloError naming the file and the key; the CLI exits 2."""

    @pytest.fixture
    def bundle(self, tpu_sidecar):
        return tpu_sidecar

    def _error(self, path: Path) -> str:
        with pytest.raises(HloError) as e:
            read_bundle(path)
        assert str(path) in str(e.value)
        return str(e.value)

    def test_not_json(self, tmp_path):
        p = tmp_path / "x.xla.json"
        p.write_text("{not json")
        assert "not a JSON sidecar" in self._error(p)

    def test_too_deep(self, tmp_path):
        p = tmp_path / "x.xla.json"
        p.write_text("[" * 5000 + "]" * 5000)
        self._error(p)

    def test_too_large(self, tmp_path):
        p = tmp_path / "x.xla.json"
        p.write_bytes(b" " * (4 * 2**20 + 10))
        assert "MiB limit" in self._error(p)

    def test_a_missing_key(self, bundle):
        assert "memory" in self._error(bundle(lambda d: d.pop("memory")))

    def test_negative_bytes(self, bundle):
        assert "memory.temp_bytes" in self._error(bundle(lambda d: d["memory"].update(temp_bytes=-1)))

    def test_bytes_beyond_any_chip(self, bundle):
        assert "memory.argument_bytes" in self._error(bundle(lambda d: d["memory"].update(argument_bytes=1e15)))

    def test_wrong_types(self, bundle):
        assert "devices" in self._error(bundle(lambda d: d.update(devices="four")))
        assert "cost.flops" in self._error(bundle(lambda d: d["cost"].update(flops="many")))

    def test_devices_that_the_topology_cannot_hold(self, bundle):
        assert "devices" in self._error(bundle(lambda d: d.update(devices=6)))

    def test_module_and_sidecar_disagree_on_devices(self, bundle, tmp_path):
        # v5e:4x4 would hold 16 devices, but the module is partitioned for 4
        path = bundle(lambda d: d.update(topology="v5e:4x4", devices=16))
        with pytest.raises(HloError, match="partitioned for 4"):
            cached_program(path)
        assert main(["hlo", str(path)]) == EXIT_BAD_INPUT

    def test_another_format(self, bundle):
        assert "format" in self._error(bundle(lambda d: d.update(format="something-else")))
