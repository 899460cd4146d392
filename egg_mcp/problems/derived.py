"""Module-level constants derived from size constants, refreshed after size_overrides (issue 18).

KernelBench references often write `out_features = 512` and then `bias_shape = (out_features,)`:
overriding `out_features` alone leaves `bias_shape` at the old size, and the mismatch used to surface
as the candidate's failure. `refresh_derived` re-evaluates, in source order, every top-level assignment
whose value reads an overridden (or already refreshed) name; one that cannot be re-evaluated is an error
that names the override, not the candidate. Pure stdlib (ast); runs in worker processes, on modules the
worker has already imported.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from egg_mcp import pysource


class StaleDerivedConstant(ValueError):
    """size_overrides left a derived module constant stale and it could not be recomputed."""


def _assignments(module: Any) -> list[tuple[list[str], ast.expr]]:
    path = getattr(module, "__file__", None)
    if not path or not Path(path).exists():
        return []
    try:
        tree = pysource.parse(Path(path).read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return []
    out = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            out.append(([t.id for t in node.targets if isinstance(t, ast.Name)], node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out.append(([node.target.id], node.value))
    return out


def refresh_derived(module: Any, overrides: dict[str, int], *, who: str = "the reference") -> list[str]:
    """Recompute `module`'s top-level constants that depend on `overrides`; returns their names."""
    changed = set(overrides)
    refreshed: list[str] = []
    for targets, value in _assignments(module):
        if set(targets) & set(overrides):
            continue  # the override itself
        reads = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
        if not reads & changed:
            continue
        try:
            new = eval(compile(ast.Expression(value), f"<derived {targets[0]}>", "eval"), vars(module))  # noqa: S307
        except Exception as exc:  # the expression is the module's own code, re-run at the new sizes
            raise StaleDerivedConstant(
                f"size_overrides {overrides} leave {who}'s `{targets[0]} = {ast.unparse(value)}` stale and it cannot "
                f"be recomputed at the new sizes ({type(exc).__name__}: {exc}); override {targets[0]} too or choose "
                "other sizes (this is the overrides' fault, not the candidate's)") from None
        for t in targets:
            setattr(module, t, new)
        changed.update(targets)
        refreshed += targets
    return refreshed
