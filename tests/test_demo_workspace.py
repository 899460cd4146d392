"""The demo's workspace (issue 31): --workspace or $EGG_MCP_WORKSPACE when given, else a new temporary
folder, never the user's default workspace; the output names the one used (checked in
test_e2e_demo's end-to-end run)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from egg_mcp.config import default_workspace_dir
from egg_mcp.e2e.demo import demo_workspace


def test_given_workspace_wins(tmp_path):
    assert demo_workspace(tmp_path / "mine", {"EGG_MCP_WORKSPACE": "/elsewhere"}) == (tmp_path / "mine", False)


def test_environment_workspace_is_used(tmp_path):
    assert demo_workspace(None, {"EGG_MCP_WORKSPACE": str(tmp_path / "env")}) == (tmp_path / "env", False)


def test_otherwise_a_fresh_temporary_folder_not_the_default_workspace(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EGG_MCP_WORKSPACE", raising=False)
    first, temporary = demo_workspace(None, {})
    second, _ = demo_workspace(None, {})
    try:
        assert temporary and first != second and first.is_dir() and not any(first.iterdir())
        assert Path(tempfile.gettempdir()) in first.parents
        assert first != default_workspace_dir() and default_workspace_dir() not in first.parents
    finally:
        first.rmdir()
        second.rmdir()

