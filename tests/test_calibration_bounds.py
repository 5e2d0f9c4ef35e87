"""Each fitted parameter's range, recomputed from the measurement it cites (profiler/calibrate.py FITTED)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.comm import ring_phase
from engine.hlo.module_file import cached_program
from engine.pod.catalog import load_catalog
from engine.scenario.calibration import Calibration, load_calibration
from profiler.calibrate import FITTED
from profiler.reference import load_reference, map_entries

TPU = Path(__file__).parent / "fixtures" / "tpu"


def _compiler_matmul_efficiency() -> dict[str, float]:
    """Peak time over the compiler's estimate of one 8192^3 bf16 matmul, per generation."""
    catalog, out = load_catalog(), {}
    for side in sorted(TPU.glob("matmul_*.xla.json")):
        prog = cached_program(side)
        chip = catalog[prog.bundle.chip]
        cycles = sum(o.estimated_cycles * o.executions for o in prog.cost.ops if o.estimated_cycles is not None)
        peak_s = prog.cost.flops_per_device / (chip.peak_bf16_flops_per_s / prog.bundle.devices_per_chip)
        out[chip.key] = peak_s / (cycles / chip.clock_hz)
    return out


def test_mxu_range_is_the_compilers_matmul_estimates():
    eff = _compiler_matmul_efficiency()
    assert set(eff) == {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"}
    b = FITTED["mxu_efficiency"]
    assert b.lo == pytest.approx(min(eff.values()), abs=0.005)
    assert b.hi == pytest.approx(max(eff.values()), abs=0.005)


def _microbench(entry_id: str):
    cases, _ = map_entries(load_reference())
    return [c for c in cases if c.entry_id == entry_id]


def test_hbm_range_holds_the_measured_copy():
    (copy,) = _microbench("coll_tpu7x_hbm_copy_microbench")
    implied = copy.formula["bytes"] / copy.formula["bytes_per_s"] / (copy.published * 1e-6)
    assert implied == pytest.approx(0.87, abs=0.005)
    b = FITTED["hbm_efficiency"]
    assert b.lo < implied < b.hi and b.hi - b.lo <= 0.1


def test_ici_range_holds_the_measured_large_all_gathers():
    """Link efficiency that makes the engine's ring match each bandwidth-bound row (4M elements and up)."""
    hop = Calibration().ici_hop_latency_s
    implied = []
    for c in _microbench("coll_tpu7x_allgather_microbench"):
        f = c.formula
        if f["bytes"] / f["n"] < 16 * 2**20:
            continue  # latency-bound rows: the fixed cost, not the link, sets their time
        wire_s = ring_phase(f["bytes"], f["n"], True, f["link_bytes_per_s"], 0.0)  # at the full link rate
        latency_s = ring_phase(f["bytes"], f["n"], True, f["link_bytes_per_s"], hop) - wire_s
        implied.append(wire_s / (c.published * 1e-6 - latency_s))
    assert len(implied) == 3
    b = FITTED["ici_efficiency"]
    assert b.lo <= min(implied) and max(implied) <= b.hi
    assert min(implied) - b.lo <= 0.05 and b.hi - max(implied) <= 0.06


def test_op_overhead_range_is_four_of_the_compilers_costliest_smallest_fusion():
    catalog, smallest = load_catalog(), []
    for side in sorted(TPU.glob("*.xla.json")):
        prog = cached_program(side)
        if prog.cost is None:
            continue
        clock = catalog[prog.bundle.chip].clock_hz
        cycles = [o.estimated_cycles for o in prog.cost.ops if o.estimated_cycles and o.bytes_accessed < 2**20]  # tiny ops
        if cycles:
            smallest.append(min(cycles) / clock)
    b = FITTED["op_overhead_s"]
    assert b.lo == 0.0 and b.hi == pytest.approx(4 * max(smallest), rel=0.01)


def test_the_compiler_emits_about_four_fusions_per_engine_op_and_pass():
    """The op-overhead range counts four fusions per engine op: the compiler's own count brackets it."""
    from engine.model.compute import passes_per_op
    from engine.model.models import model_cost
    from engine.scenario import TransformerModel

    dims = {"transformer_fsdp_unrolled_v5p8": dict(layers=4, d_model=1024, heads=8, d_ff=4096, vocab=8192, seq_len=1024),
            "transformer_dp_v5e4": dict(layers=2, d_model=256, heads=4, d_ff=1024, vocab=2048, seq_len=128)}  # fmt: skip
    per_op = []
    for name, d in dims.items():  # scripts/fixtures/make_tpu_bundles.py's loop-free steps
        prog = cached_program(TPU / f"{name}.xla.json")
        fusions = sum(o.executions for o in prog.cost.ops if o.estimated_cycles is not None and not o.collective)
        ops = model_cost(TransformerModel(kind="transformer", attention="standard", **d)).ops
        per_op.append(fusions / float((ops.launches * passes_per_op(ops, "none")).sum()))
    assert min(per_op) < 4 < max(per_op)
    assert 2.5 < min(per_op) and max(per_op) < 6.5


def test_the_calibration_file_sits_inside_every_range_and_names_its_measurement():
    import tomllib

    from engine.scenario.calibration import DEFAULT_CALIBRATION_PATH

    cal = load_calibration()
    doc = tomllib.loads(DEFAULT_CALIBRATION_PATH.read_text())
    for name, b in FITTED.items():
        assert b.lo <= getattr(cal, name) <= b.hi, name
        assert b.measurement
    assert all(t["measurement"] for t in doc["fit"]["bounds"].values())
