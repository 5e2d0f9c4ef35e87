"""What XLA holds live at its peak: the reader of its live-range, buffer-assignment and module dumps, the bundles'
``NAME.live-peak.json``, and the xla-check lines built on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import HloError
from engine.hlo.live_range import SOURCES, LivePeak, peak_sources, read_live_peak
from profiler import xla_check

FIXTURES = Path(__file__).parent / "fixtures" / "tpu"


def _fixture(name: str) -> tuple[LivePeak, dict]:
    peak = LivePeak.from_json(json.loads((FIXTURES / f"{name}.live-peak.json").read_text()), name)
    return peak, json.loads((FIXTURES / f"{name}.xla.json").read_text())


# --- the reader, on dumps in XLA's format --------------------------------------------------------
# Three dumps of one small program, written as libtpu 0.0.42.1 writes them: a forward loop whose carried state shares
# its bytes with the buffer it was given, a donated parameter and its prefetch, a temporary of the backward, an
# on-chip buffer, and an early temporary gone by the peak.

LIVE = """HloLiveRange (max 9):
  InstructionSequence:
    0:param.0
  BufferLiveRange:
    param.0{}:0-3
    copy-start.3{0}:2-3
    fusion.9{}:0-1
    custom-call.1{}:1-8
    wide.param.2{1}:2-8
    fusion.4{}:5-6
    fusion.5{}:5-5
  Live ranges at 2 (peak):
    custom-call.1{}: 4096 bytes (cumulative: 4096 bytes)
"""
ASSIGNMENT = """BufferAssignment:
allocation 0: size 1024, parameter 0, shape |f32[256]| at ShapeIndex {}, maybe-live-out:
 value: <1 param.0 @0> (size=1024,offset=0): f32[256]{0}
 value: <2 copy-start.3{0} @0> (size=1024,offset=0): f32[256]{0}
allocation 1: size 8192, preallocated-temp:
 value: <3 custom-call.1 @0> (size=4096,offset=0): f32[1024]{0}
 value: <4 wide.param.2{1} (phi) @0> (size=4096,offset=0): f32[1024]{0}
 value: <5 fusion.4 @0> (size=2048,offset=4096): bf16[1024]{0}
 value: <7 fusion.9 @0> (size=1024,offset=6144): f32[256]{0}
allocation 2: size 512, color 1, preallocated-temp:
 value: <6 fusion.5 @0> (size=512,offset=0): f32[128]{0}
"""
MODULE = """HloModule jit_step

%wide.body (wide.param.2: (s32[], f32[1024])) -> (s32[], f32[1024]) {
  %wide.param.2 = (s32[], f32[1024]{0}) parameter(0)
}

