"""Shared dashboard plumbing: the database handle, cached queries, the run picker.

Pages call :func:`query` with a profiler query function; results are cached per
(database, data version, arguments) and the data version changes whenever a run
is added or deleted, so caches never serve a stale run list.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import io
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
import typing
from typing import Any

import pandas as pd

import streamlit as st

from engine.data_files import DATA_DIR
from engine.errors import PodscopeError
from profiler import queries, sampled
from profiler import format as fmt
from profiler.connection import DatabaseDamagedError
from profiler.store import Database, DatabaseBusyError, resolve_db_path

__all__ = [
    "get_db",
    "data_version",
    "query",
    "run_picker",
    "run_label",
    "select_run",
    "URL_PARAMS",
    "what_if_name",
    "seed_if_empty",
    "invalidate",
    "chart",
    "download_csv",
    "export_button",
    "run_context",
    "step_time_range_text",
    "require_events",
    "simulate_variant",
    "simulate_and_store",
    "page_connection",
    "released",
]


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
    module, _, name = fn_name.rpartition(".")
    fn = getattr(importlib.import_module(module), name)
    with _db(path).read() as con:
        return fn(con, *args)


@st.cache_data(show_spinner=False, ttl=2.0)
def _recent_version(path: str) -> tuple[int, int]:
    # Checking the version opens the file (~30 ms on a large database); a page asks many
    # queries per render, so one check serves them all for two seconds. Runs added here
    # call invalidate(); runs added by the CLI show up within two seconds.
    return data_version(_db(path))


def query(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a profiler query function (:mod:`profiler.queries`, :mod:`profiler.steady_state`) through the cache.

    If another process holds the database past the store's lock bound (a very large
    write), the page says so and stops with a Retry button instead of failing.
    """
    path = str(get_db().path)
    try:
        return _cached(path, _recent_version(path), f"{fn.__module__}.{fn.__name__}", args)
    except DatabaseBusyError:
        _busy(Path(path))
    except DatabaseDamagedError as e:
        _damaged(e)


def _damaged(e: DatabaseDamagedError) -> None:
    """Say which file is damaged (or not a database) and what to do, and stop this render; nothing is written."""
    st.error(f"**The database file cannot be used.** {e}")
    st.stop()


def _busy(path: Path) -> None:
    """Say the database is held by another writer, offer Retry, and stop this render."""
    st.warning(
        "Database busy: another process (the CLI or a sweep) is writing a run to "
        f"`{path.name}`. Retry in a moment; nothing is lost."
    )
    st.button("Retry", key="podscope_busy_retry")
    st.stop()


def invalidate() -> None:
    _recent_version.clear()
    _cached.clear()


#: the sweeps seeded on first start: the Scaling page has a scaling curve out of the box, and a
#: time-to-train curve that crosses the critical batch
SEED_SWEEPS = (DATA_DIR / "sweeps" / "strong-scaling-v4.toml", DATA_DIR / "sweeps" / "batch-scaling-v4.toml")
_seed_lock = threading.Lock()


def _say(message: str) -> None:
    """A line in the terminal that runs ``streamlit run`` (the browser shows its own progress)."""
    print(f"podscope: {message}", file=sys.stderr, flush=True)


def seed_database(db: Database, progress: Callable[[float, str], None] | None = None) -> int:
    """Simulate the bundled examples and the bundled sweeps into ``db``; returns the runs stored.

    Prints what it does in the terminal, and calls ``progress(fraction, text)`` for a progress bar.
    The sweeps run in this process (a thread, no worker processes); a point that fails is
    reported and skipped, the examples stay.
    """
    from profiler import api  # only a first start seeds: the import stays off every other page's first view
    from profiler.sweep import run_sweep

    t0 = time.monotonic()
    paths = api.bundled_scenarios()
    sweeps = [s for s in SEED_SWEEPS if s.exists()]
    _say(f"first start: simulating {len(paths)} bundled example scenarios and {len(sweeps)} sweeps into {db.path} (a few seconds)")

    def example(i: int, n: int, path: Any) -> None:
        _say(f"  example {i + 1}/{n}: {path.stem}")
        if progress is not None:
            progress(0.7 * i / n, f"First start: simulating example {i + 1}/{n}: {path.stem}")

    stored = len(api.seed_examples(db, example))
    for k, sweep in enumerate(sweeps):
        _say(f"  sweep {sweep.stem}")

        def sweep_progress(done: int, total: int, message: str, k: int = k, name: str = sweep.stem) -> None:
            if progress is not None:
                progress(0.7 + 0.3 * (k + done / max(total, 1)) / len(sweeps), f"First start: sweep {name}, point {done}/{total}")

        with cf.ThreadPoolExecutor(max_workers=1) as pool:
            result = run_sweep(sweep, db, pool, progress=sweep_progress)
        stored += len(result.stored)
        for point, error in result.failed:
            _say(f"  sweep point {point} failed: {error.splitlines()[0]}")
    _say(f"seeded {stored} runs in {time.monotonic() - t0:.1f} s; the dashboard is ready")
    return stored


