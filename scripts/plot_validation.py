"""Render the README's predicted-vs-published plot: ``python -m scripts.plot_validation [OUT]``.

Uses matplotlib (a dev dependency, requirements-dev.txt) to write a static SVG that the
repository commits (docs/validation.svg), so the README shows the current validation
without a browser. The dashboard's Validation page draws the same data with Plotly.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from profiler.validation import results_frame


def main(out: str = str(ROOT / "docs" / "validation.svg")) -> None:
    df = results_frame()
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


if __name__ == "__main__":
    main(*sys.argv[1:])
