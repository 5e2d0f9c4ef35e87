"""One DuckDB file written by the real engine and the real importer, for the page and query tests.

Every run is a bundled scenario from ``data/scenarios/`` (or, for the TPU-compiled HLO module,
the scenario beside its fixture in ``tests/fixtures/tpu/``) made small with the scenario
overrides (the CLI's ``--set``): fewer steps, and a smaller slice where the property the
run stands for survives it. The runs are simulated by ``engine.simulate`` and stored by the
store's ``write_run``, one transaction each; the imported run goes through
``profiler.trace_import.import_trace``. So the pages are tested on exactly the tables and
summary keys the product writes: the compile causes the engine emits, the memory phases it
lays out, the ``None`` an import stores for numbers a trace does not carry.

The file is built once per pytest run (see ``real_db`` in ``tests/conftest.py``); a test
that writes gets its own copy.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import load_scenario, simulate
from engine.trace import RunResult
from profiler import queries
from profiler.store import Database, write_run
from profiler.trace_import import import_trace

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "data" / "scenarios"
#: the bundled TPU-compiled HLO module on the pod it was compiled for (a scenario beside the test fixtures)
HLO_TPU = str(ROOT / "tests" / "fixtures" / "tpu" / "transformer_fsdp_v5p8.toml")
TORCH_TRACE = ROOT / "tests" / "fixtures" / "torch_cpu_mlp.trace.json.gz"

#: label -> (bundled scenario, overrides). Written in this order after the imported run, so run
#: ids follow it and the last one (the newest) is what a page shows when nothing is picked.
SIMULATED: dict[str, tuple[str, dict[str, Any]]] = {
    # ResNet-50 data parallel on a v3 4x4: every event row kept, link load, no [compile] section;
    # trained to MLPerf's 75.9% top-1 and priced, so the Overview shows its time and cost to train
    "full": ("resnet50-v3-32.toml", {"training.steps": 6, "convergence.task": "mlperf-resnet50", "cost.usd_per_chip_hour": 2.0}),
    # the same slice with one slow chip and a few random ones: sync wait, named stragglers
    "stragglers": ("resnet50-v3-32-straggler.toml", {"training.steps": 6}),
    # a chip failure: checkpoints, a restart that redoes steps and recompiles
    "failures": (
        "llm-1b-v5p-64-failures.toml",
        {"training.steps": 30, "failures.fail_at_steps": [22], "failures.checkpoint_every_steps": 10},
    ),
    # one object-storage read stream per host: the chips wait for input
    "input_bound": (
        "resnet50-v4-gcs-input-bound.toml",
        {"training.steps": 20, "pod.topology": "2x2x2", "training.global_batch": 1024, "parallelism.data": 8},
    ),
    # the Keras example, input-bound on its one map thread (the Compare page's what-if base)
    "keras": ("keras-mlp-v5e-8.toml", {"training.steps": 60}),
    # GPT-3 175B without remat on a v5p 4x4x4: out of memory, with the engine's oom detail
    "oom": ("oom/gpt3-175b-no-remat-v5p-128.toml", {"training.steps": 2}),
    # ResNet-50 over two v4 2x2x2 slices joined by DCN (128 images per chip, as input_bound)
    "multi_slice": (
        "resnet50-v4-128.toml",
        {"training.steps": 4, "pod.topology": "2x2x2", "pod.slices": 2, "training.global_batch": 2048, "parallelism.data": 8},
    ),
    # the 1.3B LLM on a v5p 4x4x4 with [sim] trace = "summary": totals, no event rows
    "summary": ("llm-1b-v5p-64.toml", {"training.steps": 4, "sim.trace": "summary"}),
    # the straggler slice with a degraded link and [sim] trace = "sampled": every chip's totals,
    # the events of 6 of the 16 chips (a straggler, a link end, the slowest, a slice's host, random)
    "sampled": (
        "resnet50-v3-32-straggler.toml",
        {"training.steps": 6, "sim.trace": "sampled", "sim.sample_chips": 6,
         "interconnect.degraded_links": [{"a": [0, 0], "b": [1, 0], "bandwidth_frac": 0.5}]},
    ),
    # mixture of experts over an 8-way expert axis: all-to-alls, expert load, expert weights in HBM
    "moe": ("moe-8x-top2-v5p-64.toml", {"training.steps": 4}),
    # a 4-stage pipeline over two slices: bubbles, stage sends over the DCN, in-flight activations
    "pipeline": ("llm-8b-pipeline-2-slices-v5p.toml", {"training.steps": 4}),
    # the bundled TPU-compiled HLO module: XLA's estimate beside Podscope's for each op, async collectives
    "hlo_tpu": (HLO_TPU, {"training.steps": 6}),
    # the same module with Podscope's roofline charged for every op (what the Compare form's compute source sets)
    "hlo_tpu_roofline": (HLO_TPU, {"training.steps": 6, "model.compute_source": "podscope"}),
    # a variable sequence length: a compile at the first step and one per new shape; stored
    # last, so it is the run a page shows first (it has every extra table and advice)
    "recompiles": ("llm-350m-v5p-variable-seq.toml", {"training.steps": 12}),
}
IMPORTED = "imported"
LABELS = (IMPORTED, *SIMULATED)


@dataclass(frozen=True)
class RealDb:
    """A database file of real runs: the run id of each label (see :data:`SIMULATED`), and what
    the engine returned for each simulated one (its tables before the store saw them)."""

    path: Path
    run_ids: dict[str, int] = field(default_factory=dict)
    results: dict[str, RunResult] = field(default_factory=dict)

    @property
    def db(self) -> Database:
        return Database(self.path)

    def summary(self, label: str) -> dict[str, Any]:
        with self.db.read() as con:
            return queries.run_summary(con, self.run_ids[label])

    def copy(self, dest: Path) -> RealDb:
        """The same runs in a file of its own (for a test that writes)."""
        shutil.copyfile(self.path, dest)
        return RealDb(dest, self.run_ids, self.results)


def build(path: Path) -> RealDb:
    """Import the PyTorch CPU trace, then simulate and store every run of :data:`SIMULATED`."""
    db = Database(path)
    run_ids, results = {IMPORTED: import_trace(db, TORCH_TRACE)}, {}
    for label, (file, overrides) in SIMULATED.items():
        results[label] = simulate(load_scenario(SCENARIOS / file, overrides))
        run_ids[label] = write_run(db, results[label])
    return RealDb(path, run_ids, results)


def run_count(path: Path) -> int:
    with Database(path).read() as con:
        return con.execute("SELECT count(*) FROM runs").fetchone()[0]


def open_page(page: str, run_id: int | None = None, other: int | None = None, timeout_s: int = 120):
    """A page script alone in Streamlit's AppTest, showing ``run_id`` (and ``other`` beside it on Compare),
    run once and checked for exceptions."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / page), default_timeout=timeout_s)
    if run_id is not None:
        at.session_state["select_run_id"] = run_id
    if other is not None:
        at.session_state["select_cmp_id"] = other
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at