def seed_if_empty() -> None:
    """First start: simulate the bundled examples and sweep, with a progress bar, so there is something to see."""
    db = get_db()
    try:
        if db.has_runs():
            return
        with _seed_lock, released():  # two first visits at once seed once; the file is free while seeding
            if db.has_runs():
                return
            bar = st.progress(0.0, text="First start: simulating the bundled example scenarios...")
            seed_database(db, lambda f, text: bar.progress(min(f, 1.0), text=text))
            bar.empty()
        invalidate()
    except DatabaseBusyError:
        return  # another process is writing runs, so there will be something to show; pages say "busy"
    except DatabaseDamagedError as e:
        _damaged(e)  # never seed (write) into a damaged file
    except PodscopeError as e:
        st.error(f"Could not simulate the example runs: {e}")


#: the URL query parameter that carries each picked run, so a link (or a reload) shows the same view
URL_PARAMS = {"run_id": "run", "cmp_id": "vs"}


def run_label(row: Any) -> str:
    """How a run is named in pickers: "#3 llm-1b-v5p-64 (64 x v5p)"."""
    return f"#{row.run_id} {row.name} ({fmt.chips_label(row.chips, row.chip)})"


def _url_run(key: str) -> int | None:
    param = URL_PARAMS.get(key)
    raw = st.query_params.get(param) if param else None
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def remember_run(key: str, run_id: int) -> None:
    """Keep ``run_id`` as the picked run for every page of this session and in the URL."""
    st.session_state[key] = int(run_id)
    param = URL_PARAMS.get(key)
    if param and st.query_params.get(param) != str(run_id):
        st.query_params[param] = str(run_id)


def sync_url() -> None:
    """Put the session's picked runs back into the URL (a page change clears the query string)."""
    for key, param in URL_PARAMS.items():
        value = st.session_state.get(key)
        if value is not None and st.query_params.get(param) != str(value):
            st.query_params[param] = str(value)


def picked_run(ids: list[int], key: str = "run_id", default: int | None = None) -> int:
    """The run to show: just selected, else kept from another page, else from the URL, else ``default``."""
    widget = f"picker_{key}"
    pending = st.session_state.pop(f"select_{key}", None)  # set by select_run() before a rerun
    for candidate in (pending, st.session_state.get(widget), st.session_state.get(key), _url_run(key), default):
        if candidate in ids:
            return int(candidate)
    return ids[0]


def run_picker(key: str = "run_id", label: str = "Run") -> int | None:
    """Sidebar select box over stored runs; returns the chosen run_id (None if there are none).

    The choice follows the user from page to page (session state) and survives a reload or a
    shared link (the ``run`` query parameter). With no choice yet it opens on the run with the
    most to say (:func:`profiler.queries.featured_run`).
    """
    runs = query(queries.list_runs)
    if runs.empty:
        st.info("No runs yet. Simulate one with `python -m profiler run data/scenarios/<file>.toml` or the what-if form.")
        return None
    ids = [int(i) for i in runs["run_id"]]
    labels = {int(r.run_id): run_label(r) for r in runs.itertuples()}
    widget = f"picker_{key}"
    choice = picked_run(ids, key, default=query(queries.featured_run))
    st.session_state[widget] = choice

    def changed() -> None:
        remember_run(key, st.session_state[widget])

    st.sidebar.selectbox(label, ids, format_func=labels.get, key=widget, on_change=changed)
    remember_run(key, choice)
    return int(choice)


_KNOB_NAMES = {
    "pod.chip": "chip", "pod.topology": "topology", "pod.slices": "slices", "training.global_batch": "batch",
    "training.precision": "precision", "training.remat": "remat", "parallelism.data": "data",
    "parallelism.fsdp": "fsdp", "parallelism.tensor": "tensor", "input.prefetch": "prefetch",
    "input.num_parallel_calls": "parallel calls", "sim.trace": "trace", "model.compute_source": "compute source",
}  # fmt: skip


def _dotted(base: dict[str, Any], key: str) -> Any:
    node: Any = base
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def scenario_choices(section: type, key: str) -> tuple[list[Any], Any]:
    """A scenario key's valid values (its ``Literal``, in declaration order) and its default, as
    engine/scenario/ declares them, so a form offers exactly what the engine accepts."""
    field = section.model_fields[key]
    return list(typing.get_args(field.annotation)), field.default


