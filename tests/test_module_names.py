"""One name per concept: no two modules under egg_mcp/ share a basename, so a module's name alone says
which one is meant (in an import, a job target, a traceback, the docs)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "egg_mcp"
SHARED_BY_DESIGN = {"__init__.py", "__main__.py"}


def shared_basenames(root: Path) -> dict[str, list[str]]:
    """Basename -> the modules under `root` that carry it, for every basename carried more than once."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if path.name not in SHARED_BY_DESIGN:
            by_name[path.name].append(path.relative_to(root.parent).as_posix())
    return {name: paths for name, paths in by_name.items() if len(paths) > 1}


def test_no_two_modules_share_a_basename():
    shared = shared_basenames(PACKAGE)
    assert not shared, "modules sharing a basename (give each a name that says what it holds): " + "; ".join(
        f"{name}: {', '.join(paths)}" for name, paths in sorted(shared.items()))


def test_the_check_names_the_modules_that_share_a_name(tmp_path):
    root = tmp_path / "egg_mcp"
    for rel in ("a/jobs.py", "b/jobs.py", "a/__init__.py", "b/__init__.py", "c/only.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    assert shared_basenames(root) == {"jobs.py": ["egg_mcp/a/jobs.py", "egg_mcp/b/jobs.py"]}
