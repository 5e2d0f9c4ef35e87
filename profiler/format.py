"""Numbers for people: durations, bytes, rates, percentages and chip labels, formatted once.

The dashboard and the CLI both print through these functions, so a peak HBM reads "80.9 GiB"
on the Overview tile, in the Memory table and in ``python -m profiler run`` alike. Every
function takes a quantity in its internal unit (seconds, bytes, a fraction) and returns a short
string sized for a metric tile (about 12 characters); None and NaN read "n/a".

Percentages and percentage points are different things: a fraction's change is shown in
points (MFU 2.0% -> 3.4% is "+1.4 pp"), any other quantity's change as a relative percentage
("+12.5%"). :func:`change` picks the right one and reports whether the change is zero.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "NA",
    "GIB",
    "is_missing",
    "duration",
    "duration_ms",
    "gib",
    "gib_of",
    "bytes_",
    "si",
    "rate",
    "count",
    "percent",
    "usd",
    "points",
    "relative_change",
    "change",
    "chip_label",
    "chips_label",
    "chip_ranges",
]

NA = "n/a"
#: bytes in one GiB (2**30): HBM capacities are quoted in GiB by the chip data sheets
GIB = 2**30


def is_missing(value: Any) -> bool:
    """None, NaN or not a number at all."""
    if value is None:
        return True
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def _sig(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits without scientific notation ("567", "6.73", "0.0123")."""
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    text = f"{value:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def duration(seconds: float | None, digits: int = 3) -> str:
    """A duration in the unit that keeps it short: "12.3 µs", "567 ms", "6.73 s", "14.2 min", "3.1 h"."""
    if is_missing(seconds):
        return NA
    s = float(seconds)
    a = abs(s)
    if a == 0:
        return "0 s"
    if a < 1e-6:
        return f"{_sig(s * 1e9, digits)} ns"
    if a < 1e-3:
        return f"{_sig(s * 1e6, digits)} µs"
    if a < 1:
        return f"{_sig(s * 1e3, digits)} ms"
    if a < 120:
        return f"{_sig(s, digits)} s"
    if a < 7200:
        return f"{_sig(s / 60, digits)} min"
    return f"{_sig(s / 3600, digits)} h"


def duration_range(low_s: float | None, high_s: float | None, digits: int = 2) -> str:
    """A range in the unit of its upper end: "4.2–6.5 s", "880–1,100 ms"; "n/a" when either end is missing."""
    if is_missing(low_s) or is_missing(high_s):
        return NA
    hi = abs(float(high_s))
    units = ((1e-6, 1e9, "ns"), (1e-3, 1e6, "µs"), (1, 1e3, "ms"), (120, 1.0, "s"), (7200, 1 / 60, "min"))
    scale, unit = next(((sc, u) for limit, sc, u in units if hi < limit), (1 / 3600, "h"))
    return f"{_sig(float(low_s) * scale, digits)}–{_sig(float(high_s) * scale, digits)} {unit}"


def duration_ms(seconds: float | None, decimals: int = 1) -> str:
    """A step-scale duration always in milliseconds ("567.3 ms"), for columns that must line up."""
    if is_missing(seconds):
        return NA
    return f"{float(seconds) * 1e3:,.{decimals}f} ms"


def gib(n_bytes: float | None, decimals: int = 1) -> str:
    """Bytes as GiB: "5.4 GiB"; below 0.1 GiB as MiB so small footprints do not read "0.0 GiB"."""
    if is_missing(n_bytes):
        return NA
    b = float(n_bytes)
    if b != 0 and abs(b) < 0.1 * GIB:
        return f"{_sig(b / 2**20, 3)} MiB"
    return f"{b / GIB:,.{decimals}f} GiB"


def gib_of(used_bytes: float | None, capacity_bytes: float | None) -> str:
    """Use against capacity in one unit: "80.9 / 95 GiB" (capacity without decimals when whole)."""
    if is_missing(used_bytes) or is_missing(capacity_bytes):
        return NA
    cap = float(capacity_bytes) / GIB
    cap_text = f"{cap:,.0f}" if abs(cap - round(cap)) < 0.05 else f"{cap:,.1f}"
    return f"{float(used_bytes) / GIB:,.1f} / {cap_text} GiB"


