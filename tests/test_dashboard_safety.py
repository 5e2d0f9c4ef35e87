"""Dashboard safety: localhost-only config, capped uploads, no usage stats, and a clear busy state."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")


def test_streamlit_config_listens_on_localhost_caps_uploads_and_sends_no_stats():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert 0 < config["server"]["maxUploadSize"] <= 1024  # MB
    assert config["server"].get("enableXsrfProtection", True) is True
    assert config["browser"]["gatherUsageStats"] is False


def test_config_keys_are_ones_streamlit_knows():
    import streamlit.config as stconfig

    options = stconfig.get_config_options(force_reparse=True)
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    for section, table in config.items():
        for key in table:
            assert f"{section}.{key}" in options, f"{section}.{key} is not a Streamlit option"


def test_page_shows_busy_state_while_another_process_holds_the_database(writable_db, monkeypatch):
    """On a copy of the real runs (the holder opens it read-write)."""
    import profiler.connection as connection

    path = writable_db.path
    monkeypatch.setattr(connection, "LOCK_RETRY_S", 0.3)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(60)", str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        at = AppTest.from_file(APP, default_timeout=60).run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.warning and "Database busy" in at.warning[0].value
    finally:
        holder.kill()
        holder.wait()
    at.button(key="podscope_busy_retry").click().run()
    # the page renders again (an advisor finding may show as a warning; the busy state must not)
    assert not at.exception and not any("Database busy" in w.value for w in at.warning)
    assert any(m.label == "MFU" for m in at.metric)
