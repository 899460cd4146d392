"""Server configuration: where the workspace lives, which files may be read, and hard limits.

Everything a user can set comes from CLI flags or `EGG_MCP_*` environment variables, so that a
Claude Desktop JSON snippet and a shell session configure the server the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field


def default_workspace_dir() -> Path:
    """Per-user data directory (XDG on Linux, ~/Library on macOS)."""
    env = os.environ.get("EGG_MCP_WORKSPACE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "egg-mcp"
    home = Path.home()
    mac = home / "Library" / "Application Support"
    if mac.is_dir():
        return mac / "egg-mcp"
    return home / ".local" / "share" / "egg-mcp"


def _env_paths(name: str) -> list[Path]:
    raw = os.environ.get(name, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


class ServerConfig(BaseModel):
    """Everything the server needs to know before it accepts a call."""

    workspace: Path = Field(default_factory=default_workspace_dir)
    kernelbench_dir: Path | None = Field(
        default_factory=lambda: Path(os.environ["EGG_MCP_KERNELBENCH_DIR"]).expanduser()
        if os.environ.get("EGG_MCP_KERNELBENCH_DIR")
        else None
    )
    allowed_roots: list[Path] = Field(default_factory=lambda: _env_paths("EGG_MCP_ALLOWED_ROOTS"))
    max_source_bytes: int = 256 * 1024
    """Largest reference or candidate source accepted (a real kernel file is a few KB)."""
    force_interpreter: bool = Field(
        default_factory=lambda: os.environ.get("EGG_MCP_FORCE_INTERPRETER", "") not in ("", "0")
    )
    """Evaluate with TRITON_INTERPRET=1 on the CPU even when a GPU is present (tests, debugging)."""
    isolated_timing: bool = Field(
        default_factory=lambda: os.environ.get("EGG_MCP_ISOLATED_TIMING", "1").strip() not in ("0", "false", "no")
    )
    """Also time each verified candidate's kernels per call from a clean L2 with CUPTI timestamps, the
    condition ncu measures (~0.03-0.04 s per verify on the H200); EGG_MCP_ISOLATED_TIMING=0 turns it off."""
    compile_timeout_s: float = 120.0
    run_timeout_s: float = 300.0

    def readable_roots(self) -> list[Path]:
        roots = [r.resolve() for r in self.allowed_roots]
        if self.kernelbench_dir is not None:
            roots.append(self.kernelbench_dir.resolve())
        return roots
