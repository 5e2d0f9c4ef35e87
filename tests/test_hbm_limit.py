"""The HBM a step may use: XLA's compile-time limit where a compiler log records it, else capacity less a reserve."""

from __future__ import annotations

import pytest

from engine import scenario_from_dict
from engine.model.analytic import evaluate
from engine.pod.catalog import load_catalog
from engine.scenario.calibration import load_calibration
from engine.units import GIB_BYTES

#: (chip, GiB XLA lets a program use, GiB the runtime reserves), as the compiler's out-of-memory messages print them
XLA_LOGS = [("tpu-v4", 30.75, 1.25), ("tpu-v5e", 15.48, 530 / 1024), ("tpu-v2", 2 * 7.48, 2 * 530 / 1024)]


@pytest.mark.parametrize("chip, limit_gib, reserved_gib", XLA_LOGS)
def test_limit_plus_reserve_is_the_chips_capacity(chip, limit_gib, reserved_gib):
    spec = load_catalog()[chip]
    assert spec.usable_hbm_bytes(0.05) == limit_gib * GIB_BYTES
    assert (limit_gib + reserved_gib) * GIB_BYTES == pytest.approx(spec.hbm_bytes, rel=1e-3)


def test_a_chip_without_a_compiler_log_keeps_the_reserved_fraction():
    v3 = load_catalog()["tpu-v3"]
    assert v3.hbm_program_limit_bytes == 0
    assert v3.usable_hbm_bytes(0.05) == pytest.approx(32 * GIB_BYTES * 0.95)
    assert v3.usable_hbm_bytes(0.0) == v3.hbm_bytes


def test_every_recorded_limit_lies_below_capacity():
    for spec in load_catalog().values():
        assert 0 <= spec.hbm_program_limit_bytes <= spec.hbm_bytes


def _v5e_llm(layers: int) -> dict:
    return {"name": "fits", "pod": {"chip": "tpu-v5e", "topology": "2x4"},
            "model": {"kind": "transformer", "layers": layers, "d_model": 2048, "heads": 16, "d_ff": 8192, "vocab": 32000,
                      "seq_len": 2048, "mlp": "swiglu", "attention": "flash"},
            "training": {"global_batch": 8, "steps": 3, "precision": "bf16", "optimizer": "adam", "remat": "full"},
            "parallelism": {"fsdp": 8}}  # fmt: skip


def test_a_v5e_job_between_the_old_reserve_and_the_compiler_limit_fits():
    """A step whose peak lies between 95% of 16 GiB and 15.48 GiB fits (XLA would compile it)."""
    cal = load_calibration()
    peaks = {n: evaluate(scenario_from_dict(_v5e_llm(n)), cal) for n in range(16, 160, 2)}
    between = [e for e in peaks.values() if 0.95 * 16 * GIB_BYTES < e.peak_hbm_bytes <= 15.48 * GIB_BYTES]
    assert between, {n: round(e.peak_hbm_bytes / GIB_BYTES, 2) for n, e in peaks.items()}
    assert all(not e.oom and e.usable_hbm_bytes == 15.48 * GIB_BYTES for e in between)
    assert any(e.oom for e in peaks.values() if e.peak_hbm_bytes > 15.48 * GIB_BYTES)


def test_every_limit_is_within_2pct_of_the_hbm_the_compiler_grid_was_refused_against():
    """libtpu's compile-only out-of-memory messages in the compiler grid state the HBM available to a program on each
    device ('exceeds available HBM (94.75G)'); per chip it is the catalog's limit (exactly on v4, v5p, v6e and TPU7x;
    on v5e the limit run logs state, which differs by the runtime's reservation, within 2%)."""
    import json

    from profiler.xla_grid import DEFAULT_XLA_GRID_PATH

    records = json.loads(DEFAULT_XLA_GRID_PATH.read_text())["configurations"]
    available: dict[str, set[float]] = {}
    for rec in records:
        oom = rec["xla"]["oom"]
        if oom and oom.get("available_bytes"):
            available.setdefault(rec["scenario"]["pod"]["chip"], set()).add(oom["available_bytes"] * rec["xla"]["devices_per_chip"])
    assert {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu7x"} <= set(available)
    catalog = load_catalog()
    for chip, values in available.items():
        assert len(values) == 1, (chip, values)  # one limit per chip, whatever the program
        assert catalog[chip].usable_hbm_bytes(0.05) == pytest.approx(values.pop(), rel=0.02), chip
