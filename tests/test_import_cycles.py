"""No import cycle inside egg_mcp (issue 14 named `cli <-> e2e` and `harness <-> worker`).

The graph is built statically (ast, nothing is imported) from ALL imports, the ones inside
functions included: a lazy import only moves a cycle from import time to call time (harness <->
worker was one: worker imported harness in a function, harness imported worker at the top), so
it still ties the two modules together. Left out, on purpose:
- imports under `if TYPE_CHECKING:` (annotations only, never executed);
- the root package's own imports (`egg_mcp/__init__.py`: only the console entry `main()`, which
  imports cli). Every module's `import egg_mcp` (for `__version__` / `__file__`) would otherwise
  close a cycle through that entry point.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import egg_mcp

PACKAGE_DIR = Path(egg_mcp.__file__).resolve().parent


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package."""
    top = package_dir.name
    out: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = (top, *path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, skipping `if TYPE_CHECKING:` bodies (their else branch counts)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> set[str]:
    """The package's modules one import statement names (a name imported from a package that is a
    submodule counts as that submodule; anything else as the module it comes from)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        for alias in node.names:
            sub = f"{prefix}.{alias.name}"
            names.append(sub if sub in known else prefix)
    out = set()
    for name in names:
        while name and name not in known:  # `import a.b.c` of a non-module attribute: its module
            name = name.rpartition(".")[0]
        if name:
            out.add(name)
    return out


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    known = module_names(package_dir)
    root = package_dir.name
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        if module == root:
            continue  # the console entry point only (see the module docstring)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in _imports(tree):
            graph[module] |= _targets(module, path.name == "__init__.py", node, known) - {module}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path a -> ... -> a) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the package's graph is shallow enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, set(comp)) for comp in components]


def _cycle_in(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first), for the message."""
    start = min(comp)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def test_egg_mcp_has_no_import_cycle():
    graph = import_graph(PACKAGE_DIR)
    assert "egg_mcp.evaluation.worker" in graph and "egg_mcp.cli" in graph  # the walk saw the package
    cycles = find_cycles(graph)
    members = [sorted(m for m in graph if m in reachable(graph, c[0]) and c[0] in reachable(graph, m)) for c in cycles]
    assert not cycles, "import cycles in egg_mcp (break each by moving what both sides need to a leaf module):\n" + \
        "\n".join(f"{' -> '.join(c)}   (the whole knot: {', '.join(ms)})" for c, ms in zip(cycles, members))


def test_a_lazy_import_cycle_is_found(tmp_path: Path):
    """The check is not vacuous: a function-level import closing a cycle fails it, a TYPE_CHECKING
    import and the root package's entry point do not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("def main():\n    from pkg.a import f\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import pkg\nfrom pkg.sub import b\n\ndef f():\n    return b\n")
    (pkg / "sub" / "b.py").write_text(textwrap.dedent("""
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from pkg import a
        def g():
            from ..sub import c
            return c
    """))
    (pkg / "sub" / "c.py").write_text("def h():\n    from pkg.a import f\n    return f\n")
    graph = import_graph(pkg)
    assert graph["pkg"] == set()
    assert graph["pkg.a"] == {"pkg", "pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.sub.c"}  # relative, lazy; the TYPE_CHECKING import left out
    cycles = find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.sub.b", "pkg.sub.c", "pkg.a"]]
    (pkg / "sub" / "c.py").write_text("def h():\n    return 1\n")
    assert find_cycles(import_graph(pkg)) == []
