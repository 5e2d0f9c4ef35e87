"""The worked plan in docs/planner.md: the bundled 7B-on-v5p plan, searched with the current engine.

    python -m scripts.plan_doc            # print the block
    python -m scripts.plan_doc --write    # put it into docs/planner.md

Timings are left out (they depend on the machine; see docs/performance.md), so
``tests/test_docs_generated.py`` can check that the block still matches.
"""

from __future__ import annotations


from engine.planning.search import search
from profiler.plan import BUNDLED_PLANS_DIR, load_plan
from scripts.docs_blocks import DOCS, block_main

__all__ = ["PAGE", "BLOCK", "PLAN", "render"]

PAGE = DOCS / "planner.md"
BLOCK = "planner-worked"
PLAN = BUNDLED_PLANS_DIR / "llm-7b-v5p.toml"


def _mesh(mesh: dict[str, int]) -> str:
    return " x ".join(str(v) for v in mesh.values())


def render(top: int = 5) -> str:
    """The block's Markdown: counts, reasons, the best configurations and the Pareto front."""
    result = search(load_plan(PLAN))
    out = result.to_json(top)
    lines = [
        f"`python -m profiler plan llm-7b-v5p`: {out['candidates']} candidates, {out['feasible']} feasible, "
        f"{result.costed} costed analytically (the rest ruled out before costing).",
        "",
        "| Ruled out because | Candidates |",
        "|---|---:|",
        *[f"| {reason} | {n} |" for reason, n in sorted(out["infeasible"].items(), key=lambda kv: -kv[1])],
        "",
        f"Best {top} by {out['objective_name']}:",
        "",
        f"| Rank | Chips | Slice | Remat | Mesh ({' x '.join(out['best'][0]['mesh']) if out['best'] else 'data x fsdp x tensor'}) "
        "| Step (s) | Tokens/s per chip | HBM peak (GiB) |",
        "|---:|---:|---|---|---|---:|---:|---:|",
    ]
    for b in out["best"]:
        s = b["scenario"]
        lines.append(
            f"| {b['rank']} | {b['chips']} | {s['pod']['topology']} | {s['training']['remat']} | {_mesh(b['mesh'])} | "
            f"{b['step_time_s']:.3f} | {b['objective']:,.0f} | {b['peak_hbm_bytes'] / 2**30:.1f} |"
        )
    lines += [
        "",
        "Pareto front (no configuration has fewer chips and more tokens/s):",
        "",
        "| Chips | Slice | Remat | Mesh | Step (s) | Tokens/s | Tokens/s per chip |",
        "|---:|---|---|---|---:|---:|---:|",
    ]
    for p in out["pareto"]:
        k = p["knobs"]
        lines.append(
            f"| {p['chips']} | {k['pod.topology']} | {k['training.remat']} | {_mesh(p['mesh'])} | {p['step_time_s']:.3f} | "
            f"{p['tokens_per_s']:,.0f} | {p['tokens_per_s'] / p['chips']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    block_main(PAGE, BLOCK, render, __doc__)
