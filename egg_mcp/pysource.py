"""Python source parsed one thread at a time.

CPython 3.11 (through 3.11.7 at least) keeps the AST constructor's recursion depth in shared state: two threads
parsing at once fail with `SystemError: AST constructor recursion depth mismatch`. The server parses candidate
sources in worker threads (two commits of one task raced into it in tests/test_workspace_guards.py), so every
parse of a user's or a candidate's source goes through this lock.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, serialised across threads."""
    with _PARSE_LOCK:
        return ast.parse(source, filename)
