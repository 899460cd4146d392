"""Issue 29's size limits (tools/size_check.py): no module over 450 lines, no function over 80."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("size_check", REPO / "tools" / "size_check.py")
assert _spec is not None and _spec.loader is not None
size_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(size_check)


def test_no_module_or_function_over_its_limit():
    found = size_check.oversized(REPO / "egg_mcp")
    assert not found, "over the size limits:\n" + "\n".join(found)


def test_the_check_sees_long_modules_methods_and_nested_functions(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "    x = 1\n" * 80
    (pkg / "small.py").write_text("def short():\n    return 1\n")
    (pkg / "big.py").write_text(
        f"class C:\n    async def method(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
        f"def outer():\n    def inner():\n    {body.replace(chr(10), chr(10) + '    ')}\n    return inner\n"
        + "# filler\n" * 300)
    found = size_check.oversized(pkg)
    assert found[0].startswith("pkg/big.py: module of ")
    assert [line.split(": ")[1].split(" is ")[0] for line in found[1:]] == ["C.method", "outer", "outer.inner"]
    assert size_check.main([str(pkg)]) == 1
    (pkg / "big.py").unlink()
    assert size_check.oversized(pkg) == [] and size_check.main([str(pkg)]) == 0
