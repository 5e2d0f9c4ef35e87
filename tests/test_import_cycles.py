"""No import circles: among engine modules, and among the modules and packages of engine, profiler and views.

Imports are read with ``ast`` (module level and inside functions alike; only
``if TYPE_CHECKING:`` blocks are skipped, as they never run), so a circle that a
function-level import hides still fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "profiler", "views")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node outside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> nx.DiGraph:
    """Module -> module edges between the modules of PACKAGES (other imports dropped)."""
    modules = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        here = name.split(".") if is_pkg else name.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = here[: len(here) - node.level + 1] if node.level else []
                mod = ".".join(base + (node.module.split(".") if node.module else []))
                # `from pkg import sub` imports the submodule; `from pkg import name` the package itself
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names]
            for t in targets:
                while t and t not in modules:  # `import a.b.c` of a non-module attribute: nearest module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    g.add_edge(name, t)
                # Importing a.b.c first runs the packages a and a.b, unless the importer is already inside them.
                parts = t.split(".")
                for i in range(1, len(parts)):
                    pkg = ".".join(parts[:i])
                    if pkg in modules and not (name == pkg or name.startswith(pkg + ".")):
                        g.add_edge(name, pkg)
    return g


def _cycles(g: nx.DiGraph) -> list[list[str]]:
    return [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]


def test_graph_sees_real_imports():
    g = import_graph()
    assert g.has_edge("engine.simulate", "engine.trace")
    assert g.has_edge("profiler.store", "engine.trace")
    assert g.has_edge("profiler.store", "engine")  # the package __init__ runs first
    assert g.has_edge("engine.simulate", "engine.comm")
    assert g.has_edge("engine.model.analytic", "engine.memory.hbm")  # a module of one room on another's
    assert g.has_edge("engine.scenario.scenario", "engine.pod")  # ... which first runs that room's __init__


def test_no_cycle_among_engine_modules():
    g = import_graph()
    engine = g.subgraph(n for n in g if n == "engine" or n.startswith("engine."))
    assert _cycles(engine) == []


def test_no_cycle_among_engine_profiler_views_modules():
    assert _cycles(import_graph()) == []


def test_packages_point_one_way():
    g = import_graph()
    pkg = nx.DiGraph()
    pkg.add_nodes_from(PACKAGES)
    pkg.add_edges_from((a.split(".")[0], b.split(".")[0]) for a, b in g.edges if a.split(".")[0] != b.split(".")[0])
    assert nx.is_directed_acyclic_graph(pkg), sorted(pkg.edges)
    assert not any(a == "engine" for a, _ in pkg.edges), "engine imports nothing of profiler or views"
