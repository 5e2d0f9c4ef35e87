"""``[sim] trace = "sampled"``: every chip's exact aggregates, and every event of the chips chosen, for the right reasons.

Known answers: on a scenario small enough for a full trace, a sampled run's steps and
aggregates equal the summary run's (and the full run's), and its events are exactly the
full run's events of the sampled chips. The reasons are checked against what the run
itself shows: the named straggler, the degraded link's end chips, the least-waiting
chips by the stored ``chip_kind``, a chip of every slice.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from engine import InputError, ScenarioError, scenario_from_dict, simulate
from engine.sampling import SAMPLE_REASONS
from engine.scenario import DEFAULT_SAMPLE_CHIPS, MAX_CHIP_STEPS
from profiler import queries, sampled
from profiler.store import Database, write_run

ROOT = Path(__file__).resolve().parent.parent

#: two v4 2x2x2 slices (16 chips, hosts of 4), a named straggler, random ones, a degraded link on slice 1
BASE = {
    "name": "sampled-known",
    "pod": {"chip": "tpu-v4", "topology": "2x2x2", "slices": 2},
    "model": {"kind": "mlp", "layer_sizes": [1024, 4096, 1024]},
    "training": {"global_batch": 512, "steps": 40},
    "stragglers": {"chips": [11], "slowdown": 1.3, "random_fraction": 0.2, "random_slowdown_max": 1.05},
    "interconnect": {"degraded_links": [{"a": [0, 0, 0], "b": [1, 0, 0], "bandwidth_frac": 0.5, "slice": 1}]},
    "compile": {"jit": True},
    "sim": {"seed": 3},
}


def _run(trace: str, sample_chips: int | None = None, seed: int = 3):
    raw = {**BASE, "sim": {"seed": seed, "trace": trace, **({"sample_chips": sample_chips} if sample_chips else {})}}
    return simulate(scenario_from_dict(raw))


def _sorted(events: pa.Table) -> pa.Table:
    return events.sort_by([("chip", "ascending"), ("start_ns", "ascending")])


@pytest.fixture(scope="module")
def runs():
    return {"full": _run("full"), "summary": _run("summary"), "sampled": _run("sampled", 8)}


def test_aggregates_are_the_summary_runs_and_events_the_full_runs_of_the_sampled_chips(runs):
    full, summ, samp = runs["full"].trace, runs["summary"].trace, runs["sampled"].trace
    for table in ("steps", "step_kind", "chip_kind"):
        assert getattr(samp, table).equals(getattr(summ, table)), table
        assert getattr(samp, table).equals(getattr(full, table)), table
    sample = samp.extra["sampled_chips"]
    assert sample.num_rows == 8 and len(set(sample.column("chip").to_pylist())) == 8
    assert set(samp.events.column("chip").to_pylist()) == set(sample.column("chip").to_pylist())
    theirs = full.events.filter(pc.is_in(full.events.column("chip"), sample.column("chip")))
    assert theirs.num_rows > 0
    assert _sorted(samp.events).equals(_sorted(theirs))
    assert runs["summary"].facts == runs["sampled"].facts  # the same run, told the same way


def test_each_chip_is_sampled_for_what_the_run_shows(runs):
    samp = runs["sampled"]
    chosen = dict(zip(*(samp.trace.extra["sampled_chips"].column(c).to_pylist() for c in ("chip", "reason"))))
    assert set(chosen.values()) <= set(SAMPLE_REASONS)
    assert chosen[11] == "straggler"  # the chip the scenario names
    # the degraded link joins (0,0,0) and (1,0,0) of slice 1: chips 8 and 12 (8 chips a slice, C order)
    assert chosen[8] == "degraded_link" or chosen[12] == "degraded_link"
    wait = _sync_wait_ns(samp, 16)
    assert int(wait.idxmin()) in chosen  # the chip every other waits for is always in the sample
    slices = {c // 8 for c in chosen}
    assert slices == {0, 1}  # every slice has a representative


def _sync_wait_ns(run, chips: int):
    ck = run.trace.chip_kind.to_pandas()
    return ck[ck.kind == "sync_wait"].set_index("chip")["ns"].reindex(range(chips), fill_value=0)


def test_slowest_means_least_sync_wait():
    """The chips sampled as slowest waited no longer at the barriers (stored chip_kind) than any chip left out."""
    raw = {**BASE, "stragglers": {"random_fraction": 0.5, "random_slowdown_max": 1.2}, "interconnect": {},
           "pod": {"chip": "tpu-v4", "topology": "4x4x4", "slices": 1}, "training": {"global_batch": 512, "steps": 10},
           "sim": {"seed": 5, "trace": "sampled", "sample_chips": 40}}  # fmt: skip
    run = simulate(scenario_from_dict(raw))
    chosen = dict(zip(*(run.trace.extra["sampled_chips"].column(c).to_pylist() for c in ("chip", "reason"))))
    counts = {r: list(chosen.values()).count(r) for r in SAMPLE_REASONS}
    assert counts["straggler"] == counts["slowest"] == (40 - 1) // 4  # each quota filled: a quarter of what one chip of the slice leaves
    wait = _sync_wait_ns(run, 64)
    left_out = wait[~wait.index.isin(list(chosen))]
    assert max(wait[c] for c, r in chosen.items() if r == "slowest") <= left_out.min()


def test_the_sample_is_seeded_and_its_random_rest_follows_the_seed():
    a, b, c = _run("sampled", 8), _run("sampled", 8), _run("sampled", 8, seed=4)
    assert a.trace.extra["sampled_chips"].equals(b.trace.extra["sampled_chips"])
    assert a.trace.events.equals(b.trace.events)
    assert not a.trace.extra["sampled_chips"].equals(c.trace.extra["sampled_chips"])


def test_default_sample_is_256_or_the_whole_pod():
    raw = {**BASE, "sim": {"seed": 3, "trace": "sampled"}}
    small = scenario_from_dict(raw)
    assert small.sampled_chip_count == 16
    run = simulate(small)
    assert run.trace.extra["sampled_chips"].num_rows == 16
    assert _sorted(run.trace.events).equals(_sorted(_run("full").trace.events))  # the whole pod: the full trace
    big = scenario_from_dict({**raw, "pod": {"chip": "tpu-v4", "topology": "16x16x16", "slices": 2}, "training": {"global_batch": 8192, "steps": 2}})
    assert big.sampled_chip_count == DEFAULT_SAMPLE_CHIPS == 256


def test_the_largest_job_is_accepted_sampled_and_refused_in_full():
    raw = {
        "name": "v5e-199",
        "pod": {"chip": "tpu-v5e", "topology": "16x16", "slices": 199},
        "model": {"kind": "mlp", "layer_sizes": [1024, 1024]},
        "training": {"global_batch": 50944, "steps": 1000},
        "sim": {"trace": "sampled"},
    }
    s = scenario_from_dict(raw)
    assert s.total_chips == 50_944 and s.sampled_chip_count == 256
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict({**raw, "sim": {"trace": "full"}})
    assert [k for k, _ in err.value.problems] == ["training.steps"] and f"{MAX_CHIP_STEPS:,}" in str(err.value)


def test_one_chip_per_slice_when_hosts_do_not_fit():
    """199 slices of v5e (8 chips a host) and 256 samples: a chip of every slice, not a host of each."""
    raw = {
        "name": "v5e-199-short",
        "pod": {"chip": "tpu-v5e", "topology": "16x16", "slices": 199},
        "model": {"kind": "mlp", "layer_sizes": [256, 256]},
        "training": {"global_batch": 50944, "steps": 2},
        "stragglers": {"random_fraction": 0.001, "random_slowdown_max": 1.1},
        "sim": {"trace": "sampled"},
    }
    run = simulate(scenario_from_dict(raw))
    table = run.trace.extra["sampled_chips"].to_pandas()
    assert len(table) == 256
    assert set(table.chip // 256) == set(range(199))
    assert set(run.trace.events.column("chip").to_pylist()) == set(table.chip)
    counts = table.reason.value_counts().to_dict()
    assert counts.get("slice_host", 0) + counts.get("slowest", 0) + counts.get("straggler", 0) >= 199 - counts.get("random", 0)
    assert run.trace.chip_kind.to_pandas().chip.nunique() == 50_944  # aggregates of every chip


def test_store_and_query_round_trip(tmp_path, runs):
    db = Database(tmp_path / "sampled.duckdb")
    run_id = write_run(db, runs["sampled"])
    summ_id = write_run(db, runs["summary"])
    with db.read() as con:
        sample = sampled.sampled_chips(con, run_id)
        assert sample is not None and len(sample) == 8
        assert sample.to_dict("list") == {
            "chip": runs["sampled"].trace.extra["sampled_chips"].column("chip").to_pylist(),
            "reason": runs["sampled"].trace.extra["sampled_chips"].column("reason").to_pylist(),
        }
        assert sampled.sampled_chips(con, summ_id) is None
        stored = set(r[0] for r in con.execute("SELECT DISTINCT chip FROM events WHERE run_id = ?", [run_id]).fetchall())
        assert stored == set(sample.chip)
        a, b = queries.run_summary(con, run_id), queries.run_summary(con, summ_id)
        assert a["breakdown"] == b["breakdown"] and a["step_time_s"] == b["step_time_s"]
        assert a["events"] == runs["sampled"].trace.events.num_rows > 0 == b["events"]
        ddl = con.execute("SELECT sql FROM duckdb_tables() WHERE table_name = 'extra_sampled_chips'").fetchone()[0]
        assert "chip INTEGER" in ddl and "reason VARCHAR" in ddl
    np.testing.assert_array_equal(sample.chip.to_numpy(), np.sort(sample.chip.to_numpy()))


def test_perfetto_export_and_cli_say_which_chips_of_how_many(real_db, tmp_path, capsys):
    """The export holds the sampled chips' lanes, names each one's reason, and says N sampled chips of M."""
    from profiler.cli import main
    from profiler.export import export_run

    run_id = real_db.run_ids["sampled"]
    with real_db.db.read() as con:
        sample = sampled.sampled_chips(con, run_id)
    out = tmp_path / "sampled.json"
    report = export_run(real_db.db, run_id, "perfetto", out)
    doc = json.loads(out.read_text())
    about = doc["otherData"]["podscope"]["sampled"]
    assert about["chips"] == len(sample) == 6 and about["of_chips"] == 16
    assert about["reasons"] == sampled.reason_counts(sample)
    pids = {e["pid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert pids == {c + 1 for c in sample["chip"]}
    names = {e["pid"] - 1: e["args"]["podscope"].get("sampled_reason") for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == dict(zip(sample["chip"], sample["reason"]))
    assert "holds the events of 6 of 16 chips" in report.message() and "all 6 sampled chips" in report.message()
    # asked for chips of which some were not sampled: only the sampled ones are written
    other = next(c for c in range(16) if c not in set(sample["chip"]))
    part = export_run(real_db.db, run_id, "perfetto", tmp_path / "part.json", chips=f"{other},{int(sample['chip'][0])}")
    assert part.chips == (int(sample["chip"][0]),)
    with pytest.raises(InputError, match="holds events of chips"):
        export_run(real_db.db, run_id, "perfetto", tmp_path / "none.json", chips=str(other))
    # and back: the importer reads the export's chips by their podscope metadata
    from profiler.trace_import import import_trace

    back_db = Database(tmp_path / "back.duckdb")
    back = import_trace(back_db, out)
    with back_db.read() as con:
        imported = {r[0] for r in con.execute("SELECT DISTINCT chip FROM events WHERE run_id = ?", [back]).fetchall()}
    assert imported == set(sample["chip"])
    assert main(["export", str(run_id), "--format", "perfetto", "-o", str(tmp_path / "cli.json"), "--db", str(real_db.path)]) == 0
    assert "events of 6 of 16 chips" in capsys.readouterr().err
    assert main(["export", str(run_id), "--format", "perfetto", "-o", str(tmp_path / "bad.json"), "--chips", str(other),
                 "--db", str(real_db.path)]) == 2  # fmt: skip


def test_an_hlo_scenario_samples_alike():
    """An HLO model's run (engine/hlo/run.py) samples with the same rules: summary's aggregates, full's events."""
    from engine import load_scenario

    path = ROOT / "data" / "scenarios" / "jax-transformer-hlo-v5p-8.toml"
    full, summ = (simulate(load_scenario(path, {"training.steps": 5, "sim.trace": t})) for t in ("full", "summary"))
    samp = simulate(load_scenario(path, {"training.steps": 5, "sim.trace": "sampled", "sim.sample_chips": 3}))
    assert samp.trace.chip_kind.equals(summ.trace.chip_kind) and samp.trace.steps.equals(summ.trace.steps)
    chips = samp.trace.extra["sampled_chips"].column("chip")
    assert len(chips) == 3
    assert _sorted(samp.trace.events).equals(_sorted(full.trace.events.filter(pc.is_in(full.trace.events.column("chip"), chips))))