def bytes_(n_bytes: float | None) -> str:
    """Bytes in binary units with 3 significant digits: "512 B", "33.5 MiB", "1.25 TiB"."""
    if is_missing(n_bytes):
        return NA
    b = float(n_bytes)
    for factor, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(b) >= factor:
            return f"{_sig(b / factor)} {unit}"
    return f"{b:,.0f} B"


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """A count or rate with k/M/G/T and 3 significant digits: "14.4k", "255k samples/s", "1.2 T"."""
    if is_missing(value):
        return NA
    v = float(value)
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{_sig(v / factor, digits)}{prefix} {unit}".rstrip()
    return f"{_sig(v, digits)} {unit}".rstrip()


def rate(per_s: float | None, unit: str) -> str:
    """A rate per second: "14.4k samples/s"."""
    return si(per_s, f"{unit}/s")


def count(n: float | None) -> str:
    """A whole number with thousands separators: "45,580"."""
    if is_missing(n):
        return NA
    return f"{int(round(float(n))):,}"


def usd(dollars: float | None) -> str:
    """US dollars: cents below $10,000 ("$13.69"), then 3 significant digits with k/M ("$245k")."""
    if is_missing(dollars):
        return NA
    v = float(dollars)
    return f"${v:,.2f}" if abs(v) < 1e4 else f"${si(v)}"


def percent(frac: float | None, decimals: int = 1) -> str:
    """A fraction as a percentage: 0.408 -> "40.8%"; tiny non-zero values say so ("<0.1%")."""
    if is_missing(frac):
        return NA
    p = float(frac) * 100
    floor = 10.0**-decimals
    if p != 0 and abs(p) < floor:
        return f"<{floor:g}%" if p > 0 else f">-{floor:g}%"
    return f"{p:.{decimals}f}%"


def points(delta_frac: float | None, decimals: int = 1) -> str:
    """The difference of two fractions in percentage points: 0.014 -> "+1.4 pp"."""
    if is_missing(delta_frac):
        return NA
    return f"{float(delta_frac) * 100:+.{decimals}f} pp"


def relative_change(new: float | None, old: float | None, decimals: int = 1) -> str | None:
    """(new - old) / old as a signed percentage ("+12.5%"); None when there is no base to divide by."""
    if is_missing(new) or is_missing(old) or float(old) == 0:
        return None
    return f"{(float(new) - float(old)) / abs(float(old)) * 100:+.{decimals}f}%"


def change(new: float | None, old: float | None, *, fraction: bool = False, decimals: int = 1) -> tuple[str | None, bool]:
    """The change from ``old`` to ``new`` as shown beside a metric, and whether it rounds to zero.

    ``fraction=True`` (MFU, a share of time) gives percentage points, otherwise a relative
    percentage. A change that rounds to zero at ``decimals`` is reported as zero, so a caller
    can show it neutral rather than as a rise or a fall.
    """
    if is_missing(new) or is_missing(old):
        return None, True
    if fraction:
        delta = float(new) - float(old)
        zero = round(delta * 100, decimals) == 0
        return (f"{0:.{decimals}f} pp" if zero else points(delta, decimals)), zero
    text = relative_change(new, old, decimals)
    if text is None:
        return None, True
    zero = round((float(new) - float(old)) / abs(float(old)) * 100, decimals) == 0
    return (f"{0:.{decimals}f}%" if zero else text), zero


def chip_label(chip: str | None) -> str:
    """A chip's short name: "tpu-v5p" -> "v5p" (other names unchanged)."""
    if not chip:
        return "?"
    return chip.removeprefix("tpu-")


def chips_label(n: int | None, chip: str | None) -> str:
    """A slice in a few characters: "64 x v5p"."""
    if is_missing(n):
        return f"? x {chip_label(chip)}"
    return f"{int(n):,} x {chip_label(chip)}"


def chip_ranges(chips) -> str:
    """Ascending chip ids as ranges: ``(0, 1, 2, 5)`` -> ``"0-2,5"``."""
    ids = [int(c) for c in chips]
    runs: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        runs.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(runs)
