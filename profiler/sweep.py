"""Parameter sweeps: a base scenario, a grid and random samples over dotted keys, run on any Executor.

A sweep file (TOML)::

    name = "strong-scaling-v4"
    base = "../scenarios/resnet50-v4-128.toml"   # relative to the sweep file
    [set]                                       # fixed overrides for every point
    "training.steps" = 20
    [grid]                                      # cartesian product
    "training.precision" = ["bf16", "fp32"]
    [zip]                                       # lists varied together (equal lengths)
    "pod.topology"     = ["2x2x1", "2x2x2", "4x4x4"]
    "parallelism.data" = [4, 8, 64]
    [random]                                    # extra random points (seeded)
    samples = 4
    seed = 0
    [random.keys]
    "training.global_batch" = { choices = [4096, 8192] }
    "sim.jitter_frac" = { low = 0.0, high = 0.05 }

Workers (a process pool here, Dask workers on a cluster: ``distributed.Client(...).get_executor()``)
simulate one point each and write it to its own folder of Arrow IPC files under a temporary
name, renamed when complete (IPC, not Parquet: a point's dozen small tables write ~3x and read
~8x faster, which matters at tens of summary-mode points per second); one writer (this process) loads finished points into DuckDB, so
workers never contend for the database lock. A point is identified by a hash of its full
scenario, so re-running the sweep skips points already stored (resumable), and a point whose
simulation fails is recorded in ``sweep_failures`` with its error while the sweep goes on.

With ``xla_flags`` (``podscope sweep FILE --xla``) each worker first compiles its point's JAX program for the
point's chip and topology with the TPU compiler, as ``run --xla`` does, and the stored run takes XLA's HBM peak
and verdict (``hbm_source = "xla"``): workers need ``podscope[tpu]``. The compile options are part of a point's
id, and a sweep stored one way is not resumed the other.
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import hashlib
import itertools
import json
import os
import re
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine import RunFacts, RunResult, Trace, apply_overrides, scenario_from_dict, simulate
from engine.errors import InputError, PodscopeError, ProfilerError, ScenarioError
from engine.jsonable import json_default
from engine.scenario import MAX_SCENARIO_BYTES, parse_toml
from engine.scenario.names import derived_name, name_problem
from engine.scenario.validation_messages import UNKNOWN_KEY

from .schema import CREATE_TABLE_SQL
from .store import Database, write_runs

__all__ = [
    "SweepSpec",
    "SweepPoint",
    "SweepResult",
    "load_sweep",
    "expand_points",
    "run_sweep",
    "simulate_point",
    "make_executor",
    "default_out_dir",
]

_STORED_POINT_IDS_SQL = (
    "SELECT json_extract_string(summary, '$.sweep.point'), run_id FROM runs "
    "WHERE json_extract_string(summary, '$.sweep.name') = $sweep"
)
_STORED_POINTS_SQL = (
    "SELECT json_extract_string(summary, '$.sweep.point') FROM runs WHERE json_extract_string(summary, '$.sweep.name') = $sweep"
)
_STORED_HBM_SOURCES_SQL = (
    "SELECT DISTINCT coalesce(json_extract_string(summary, '$.hbm_source'), 'podscope'), "
    "coalesce(CAST(json_extract(summary, '$.hbm_xla_flags') AS VARCHAR), '{}') FROM runs WHERE json_extract_string(summary, '$.sweep.name') = $sweep"
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)  # `samples = true` is not 1


class RandomKey(_Model):
    """One randomly sampled key: ``choices`` (uniform), or a uniform range ``low``..``high`` (``log`` for log-uniform)."""

    choices: list[Any] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False

    @model_validator(mode="after")
    def _one_form(self) -> "RandomKey":
        if (self.choices is None) == (self.low is None or self.high is None):
            raise ValueError("give either choices = [...] or both low and high")
        if self.low is not None and self.high is not None and (self.high < self.low or (self.log and self.low <= 0)):
            raise ValueError("need low <= high (and low > 0 for log)")
        return self


class RandomSection(_Model):
    samples: Annotated[int, Field(ge=0, le=100_000)] = 0
    seed: Annotated[int, Field(ge=0)] = 0
    keys: dict[str, RandomKey] = {}


class SweepSpec(_Model):
    """A validated sweep file (see the module docstring)."""

    name: str  # checked by the one run-name rule (engine.scenario.names)
    base: str
    set: dict[str, Any] = {}
    grid: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}
    zip: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}
    random: RandomSection = RandomSection()

    @model_validator(mode="after")
    def _name_rule(self) -> "SweepSpec":
        if (problem := name_problem(self.name)) is not None:
            raise ValueError(f"name: {problem}")
        return self

    @model_validator(mode="after")
    def _zip_lengths(self) -> "SweepSpec":
        lengths = {len(v) for v in self.zip.values()}
        if len(lengths) > 1:
            raise ValueError(f"every list under [zip] must have the same length; found lengths {sorted(lengths)}")
        return self


@dataclass(frozen=True)
class SweepPoint:
    """One point: its id (hash of the full scenario dict) and the overrides that made it."""

    point: str
    overrides: dict[str, Any]
    scenario: dict[str, Any]


@dataclass(frozen=True)
class SweepResult:
    """What a sweep did: run ids stored now, points skipped as already stored, failures (point, error)."""

    name: str
    points: int
    stored: list[int]
    skipped: list[str]
    failed: list[tuple[str, str]]


def _read_bounded(path: Path) -> str:
    with path.open("rb") as f:  # a device or a huge file must not exhaust memory
        data = f.read(MAX_SCENARIO_BYTES + 1)
    if len(data) > MAX_SCENARIO_BYTES:
        raise ScenarioError(str(path), [("", f"larger than {MAX_SCENARIO_BYTES // 1024} KiB; a sweep file is a few dozen lines")])
    return data.decode("utf-8")


def load_sweep(path: str | Path) -> tuple[SweepSpec, dict[str, Any]]:
    """Load a sweep file and its base scenario (raw dict, name set); validate both.

    Raises
    ------
    ScenarioError
        Naming the file and dotted key of every problem.
    """
    path = Path(path)
    try:
        raw = parse_toml(_read_bounded(path), str(path))
    except OSError as e:
        raise ScenarioError(str(path), [("", f"cannot read file: {e.strerror or e}")]) from None
    except UnicodeDecodeError as e:
        raise ScenarioError(str(path), [("", f"malformed TOML: {e}")]) from None
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as e:
        raise ScenarioError(str(path), [(".".join(str(p) for p in err["loc"]), err["msg"]) for err in e.errors()]) from None
    base_path = (path.parent / spec.base).resolve()
    try:
        base = parse_toml(_read_bounded(base_path), str(base_path))
    except OSError as e:
        raise ScenarioError(str(path), [("base", f"cannot read base scenario {base_path}: {e.strerror or e}")]) from None
    except UnicodeDecodeError as e:
        raise ScenarioError(str(base_path), [("", f"not UTF-8 text: {e}")]) from None
    base.setdefault("name", base_path.stem)
    return spec, base


def _sample(key: RandomKey, rng: np.random.Generator) -> Any:
    if key.choices is not None:
        return key.choices[int(rng.integers(len(key.choices)))]
    assert key.low is not None and key.high is not None
    v = float(np.exp(rng.uniform(np.log(key.low), np.log(key.high)))) if key.log else float(rng.uniform(key.low, key.high))
    return int(round(v)) if key.integer else v


def point_label(overrides: dict[str, Any]) -> str:
    """A sweep point's name as a person reads it: ``topology 2x4x4, data 32`` for
    ``{"pod.topology": "2x4x4", "parallelism.data": 32}`` (each key's last part, then its value)."""
    return ", ".join(f"{k.rsplit('.', 1)[-1].replace('_', ' ')} {v}" for k, v in overrides.items())


def expand_points(
    spec: SweepSpec, base: Mapping[str, Any], source: str = "<sweep>", xla_flags: Mapping[str, str] | None = None
) -> list[SweepPoint]:
    """Every point of the sweep: grid x zip rows, then random samples; each validated.

    A point's id hashes its full scenario, and with ``xla_flags`` (the points are compiled, with these options) the
    options too.

    Raises
    ------
    ScenarioError
        If a key does not exist in the scenario schema (checked on the first point). Points
        that are invalid only in combination (e.g. a batch that does not divide) are kept and
        fail at run time, recorded as failures.
    """
    grid_keys = list(spec.grid)
    grid_rows = [dict(zip(grid_keys, values)) for values in itertools.product(*spec.grid.values())] or [{}]
    n_zip = len(next(iter(spec.zip.values()))) if spec.zip else 1
    zip_rows = [{k: v[i] for k, v in spec.zip.items()} for i in range(n_zip)] if spec.zip else [{}]
    combos = [{**g, **z} for g in grid_rows for z in zip_rows]
    rng = np.random.default_rng(spec.random.seed)
    for _ in range(spec.random.samples):
        combos.append({k: _sample(key, rng) for k, key in spec.random.keys.items()})
    points = []
    seen = set()
    for i, overrides in enumerate(combos):
        full = {**spec.set, **overrides}
        raw = apply_overrides(base, full)
        raw["name"] = derived_name(f"{spec.name}: {point_label(overrides)}" if overrides else spec.name)
        if i == 0:
            _check_keys(raw, source)
        key = raw if xla_flags is None else {"scenario": raw, "xla_flags": dict(xla_flags)}
        point = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
        if point not in seen:
            seen.add(point)
            points.append(SweepPoint(point=point, overrides=overrides, scenario=raw))
    return points


def _check_keys(raw: Mapping[str, Any], source: str) -> None:
    """Reject unknown keys early (a typo would otherwise fail every point)."""
    try:
        scenario_from_dict(raw, source=source)
    except ScenarioError as e:
        unknown = [(k, m) for k, m in e.problems if m.startswith(UNKNOWN_KEY)]
        if unknown:
            raise ScenarioError(source, unknown) from None


# --- worker side ---------------------------------------------------------------------------

_POINT_TABLE_SUFFIX = ".arrow"  # one Arrow IPC file per table of a point


def simulate_point(point: SweepPoint, out_dir: str, xla_flags: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """Simulate one point and write it as a folder of Arrow IPC files; runs in a worker process.

    With ``xla_flags`` the point's JAX program is compiled first (with those XLA options beyond libtpu's defaults)
    and the run takes XLA's HBM peak and verdict, as ``run --xla`` does.

    Returns (folder, None) or ("", error text). Written under a temporary name and renamed,
    so the writer never sees half a point.
    """
    final = Path(out_dir) / point.point
    if final.exists():
        return str(final), None
    try:
        scenario = scenario_from_dict(point.scenario, source=f"sweep point {point.point}")
        memory = None
        if xla_flags is not None:
            from . import xla_check

            memory = xla_check.compiled_hbm(scenario, xla_flags)
        result = simulate(scenario, xla_memory=memory)
    except PodscopeError as e:
        return "", f"{type(e).__name__}: {e}"
    except Exception as e:  # a bug in one point must not stop the sweep; keep its traceback
        return "", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{point.point}.", dir=out_dir))
    try:
        tables = {"events": result.trace.events, "steps": result.trace.steps, "chips": result.trace.chips}
        # exact aggregates by kind (the only per-step data of a summary-mode run)
        for agg in ("step_kind", "chip_kind"):
            if getattr(result.trace, agg, None) is not None:
                tables[agg] = getattr(result.trace, agg)
        tables.update({f"extra_{k}": v for k, v in result.trace.extra.items()})
        for name, table in tables.items():
            with pa.ipc.new_file(tmp / f"{name}{_POINT_TABLE_SUFFIX}", table.schema) as writer:
                writer.write_table(table)
        meta = {"scenario": point.scenario, "facts": asdict(result.facts), "point": point.point, "overrides": point.overrides}
        (tmp / "meta.json").write_text(json.dumps(meta, default=json_default))
        try:
            os.rename(tmp, final)
        except OSError as e:
            # another sweep sharing this folder finished the same point first (same hash: the
            # same scenario, so the same result); use its folder, or the stored run if it is gone
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(final), None


# --- writer side ---------------------------------------------------------------------------

#: the writer stores finished points once this many are ready, or this long after the first
STORE_GATHER_POINTS = 64
STORE_GATHER_S = 1.0


def _read_point_table(path: Path) -> pa.Table:
    with pa.OSFile(str(path)) as f:  # read into memory: the folder is removed once stored
        return pa.ipc.open_file(f).read_all()


def _load_point(folder: Path, sweep: str) -> RunResult:
    meta = json.loads((folder / "meta.json").read_text())
    tables = {p.stem: _read_point_table(p) for p in folder.glob(f"*{_POINT_TABLE_SUFFIX}")}
    extra = {k.removeprefix("extra_"): v for k, v in tables.items() if k.startswith("extra_")}
    facts = meta["facts"]
    facts["extra"] = {**facts.get("extra", {}), "sweep": {"name": sweep, "point": meta["point"], "overrides": meta["overrides"]}}
    return RunResult(
        scenario=scenario_from_dict(meta["scenario"]),
        trace=Trace(events=tables["events"], steps=tables["steps"], chips=tables["chips"], extra=extra,
                    step_kind=tables.get("step_kind"), chip_kind=tables.get("chip_kind")),  # fmt: skip
        facts=RunFacts(**facts),
    )


def _record_failure(db: Database, sweep: str, point: SweepPoint, error: str) -> None:
    with db.write() as con:
        con.execute(CREATE_TABLE_SQL["sweep_failures"])
        con.execute(
            "INSERT INTO sweep_failures VALUES ($sweep, $point, $overrides, $error, $at)",
            {"sweep": sweep, "point": point.point, "overrides": json.dumps(point.overrides), "error": error,
             "at": datetime.now(timezone.utc)},
        )  # fmt: skip


def _stored_point_ids(db: Database, sweep: str) -> dict[str, int]:
    with db.read() as con:
        return {r[0]: int(r[1]) for r in con.execute(_STORED_POINT_IDS_SQL, {"sweep": sweep}).fetchall()}


def _stored_points(db: Database, sweep: str) -> set[str]:
    with db.read() as con:
        return {r[0] for r in con.execute(_STORED_POINTS_SQL, {"sweep": sweep}).fetchall()}


def _store_points(
    db: Database, sweep: str, ready: list[tuple[SweepPoint, str]]
) -> list[tuple[tuple[SweepPoint, str], int, str | None, bool]]:
    """Store finished points together; on a failure, one by one so only the bad point fails.

    Returns ((point, folder), run_id, error, stored_now) per point, error None when the
    point is in the database. A point another sweep into the same file stored first is
    not stored again (``stored_now`` False): the store decides in the transaction that
    would store it, and a folder that other sweep already removed means just that.
    """
    if not ready:
        return []
    try:
        results = [_load_point(Path(folder), sweep) for _, folder in ready]
        others: set[int] = set()
        ids = write_runs(db, results, already_stored=others)
        return [(item, run_id, None, run_id not in others) for item, run_id in zip(ready, ids)]
    except (PodscopeError, OSError, ValueError):
        pass  # fall through: each point reports its own error below
    already = _stored_point_ids(db, sweep)  # write_runs keeps the runs before a failure
    out = []
    for item in ready:
        point, folder = item
        if point.point in already:
            out.append((item, already[point.point], None, False))
            continue
        try:
            others = set()
            ids = write_runs(db, [_load_point(Path(folder), sweep)], already_stored=others)
            out.append((item, ids[0], None, ids[0] not in others))
        except (PodscopeError, OSError, ValueError) as e:
            stored_by_other = _stored_point_ids(db, sweep).get(point.point)
            if stored_by_other is not None:  # its folder went with the other sweep's store
                out.append((item, stored_by_other, None, False))
            else:
                out.append((item, -1, f"{type(e).__name__}: {e}", False))
    return out


def _check_compilable(points: list[SweepPoint]) -> None:
    """Raise :class:`InputError` unless the TPU compiler is installed and every point has a JAX program."""
    from . import xla_reference
    from .tpu_capture import require_tpu_compiler

    require_tpu_compiler()
    for p in points:
        try:
            why = xla_reference.refusal(scenario_from_dict(p.scenario, source=f"sweep point {p.point}"))
        except ScenarioError:
            continue  # invalid only in combination: it fails at run time and is recorded, as without --xla
        if why:
            raise InputError(f"sweep point {p.scenario['name']!r}: --xla: {why}")


def _check_stored_hbm_source(db: Database, sweep: str, xla_flags: Mapping[str, str] | None) -> None:
    """Raise :class:`InputError` if the database holds points of ``sweep`` whose HBM came the other way."""
    with db.read() as con:
        stored = con.execute(_STORED_HBM_SOURCES_SQL, {"sweep": sweep}).fetchall()
    want = ("podscope", {}) if xla_flags is None else ("xla", dict(xla_flags))
    for source, flags in stored:
        have = (source, json.loads(flags))
        if have != want:
            how = "without --xla"
            if source == "xla":  # against another compile, say which options it had
                how = "with --xla" if want[0] != "xla" else f"with --xla and {f'XLA options {have[1]}' if have[1] else 'libtpu defaults'}"
            raise InputError(
                f"sweep {sweep!r} is stored in {db.path} {how}; resuming it another way would mix HBM sources. "
                "Run it as before, give this sweep another name (name = ... in the sweep file), or use another --db"
            )


def default_out_dir(db: Database, sweep: str) -> Path:
    """Where workers write points: beside the database, one folder per sweep."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", sweep).strip("._")[:64] or "sweep"
    if safe != sweep:  # a name that is not a plain file name: keep folders of different sweeps apart
        safe += "-" + hashlib.sha256(sweep.encode()).hexdigest()[:8]
    return db.path.parent / f"{db.path.stem}.sweeps" / safe


def run_sweep(
    path: str | Path,
    db: Database,
    executor: cf.Executor,
    *,
    out_dir: str | Path | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    keep_points: bool = False,
    xla_flags: Mapping[str, str] | None = None,
) -> SweepResult:
    """Run (or resume) a sweep: simulate points on ``executor``, store each finished point.

    Parameters
    ----------
    path
        The sweep TOML file.
    executor
        Any ``concurrent.futures.Executor``: a ``ProcessPoolExecutor`` or
        ``distributed.Client(address).get_executor()``. Workers must see ``out_dir``
        (a shared folder on a cluster) and import this repository.
    out_dir
        Folder for the per-point Arrow files (default: beside the database).
    progress
        Called as ``progress(done, total, message)`` after each point.
    keep_points
        Keep point folders after they are stored (default: removed once in DuckDB).
    xla_flags
        Compile each point's JAX program with the TPU compiler first, with these XLA options beyond libtpu's defaults
        (``{}``: none), and store XLA's HBM peak and verdict (``hbm_source = "xla"``); None: Podscope's own.

    Raises
    ------
    ScenarioError
        Bad sweep file (nothing is written).
    InputError
        ``xla_flags`` without jax[tpu] installed, or a point with no JAX program (it names the point and why); or the
        database holds this sweep's points stored the other way (with or without the compiler, or other options).
        Nothing is written.
    """
    spec, base = load_sweep(path)
    points = expand_points(spec, base, source=str(path), xla_flags=xla_flags)
    if xla_flags is not None:
        _check_compilable(points)
    _check_stored_hbm_source(db, spec.name, xla_flags)
    out = Path(out_dir) if out_dir is not None else default_out_dir(db, spec.name)
    out.mkdir(parents=True, exist_ok=True)
    done_points = _stored_points(db, spec.name)
    todo = [p for p in points if p.point not in done_points]
    skipped = [p.point for p in points if p.point in done_points]
    stored: list[int] = []
    failed: list[tuple[str, str]] = []
    done = len(skipped)
    if progress is not None:
        progress(done, len(points), f"{len(skipped)} point(s) already stored")
    futures = {executor.submit(simulate_point, p, str(out), None if xla_flags is None else dict(xla_flags)): p for p in todo}
    pending = set(futures)
    while pending:
        # points are stored in batches (store.write_runs): a batch costs about as much as one run
        # (file open, a statement per table, checkpoint), more than simulating a summary-mode
        # point, so the writer gathers finished points for up to STORE_GATHER_S first
        finished, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
        deadline = time.monotonic() + STORE_GATHER_S
        while pending and len(finished) < STORE_GATHER_POINTS:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            more, pending = cf.wait(pending, timeout=left, return_when=cf.FIRST_COMPLETED)
            finished |= more
        ready: list[tuple[SweepPoint, str]] = []
        for fut in finished:
            point = futures[fut]
            try:
                folder, error = fut.result()
            except Exception as e:  # the executor itself failed for this point (worker died, ...)
                folder, error = "", f"{type(e).__name__}: {e}"
            if error is None:
                ready.append((point, folder))
            else:
                failed.append((point.point, error))
                _record_failure(db, spec.name, point, error)
                done += 1
                if progress is not None:
                    progress(done, len(points), point.scenario["name"] + " FAILED")
        for (point, folder), run_id, error, stored_now in _store_points(db, spec.name, ready):
            if error is None:
                (stored if stored_now else skipped).append(run_id if stored_now else point.point)
                if not keep_points:
                    shutil.rmtree(folder, ignore_errors=True)
            else:
                failed.append((point.point, error))
                _record_failure(db, spec.name, point, error)
            done += 1
            if progress is not None:
                progress(done, len(points), point.scenario["name"] + (" FAILED" if error else ""))
    return SweepResult(name=spec.name, points=len(points), stored=stored, skipped=skipped, failed=failed)


#: how often a pool worker checks that the sweep that started it is still alive
PARENT_POLL_S = 0.25


def exit_with_parent(parent_pid: int) -> None:
    """Pool worker initializer: exit as soon as the sweep process that started it is gone.

    A SIGKILLed sweep cannot shut its pool down, and the workers would otherwise finish
    their points (seconds to minutes, with a simulation's memory) for nobody. The worker
    is re-parented when its parent dies, so a daemon thread watching ``os.getppid()`` sees it.
    """
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="podscope-parent-watch", daemon=True).start()


def make_executor(kind: str, *, address: str | None = None, workers: int | None = None) -> tuple[cf.Executor, Callable[[], None]]:
    """A local process pool, or Dask's executor (``address`` of a running scheduler, or a loopback LocalCluster).

    Returns the executor and a function that shuts everything down.

    Raises
    ------
    ProfilerError
        If the scheduler at ``address`` cannot be reached.
    """
    if kind == "local":
        import multiprocessing

        # spawn: workers start clean rather than forking a process that may hold DuckDB handles
        pool = cf.ProcessPoolExecutor(
            max_workers=workers or os.cpu_count(), mp_context=multiprocessing.get_context("spawn"),
            initializer=exit_with_parent, initargs=(os.getpid(),),
        )  # fmt: skip
        return pool, lambda: pool.shutdown(wait=True)
    if kind == "dask":
        from distributed import Client, LocalCluster

        if address:
            try:
                client = Client(address, timeout="20s")
            except (OSError, TimeoutError) as e:
                raise ProfilerError(f"cannot reach the Dask scheduler at {address}: {e}") from e
            return client.get_executor(), client.close
        cluster = LocalCluster(n_workers=workers or 2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None)
        client = Client(cluster)

        def close() -> None:
            client.close()
            cluster.close()

        return client.get_executor(), close
    raise ValueError(f"unknown executor {kind!r}")

