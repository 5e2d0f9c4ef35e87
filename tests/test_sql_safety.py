"""Run names full of SQL metacharacters go through the CLI and every query verbatim; deleting a
run (API and ``python -m profiler delete``) removes exactly its rows; no SQL is built from values:
an AST check over profiler/ finds every piece formatted into SQL and requires that it went through
``quote_ident`` (identifiers) or is a module constant, with every value bound.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine import ProfilerError, RunNotFoundError, simulate
from engine.trace import TABLES, Trace
from profiler import delete_run, queries, resolve_run, write_run
from profiler.cli import EXIT_ERROR, EXIT_OK
from profiler.schema import per_run_tables

ROOT = Path(__file__).resolve().parent.parent
NASTY = [
    "x'; DROP TABLE runs; --",
    'quote " and \' both',
    "SELECT * FROM runs WHERE 1=1",
    "run); DELETE FROM events; (",
    "$run_id ? %s {name}",
    "名前 with unicode ☃",
]
KERAS = str(ROOT / "data" / "scenarios" / "keras-mlp-v5e-8.toml")


def cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PODSCOPE_DB": str(db)}
    return subprocess.run([sys.executable, "-m", "profiler", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def _per_run_query_functions():
    """Every public query taking (con) or (con, run_id, <defaults>): new queries are covered automatically."""
    out = []
    for name in queries.__all__:
        fn = getattr(queries, name)
        if not callable(fn):
            continue
        params = list(inspect.signature(fn).parameters.values())
        required = [p for p in params if p.default is inspect.Parameter.empty]
        if len(required) == 1 or (len(required) == 2 and required[1].name == "run_id"):
            out.append((fn, len(required) == 2))
    return out


def test_every_query_function_handles_nasty_names(db, small_scenario):
    ids = {name: write_run(db, simulate(small_scenario), name=name) for name in NASTY}
    fns = _per_run_query_functions()
    assert {f.__name__ for f, _ in fns} >= {"list_runs", "run_summary", "breakdown", "step_times", "run_scenario"}
    with db.read() as con:
        listed = queries.list_runs(con)
        assert sorted(listed["name"]) == sorted(NASTY)
        for name, run_id in ids.items():
            assert resolve_run(con, name) == run_id
            assert queries.run_summary(con, run_id)["name"] == name
            for fn, per_run in fns:
                fn(con, run_id) if per_run else fn(con)
        assert {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()} >= {"runs", "events"}


def test_cli_stores_lists_and_deletes_nasty_names(tmp_path):
    db = tmp_path / "db.duckdb"
    name = NASTY[0]
    p = cli("run", KERAS, "--set", "training.steps=3", "--name", name, "--json", db=db)
    assert p.returncode == EXIT_OK, p.stderr
    assert json.loads(p.stdout)["name"] == name
    keep = cli("run", KERAS, "--set", "training.steps=3", "--name", "keep", "--json", db=db)
    assert keep.returncode == EXIT_OK
    rows = json.loads(cli("runs", "--json", db=db).stdout)
    assert sorted(r["name"] for r in rows) == sorted([name, "keep"])
    gone = cli("delete", name, db=db)
    assert gone.returncode == EXIT_OK, gone.stderr
    assert [r["name"] for r in json.loads(cli("runs", "--json", db=db).stdout)] == ["keep"]


def test_cli_delete_missing_run_is_exit_1_with_a_clear_message(tmp_path):
    db = tmp_path / "db.duckdb"
    p = cli("delete", "no-such-run", db=db)
    assert p.returncode == EXIT_ERROR
    assert "no run with id or name 'no-such-run'" in p.stderr
    assert not db.exists()  # deleting from nothing creates nothing
    cli("run", KERAS, "--set", "training.steps=2", db=db)
    p = cli("delete", "4242", db=db)
    assert p.returncode == EXIT_ERROR and "'4242'" in p.stderr and "Traceback" not in p.stderr


def test_delete_by_id_removes_every_row_of_that_run_only(db, small_scenario):
    good = simulate(small_scenario)
    extra = {"chip_memory": TABLES["extra_chip_memory"].table({"chip": [0, 1], "peak_bytes": [1.0, 2.0]})}
    with_extra = type(good)(good.scenario, Trace(good.trace.events, good.trace.steps, good.trace.chips, extra), good.facts)
    keep = write_run(db, with_extra, name="keep")
    gone = write_run(db, with_extra, name="gone")
    assert delete_run(db, str(gone)) == gone
    with db.read() as con:
        tables = per_run_tables(con)
        assert "extra_chip_memory" in tables
        for table in tables:
            assert con.execute(f'SELECT count(*) FROM "{table}" WHERE run_id = ?', [gone]).fetchone()[0] == 0
            assert con.execute(f'SELECT count(*) FROM "{table}" WHERE run_id = ?', [keep]).fetchone()[0] > 0
        assert con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [gone]).fetchone()[0] == 0
    with pytest.raises(RunNotFoundError):
        delete_run(db, gone)


# --- every identifier formatted into SQL is quoted, every value is bound ------------------------

QUOTE_FUNCTION = "quote_ident"  # profiler.schema.quote_ident, the one way a name enters SQL
_SQL_WORDS = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|FROM|WHERE|JOIN|VALUES|INTO|TABLE|WHEN|THEN)\b")
_SQL_CALLS = {"execute", "executemany", "sql", "query"}
_CONSTANT_NAME = re.compile(r"^_?[A-Z][A-Z0-9_]*$")


def _is_quote_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == QUOTE_FUNCTION)
        or (isinstance(node.func, ast.Attribute) and node.func.attr == QUOTE_FUNCTION)
    )


def _looks_like_sql(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(_SQL_WORDS.search(node.value))
    if isinstance(node, ast.JoinedStr):
        return any(_looks_like_sql(v) for v in node.values)
    return False


class _SqlFormattingChecker(ast.NodeVisitor):
    """Finds SQL text built inside a function from anything but quoted identifiers and module constants.

    SQL built at module level is a constant of the module (it runs at import, with no caller's
    values). Inside a function, a piece formatted into SQL (f-string, ``+``) must be a
    ``quote_ident(...)`` call, ``", ".join(quote_ident(c) for c in ...)``, a literal, or a
    module-level UPPER_CASE constant (or an item of one); ``%`` and ``.format`` never build SQL.
    The SQL handed to ``execute``/``sql``/``query`` is checked as SQL whatever words it holds,
    and so is a local variable assigned in the same function and handed to them.
    """

    def __init__(self, tree: ast.Module, filename: str):
        self.filename = filename
        self.problems: list[str] = []
        self._seen: set[tuple[int, str]] = set()
        self.constants = {
            t.id
            for stmt in tree.body
            if isinstance(stmt, (ast.Assign, ast.AnnAssign))
            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
            if isinstance(t, ast.Name) and _CONSTANT_NAME.match(t.id)
        }
        self._local_values: list[dict[str, list[ast.AST]]] = []  # per enclosing function: name -> assigned values

    def _problem(self, node: ast.AST, what: str) -> None:
        if (id(node), what) not in self._seen:  # a piece reached twice (as SQL and as an execute argument) counts once
            self._seen.add((id(node), what))
            self.problems.append(f"{self.filename}:{node.lineno} {what}")

    def _allowed_piece(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) or _is_quote_call(node):
            return True
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return self._allowed_piece(node.value)
        if isinstance(node, ast.Name):
            return node.id in self.constants
        if (  # ", ".join(quote_ident(c) for c in columns)
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and isinstance(node.func.value, ast.Constant)
            and len(node.args) == 1
            and isinstance(node.args[0], (ast.GeneratorExp, ast.ListComp))
        ):
            return _is_quote_call(node.args[0].elt)
        return False

    def _check_sql(self, node: ast.AST, forced: bool = False) -> None:
        """``node`` builds SQL (or may: ``forced``); every formatted piece must be allowed."""
        if isinstance(node, ast.JoinedStr) and (forced or _looks_like_sql(node)):
            for value in node.values:
                if isinstance(value, ast.FormattedValue) and not self._allowed_piece(value.value):
                    self._problem(node, f"formats {ast.unparse(value.value)!r} into SQL: quote it with {QUOTE_FUNCTION}() or bind it")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            parts = self._add_parts(node)
            if forced or any(_looks_like_sql(p) for p in parts):
                for part in parts:
                    if isinstance(part, ast.JoinedStr):
                        self._check_sql(part, forced=True)
                    elif not self._allowed_piece(part):
                        self._problem(node, f"concatenates {ast.unparse(part)!r} into SQL: quote it with {QUOTE_FUNCTION}() or bind it")

    def _add_parts(self, node: ast.AST) -> list[ast.AST]:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return [*self._add_parts(node.left), *self._add_parts(node.right)]
        return [node]

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        assigned: dict[str, list[ast.AST]] = {}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign):
                for t in sub.targets:
                    if isinstance(t, ast.Name):
                        assigned.setdefault(t.id, []).append(sub.value)
            elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)) and isinstance(sub.target, ast.Name) and sub.value is not None:
                assigned.setdefault(sub.target.id, []).append(sub.value)
        self._local_values.append(assigned)
        self.generic_visit(node)
        self._local_values.pop()

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if self._local_values:
            self._check_sql(node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if self._local_values:
            if isinstance(node.op, ast.Mod) and _looks_like_sql(node.left):
                self._problem(node, "builds SQL with %-formatting: bind the values")
            elif isinstance(node.op, ast.Add):
                self._check_sql(node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format" and _looks_like_sql(func.value):
            self._problem(node, "builds SQL with str.format: bind the values")
        if self._local_values and isinstance(func, ast.Attribute) and func.attr in _SQL_CALLS and node.args:
            sql = node.args[0]
            if isinstance(sql, ast.Name):
                for value in self._local_values[-1].get(sql.id, []):
                    self._check_sql(value, forced=True)
            else:
                self._check_sql(sql, forced=True)
        self.generic_visit(node)


def sql_formatting_problems(source: str, filename: str = "<source>") -> list[str]:
    """Where ``source`` formats into SQL anything but a quoted identifier or a module constant ("file:line what")."""
    tree = ast.parse(source, filename)
    checker = _SqlFormattingChecker(tree, filename)
    checker.visit(tree)
    return checker.problems


PROFILER_SOURCES = sorted((ROOT / "profiler").rglob("*.py"))


@pytest.mark.parametrize("path", PROFILER_SOURCES, ids=lambda p: str(p.relative_to(ROOT / "profiler")))
def test_every_identifier_formatted_into_sql_is_quoted_and_every_value_bound(path):
    assert sql_formatting_problems(path.read_text(), path.name) == []


def test_the_quoting_function_is_the_one_the_checker_requires():
    from profiler.schema import quote_ident

    assert quote_ident.__name__ == QUOTE_FUNCTION
    assert quote_ident("extra_link_load") == '"extra_link_load"'
    for bad in ['x"; DROP TABLE runs; --', "Runs", "1abc", "a b", "", "é"]:
        with pytest.raises(ProfilerError, match="not a plain identifier"):
            quote_ident(bad)


def test_an_unquoted_table_name_in_the_real_queries_module_fails_the_check():
    source = (ROOT / "profiler" / "queries.py").read_text()
    quoted = "{quote_ident(table)}"
    assert source.count(quoted) >= 2  # the check below breaks real SQL, not a string that is absent
    broken = source.replace(quoted, "{table}")
    problems = sql_formatting_problems(broken, "queries.py")
    assert len(problems) == source.count(quoted)
    assert all("formats 'table' into SQL" in p for p in problems)


@pytest.mark.parametrize(
    "body, what",
    [
        ('con.execute(f"SELECT count(*) FROM {table} WHERE run_id = $id", {"id": run_id})', "formats 'table'"),
        ('con.execute(f"SELECT * FROM runs WHERE name = \'{name}\'")', "formats 'name'"),
        ('sql = f"DELETE FROM {quote_ident(table)} WHERE run_id = {run_id}"\n    con.execute(sql)', "formats 'run_id'"),
        ('sql = "SELECT * FROM " + table\n    con.execute(sql)', "concatenates 'table'"),
        ('con.execute("SELECT * FROM runs WHERE name = \'%s\'" % name)', "%-formatting"),
        ('con.execute("SELECT * FROM runs WHERE name = \'{}\'".format(name))', "str.format"),
        ('con.execute(f"{query}")', "formats 'query'"),
        ('cols = ", ".join(columns)\n    con.execute(f"INSERT INTO t SELECT {cols} FROM v")', "formats 'cols'"),
        ('con.execute(f"SELECT {\', \'.join(c for c in columns)} FROM t")', "formats"),
    ],
)
def test_the_check_fails_on_sql_built_from_values(body, what):
    problems = sql_formatting_problems(f"def f(con, table, name, run_id, query, columns):\n    {body}\n", "broken.py")
    assert len(problems) == 1 and what in problems[0] and problems[0].startswith("broken.py:"), problems


def test_the_check_accepts_quoted_identifiers_bound_values_and_module_constants():
    source = """
_COLUMNS = "chip, step"
_SQL = f"SELECT {_COLUMNS} FROM {quote_ident('events')}"  # module level: a constant of the module
def f(con, table, columns, run_id):
    con.execute(f"SELECT {_COLUMNS} FROM {quote_ident(table)} WHERE run_id = $id", {"id": run_id})
    con.execute(f"INSERT INTO {quote_ident(table)} SELECT {', '.join(quote_ident(c) for c in columns)} FROM v")
    con.execute(_SQL, [run_id])
    raise ValueError(f"no run with id {run_id} in table {table}")  # a message, not SQL
"""
    assert sql_formatting_problems(source) == []