ENTRY %main (param.0: f32[256]) -> f32[256] {
  %param.0 = f32[256]{0} parameter(0), metadata={op_name="params[\\'w\\']"}
  %fusion.9 = f32[256]{0} fusion(%param.0), kind=kLoop, calls=%h, metadata={op_name="jit(step)/jvp()/sin"}
  %custom-call.1 = f32[1024]{0} custom-call(), custom_call_target="AllocateBuffer", metadata={op_name="broadcast.9"}
  %while.7 = (s32[], f32[1024]{0}) while(%tuple.6), condition=%wide.cond, body=%wide.body, metadata={op_name="jit(step)/jvp()/while"}
  %copy-start.3 = (f32[256]{0}, f32[256]{0}, u32[]) copy-start(%param.0)
  %fusion.4 = bf16[1024]{0} fusion(%param.0), kind=kLoop, calls=%f, metadata={op_name="jit(step)/transpose(jvp())/rematted_computation/dot_general" stack_frame_id=3}
  %fusion.5 = f32[128]{0} fusion(%param.0), kind=kLoop, calls=%g, metadata={op_name="jit(step)/transpose(jvp())/dot_general"}
}
"""


def test_the_hbm_peak_counts_each_live_byte_once_and_names_what_made_it():
    peak = read_live_peak(LIVE, ASSIGNMENT, MODULE, "small step")
    # HBM by position: the loop's 4096 bytes from 1 to 8 (its state and the buffer it was given: one place), the
    # early temporary's 1024 at 0-1, the backward's 2048 at 5-6: the most at 5 (not the analysis's own "peak", 2)
    assert peak.position == 5
    assert peak.live_bytes(0) == 1024 + 4096 + 2048 and peak.live_bytes(None) == 1024 + 4096 + 2048 + 512
    by_value = {b.value: b for b in peak.buffers}
    # of the two values on the loop's bytes, the one a JAX op names is kept: the loop's state, named by its while
    assert "wide.param.2{1}" in by_value and "custom-call.1" not in by_value and "fusion.9" not in by_value
    assert by_value["wide.param.2{1}"].op_name == "jit(step)/jvp()/while"
    assert by_value["param.0"].argument == ("params", "w")  # held though no longer live at 5
    assert by_value["fusion.5"].memory_space == 1
    s = peak_sources(peak)
    assert s["live_bytes"] == peak.live_bytes(0) == sum(s[k] for k in SOURCES)
    assert (s["arguments"], s["forward"], s["recomputed"], s["backward"]) == (1024, 4096, 2048, 0)
    assert s["by_argument"] == {"params": 1024}
    assert peak_sources(peak, memory_space=1)["backward"] == 512  # the on-chip buffer, in its own space


@pytest.mark.parametrize(
    ("live", "assignment", "says"),
    [
        ("HloLiveRange (max 9):\n", ASSIGNMENT, "no 'BufferLiveRange:' section"),
        ("HloLiveRange (max 9):\n  BufferLiveRange:\n  Live ranges at 2 (peak):\n", ASSIGNMENT, "lists no value"),
        (LIVE, "BufferAssignment:\n", "no 'allocation N"),
    ],
)
def test_a_dump_without_what_the_reader_needs_is_named(live, assignment, says):
    with pytest.raises(HloError, match="small step") as e:
        read_live_peak(live, assignment, MODULE, "small step")
    assert says in str(e.value)


def test_a_live_peak_file_of_another_format_is_refused():
    with pytest.raises(HloError, match="not a live peak written by Podscope"):
        LivePeak.from_json({"format": "something-else", "position": 0, "buffers": []}, "x.live-peak.json")
    with pytest.raises(HloError, match="x.live-peak.json"):
        LivePeak.from_json({"format": "podscope-xla-live-peak"}, "x.live-peak.json")


# --- the committed bundles (scripts/fixtures/make_tpu_bundles.py) --------------------------------------


def test_the_scanned_fsdp_step_peaks_in_its_forward_scan_with_its_arguments_all_live():
    peak, side = _fixture("transformer_fsdp_v5p8")
    mem = side["memory"]
    s = peak_sources(peak)
    # each byte counted once (a loop's carried values share the buffers they were given), the HBM peak is XLA's own
    assert s["live_bytes"] == pytest.approx(mem["peak_bytes"], rel=1e-3)
    # every argument (weights, Adam moments, tokens, labels, step) is held at the peak: XLA's argument bytes
    assert s["arguments"] == mem["argument_bytes"]
    assert set(s["by_argument"]) == {"params", "m", "u", "tokens", "labels", "count"}
    # the peak is at the end of the forward scan: what it keeps for the backward, nothing of the backward but scalars
    assert s["forward"] > 0.8 * (s["live_bytes"] - s["arguments"]) and s["backward"] + s["recomputed"] < 2**20


def test_the_refused_step_shows_what_it_would_hold():
    peak, side = _fixture("oom_v5e4")
    assert side["oom"] is not None and side["memory"] is None
    s = peak_sources(peak)
    # what XLA's message says the program needs, more than the chip has
    assert s["live_bytes"] == pytest.approx(side["oom"]["required_bytes"], rel=1e-3)
    assert s["live_bytes"] > side["oom"]["available_bytes"]
    largest = peak.largest(1)[0]
    assert largest.bytes == max(b.bytes for b in peak.buffers) and s["backward"] > 0 and s["forward"] > 0


# --- xla-check ----------------------------------------------------------------------------------


def _record(peak: LivePeak, side: dict, devices_per_chip: int) -> dict:
    mem = side["memory"]
    return {"memory": mem, "oom": None, "flops_per_device": None, "devices_per_chip": devices_per_chip, "devices": side["devices"],
            "mesh": {"fsdp": side["devices"]}, "notes": [], "compile_s": side["compile_s"], "live_peak": xla_check.live_peak_record(peak)}  # fmt: skip


@pytest.mark.parametrize("devices_per_chip", [1, 2])
def test_xla_check_sets_the_peak_by_source_per_chip(devices_per_chip):
    peak, side = _fixture("transformer_fsdp_v5p8")
    xla = _record(peak, side, devices_per_chip)
    live = xla["live_peak"]
    assert [b["bytes"] for b in live["largest"]] == sorted((b.bytes for b in peak.buffers if b.memory_space == 0), reverse=True)[
        : xla_check.LARGEST_AT_PEAK
    ]
    pod = {"peak_hbm_bytes": 1.0 * 2**30, "oom": False, "hardware_flops_per_chip": 0.0, "usable_hbm_bytes": 90.0 * 2**30,
           "breakdown_bytes": {"params": 0.0}, "peak_phase": "backward", "gradient_reduction_bytes": 0.0}  # fmt: skip
    cmp = xla_check.compare(pod, xla)
    per_chip = cmp["xla"]["live_peak"]
    assert per_chip["live_bytes"] == devices_per_chip * live["live_bytes"]
    assert per_chip["by_argument"]["params"] == devices_per_chip * live["by_argument"]["params"]
    text = xla_check.format_check("fsdp", cmp, xla)
    assert f"at XLA's peak {per_chip['live_bytes'] / 2**30:.3f} GiB per chip live in HBM" in text
    assert f"forward pass {per_chip['forward'] / 2**30:.3f}" in text and "backward pass" not in text  # none at this peak
    assert ("per device" in text.split("largest")[1]) == (devices_per_chip > 1)
