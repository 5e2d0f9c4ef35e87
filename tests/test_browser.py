"""The whole dashboard in a real browser: headless Chromium driven by Playwright.

Starts ``streamlit run app.py`` on a free local port against a database in tmp_path, visits every
page, fails on any Streamlit exception box, runs one what-if simulation end to end, and saves a
screenshot per page to tests/artifacts/ (git-ignored).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scripts.app_server import AppDidNotStart, running_app, wait_for_script_run

from tests.real_runs import LABELS

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# url path of each page (Streamlit derives it from the file name) and a text the page must show
PLOT = '[data-testid="stPlotlyChart"] .main-svg'
PAGES = [
    ("", "Overview", PLOT),
    ("idle", "Idle time", PLOT),
    ("pod", "Pod", PLOT),
    ("timeline", "Timeline", PLOT),
    ("memory", "Memory", PLOT),
    ("scaling", "Scaling", PLOT),
    ("recompilation", "Recompilation", PLOT),
    ("compare", "Compare / what-if", '[data-testid="stForm"]'),
]

pytestmark = pytest.mark.browser

if not CHROMIUM.exists():
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but /usr/bin/chromium is missing: the browser tests must run in CI", pytrace=False)
    pytest.skip("no /usr/bin/chromium (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory, real_db):
    """The dashboard on a copy of the real runs (tests/real_runs.py); the newest, shown first, has
    link load, a compile log, a memory timeline and advice."""
    tmp = tmp_path_factory.mktemp("browser")
    db_path = real_db.copy(tmp / "browser.duckdb").path
    try:
        with running_app(db_path, tmp / "streamlit.log", timeout_s=60) as url:
            yield url
    except AppDidNotStart as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 2000})
        yield pg
        browser.close()


def _settle(pg, selector: str | None = None) -> None:
    """Wait until the page's key element is drawn and Streamlit has finished running the script."""
    if selector:
        pg.wait_for_selector(selector, timeout=60_000)
    wait_for_script_run(pg, timeout_ms=60_000)


def _no_exception(pg, where: str) -> None:
    boxes = pg.locator('[data-testid="stException"]')
    assert boxes.count() == 0, f"{where}: {boxes.first.inner_text()}"


@pytest.mark.parametrize(("path", "heading", "selector"), PAGES)
def test_every_page_renders_without_exception(server, page, path, heading, selector):
    page.goto(f"{server}/{path}")
    _settle(page, selector)
    page.get_by_role("heading", name=heading).first.wait_for(timeout=30_000)
    _no_exception(page, path or "overview")
    page.screenshot(path=str(ARTIFACTS / f"page_{path or 'overview'}.png"), full_page=True)


def test_what_if_simulation_end_to_end(server, page, real_db):
    page.goto(f"{server}/compare")
    _settle(page, '[data-testid="stForm"]')
    topology = page.get_by_label("Topology")
    topology.fill("4x4x4")
    page.get_by_label("Global batch").fill("1024")
    page.get_by_role("button", name="Simulate").click()
    # The new 64-chip run becomes the comparison once it is simulated and stored.
    chip = real_db.results[LABELS[-1]].facts.chip  # the newest run is the Compare page's base
    page.get_by_text(f"(64 x {chip.removeprefix('tpu-')}) against base").wait_for(timeout=120_000)
    _settle(page, PLOT)
    _no_exception(page, "compare after what-if")
    assert page.locator('[data-testid="stMetric"]').count() >= 5
    page.screenshot(path=str(ARTIFACTS / "what_if_result.png"), full_page=True)


def test_clicking_a_slice_in_the_grid_opens_its_torus(server, page, real_db):
    """On a two-slice run the Pod page opens on slice 0; a click on the second cell opens slice 1 and puts it in the URL."""
    run_id = real_db.run_ids["multi_slice"]
    page.goto(f"{server}/pod?run={run_id}")
    _settle(page, PLOT)
    page.get_by_role("heading", name="Slice 0").wait_for(timeout=30_000)
    cell = page.locator('[data-testid="stPlotlyChart"]').first.locator(".scatterlayer .trace").first.locator(".point").nth(1)
    box = cell.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.get_by_role("heading", name="Slice 1").wait_for(timeout=60_000)
    _settle(page, PLOT)
    _no_exception(page, "pod after a slice click")
    assert "slice=1" in page.url
    page.screenshot(path=str(ARTIFACTS / "pod_slice_clicked.png"), full_page=True)
