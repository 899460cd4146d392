"""Server configuration: where the workspace lives, which files may be read, and hard limits.

Everything a user can set comes from CLI flags or `EGG_MCP_*` environment variables, so that a
Claude Desktop JSON snippet and a shell session configure the server the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

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


def default_scratch_dir(workspace: Path) -> Path:
    """Where workers' folders go (runners' private dirs go to the system temp dir): $EGG_MCP_SCRATCH, else
    `<temp>/egg-mcp-<uid>/<hash of the workspace path>`, outside the workspace, so whatever a job writes never
    fills the disk the workspace's database lives on by accident, and never lands beside its artifacts.
    One folder per workspace: two servers on one machine with different workspaces never share one."""
    env = os.environ.get("EGG_MCP_SCRATCH")
    if env:
        return Path(env).expanduser()
    import hashlib
    import tempfile

    key = hashlib.sha256(str(Path(workspace).expanduser().resolve()).encode()).hexdigest()[:12]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"egg-mcp-{uid}" / key


def _env_paths(name: str) -> list[Path]:
    raw = os.environ.get(name, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def _env_float(name: str, default: float) -> float:
    """A positive number from `name`, or `default`; a bad value is an error naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number (seconds)") from None
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"{name}={raw!r} must be a finite number > 0")
    return value


def output_exchange_from_bytes() -> int:
    """Reference outputs from this size go from runner to judge through shared memory (evaluation/exchange.py):
    $EGG_MCP_EXCHANGE_FROM_BYTES, else 64 MiB (tests lower it to send small outputs that way)."""
    return int(_env_float("EGG_MCP_EXCHANGE_FROM_BYTES", float(64 << 20)))


RUN_LIMIT_FACTOR = 100
"""A candidate 100x slower than eager PyTorch is already a verdict: no need to wait longer."""
CALLS_PER_VERIFY = 200
"""Forward calls a verify job makes at most, roughly: correctness trials, warm-up and the timing loop."""


def derived_run_timeout(eager_ms: float | None, floor_s: float, ceiling_s: float) -> float:
    """Run-phase limit of one verify: clamp(100 x eager time x calls per verify, floor, ceiling).

    Without a measured eager time (no GPU) the ceiling (the configured run limit) applies."""
    if eager_ms is None or not eager_ms > 0:
        return ceiling_s
    derived = RUN_LIMIT_FACTOR * CALLS_PER_VERIFY * eager_ms / 1000.0
    return max(min(derived, ceiling_s), min(floor_s, ceiling_s))


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
    ray_address: str | None = Field(default_factory=lambda: os.environ.get("EGG_MCP_RAY") or None)
    """Cluster mode (`--ray auto|ADDRESS`, $EGG_MCP_RAY): evaluation jobs go to lanes on this Ray cluster."""
    isolated_timing: bool = Field(
        default_factory=lambda: os.environ.get("EGG_MCP_ISOLATED_TIMING", "1").strip() not in ("0", "false", "no")
    )
    """Also time each verified candidate's kernels per call from a clean L2 with CUPTI timestamps, the
    condition ncu measures (~0.03-0.04 s per verify on the H200); EGG_MCP_ISOLATED_TIMING=0 turns it off."""
    compile_timeout_s: float = Field(default_factory=lambda: _env_float("EGG_MCP_COMPILE_TIMEOUT_S", 120.0), gt=0)
    """Limit on loading and compiling a candidate (Triton JIT of every kernel); EGG_MCP_COMPILE_TIMEOUT_S."""
    run_timeout_s: float = Field(default_factory=lambda: _env_float("EGG_MCP_RUN_TIMEOUT_S", 300.0), gt=0)
    """Ceiling of the run phase of one verify (EGG_MCP_RUN_TIMEOUT_S); the limit actually used is
    derived from the reference's measured eager time (see `derived_run_timeout`)."""
    run_timeout_floor_s: float = Field(default_factory=lambda: _env_float("EGG_MCP_RUN_TIMEOUT_FLOOR_S", 30.0), gt=0)
    """Floor of the derived run limit (EGG_MCP_RUN_TIMEOUT_FLOOR_S): process and timer overheads."""
    analysis_timeout_s: float = Field(default_factory=lambda: _env_float("EGG_MCP_ANALYSIS_TIMEOUT_S", 120.0), gt=0)
    """Limit on start_task's reference analysis (EGG_MCP_ANALYSIS_TIMEOUT_S)."""
    max_eval_bytes: int = Field(
        default_factory=lambda: int(_env_float("EGG_MCP_MAX_EVAL_GIB", 16.0) * 2**30), gt=0)
    """Largest estimated problem footprint size_overrides may ask for (EGG_MCP_MAX_EVAL_GIB, default 16)."""

    unsafe_sandbox_floor: Literal["none", "env", "landlock"] | None = Field(
        default_factory=lambda: os.environ.get("EGG_MCP_UNSAFE_SANDBOX_FLOOR", "").strip() or None)
    """Lower the sandbox floor to this level (`--unsafe-sandbox-floor`, EGG_MCP_UNSAFE_SANDBOX_FLOOR): candidates
    then run on a host without Landlock or user namespaces, and every result's text says the weak level. Default
    (None): every layer the kernel offers, at least Landlock + user/PID namespaces (egg_mcp.sandbox.floor)."""

    scratch: Path | None = None
    """Workers' folders: None means `default_scratch_dir(workspace)` (EGG_MCP_SCRATCH, else the temp dir)."""

    def scratch_dir(self) -> Path:
        return Path(self.scratch) if self.scratch is not None else default_scratch_dir(self.workspace)

    def readable_roots(self) -> list[Path]:
        roots = [r.resolve() for r in self.allowed_roots]
        if self.kernelbench_dir is not None:
            roots.append(self.kernelbench_dir.resolve())
        return roots
