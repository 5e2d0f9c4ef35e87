"""Start the real dashboard (``streamlit run app.py``) on a database, on a free local port.

The browser tests and the screenshot script drive the app a user runs, so both start it the same
way: headless, bound to 127.0.0.1, usage statistics off, its output in a log file, and stopped
when the ``with`` block ends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["AppDidNotStart", "free_port", "running_app", "wait_for_script_run"]

ROOT = Path(__file__).resolve().parent.parent


#: Streamlit's root element once the browser is connected and the page's script has run to its end.
#: A freshly loaded page starts in script state "initial", so this never matches a page that has not
#: run yet (the status widget alone does: it says "Running" only some time after a run starts).
_SCRIPT_DONE = '[data-testid="stApp"][data-test-connection-state="CONNECTED"][data-test-script-state="notRunning"]'
_STATUS_IDLE_JS = """() => {
  const w = document.querySelector('[data-testid="stStatusWidget"]');
  return !w || !/Stop|Running/.test(w.innerText);
}"""


def wait_for_script_run(page, timeout_ms: int = 90_000, pause_ms: int = 800) -> None:
    """Wait until a Playwright ``page`` of the dashboard has run its script to the end.

    After ``pause_ms`` (time for a widget change to start its rerun), waits for Streamlit's script
    state to be ``notRunning`` on a connected app and for its status widget to be idle, then pauses
    again so charts can draw.
    """
    page.wait_for_timeout(pause_ms)
    page.wait_for_selector(_SCRIPT_DONE, timeout=timeout_ms)
    page.wait_for_function(_STATUS_IDLE_JS, timeout=timeout_ms)
    page.wait_for_timeout(pause_ms)


class AppDidNotStart(RuntimeError):
    """Streamlit did not answer its health check in time; the message carries its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_app(db_path: Path, log_path: Path, timeout_s: float = 90.0, app: Path | None = None) -> Iterator[str]:
    """Run the dashboard (or another Streamlit ``app``, for a benchmark's baseline) on ``db_path``
    and yield its URL once its health check answers."""
    port = free_port()
    env = {**os.environ, "PODSCOPE_DB": str(db_path), "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(app or "app.py"), "--server.headless", "true",
             "--server.port", str(port), "--server.address", "127.0.0.1"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    if time.monotonic() > deadline:
                        raise AppDidNotStart(f"streamlit did not answer on {url} within {timeout_s:.0f} s; log: {log_path.read_text()}") from None
                    time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
