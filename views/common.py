"""Shared dashboard plumbing: the database handle, cached queries, the run picker.

Pages call :func:`query` with a profiler query function; results are cached per
(database, data version, arguments) and the data version changes whenever a run
is added or deleted, so caches never serve a stale run list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from engine.errors import PodscopeError
from profiler import api, queries
from profiler.store import Database, DatabaseBusyError, resolve_db_path

__all__ = ["get_db", "data_version", "query", "run_picker", "select_run", "seed_if_empty", "invalidate"]


@st.cache_resource
def _db(path: str) -> Database:
    # This process writes too (what-if runs), so reads must use the same DuckDB settings.
    return Database(path, read_only_reads=False)


def get_db() -> Database:
    return _db(str(resolve_db_path()))


def data_version(db: Database) -> tuple[int, int]:
    """(max run_id, run count): changes whenever a run is added or deleted."""
    with db.read() as con:
        row = con.execute("SELECT coalesce(max(run_id), 0), count(*) FROM runs").fetchone()
    return int(row[0]), int(row[1])


@st.cache_data(show_spinner=False, max_entries=256)
def _cached(path: str, version: tuple[int, int], fn_name: str, args: tuple[Any, ...]) -> Any:
    fn = getattr(queries, fn_name)
    with _db(path).read() as con:
        return fn(con, *args)


def query(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a :mod:`profiler.queries` function through the cache.

    If another process holds the database past the store's lock bound (a very large
    write), the page says so and stops with a Retry button instead of failing.
    """
    db = get_db()
    try:
        return _cached(str(db.path), data_version(db), fn.__name__, args)
    except DatabaseBusyError:
        st.warning(
            "Database busy: another process (the CLI or a sweep) is writing a run to "
            f"`{db.path.name}`. Retry in a moment; nothing is lost."
        )
        st.button("Retry", key="podscope_busy_retry")
        st.stop()


def invalidate() -> None:
    _cached.clear()


def seed_if_empty() -> None:
    """First start: simulate the bundled examples, with a progress bar, so there is something to see."""
    db = get_db()
    try:
        if db.has_runs():
            return
        bar = st.progress(0.0, text="First start: simulating the bundled example scenarios...")

        def progress(i: int, n: int, path: Any) -> None:
            bar.progress(i / n, text=f"Simulating example {i + 1}/{n}: {path.stem}")

        api.seed_examples(db, progress)
        bar.empty()
        invalidate()
    except DatabaseBusyError:
        return  # another process is writing runs, so there will be something to show; pages say "busy"
    except PodscopeError as e:
        st.error(f"Could not simulate the example runs: {e}")


def run_picker(key: str = "run_id", label: str = "Run") -> int | None:
    """Sidebar select box over stored runs; returns the chosen run_id (None if there are none)."""
    runs = query(queries.list_runs)
    if runs.empty:
        st.info("No runs yet. Simulate one with `python -m profiler run data/scenarios/<file>.toml` or the what-if form.")
        return None
    ids = [int(i) for i in runs["run_id"]]
    labels = {int(r.run_id): f"#{r.run_id} {r.name} ({r.chips} x {r.chip})" for r in runs.itertuples()}
    widget = f"picker_{key}"
    pending = st.session_state.pop(f"select_{key}", None)  # set by select_run() before a rerun
    if pending in ids:
        st.session_state[widget] = pending
    elif st.session_state.get(widget) not in ids:
        st.session_state[widget] = ids[0]
    choice = st.sidebar.selectbox(label, ids, format_func=labels.get, key=widget)
    st.session_state[key] = choice
    return int(choice)


def select_run(run_id: int, key: str = "run_id") -> None:
    """Make ``run_id`` the picked run on the next script run (call before ``st.rerun()``)."""
    st.session_state[f"select_{key}"] = run_id
