"""The package's layers, as ARCHITECTURE.md draws them: a package imports only packages of lower layers (and its own
modules), at module level or inside functions. The diagram is read from ARCHITECTURE.md's `layers` block, so the
document and this test cannot drift apart."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "egg_mcp"


def layers() -> dict[str, int]:
    """{unit: layer} from the ```layers block of ARCHITECTURE.md (a line: `N unit unit ...`)."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md has no ```layers block"
    out: dict[str, int] = {}
    for line in block.group(1).splitlines():
        level, *units = line.split()
        for unit in units:
            assert unit not in out, f"{unit} is drawn twice"
            out[unit] = int(level)
    return out


def unit_of(module: str) -> str:
    """egg_mcp.evaluation.judge -> evaluation; egg_mcp.config -> config; egg_mcp -> egg_mcp."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "egg_mcp"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every egg_mcp import in the file, inside functions included."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{a.name}") for a in node.names if base == "egg_mcp"]
    return [(line, m) for line, m in out if m == "egg_mcp" or m.startswith("egg_mcp.")]


def _units_on_disk() -> set[str]:
    return {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"} - {"__init__"} | {"egg_mcp"}


def test_every_package_and_top_level_module_is_drawn():
    drawn = layers()
    missing = sorted(_units_on_disk() - set(drawn))
    stale = sorted(set(drawn) - _units_on_disk())
    assert not missing and not stale, f"not in ARCHITECTURE.md's layers: {missing}; drawn but gone: {stale}"


def test_no_import_reaches_sideways_or_up():
    drawn = layers()
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = unit_of(module_name(path))
        for line, target in imports(path):
            dst = unit_of(target)
            if target == "egg_mcp" or dst == src or dst not in drawn:
                continue  # the root itself (version only), its own modules; an unknown unit fails the test above
            if drawn[dst] >= drawn[src]:
                bad.append(f"{path.relative_to(REPO)}:{line} ({src}, layer {drawn[src]}) imports {target} "
                           f"({dst}, layer {drawn[dst]})")
    assert not bad, "imports against ARCHITECTURE.md's layers:\n" + "\n".join(bad)


def test_the_check_sees_function_level_and_relative_imports(tmp_path, monkeypatch):
    """The reader itself: an import inside a function and a relative one are both found."""
    pkg = tmp_path / "egg_mcp" / "analysis"
    pkg.mkdir(parents=True)
    (tmp_path / "egg_mcp" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    mod = pkg / "x.py"
    mod.write_text("def f():\n    from egg_mcp.workflow import verify\n\nfrom ..server import create_server\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    found = {m for _, m in imports(mod)}
    assert {"egg_mcp.workflow", "egg_mcp.server"} <= found
