"""The dashboard in headless Chromium at 1400 x 900, on a database the app seeds on first start:
the picked run survives page changes and a reload (URL query parameters), no headline number is cut
off (every metric's scroll width fits its client width) or left raw, and the Scaling page draws the
time to train of the bundled batch-scaling sweep with the critical batch marked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.app_server import AppDidNotStart, running_app, wait_for_script_run
from tests.test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parent.parent
VIEWPORT = {"width": 1400, "height": 900}
METRIC_PAGES = ["", "idle", "pod", "memory", "recompilation", "compare", "validation"]

pytestmark = pytest.mark.browser

# Every metric value (and anything inside it) whose content is wider than its box: a cut-off number.
_TRUNCATED_JS = """() => {
  const out = [];
  for (const m of document.querySelectorAll('[data-testid="stMetricValue"]')) {
    for (const el of [m, ...m.querySelectorAll('*')]) {
      if (el.scrollWidth > el.clientWidth + 1) { out.push(m.innerText + ' (' + el.scrollWidth + ' > ' + el.clientWidth + ')'); break; }
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser_ux")
    try:
        with running_app(tmp / "fresh.duckdb", tmp / "streamlit.log") as url:
            yield url
    except AppDidNotStart as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport=VIEWPORT)
        pg.goto(server)  # the first visit seeds the database
        wait_for_script_run(pg, timeout_ms=180_000)
        yield pg
        browser.close()


def _sidebar_run(pg) -> str:
    return pg.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"] input[role="combobox"]').first.input_value()


def _pick(pg, run: str) -> None:
    pg.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"] button[aria-label="Open"]').first.click()
    # the list draws only the options in view (a fresh database holds ~30 runs): type to bring #run up
    pg.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"] input[role="combobox"]').first.fill(f"#{run} ")
    pg.get_by_role("option", name=re.compile(rf"^#{run} ")).click()
    wait_for_script_run(pg)
    assert f"#{run} " in _sidebar_run(pg)


def test_picked_run_survives_navigation_and_reload(server, page):
    page.goto(server)
    wait_for_script_run(page)
    _pick(page, "4")
    assert re.search(r"[?&]run=4\b", page.url), page.url
    page.locator('[data-testid="stSidebarNav"] a', has_text="Idle time").click()
    wait_for_script_run(page)
    assert "/idle" in page.url and "#4 " in _sidebar_run(page)
    page.wait_for_function("() => /[?&]run=4\\b/.test(location.search)", timeout=10_000)
    page.reload()
    wait_for_script_run(page)
    assert "#4 " in _sidebar_run(page), "the run was lost on reload"
    page.goto(f"{server}/memory?run=7")  # a shared link
    wait_for_script_run(page)
    assert "#7 " in _sidebar_run(page)


ALL_PAGES = ["", "idle", "pod", "timeline", "memory", "scaling", "recompilation", "compare", "plan", "validation"]

# The headline text a person reads first: titles, headers, metric labels and values, alert boxes, and the choices
# the page's forms show.
_HEADLINES_JS = """() => {
  const sel = 'h1, h2, h3, [data-testid="stMetricLabel"], [data-testid="stMetricValue"], [data-testid="stAlert"]';
  const texts = [...document.querySelectorAll(sel)].map(e => e.innerText.trim());
  const choices = [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stSelectbox"] input')].map(i => i.value.trim());
  return [...texts, ...choices].filter(t => t.length > 0);
}"""
#: a raw identifier (snake_case of three words or more, e.g. tokens_per_s_per_chip) or a figure with more than
#: four significant decimals (0.0088 is rounded, 1.23456 is not) or a thousands group with decimals (4,247.57 ms):
#: what a page should have rounded or named
_RAW_ID = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+){2,}\b")
_UNROUNDED = re.compile(r"(?<![\d.])(?:[1-9]\d*\.\d{4,}|0\.0*[1-9]\d{4,})|\d,\d{3}\.\d{2}\b")


def _assert_no_metric_cut_off(pg, path: str, run: str) -> None:
    assert pg.locator('[data-testid="stMetricValue"]').count() > 0 or path == "compare"
    cut = pg.evaluate(_TRUNCATED_JS)
    assert not cut, f"{path or 'overview'} run {run or 'default'}: {cut}"


@pytest.mark.parametrize("path", ALL_PAGES)
def test_headline_text_has_no_raw_ids_or_unrounded_figures(server, page, path):
    """Every page on the default run: no raw ids or unrounded figures in its headline text, and on the pages with
    metrics no metric cut off."""
    page.goto(f"{server}/{path}")
    wait_for_script_run(page)
    texts = page.evaluate(_HEADLINES_JS)
    assert texts, f"{path or 'overview'}: no headline text found"
    raw = [t for t in texts if _RAW_ID.search(t.replace("`", ""))]
    unrounded = [t for t in texts if _UNROUNDED.search(t)]
    assert not raw, f"{path or 'overview'}: raw ids in {raw}"
    assert not unrounded, f"{path or 'overview'}: unrounded figures in {unrounded}"
    if path in METRIC_PAGES:
        _assert_no_metric_cut_off(page, path, "")


@pytest.mark.parametrize("path", [p for p in METRIC_PAGES if p != "validation"])
def test_no_metric_is_truncated_at_1400px(server, page, path):
    """The 128-chip 32B run, with the widest numbers, picked in the sidebar as a user would (the Validation page
    shows no run: the default run's visit above covers it)."""
    page.goto(f"{server}/{path}")
    wait_for_script_run(page)
    _pick(page, "4")
    _assert_no_metric_cut_off(page, path, "4")


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


def test_fresh_scaling_page_draws_time_to_train(server, page):
    ARTIFACTS.mkdir(exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 2400})
    try:
        page.goto(f"{server}/scaling")
        page.get_by_role("heading", name="Time and cost to train").wait_for(timeout=60_000)
        wait_for_script_run(page, timeout_ms=60_000)
        page.wait_for_function(_TIME_TO_TRAIN_JS, timeout=60_000)
        assert page.locator('[data-testid="stException"]').count() == 0
        chart = page.evaluate(_TIME_TO_TRAIN_JS)
        assert chart["points"] >= 3 and chart["svg"] >= 3, chart
        assert chart["shapes"] >= 1, "B_crit is marked"
        page.screenshot(path=str(ARTIFACTS / "page_scaling_time_to_train.png"), full_page=True)
    finally:
        page.set_viewport_size(VIEWPORT)
