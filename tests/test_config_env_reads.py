"""Environment variables are read only in egg_mcp/config.py: every variable is named there once, and a reader
anywhere else goes through one of its functions, so what the product reads (and when) is said in one place."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "egg_mcp"
ALLOWED = "config.py"


def env_reads(source: str, name: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) for each use of the process environment through os: os.environ, os.getenv, os.environb,
    os.putenv/unsetenv, `from os import environ` (then any use of that name)."""
    tree = ast.parse(source, name)
    os_names = {"os"}
    env_names: set[str] = set()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                if alias.name in ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"):
                    env_names.add(alias.asname or alias.name)
                    found.append((node.lineno, f"from os import {alias.name}"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in os_names
                and node.attr in ("environ", "environb", "getenv", "getenvb", "putenv", "unsetenv")):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in env_names:
            found.append((node.lineno, node.id))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "environ"
              and node.attr in ("get", "pop", "setdefault", "items", "keys", "values", "copy")):
            found.append((node.lineno, f"environ.{node.attr}"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in os_names
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in ("environ", "getenv")):
            found.append((node.lineno, f"getattr({node.args[0].id}, {node.args[1].value!r})"))
    return sorted(set(found))


def offenders(package: Path = PACKAGE) -> list[str]:
    """file:line: what, for every environment use in `package` outside its config.py."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix() == ALLOWED:
            continue
        for line, what in env_reads(path.read_text(encoding="utf-8"), str(path)):
            out.append(f"{path.relative_to(package.parent)}:{line}: {what}")
    return out


def test_environment_is_read_only_in_config():
    found = offenders()
    assert not found, ("environment read outside egg_mcp/config.py (add a function or a name constant there and "
                       "call it):\n" + "\n".join(found))


def test_the_check_sees_every_form():
    source = """
import os
import os as o
from os import environ, getenv as ge

a = os.environ.get("X")
b = o.getenv("Y")
c = environ["Z"]
d = ge("W")
e = getattr(os, "environ")
os.environ["V"] = "1"
f = environ.get("U")
"""
    lines = {line for line, _ in env_reads(source)}
    assert lines == {4, 6, 7, 8, 9, 10, 11, 12}, env_reads(source)


def test_the_check_leaves_other_mappings_and_words_alone():
    source = '''
"""Reads os.environ in a docstring only."""
import os

def f(env):
    return env.get("EGG_MCP_NCU"), os.path.join("a", "b"), "os.environ"
'''
    assert env_reads(source) == []


if __name__ == "__main__":  # python3 tests/test_config_env_reads.py [PACKAGE_DIR]: list what a tree reads where
    print("\n".join(offenders(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)) or "none")
