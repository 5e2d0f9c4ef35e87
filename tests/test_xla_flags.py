"""XLA options a program is compiled with (``--xla-flag`` of ``compile`` and ``xla-check``, a sidecar's ``xla_flags``),
and xla-check's account of how XLA scheduled the step's collectives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import HloError, InputError
from engine.hlo.bundle import read_bundle
from profiler import xla_check
from profiler.cli import main
from profiler.tpu_capture import parse_xla_flags
from tests.test_xla_reference import xla_check_in_process

ROOT = Path(__file__).resolve().parents[1]
TPU = Path(__file__).parent / "fixtures" / "tpu"

#: the continuation-fusion options MaxText's configs set in LIBTPU_INIT_ARGS (benchmarks/xla_flags_library.py
#: CF_FOR_ALL_GATHER; configs/v5p/512b.sh)
CONTINUATION_FUSION = (
    "xla_tpu_enable_async_collective_fusion=true",
    "xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "xla_tpu_overlap_compute_collective_tc=true",
    "xla_enable_async_all_gather=true",
)

#: FSDP 2 x tensor 2 on four v5p chips: with the compiler's defaults XLA gathers every weight and activation synchronously
FSDP_TP = (
    'name = "fsdp-tp"\n[pod]\nchip = "tpu-v5p"\ntopology = "2x2x1"\n[model]\nkind = "transformer"\nlayers = 2\n'
    'd_model = 1024\nheads = 8\nd_ff = 4096\nvocab = 1024\nseq_len = 256\nattention = "standard"\n'
    '[training]\nglobal_batch = 8\nsteps = 2\nremat = "full"\n[parallelism]\nfsdp = 2\ntensor = 2\n'
)

#: a data-parallel MLP on four v5p chips: compiles in seconds, for the tests of where the options are recorded
DP_MLP = (
    'name = "dp-mlp"\n[pod]\nchip = "tpu-v5p"\ntopology = "2x2x1"\n[model]\nkind = "mlp"\nlayer_sizes = [1024, 1024, 1000]\n'
    '[training]\nglobal_batch = 256\nsteps = 2\n[parallelism]\ndata = 4\n'
)


class TestParse:
    def test_name_value_pairs_as_libtpu_init_args_writes_them(self):
        assert parse_xla_flags(["--xla_enable_async_all_gather=true", " xla_tpu_rwb_fusion=false "]) == {
            "xla_enable_async_all_gather": "true", "xla_tpu_rwb_fusion": "false"}  # fmt: skip

    @pytest.mark.parametrize(
        ("items", "words"),
        [
            (["xla_enable_async_all_gather"], "expected NAME=VALUE"),
            (["XLA_TPU=1"], "not an XLA option name"),
            (["tpu_rwb_fusion=false"], "not an XLA option name"),
            (["xla_tpu_rwb_fusion="], "expected a value"),
            (["xla_tpu_rwb_fusion=false", "--xla_tpu_rwb_fusion=true"], "given twice"),
        ],
    )
    def test_what_is_not_an_option_is_named(self, items, words):
        with pytest.raises(InputError) as e:
            parse_xla_flags(items)
        assert words in str(e.value) and "--xla-flag" in str(e.value)


class TestSidecar:
    @pytest.fixture
    def sidecar(self, tpu_sidecar):
        return lambda flags: tpu_sidecar(lambda d: d.update(xla_flags=flags))

    def test_a_bundle_keeps_the_options_it_was_compiled_with(self, sidecar):
        assert read_bundle(sidecar({"xla_enable_async_all_gather": "true"})).xla_flags == {"xla_enable_async_all_gather": "true"}

    def test_an_hlo_run_of_the_bundle_says_how_it_was_compiled(self, sidecar, tmp_path):
        from engine import simulate
        from engine.scenario import scenario_from_dict

        side = sidecar({"xla_enable_async_all_gather": "true"})
        s = scenario_from_dict({"name": "b", "pod": {"chip": "tpu-v5e", "topology": "2x2"}, "model": {"kind": "hlo", "path": str(side)},
                                "training": {"global_batch": 8, "steps": 2}}, source="test")  # fmt: skip
        assert simulate(s).facts.extra["xla_flags"] == {"xla_enable_async_all_gather": "true"}

    def test_a_bundle_without_them_was_compiled_with_the_defaults(self):
        assert read_bundle(TPU / "transformer_dp_v5e4.xla.json").xla_flags == {}

    @pytest.mark.parametrize("flags", [["xla_enable_async_all_gather"], {"--xla_x": "true"}, {"xla_x": 1}, {"xla_x": ""}])
    def test_what_is_not_an_option_is_an_error_naming_the_key(self, sidecar, flags):
        with pytest.raises(HloError) as e:
            read_bundle(sidecar(flags))
        assert "xla_flags" in str(e.value)


@pytest.mark.parametrize("command", [["xla-check", "examples-are-not-read"], ["compile", "step.py:step", "--target", "v5p-8"]])
def test_a_malformed_option_exits_2_before_anything_compiles(command):
    p = subprocess.run([sys.executable, "-m", "profiler", *command, "--xla-flag", "xla_tpu_rwb_fusion"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2
    assert "--xla-flag 'xla_tpu_rwb_fusion': expected NAME=VALUE" in p.stderr


def test_continuation_fusion_makes_the_gathers_asynchronous_and_hides_some_of_them(live, tmp_path):
    """The same FSDP x tensor step compiled with the compiler's defaults and with MaxText's continuation-fusion options:
    with the options XLA runs about half its all-gathers beside compute, and the schedule, priced on the same links,
    leaves less collective time exposed; xla-check records the options and says how the step was compiled."""
    toml = tmp_path / "fsdp-tp.toml"
    toml.write_text(FSDP_TP)
    default, fused = xla_check_in_process(toml), xla_check_in_process(toml, *CONTINUATION_FUSION)
    before, after = default["xla_compile"]["schedule"], fused["xla_compile"]["schedule"]
    assert "all-gather" not in before["asynchronous"] and before["synchronous"]["all-gather"] > 0
    assert after["asynchronous"]["all-gather"] > 0
    assert after["synchronous"]["all-gather"] + after["asynchronous"]["all-gather"] == before["synchronous"]["all-gather"]
    assert after["collective_s"] == pytest.approx(before["collective_s"])  # the same collectives, moved in the schedule
    assert 0 < after["exposed_collective_s"] < before["exposed_collective_s"] <= before["collective_s"]
    assert fused["xla_compile"]["xla_flags"] == dict(f.split("=") for f in CONTINUATION_FUSION)
    assert fused["xla"]["exposed_collective_s"] == after["exposed_collective_s"]
    assert 0 < fused["podscope"]["exposed_collective_s"] < fused["xla"]["exposed_collective_s"]
    text = xla_check.format_check("fsdp-tp", fused, fused["xla_compile"])
    assert f"with {len(CONTINUATION_FUSION)} XLA option(s) given" in text
    assert "with the compiler's default options" in xla_check.format_check("fsdp-tp", default, default["xla_compile"])


def test_an_option_xla_does_not_know_exits_2_naming_it(live, tmp_path):
    toml = tmp_path / "dp-mlp.toml"
    toml.write_text(DP_MLP)
    p = subprocess.run([sys.executable, "-m", "profiler", "xla-check", str(toml), "--xla-flag", "xla_tpu_no_such_option=true"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert p.returncode == 2
    assert "xla_tpu_no_such_option" in p.stderr and "No such compile option" in p.stderr


def test_a_capture_records_its_options_in_the_sidecar(live, tmp_path):
    from engine.scenario import load_scenario

    toml = tmp_path / "dp-mlp.toml"
    toml.write_text(DP_MLP)
    flags = {"xla_enable_async_all_gather": "true"}
    xla_check.compile_numbers(load_scenario(toml), out_dir=tmp_path, live_range=False, xla_flags=flags)
    assert read_bundle(tmp_path / "xla_check.xla.json").xla_flags == flags


@pytest.mark.parametrize("command", [["run", "resnet50-v3-32"], ["plan", "llm-7b-v5p"]])
def test_options_without_a_compile_are_refused_before_anything_runs(command, tmp_path, capsys):
    db = tmp_path / "new" / "runs.duckdb"
    extra = ["--db", str(db)] if command[0] == "run" else []
    assert main([*command, *extra, "--xla-flag", "xla_enable_async_all_gather=true"]) == 2
    assert "add --xla" in capsys.readouterr().err
    assert not db.parent.exists()


def test_a_run_compiled_with_options_records_them(live, tmp_path, capsys):
    toml = tmp_path / "dp-mlp.toml"
    toml.write_text(DP_MLP)
    db = tmp_path / "runs.duckdb"
    flags = dict(f.split("=") for f in CONTINUATION_FUSION)
    code = main(["run", str(toml), "--db", str(db), "--create", "--xla", "--json", *(f"--xla-flag={f}" for f in CONTINUATION_FUSION)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["hbm_source"] == "xla" and summary["hbm_xla_flags"] == flags
    capsys.readouterr()
    assert main(["run", str(toml), "--db", str(db), "--name", "plain", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)  # Podscope's own HBM: no compile, so no options
    assert plain["hbm_source"] == "podscope" and "hbm_xla_flags" not in plain


def test_the_python_api_refuses_options_without_a_compile(tmp_path):
    from profiler import api
    from profiler.store import Database
    from profiler.tpu_capture import FLAGS_WITHOUT_COMPILE

    with pytest.raises(InputError, match="add --xla") as e:
        api.run_file(api.scenario_path("resnet50-v3-32"), Database(tmp_path / "runs.duckdb"), xla_flags={"xla_enable_async_all_gather": "true"})
    assert str(e.value) == FLAGS_WITHOUT_COMPILE
    assert not (tmp_path / "runs.duckdb").exists()
