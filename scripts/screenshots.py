"""Screenshot every dashboard page at 1400 x 900 in headless Chromium, on a freshly seeded database.

    python -m scripts.screenshots [--out tests/artifacts/] [--db PATH]

Without ``--db`` the app starts on an empty temporary database and seeds it as on a first
start, so the shots show what a newcomer sees. The app is started with ``streamlit run app.py`` on a free local port and stopped at the
end. One PNG per page, 1400 px wide and as tall as the page, is written to ``--out`` (default ``tests/artifacts/``,
git-ignored), named ``page_<url path>.png``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scripts.app_server import running_app, wait_for_script_run

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
VIEWPORT = {"width": 1400, "height": 900}
#: url path of each page (Streamlit derives it from the file name; "" is the default page)
PAGES = ["", "idle", "pod", "timeline", "memory", "scaling", "recompilation", "compare", "validation"]


_CONTENT_HEIGHT_JS = """() => {
  const m = document.querySelector('[data-testid="stMain"]') || document.querySelector('section.main');
  const inner = m && (m.querySelector('[data-testid="stMainBlockContainer"]') || m.firstElementChild);
  return inner ? inner.scrollHeight + 120 : document.body.scrollHeight;
}"""


def shoot(url: str, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        for path in PAGES:
            page.goto(f"{url}/{path}")
            wait_for_script_run(page, timeout_ms=180_000, pause_ms=1500)  # plotly draws after the script finishes
            target = out / f"page_{path or 'overview'}.png"
            # Streamlit scrolls inside its main section, so a full-page shot is one viewport high:
            # grow the viewport to the content's height (width stays 1400), shoot, shrink back.
            height = page.evaluate(_CONTENT_HEIGHT_JS)
            page.set_viewport_size({"width": VIEWPORT["width"], "height": max(VIEWPORT["height"], min(int(height), 8000))})
            page.wait_for_timeout(1000)
            page.screenshot(path=str(target))
            page.set_viewport_size(VIEWPORT)
            written.append(target)
            print(target, file=sys.stderr)
        browser.close()
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "artifacts", help="folder for the PNGs")
    ap.add_argument("--db", type=Path, help="an existing database (default: a new temporary one, seeded by the app)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db_path = args.db
        if db_path is None:
            db_path = Path(tmp) / "screenshots.duckdb"
        with running_app(db_path, Path(tmp) / "streamlit.log") as url:
            shoot(url, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