def what_if_name(base: dict[str, Any], overrides: dict[str, Any]) -> str:
    """A variant named by what changed: "llm-1b-v5p-64 · batch 512 → 1024, chip tpu-v4 → tpu-v5p".

    Overrides equal to the base value, or None (a value that follows the others), are not named.
    """
    changes = []
    for key, new in overrides.items():
        if key == "name" or new is None:
            continue
        old = _dotted(base, key)
        if old is not None and str(old) == str(new):
            continue
        label = _KNOB_NAMES.get(key, key.rsplit(".", 1)[-1])
        changes.append(f"{label} {old} → {new}" if old is not None else f"{label} {new}")
    return f"{base.get('name', 'run')} · {', '.join(changes) if changes else 'same settings'}"


def si(value: float, unit: str = "") -> str:
    """A rate for a metric tile: 3 significant digits with k/M/G, so it fits the tile ("255k samples/s")."""
    return fmt.si(value, unit)


def step_time_range_text(summary: dict[str, Any], label: str = "Step time") -> str | None:
    """The run's calibrated step-time range as one caption line, or None (imported and older runs have none).

    The range (summary keys ``step_time_range_s`` and ``step_time_range_basis``, see
    ``profiler/ranges.py``) is how far Podscope was off on comparable published results predicted
    by fits that never saw their chip generation.
    """
    rng = summary.get("step_time_range_s")
    if not rng:
        return None
    basis = summary.get("step_time_range_basis") or {}
    coverage = basis.get("nominal_coverage", 0.8)
    group = basis.get("group", "all")
    return (
        f"{label} likely {fmt.duration_range(rng[0], rng[1])} (a range meant to hold the real "
        f"step time {coverage:.0%} of the time: Podscope's errors on {basis.get('cases', '?')} comparable published "
        f"results ({group}) when their chip generation was left out of the fit)"
    )


def select_run(run_id: int, key: str = "run_id") -> None:
    """Make ``run_id`` the picked run on the next script run (call before ``st.rerun()``)."""
    st.session_state[f"select_{key}"] = run_id


def download_csv(df: pd.DataFrame, file_name: str, key: str, label: str = "Download data (CSV)") -> None:
    """A download button for a figure's data; the CSV is built only when clicked."""
    st.download_button(
        label, data=lambda: df.to_csv(index=False).encode(), file_name=file_name, mime="text/csv", key=key,
        on_click="ignore", icon=":material/download:",
    )  # fmt: skip


def chart(fig: Any, df: pd.DataFrame | None, file_name: str, key: str, **kwargs: Any) -> Any:
    """Draw a Plotly figure and, when its data is given, a CSV download of that data beneath it."""
    out = st.plotly_chart(fig, width="stretch", key=f"chart_{key}", **kwargs)
    if df is not None and not df.empty:
        download_csv(df, file_name, key=f"csv_{key}")
    return out


def _events_parquet(path: str, run_id: int, step0: int, step1: int) -> bytes:
    # A thin export of the run's events for a window; ``profiler export`` (Perfetto, full runs) supersedes it.
    import pyarrow.parquet as pq  # only when the button is clicked

    with _db(path).read() as con:
        table = queries.events_window(con, run_id, step0, step1)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def export_button(run_id: int, step0: int, step1: int, key: str) -> None:
    """Download the run's events of steps [step0, step1] as Parquet (built only when clicked).

    A sampled run's events are its sampled chips' only; the label says so.
    """
    path = str(get_db().path)
    sample = query(sampled.sampled_chips, run_id)
    chips_note = "" if sample is None else f"{len(sample)} sampled chips, "
    st.download_button(
        f"Export trace, {chips_note}steps {step0}-{step1} (Parquet)", data=lambda: _events_parquet(path, run_id, step0, step1),
        file_name=f"run{run_id}_steps{step0}-{step1}.parquet", mime="application/vnd.apache.parquet", key=key,
        on_click="ignore", icon=":material/file_export:",
    )  # fmt: skip


def run_context(title: str, key: str = "run_id") -> tuple[int, dict[str, Any]] | None:
    """Page header: the title, the run picker and the chosen run's summary (None when there is no run)."""
    st.title(title)
    run_id = run_picker(key)
    if run_id is None:
        return None
    try:
        summary = query(queries.run_summary, run_id)
    except PodscopeError as e:
        st.error(f"Cannot read run #{run_id}: {e}")
        return None
    if summary.get("source") == "imported":
        st.caption("Imported trace: numbers the trace does not carry (model, memory, scenario) are shown as n/a.")
    return run_id, summary


