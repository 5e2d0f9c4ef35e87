"""Scenarios, overrides and names built to break the loader: each a clear error, exit 2, bounded memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.scenario import MAX_POD_CHIPS, MAX_SUMMARY_CHIP_STEPS, MAX_TOML_DEPTH
from engine.scenario.names import MAX_NAME_CHARS, derived_name, name_problem, printable
from tests.hostile import ROOT, run_cli

BASE = (ROOT / "data" / "scenarios" / "resnet50-v3-32.toml").read_text()


@pytest.mark.parametrize("value", ["[" * 1100 + "]" * 1100, "{a=" * 1100 + "1" + "}" * 1100, "[" * 40 + "]" * 40])
def test_deeply_nested_toml_is_a_scenario_error(tmp_path, value):
    path = tmp_path / "deep.toml"
    path.write_text(BASE + f"\n[sim]\nx = {value}\n")
    out = run_cli("run", str(path), "--db", str(tmp_path / "x.duckdb"))
    assert out.returncode == 2, out.stderr
    assert f"nested more than {MAX_TOML_DEPTH} deep" in out.stderr and str(path) in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "x.duckdb").exists()


def test_deeply_nested_override_and_sweep_file(tmp_path):
    out = run_cli("run", "resnet50-v3-32", "--set", "sim.x=" + "[" * 1100 + "]" * 1100, "--db", str(tmp_path / "x.duckdb"))
    assert out.returncode == 2 and "--set sim.x" in out.stderr and "nested more than" in out.stderr
    sweep = tmp_path / "s.toml"
    sweep.write_text(f'name = "s"\nbase = "{ROOT}/data/scenarios/resnet50-v3-32.toml"\n[set]\n"sim.x" = ' + "[" * 1100 + "]" * 1100 + "\n")
    out = run_cli("sweep", str(sweep), "--db", str(tmp_path / "x.duckdb"), "--quiet")
    assert out.returncode == 2 and "nested more than" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "sets, key, valid",
    [
        (["training.steps=1_000_000_000", 'sim.trace="summary"'], "training.steps", f"at most {MAX_SUMMARY_CHIP_STEPS:,} chip-steps"),
        (["training.steps=10_000_000", 'sim.trace="summary"'], "training.steps", f"at most {MAX_SUMMARY_CHIP_STEPS // 16:,} steps on 16 chips"),
        (["pod.slices=100000", "training.global_batch=1600000"], "pod.slices", f"at most {MAX_POD_CHIPS:,} chips"),
    ],
)
def test_huge_counts_are_refused_before_allocating(tmp_path, sets, key, valid):
    args = [a for s in sets for a in ("--set", s)]
    out = run_cli("run", "resnet50-v3-32", *args, "--db", str(tmp_path / "x.duckdb"), timeout_s=90)
    assert out.returncode == 2, out.stderr[-2000:]
    assert key in out.stderr and valid in out.stderr and "GiB" not in out.stderr.split(valid)[1][:0]
    assert out.seconds < 60 and not (tmp_path / "x.duckdb").exists()


@pytest.mark.parametrize(
    "name, fragment",
    [("x" * 10_240, f"at most {MAX_NAME_CHARS}"), ("a\x1b[31mred", "control characters (\\x1b)"), ("two\nlines", "\\n"),
     ("   ", "empty or blank"), ("nul\x00byte", "\\x00")],
)  # fmt: skip
def test_one_name_rule_for_every_way_in(tmp_path, name, fragment):
    db = str(tmp_path / "x.duckdb")
    trace = str(ROOT / "tests" / "fixtures" / "torch_cpu_mlp.trace.json.gz")
    if "\x00" not in name:  # argv cannot carry NUL; the Python API and files can
        for args in (["run", "resnet50-v3-32", "--name", name, "--db", db], ["import", trace, "--name", name, "--db", db]):
            out = run_cli(*args)
            assert out.returncode == 2 and fragment in out.stderr, out.stderr
            assert "\x1b" not in out.stderr
    scenario = tmp_path / "named.toml"
    scenario.write_text(BASE.replace('name = "resnet50-v3-32"', f"name = {_toml_str(name)}"))
    out = run_cli("run", str(scenario), "--db", db)
    assert out.returncode == 2 and "name:" in out.stderr and fragment in out.stderr, out.stderr
    sweep = tmp_path / "s.toml"
    sweep.write_text(f"name = {_toml_str(name)}\nbase = \"{ROOT}/data/scenarios/resnet50-v3-32.toml\"\n")
    out = run_cli("sweep", str(sweep), "--db", db, "--quiet")
    assert out.returncode == 2 and fragment in out.stderr, out.stderr
    assert not Path(db).exists()


def _toml_str(s: str) -> str:
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in s) + '"'


def test_derived_names_fit_the_rule():
    for text in ["sweep a=1 b=" + "x" * 500, "file\nname\x1b", "", "ok"]:
        name = derived_name(text)
        assert name_problem(name) is None, (text, name)
    assert derived_name("a\x1bb") == "a\\x1bb" and len(derived_name("y" * 999)) == MAX_NAME_CHARS


def test_stored_control_characters_are_escaped_on_every_cli_output(tmp_path, small_scenario):
    """A name with ESC stored by another tool (the rule cannot stop a direct INSERT) is shown escaped."""
    import duckdb

    from engine import simulate
    from profiler.store import Database, write_run

    db = Database(tmp_path / "x.duckdb")
    run_id = write_run(db, simulate(small_scenario))
    con = duckdb.connect(str(db.path))
    con.execute("UPDATE runs SET name = $n, chip = $c", {"n": "evil\x1b[2J\x1b]0;title\x07\nname", "c": "tpu\x1b[31m"})
    con.close()
    for args in (["runs"], ["export", str(run_id), "--format", "perfetto", "-o", str(tmp_path / "e.json")]):
        out = run_cli(*args, "--db", str(db.path))
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout + out.stderr and "\x07" not in out.stdout + out.stderr
    assert "evil\\x1b[2J" in run_cli("runs", "--db", str(db.path)).stdout
    assert printable("a\u202eb") == "a\\u202eb"
