"""The validation page's generated parts: its tables in docs/validation.md and docs/validation.svg.

    python -m scripts.plot_validation [OUT.svg]

runs ``validate`` once, writes the summary and per-case tables between their markers in
docs/validation.md, and draws the predicted-vs-published plot with matplotlib (a dev dependency,
requirements-dev.txt) as a static SVG the repository commits, so the page shows the current
validation without a browser. The dashboard's Validation page draws the same data with Plotly.
``tests/test_docs_generated.py`` checks that the tables match :func:`tables` of the current code.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from engine.scenario.calibration import load_calibration
from profiler.memory_checks import memory_block
from profiler.reference import load_reference
from profiler.validation import Validation, fit_record, results_frame, run_validation
from profiler.xla_compute import compute_table
from profiler.xla_grid import xla_table
from scripts.docs_blocks import DOCS, write_block

ROOT = Path(__file__).resolve().parent.parent
PAGE = DOCS / "validation.md"


def _fmt(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def _summary_row(label: str, s: dict) -> str:
    return (
        f"| {label} | {s['n']} | {s['median_abs_pct']:.1f}% | {s['p90_abs_pct']:.1f}% | "
        f"{s['worst_abs_pct']:.1f}% (`{s['worst_id']}`) |"
    )


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1f}%"


def _range(c) -> str:
    if c.held_out_range is None:
        return ""
    lo, hi = c.held_out_range
    return f"{_fmt(lo)} - {_fmt(hi)} ({'inside' if c.held_out_in_range else '**outside**'})"


def tables(v: Validation) -> dict[str, str]:
    """The Markdown blocks of docs/validation.md, by block name, from one validation run."""
    record = fit_record(v.reference, v.calibration)
    summary = ["| absolute % error | cases | median | p90 | worst |", "| --- | ---: | ---: | ---: | ---: |"]
    summary.append(_summary_row("end-to-end, fitted (in-sample)", v.summary["end_to_end"]))
    if v.summary["leave_one_generation_out"]["n"]:
        summary.append(_summary_row("end-to-end, chip generation held out", v.summary["leave_one_generation_out"]))
        for chip, held in v.summary["leave_one_generation_out_by_chip"].items():
            summary.append(_summary_row(f"end-to-end, {chip} cases, {chip} held out", held))
    if v.summary["leave_one_family_out"]["n"]:
        summary.append(_summary_row("end-to-end, family held out", v.summary["leave_one_family_out"]))
    if v.summary["end_to_end_never_fitted"]["n"]:
        summary.append(_summary_row("end-to-end, never fitted (mixture-of-experts)", v.summary["end_to_end_never_fitted"]))
    summary.append(_summary_row("collective, scaling and formula checks (not fitted)", v.summary["checks"]))
    rng = v.summary["step_time_range"]
    if rng["n"]:
        summary += [
            "",
            f"Held-out 80% step-time ranges: {rng['inside']} of {rng['n']} published results inside their range "
            f"({100 * rng['coverage']:.0f}%), median width {rng['median_width_pct']:.1f}% of the prediction.",
        ]
    cases = [
        "| case | chip | metric | predicted | published | in-sample | generation held out | family held out "
        "| held-out 80% range |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    cases += [
        f"| {c.id} | {c.chip} | {c.metric} | {_fmt(c.predicted)} | {_fmt(c.published)} | {c.error_pct:+.1f}% "
        f"| {_pct(c.leave_one_generation_out_error_pct)} | {_pct(c.leave_one_family_out_error_pct)} | {_range(c)} |"
        for c in v.cases
        if c.kind != "time_to_train"
    ]
    ttt = ["| case | chip | predicted (s) | published (s) | error |", "| --- | --- | ---: | ---: | ---: |"]
    ttt += [
        f"| {c.id.removesuffix('_time_to_train')} | {c.chip} | {_fmt(c.predicted)} | {_fmt(c.published)} | {c.error_pct:+.1f}% |"
        for c in v.cases
        if c.kind == "time_to_train"
    ]
    s = v.summary["time_to_train"]
    if s["n"]:
        ttt += ["", f"Median absolute error {s['median_abs_pct']:.1f}% over {s['n']} entries (p90 {s['p90_abs_pct']:.1f}%, "
                f"worst {s['worst_abs_pct']:.1f}%, {s['worst_id']})."]  # fmt: skip
    cal = load_calibration(Path(v.calibration))
    params = ["| parameter | fitted | prior |", "| --- | ---: | ---: |"]
    for name in record.get("fitted", []):
        scale, unit = (1e6, " us") if name.endswith("_s") else (1.0, "")
        label = name.removesuffix("_s") if unit else name
        params.append(f"| `{label}` | {getattr(cal, name) * scale:.3g}{unit} | {record['prior'][name] * scale:.3g}{unit} |")
    ranges = ["| comparable cases | n | step-time range (x predicted) |", "| --- | ---: | --- |"]
    for group, row in record.get("step_time_ranges", {}).items():
        ranges.append(f"| `{group}` | {row['n']} | {row['low_factor']:.3f} - {row['high_factor']:.3f} |")
    hbm = ["| compiled programs | n | range of XLA's HBM peak (x Podscope's) |", "| --- | ---: | --- |"]
    for group, row in record.get("hbm_ranges", {}).items():
        hbm.append(f"| `{group}` | {row['n']} | {row['low_factor']:.3f} - {row['high_factor']:.3f} |")
    return {
        "validation-parameters": "\n".join(params) + "\n",
        "validation-hbm-ranges": "\n".join(hbm) + "\n",
        "validation-summary": "\n".join(summary) + "\n",
        "validation-ranges": "\n".join(ranges) + "\n",
        "validation-cases": "\n".join(cases) + "\n",
        "validation-time-to-train": "\n".join(ttt) + "\n",
        "validation-memory": memory_block(load_reference(v.reference)),
        "validation-xla": xla_table(v.xla),
        "validation-xla-compute": compute_table(v.xla_compute),
    }


def plot(df: pd.DataFrame, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    families = sorted(df["family"].unique())
    colors = {f: plt.get_cmap("tab10")(i) for i, f in enumerate(families)}
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 7.2), gridspec_kw={"width_ratios": [1, 1.15]})
    lo = min(df["predicted"].min(), df["published"].min()) / 1.5
    hi = max(df["predicted"].max(), df["published"].max()) * 1.5
    ax.plot([lo, hi], [lo, hi], "--", color="#9D9D9D", label="ideal (y = x)")
    ax.fill_between([lo, hi], [lo * 0.8, hi * 0.8], [lo * 1.2, hi * 1.2], color="#DDDDDD", alpha=0.5, label="within 20%")
    for family in families:
        g = df[df["family"] == family]
        ax.scatter(g["published"], g["predicted"], label=f"{family} ({len(g)})", s=28, color=colors[family])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("published (each case in its own unit: TFLOP/s/chip, images/s/chip, tokens/s/chip, s, us, ratio)", fontsize=7)
    ax.set_ylabel("predicted by Podscope")
    ax.set_title("Predicted vs published")
    ax.legend(fontsize=8, loc="upper left")

    d = df.sort_values("error_pct")
    y = list(range(len(d)))
    bx.barh(y, d["error_pct"], color=[colors[f] for f in d["family"]], zorder=3)
    for yi, (fit, kind, err) in zip(y, zip(d["fit"], d["kind"], d["error_pct"])):
        if not fit:
            label = " never fitted" if kind == "end_to_end" else " check"
            bx.text(err, yi, label, va="center", fontsize=6, color="#555555")
    # Held out: the error of a fit that never saw the case's chip generation (its 80% range as a line: the case
    # is inside when the line crosses 0) or its family.
    lo = 100 * (d["range_low"] - d["published"]) / d["published"]
    hi = 100 * (d["range_high"] - d["published"]) / d["published"]
    has = d["range_low"].notna().to_numpy()
    bx.hlines([yi for yi, h in zip(y, has) if h], lo[has], hi[has], color="#333333", lw=1.0, zorder=4,
              label="80% range around the generation-held-out prediction")  # fmt: skip
    bx.scatter(d["leave_one_generation_out_error_pct"], y, marker="D", s=14, color="#111111", zorder=5,
               label="chip generation held out")  # fmt: skip
    bx.scatter(d["leave_one_family_out_error_pct"], y, marker="x", s=16, color="#B2182B", zorder=5, label="family held out")
    bx.axvspan(-10, 10, color="#DDDDDD", alpha=0.6, zorder=0)
    bx.axvspan(-20, 20, color="#EEEEEE", alpha=0.5, zorder=0)
    bx.axvline(0, color="#666666", lw=0.8)
    bx.set_yticks(y)
    bx.set_yticklabels(d["id"], fontsize=6)
    bx.set_xlabel("error, % of published ((predicted - published) / published)")
    e2e = d[d["fit"] & d["held_out_in_range"].notna()]
    inside = int(e2e["held_out_in_range"].astype(bool).sum())
    bx.set_title(
        f"Error per case ('check' = collective, scaling ratio or formula example; 'never fitted' = a kind of job no fit sees)\n"
        f"published result inside its held-out 80% range: {inside} of {len(e2e)}",
        fontsize=9,
    )
    handles, labels = bx.get_legend_handles_labels()
    handles.insert(0, Patch(color="#AAAAAA"))
    labels.insert(0, "in-sample (fit on all cases; bar colour = family)")
    bx.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=2)
    fig.suptitle("Podscope vs published TPU results (python -m profiler validate)")
    fig.tight_layout()
    matplotlib.rcParams["svg.hashsalt"] = "podscope"  # stable ids: the SVG only changes when the data does
    fig.savefig(out, metadata={"Date": None})
    print(f"wrote {out}")


def main(out: str = str(DOCS / "validation.svg")) -> None:
    v = run_validation()
    for name, text in tables(v).items():
        write_block(PAGE, name, text)
    df = results_frame()
    plot(df[df["kind"] != "time_to_train"], out)


if __name__ == "__main__":
    main(*sys.argv[1:])