def require_events(run_id: int, what: str) -> bool:
    """For a page that draws per-event rows: does the run have them? If not, say why and what to do.

    A run simulated with ``[sim] trace = "summary"`` keeps per-step and per-chip totals (which
    Overview, Idle time, Pod and Compare draw) but no event rows. Returns False after telling
    the user so, with a button that simulates the same scenario again with a full trace.
    """
    scenario = query(queries.run_scenario, run_id)
    if scenario is None or (scenario.get("sim") or {}).get("trace", "full") != "summary":
        return True
    st.info(
        f'Run #{run_id} was simulated with `[sim] trace = "summary"`: it stored per-step and per-chip totals '
        "(Overview, Idle time, Pod and Compare show them) but no individual events, so there is no "
        f"{what}. Simulate it again with a full trace (below, or "
        "`python -m profiler run SCENARIO.toml --set sim.trace=full`) to see it."
    )
    if st.button("Simulate again with a full trace", key=f"full_trace_{run_id}"):
        overrides = {"sim.trace": "full", "name": f"{scenario['name']} [full trace]"}
        summary = simulate_variant(scenario, overrides, source=f"run #{run_id} with a full trace")
        if summary is not None:
            select_run(summary["run_id"])
            st.rerun()
    return False


def simulate_and_store(scenario: Any) -> dict[str, Any]:
    """Simulate a validated scenario and store it; returns the new run's summary.

    The simulation can take seconds to minutes, and while this process has the DuckDB file
    open no other process can open it (a CLI writer gives up after the store's retry bound).
    So it runs with the page's connection :func:`released`; the file is opened again only
    for the write (one transaction for a run of up to ``EVENT_CHUNK_ROWS`` events) and then
    for the reads that follow.

    Raises
    ------
    PodscopeError
        As :func:`profiler.streamed_write.simulate_and_write` does.
    """
    from profiler.streamed_write import simulate_and_write

    with released():
        run_id, _ = simulate_and_write(get_db(), scenario)
    invalidate()
    return query(queries.run_summary, run_id)


def simulate_variant(base: dict[str, Any], overrides: dict[str, Any], source: str) -> dict[str, Any] | None:
    """Validate ``base`` with dotted-key ``overrides``, simulate and store it; returns the new run's summary.

    Problems are shown on the page (a ScenarioError lists every bad key) and give None, never an exception.
    """
    from engine import ScenarioError, scenario_from_dict
    from engine.scenario import apply_overrides

    try:
        scenario = scenario_from_dict(apply_overrides(base, overrides), source=source)
        summary = simulate_and_store(scenario)
    except ScenarioError as e:
        st.error("\n\n".join(f"**{k or 'scenario'}**: {m}" for k, m in e.problems))
        return None
    except PodscopeError as e:
        st.error(str(e))
        return None
    return summary


class _HeldConnection:
    """The connection a page render keeps open, closable for a long computation and reopenable."""

    def __init__(self, db: Database):
        self.db = db
        self._cm: Any = None

    def open(self) -> None:
        if self._cm is None and self.db.path.exists():
            cm = self.db.read()
            cm.__enter__()  # DatabaseBusyError propagates: nothing is held then
            self._cm = cm

    def close(self) -> None:
        cm, self._cm = self._cm, None
        if cm is not None:
            cm.__exit__(None, None, None)


#: the held connection of the render running on this thread (Streamlit runs each session's
#: script on its own thread), so released() only ever closes its own render's connection
_render = threading.local()


@contextmanager
def page_connection() -> Iterator[None]:
    """Hold one connection open while a page renders.

    Opening a DuckDB file costs ~35 ms, and a page asks several queries, each on its own short
    connection. While one connection is open, DuckDB reuses the open database for every further
    connection in the process (~0.2 ms). The file is released when the page is drawn, so the CLI
    can still write between renders (it retries briefly on the lock, as it always has), and
    during any long computation the page wraps in :func:`released` (a what-if simulation).
    """
    held = _HeldConnection(get_db())
    try:
        held.open()
    except DatabaseBusyError:
        _busy(held.db.path)
    except DatabaseDamagedError as e:
        _damaged(e)
    _render.held = held
    try:
        yield
    finally:
        _render.held = None
        held.close()


@contextmanager
def released() -> Iterator[None]:
    """Close this render's held connection for the block, and reopen it after.

    Inside the block this thread holds no connection, so another process can open the file
    (other sessions' renders may still hold theirs briefly). Queries inside the block open
    their own short connections.
    """
    held = getattr(_render, "held", None)
    if held is not None:
        held.close()
    try:
        yield
    finally:
        if held is not None:
            try:
                held.open()
            except DatabaseBusyError:
                pass  # the page's reads each open (and wait for) their own connection instead
