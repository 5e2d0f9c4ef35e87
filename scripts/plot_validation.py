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

from engine.calibration import load_calibration
from profiler.validation import Validation, fit_record, results_frame, run_validation
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


def tables(v: Validation) -> dict[str, str]:
    """The Markdown blocks of docs/validation.md, by block name, from one validation run."""
    record = fit_record(v.reference, v.calibration)
    summary = ["| absolute % error | cases | median | p90 | worst |", "| --- | ---: | ---: | ---: | ---: |"]
    summary.append(_summary_row("end-to-end, fitted (in-sample)", v.summary["end_to_end"]))
    if record.get("held_out", {}).get("n"):
        summary.append(_summary_row(f"end-to-end, held out ({record.get('folds', '?')}-fold)", record["held_out"]))
    if record.get("family_held_out", {}).get("n"):
        summary.append(_summary_row("end-to-end, held out (leave-one-family-out)", record["family_held_out"]))
    summary.append(_summary_row("collective / formula checks (not fitted)", v.summary["checks"]))
    cases = ["| case | chip | metric | predicted | published | error |", "| --- | --- | --- | ---: | ---: | ---: |"]
    cases += [
        f"| {c.id} | {c.chip} | {c.metric} | {_fmt(c.predicted)} | {_fmt(c.published)} | {c.error_pct:+.1f}% |" for c in v.cases
    ]
    cal = load_calibration(Path(v.calibration))
    params = ["| parameter | fitted | prior |", "| --- | ---: | ---: |"]
    for name in record.get("fitted", []):
        scale, unit = (1e6, " us") if name.endswith("_s") else (1.0, "")
        label = name.removesuffix("_s") if unit else name
        params.append(f"| `{label}` | {getattr(cal, name) * scale:.3g}{unit} | {record['prior'][name] * scale:.3g}{unit} |")
    return {"validation-parameters": "\n".join(params) + "\n", "validation-summary": "\n".join(summary) + "\n", "validation-cases": "\n".join(cases) + "\n"}


def plot(df: pd.DataFrame, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted(df["family"].unique())
    colors = {f: plt.get_cmap("tab10")(i) for i, f in enumerate(families)}
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 6.5), gridspec_kw={"width_ratios": [1, 1.15]})
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
    y = range(len(d))
    bx.barh(list(y), d["error_pct"], color=[colors[f] for f in d["family"]], zorder=3)
    for yi, (fit, err) in zip(y, zip(d["fit"], d["error_pct"])):
        if not fit:
            bx.text(err, yi, " check", va="center", fontsize=6, color="#555555")
    bx.axvspan(-10, 10, color="#DDDDDD", alpha=0.6, zorder=0)
    bx.axvspan(-20, 20, color="#EEEEEE", alpha=0.5, zorder=0)
    bx.axvline(0, color="#666666", lw=0.8)
    bx.set_yticks(list(y))
    bx.set_yticklabels(d["id"], fontsize=6)
    bx.set_xlabel("error, % of published ((predicted - published) / published)")
    bx.set_title("Error per case ('check' = collective / formula example, not fitted)")
    fig.suptitle("Podscope vs published TPU results (python -m profiler validate)")
    fig.tight_layout()
    matplotlib.rcParams["svg.hashsalt"] = "podscope"  # stable ids: the SVG only changes when the data does
    fig.savefig(out, metadata={"Date": None})
    print(f"wrote {out}")



def main(out: str = str(DOCS / "validation.svg")) -> None:
    v = run_validation()
    for name, text in tables(v).items():
        write_block(PAGE, name, text)
    plot(results_frame(), out)


if __name__ == "__main__":
    main(*sys.argv[1:])
