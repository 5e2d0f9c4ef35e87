"""The convergence tasks' fits and leave-one-out errors, as the table in docs/model.md.

    python -m scripts.convergence_table            # print the table
    python -m scripts.convergence_table --write    # put it into docs/model.md
"""

from __future__ import annotations

from engine.convergence import load_tasks
from scripts.docs_blocks import DOCS, block_main
from scripts.fit_convergence import fits

PAGE = DOCS / "model.md"
BLOCK = "convergence-table"
HEADER = (
    "| task | RCP points (batches) | E_min (samples) | B_crit (samples) | in-sample median / worst | left out median / worst |",
    "| --- | --- | --- | --- | --- | --- |",
)


def _pct(errors: list[float]) -> str:
    a = sorted(abs(x) for x in errors)
    return f"{100 * a[len(a) // 2]:.1f}% / {100 * a[-1]:.1f}%"


def table() -> str:
    tasks = load_tasks()
    rows = list(HEADER)
    for key, r in fits().items():
        b = r["batches"]
        rows.append(
            f"| `{key}` | {len(b)} ({b[0]:,.0f} to {b[-1]:,.0f}) | {tasks[key].model.e_min_samples:,.0f} | "
            f"{tasks[key].model.b_crit_samples:,.0f} | {_pct(r['in_sample'])} | {_pct(r['loo'])} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    block_main(PAGE, BLOCK, table, __doc__)
