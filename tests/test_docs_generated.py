"""The docs' generated tables match what their scripts produce from the current code.

Each table sits between marker comments in a docs page (``scripts/docs_blocks.py``) and is
written by the script that measures it. When the engine, the calibration or the reference file
changes the numbers, these tests fail until the script is run again with ``--write`` (or, for
validation, ``python -m scripts.plot_validation``). Performance tables are not checked: they
record a machine and a date.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.validation import run_validation
from scripts import convergence_table, idle_table, link_fault_table, module_listing, plot_validation, tpu_table
from scripts.docs_blocks import read_block

ROOT = Path(__file__).resolve().parent.parent


def test_validation_tables_match_the_current_validation():
    for name, text in plot_validation.tables(run_validation()).items():
        assert read_block(plot_validation.PAGE, name) == text, (
            f"docs/validation.md block {name!r} is stale: run `python -m scripts.plot_validation`"
        )


@pytest.mark.slow
def test_idle_table_matches_the_bundled_scenarios_and_the_fixes_act():
    out = subprocess.run([sys.executable, "-m", "scripts.idle_table"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert read_block(idle_table.PAGE, idle_table.BLOCK) == out.stdout, (
        "docs/model.md idle table is stale: run `python -m scripts.idle_table --write`"
    )
    rows = out.stdout.strip().splitlines()[len(idle_table.HEADER):]
    assert len(rows) == 10 and all(r.startswith("| ") and r.endswith(" |") for r in rows)
    # the mechanisms still act: the fix for each cause removes (most of) it
    assert "input wait" in rows[6] and "-> 0.0%" in rows[6]
    assert "279 -> 3 -> 0 recompiles" in rows[7]


def test_link_fault_table_matches_the_engine_and_the_faults_act():
    text = link_fault_table.table()
    assert read_block(link_fault_table.PAGE, link_fault_table.BLOCK) == text, (
        "docs/model.md link-fault table is stale: run `python -m scripts.link_fault_table --write`"
    )
    rows = {r.split(" | ")[0].lstrip("| "): r.split(" | ")[1:] for r in text.strip().splitlines()[len(link_fault_table.HEADER):]}
    none, x_slow, z_slow = rows["none"], rows["x link at 0.5 (fsdp)"], rows["z link at 0.5 (tensor)"]
    ms = lambda cell: float(cell.split()[0].replace(",", ""))  # noqa: E731
    assert ms(x_slow[0]) > ms(none[0]) and x_slow[1] == none[1]  # an x fault slows the FSDP gathers only
    assert ms(z_slow[1]) == 2 * ms(none[1]) and z_slow[0] == none[0]  # a z link at half doubles the TP all-reduces
    assert z_slow[3] == none[3]  # ... which the layer's compute still hides: the step does not move


def test_convergence_table_matches_the_bundled_fits():
    text = convergence_table.table()
    assert read_block(convergence_table.PAGE, convergence_table.BLOCK) == text, (
        "docs/model.md convergence table is stale: run `python -m scripts.convergence_table --write`"
    )
    assert "`mlperf-resnet50`" in text and "`mlperf-llama31-405b`" in text


def test_tpu_tables_match_the_committed_bundles():
    text = tpu_table.render()
    assert read_block(tpu_table.PAGE, tpu_table.BLOCK) == text, (
        "docs/hlo.md TPU tables are stale: run `python -m scripts.tpu_table --write`"
    )
    flops = [r for r in text.splitlines() if r.startswith("| transformer_dp_v5e4 |")][0]
    assert "(-0.0000%)" in flops or "(+0.0000%)" in flops  # Podscope's count is XLA's on a loop-free module


def test_module_listing_names_every_module_with_its_docstring():
    text = module_listing.render()
    assert read_block(module_listing.PAGE, module_listing.BLOCK) == text, (
        "docs/architecture.md module listing is stale: run `python -m scripts.module_listing --write`"
    )
    listed = {line.split("`")[1] for line in text.splitlines()[2:]}
    assert {"engine/model/step.py", "engine/comm/collectives.py", "profiler/schema.py", "views/figures.py"} <= listed
    assert "(no docstring)" not in text, "every module says what it is for in its docstring"


def test_a_block_that_is_missing_is_an_error(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("no markers here\n")
    with pytest.raises(KeyError, match="no generated block 'x'"):
        read_block(page, "x")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_between_the_readme_and_the_docs_resolve():
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", dest.read_text(), re.M)
                if anchor not in {_slug(h) for h in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_worked_plan_matches_the_current_engine():
    from scripts import plan_doc

    assert read_block(plan_doc.PAGE, plan_doc.BLOCK) == plan_doc.render(), (
        "docs/planner.md worked plan is stale: run `python -m scripts.plan_doc --write`"
    )
