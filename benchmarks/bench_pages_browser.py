"""Time to interactive of every dashboard page in headless Chromium, on a given database.

A script, not a test: ``python -m benchmarks.bench_pages_browser --db PATH`` (e.g. the file
``bench_dashboard.py --db PATH`` built: 4,096 chips x 1,000 steps). Starts ``streamlit run``
on a free local port, opens each page in a fresh tab and reports the seconds until its key
element is drawn and the script has finished (first view, cold cache; then a second view).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["", "idle", "pod", "timeline", "memory", "scaling", "recompilation", "compare"]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
_IDLE_JS = """() => {
  const w = document.querySelector('[data-testid="stStatusWidget"]');
  return !!document.querySelector('h1') && (!w || !/Stop|Running/.test(w.innerText));
}"""


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PODSCOPE_DB": str(Path(args.db).resolve()), "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port), "--server.address", "127.0.0.1"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            for attempt in ("first view", "second view"):
                for page_path in PAGES:
                    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
                    t0 = time.perf_counter()
                    pg.goto(f"{url}/{page_path}")
                    pg.wait_for_selector("h1", timeout=60_000)
                    pg.wait_for_timeout(300)  # let the script-running indicator appear
                    pg.wait_for_function(_IDLE_JS, timeout=60_000)
                    print(f"{attempt:12s} {page_path or 'overview':14s} {time.perf_counter() - t0 - 0.3:5.2f} s")
                    pg.close()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
