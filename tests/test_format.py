"""Known answers for the human number formats shared by the dashboard and the CLI."""

from __future__ import annotations

import math

import pytest

from profiler import format as fmt


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (6.72905, "6.73 s"), (0.56726, "567 ms"), (0.0123456, "12.3 ms"), (12.3e-6, "12.3 µs"), (850, "14.2 min"),
        (3 * 3600, "3 h"), (0, "0 s"), (None, "n/a"), (math.nan, "n/a"), (1490.2, "24.8 min"),
    ],
)  # fmt: skip
def test_duration(seconds, text):
    assert fmt.duration(seconds) == text


def test_gib_single_formatter():
    assert fmt.gib(5801034048) == "5.4 GiB"
    assert fmt.gib(5801034048, 2) == "5.40 GiB"
    assert fmt.gib(33543604.5) == "32 MiB"  # below 0.1 GiB: MiB, never "0.0 GiB"
    assert fmt.gib_of(80.9 * 2**30, 95 * 2**30) == "80.9 / 95 GiB"
    assert fmt.gib_of(5.4 * 2**30, 32 * 2**30) == "5.4 / 32 GiB"
    assert fmt.gib_of(1 * 2**30, 15.75 * 2**30) == "1.0 / 15.8 GiB"
    assert fmt.gib_of(None, 2**30) == "n/a"


def test_bytes_and_rates():
    assert fmt.bytes_(33543604.5) == "32 MiB"
    assert fmt.bytes_(512) == "512 B"
    assert fmt.si(14441.44) == "14.4k"
    assert fmt.rate(255_000, "samples") == "255k samples/s"
    assert fmt.si(2.0e12, "FLOP/s") == "2T FLOP/s"
    assert fmt.count(45580) == "45,580"


def test_percent_and_points():
    assert fmt.percent(0.408) == "40.8%"
    assert fmt.percent(0.00004) == "<0.1%"
    assert fmt.percent(0) == "0.0%"
    assert fmt.points(0.014) == "+1.4 pp"
    assert fmt.points(-0.021) == "-2.1 pp"


def test_change_fraction_is_points_and_zero_is_neutral():
    # MFU 2.0% -> 30.2% is +28.2 points, not +1409.9%
    assert fmt.change(0.302, 0.020, fraction=True) == ("+28.2 pp", False)
    assert fmt.change(1.0004, 1.0) == ("0.0%", True)
    assert fmt.change(0.56726, 0.56726) == ("0.0%", True)
    assert fmt.change(1.25, 1.0) == ("+25.0%", False)
    assert fmt.change(None, 1.0) == (None, True)
    assert fmt.change(1.0, 0.0) == (None, True)


def test_chip_labels():
    assert fmt.chip_label("tpu-v5p") == "v5p"
    assert fmt.chips_label(64, "tpu-v5p") == "64 x v5p"
    assert fmt.chips_label(1024, "gpu-h100") == "1,024 x gpu-h100"


def test_a_range_reads_in_the_unit_of_its_upper_end():
    from profiler import format as fmt

    assert fmt.duration_range(4.24757, 6.53393) == "4.2–6.5 s"
    assert fmt.duration_range(0.88, 1.1) == "0.88–1.1 s"
    assert fmt.duration_range(0.0042, 0.0065) == "4.2–6.5 ms"
    assert fmt.duration_range(None, 1.0) == fmt.NA
