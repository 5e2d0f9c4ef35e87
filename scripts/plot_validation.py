"""Render the README's predicted-vs-published plot: ``python scripts/plot_validation.py [OUT]``.

Uses matplotlib (a dev dependency, requirements-dev.txt) to write a static SVG that the
repository commits (docs/validation.svg), so the README shows the current validation
without a browser. The dashboard's Validation page draws the same data with Plotly.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from profiler.validation import results_frame  # noqa: E402


def main(out: str = str(ROOT / "docs" / "validation.svg")) -> None:
    df = results_frame()
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
    for yi, (fit, err) in zip(y, zip(d["fit"], d["error_pct"])):
        if not fit:
            bx.text(err, yi, " check", va="center", fontsize=6, color="#555555")
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
        f"Error per case ('check' = collective / formula example, not fitted)\n"
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


if __name__ == "__main__":
    main(*sys.argv[1:])
