"""Time to interactive of every dashboard page in headless Chromium, on a given database.

A script, not a test: ``python -m benchmarks.bench_pages_browser --db PATH [--repeat N] [--run ID]``
(e.g. the file ``bench_dashboard.py --db PATH`` built: 4,096 chips x 1,000 steps, and the
50,944-chip summary run). Starts ``streamlit run`` on a free local port (scripts/app_server.py)
and opens each page in a fresh tab, reporting for each view the seconds until the title is drawn
(``h1``), and until everything is drawn (``ready``: the script has finished, no element still
waits for its code, every chart has drawn). The first pass over the pages, just after the server starts, includes the views' imports and
cold caches (``first view``); later rounds are warm. Then, on a freshly started server, it moves page
to page by the sidebar in one tab, as a user does, and reports each page until every chart on it is
drawn (``sidebar``: Streamlit's and Plotly's code are loaded once, by the first page). The same is measured for a one-chart Streamlit
app (``floor``): what Streamlit and Plotly cost in this browser on this machine before Podscope
does anything.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from scripts.app_server import running_app

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["", "idle", "pod", "timeline", "memory", "scaling", "recompilation", "compare"]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
#: drawn: the title is there, the script has finished, no element still waits for its code (Streamlit shows a
#: skeleton while a lazily loaded component, such as the Plotly chart's, arrives) and every chart has its SVG
_READY_JS = """() => {
  const w = document.querySelector('[data-testid="stStatusWidget"]');
  if (!document.querySelector('h1') || (w && /Stop|Running/.test(w.innerText))) return false;
  if (document.querySelector('[data-testid*="keleton"]')) return false;
  return [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].every(c => c.querySelector('.main-svg'));
}"""
_FLOOR_APP = """import plotly.graph_objects as go
import streamlit as st
st.title("Floor")
st.plotly_chart(go.Figure(go.Scatter(x=[0, 1], y=[0, 1])))
"""


def view(browser, url: str) -> tuple[float, float]:
    """(seconds to the title, seconds until everything is drawn) of one fresh tab."""
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    t0 = time.perf_counter()
    pg.goto(url)
    pg.wait_for_selector("h1", timeout=60_000)
    h1 = time.perf_counter() - t0
    pg.wait_for_timeout(100)  # let the script-running indicator appear
    pg.wait_for_function(_READY_JS, timeout=60_000)
    ready = time.perf_counter() - t0
    pg.close()
    return h1, ready


#: the title each page shows (what a sidebar click waits for)
TITLES = {"": "Overview", "idle": "Idle time", "pod": "Pod", "timeline": "Timeline", "memory": "Memory", "scaling": "Scaling",
          "recompilation": "Recompilation", "compare": "Compare / what-if"}  # fmt: skip
_TITLE_JS = "(t) => { const h = document.querySelector('h1'); return !!h && h.innerText.trim() === t; }"


def navigate(url: str, query: str, rounds: int) -> None:
    """Page to page by the sidebar, as a user moves (one tab: Streamlit and Plotly's code load once).

    Times each click until the page's title is shown and everything on it is drawn (as ``ready`` above).
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        pg.goto(f"{url}/{query}")
        pg.wait_for_function(_READY_JS, timeout=60_000)
        for r in range(rounds):
            attempt = "first view" if r == 0 else f"view {r + 1}"
            for path in [*PAGES[1:], PAGES[0]]:
                link = pg.locator('[data-testid="stSidebarNav"] a').filter(has_text=TITLES[path]).first
                t0 = time.perf_counter()
                link.click()
                pg.wait_for_function(_TITLE_JS, arg=TITLES[path], timeout=60_000)
                pg.wait_for_timeout(100)  # let the script-running indicator appear
                pg.wait_for_function(_READY_JS, timeout=60_000)
                ready = time.perf_counter() - t0
                print(f"{'sidebar':9s} {attempt:11s} {path or 'overview':14s} ready {ready:5.2f} s  (load {os.getloadavg()[0]:.1f})", flush=True)
        browser.close()


def measure(url: str, paths: list[str], rounds: int, label: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        for r in range(rounds):
            attempt = "first view" if r == 0 else f"view {r + 1}"
            for path in paths:
                h1, ready = view(browser, f"{url}/{path}")
                name = path.split("?")[0] or "overview"
                print(f"{label:9s} {attempt:11s} {name:14s} h1 {h1:5.2f} s  ready {ready:5.2f} s  (load {os.getloadavg()[0]:.1f})", flush=True)
        browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--repeat", type=int, default=2, help="rounds over the pages (the first is the first view)")
    ap.add_argument("--run", type=int, help="the run to show (?run=ID); default: the one the dashboard opens on")
    ap.add_argument("--no-floor", action="store_true", help="skip the one-chart Streamlit app")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    query = f"?run={args.run}" if args.run else ""
    with tempfile.TemporaryDirectory() as tmp:
        with running_app(Path(args.db).resolve(), Path(tmp) / "streamlit.log") as url:
            measure(url, [p + query for p in PAGES], args.repeat, "podscope")
        with running_app(Path(args.db).resolve(), Path(tmp) / "streamlit-nav.log") as url:
            navigate(url, query, args.repeat)
        if not args.no_floor:
            app = Path(tmp) / "floor.py"
            app.write_text(_FLOOR_APP)
            with running_app(Path(tmp) / "unused.duckdb", Path(tmp) / "floor.log", app=app) as url:
                measure(url, [""], args.repeat + 2, "floor")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
