"""Print the docs' per-case validation table as Markdown: ``python scripts/validation_table.py``.

One row per expressible reference case: predicted and published figures, the in-sample
error, the errors of fits that never saw the case's chip generation or its family, and the
held-out 80% range with whether the published figure lies inside; then the summary lines.
Everything comes from ``profiler.validation`` (the calibration's fit record for the held-out
columns), so the table in the docs is regenerated, never edited by hand.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiler.validation import run_validation  # noqa: E402


def _num(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def _pct(x: float | None) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1f}%"


def _summary(label: str, s: dict) -> str:
    if not s["n"]:
        return f"| {label} | 0 | | | |"
    return f"| {label} | {s['n']} | {s['median_abs_pct']:.1f}% | {s['p90_abs_pct']:.1f}% | {s['worst_abs_pct']:.1f}% ({s['worst_id']}) |"


def main() -> None:
    v = run_validation()
    lines = [
        "| case | chip | metric | predicted | published | in-sample | generation held out | family held out | held-out 80% range |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for c in v.cases:
        rng = ""
        if c.held_out_range is not None:
            rng = f"{_num(c.held_out_range[0])}-{_num(c.held_out_range[1])} ({'inside' if c.held_out_in_range else 'outside'})"
        lines.append(
            f"| {c.id} | {c.chip} | {c.metric} | {_num(c.predicted)} | {_num(c.published)} | {c.error_pct:+.1f}% "
            f"| {_pct(c.leave_one_generation_out_error_pct)} | {_pct(c.leave_one_family_out_error_pct)} | {rng} |"
        )
    s = v.summary
    lines += [
        "",
        "| absolute % error, end-to-end cases | n | median | p90 | worst |",
        "| --- | ---: | ---: | ---: | --- |",
        _summary("in-sample", s["end_to_end"]),
        _summary("chip generation held out", s["leave_one_generation_out"]),
        _summary("family held out", s["leave_one_family_out"]),
        _summary("collective / formula checks (not fitted)", s["checks"]),
    ]
    r = s["step_time_range"]
    if r["n"]:
        lines += [
            "",
            f"Held-out 80% step-time ranges: {r['inside']} of {r['n']} published results inside "
            f"({100 * r['coverage']:.0f}%), median width {r['median_width_pct']:.1f}% of the prediction.",
        ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
