"""``[convergence]`` and ``[cost]`` in scenarios and summaries: validation, ``run --json`` and the CLI text."""

from __future__ import annotations

import json
import textwrap

import pytest

from engine import ScenarioError, load_scenario
from engine.convergence import load_tasks
from profiler.cli import EXIT_BAD_INPUT, main

RESNET = """
name = "r50"
[pod]
chip = "tpu-v4"
topology = "4x4x4"
[model]
kind = "resnet50"
[training]
global_batch = {batch}
steps = 2
optimizer = "momentum"
remat = "full"  # the largest batches fit only so
[sim]
trace = "summary"
{extra}
"""
CONVERGENCE = '[convergence]\ntask = "mlperf-resnet50"\n'


def _write(tmp_path, batch: int = 8192, extra: str = CONVERGENCE):
    path = tmp_path / f"r50-{batch}.toml"
    path.write_text(textwrap.dedent(RESNET.format(batch=batch, extra=extra)))
    return path


def _run_json(tmp_path, path, capsys) -> dict:
    assert main(["run", str(path), "--json", "--db", str(tmp_path / "db.duckdb"), "--create"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("batch", [4096, 8192, 13056, 32768, 49152, 58880, 65536])
def test_run_json_steps_to_target_within_10pct_of_the_rcp(tmp_path, capsys, batch):
    out = _run_json(tmp_path, _write(tmp_path, batch), capsys)
    task = load_tasks()["mlperf-resnet50"]
    rcp_epochs = dict(task.points)[batch]  # the RCP mean at this batch (data/convergence.toml)
    assert out["steps_to_target"] == pytest.approx(rcp_epochs * 1281167 / batch, rel=0.10)
    assert out["samples_to_target"] == pytest.approx(rcp_epochs * 1281167, rel=0.10)
    lo, hi = out["time_to_train_range_s"]
    assert lo < out["time_to_train_s"] < hi
    assert out["time_to_train_s"] >= out["steps_to_target"] * out["step_time_s"] * (1 - 1e-9)
    assert out["chip_hours"] == pytest.approx(out["time_to_train_s"] * 64 / 3600)
    assert out["cost_usd"] is None


def test_known_answer_budget_with_eval_and_price(tmp_path, capsys):
    # 8,192,000 samples at batch 8,192 = 1,000 steps; 8 evals of 2 s; 64 chips at $2 per chip-hour
    extra = "[convergence]\nsamples = 8192000\neval_every_samples = 1024000\neval_s = 2.0\n[cost]\nusd_per_chip_hour = 2.0\n"
    out = _run_json(tmp_path, _write(tmp_path, 8192, extra), capsys)
    assert out["steps_to_target"] == 1000
    want_s = 1000 * out["step_time_s"] + 8 * 2.0  # no [compile], no [failures]
    assert out["time_to_train_s"] == pytest.approx(want_s, rel=1e-9)
    assert out["time_to_train_range_s"][0] < want_s < out["time_to_train_range_s"][1]  # the step-time range alone
    assert out["cost_usd"] == pytest.approx(want_s * 64 / 3600 * 2.0, rel=1e-9)


def test_without_convergence_the_keys_are_null(tmp_path, capsys):
    out = _run_json(tmp_path, _write(tmp_path, 8192, ""), capsys)
    for key in ("steps_to_target", "samples_to_target", "time_to_train_s", "time_to_train_range_s", "chip_hours", "cost_usd"):
        assert key in out and out[key] is None


def test_cli_text_shows_time_to_train(tmp_path, capsys):
    assert main(["run", str(_write(tmp_path)), "--db", str(tmp_path / "db.duckdb"), "--create"]) == 0
    text = capsys.readouterr().out
    assert "to target" in text and "time to train" in text and "chip-hours" in text


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        ("[convergence]\nsamples = 0\n", "convergence.samples", "greater than 0"),
        ("[convergence]\ntokens = -5\n", "convergence.tokens", "greater than 0"),
        ('[convergence]\ntask = "imagenet"\n', "convergence.task", "mlperf-resnet50"),
        ("[convergence]\ne_min_samples = 1e6\nb_crit_samples = 0\n", "convergence.b_crit_samples", "greater than 0"),
        ("[convergence]\ne_min_samples = 1e6\n", "convergence.b_crit_samples", "go together"),
        ('[convergence]\ntask = "mlperf-resnet50"\nsamples = 1e6\n', "convergence.", "both given"),
        ('[convergence]\ntask = "mlperf-bert"\n', "convergence.task", "resnet50"),
        ("[convergence]\ntokens = 1e9\n", "convergence.tokens", "no tokens"),
        ("[convergence]\n", "convergence", "neither a task nor a budget"),
        ("[convergence]\nsamples = 1e6\neval_s = 3.0\n", "convergence.eval_every_samples", "how often"),
        ("[convergence]\nsamples = 1e6\nepochs = 3\n", "convergence.epochs", ""),
        ('[convergence]\ntask = "mlperf-resnet50"\n[cost]\nusd_per_chip_hour = -1.0\n', "cost.usd_per_chip_hour", "greater than or equal"),
    ],
)
def test_bad_convergence_is_a_scenario_error_naming_the_key(tmp_path, capsys, extra, key, words):
    path = _write(tmp_path, 8192, extra)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    problems = dict(e.value.problems)
    assert any(k.startswith(key) and words in m for k, m in problems.items()), problems
    db = tmp_path / "db.duckdb"
    assert main(["run", str(path), "--json", "--db", str(db), "--create"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().out == ""
    assert not db.exists()


def test_validate_predicts_mlperf_time_to_train_as_its_own_never_fitted_group():
    from profiler.reference import TTT_KEY, load_reference
    from profiler.validation import run_validation

    v = run_validation()
    ttt = [c for c in v.cases if c.kind == "time_to_train"]
    entries = {e["id"]: e for e in load_reference()}
    assert len(ttt) >= 20 and not any(c.fit for c in ttt)
    for c in ttt:
        assert c.published == entries[c.id.removesuffix("_time_to_train")]["expected"][TTT_KEY]
    s = v.to_json()["summary"]["time_to_train"]
    assert s["n"] == len(ttt) and s["median_abs_pct"] is not None
    # the per-step groups are what they were: no time-to-train case in them
    assert v.summary["all"]["n"] == len([c for c in v.cases if c.kind != "time_to_train"])
    assert not {c.id for c in ttt} & {s.id for s in v.skipped}


def test_advisor_says_when_the_batch_is_far_past_the_critical_batch(tmp_path, capsys):
    # mlperf-resnet50's B_crit is ~46,763 images: 131,072 is ~2.8x it, 8,192 is well below
    far = _run_json(tmp_path, _write(tmp_path, 131072), capsys)
    k = far["batch_over_b_crit"]
    assert k == pytest.approx(131072 / load_tasks()["mlperf-resnet50"].model.b_crit_samples)
    (item,) = [a for a in far["advice"] if a["rule"] == "batch_past_critical"]
    assert f"{(k + 2) / (k + 1):.2f}x as long" in item["message"]  # half the batch: S(B/2) / S(B) = (k + 2) / (k + 1)
    near = _run_json(tmp_path / "..", _write(tmp_path, 8192), capsys)
    assert not [a for a in near["advice"] if a["rule"] == "batch_past_critical"]
