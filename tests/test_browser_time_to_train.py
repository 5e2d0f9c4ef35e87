"""A newcomer's Scaling page in headless Chromium: on a database the app seeds on first start, the
time-to-train chart is drawn (the bundled batch-scaling sweep) with a curve of at least 3 points and
the critical batch marked."""

from __future__ import annotations

import pytest

from scripts.app_server import AppDidNotStart, running_app, wait_for_script_run
from tests.test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.browser

# The Plotly graph whose title is "Time to train": its largest trace's point count and its shapes.
_TIME_TO_TRAIN_JS = """() => {
  for (const el of document.querySelectorAll('[data-testid="stPlotlyChart"] .js-plotly-plot')) {
    const title = el.layout && el.layout.title && el.layout.title.text;
    if (!title || title.replace(/<[^>]*>/g, '') !== 'Time to train') continue;  // Streamlit bolds titles
    // _fullData: the traces as drawn (data may still hold the base64 typed arrays Streamlit sent)
    const points = Math.max(0, ...el._fullData.filter(t => t.mode === 'lines+markers').map(t => t.x.length));
    return {points: points, shapes: (el.layout.shapes || []).length, svg: el.querySelectorAll('.scatterlayer .point').length};
  }
  return null;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser_ttt")
    try:
        with running_app(tmp / "fresh.duckdb", tmp / "streamlit.log") as url:
            yield url
    except AppDidNotStart as e:
        pytest.fail(str(e))


def test_fresh_scaling_page_draws_time_to_train(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 2400})
            pg.goto(server)  # the first visit seeds the database
            wait_for_script_run(pg, timeout_ms=180_000)
            pg.goto(f"{server}/scaling")
            pg.get_by_role("heading", name="Time and cost to train").wait_for(timeout=60_000)
            wait_for_script_run(pg, timeout_ms=60_000)
            pg.wait_for_function(_TIME_TO_TRAIN_JS, timeout=60_000)
            assert pg.locator('[data-testid="stException"]').count() == 0
            chart = pg.evaluate(_TIME_TO_TRAIN_JS)
            assert chart["points"] >= 3 and chart["svg"] >= 3, chart
            assert chart["shapes"] >= 1, "B_crit is marked"
            pg.screenshot(path=str(ARTIFACTS / "page_scaling_time_to_train.png"), full_page=True)
        finally:
            browser.close()
