"""Every parse of Python source in the package goes through egg_mcp.pysource (one thread at a time): CPython 3.11's
AST constructor fails when two threads parse at once, which two racing commit_stage calls hit."""

from __future__ import annotations

import threading

from egg_mcp import pysource
from tests.conftest import REPO


def test_no_module_parses_source_but_pysource():
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "egg_mcp").rglob("*.py")
                 if p.name != "pysource.py" and "ast.parse(" in p.read_text()]
    assert offenders == []


def test_parses_from_many_threads_all_succeed():
    source = "def f(x):\n" + "".join(f"    x = (x + {i}) * (x - {i})\n" for i in range(200)) + "    return x\n"
    errors: list[BaseException] = []

    def parse_many():
        try:
            for _ in range(30):
                pysource.parse(source)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []
