"""Size limits of the package (issue 29): no module over 450 lines, no function over 80.

    python tools/size_check.py [PACKAGE_DIR]    (default: egg_mcp/ beside this folder)

Prints every module and function over its limit, one a line, and exits 1 when there is one. A function
counts from its `def` line to its last line (decorators left out); a nested function counts inside the
one around it and on its own too. Read with `ast`: nothing is imported.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, def line, length in lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            yield name, node.lineno, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def oversized(package_dir: Path) -> list[str]:
    """One line per module over MAX_MODULE_LINES and per function over MAX_FUNCTION_LINES, by path."""
    base = package_dir.resolve().parent
    out = []
    for path in sorted(package_dir.resolve().rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        shown = path.relative_to(base)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            out.append(f"{shown}: module of {lines} lines (limit {MAX_MODULE_LINES})")
        for name, line, length in _functions(ast.parse(text, filename=str(path))):
            if length > MAX_FUNCTION_LINES:
                out.append(f"{shown}:{line}: {name} is {length} lines (limit {MAX_FUNCTION_LINES})")
    return out


def main(argv: list[str]) -> int:
    package_dir = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent / "egg_mcp"
    found = oversized(package_dir)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
