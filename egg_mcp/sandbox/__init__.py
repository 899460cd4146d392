"""Least privilege for runners (the processes that import candidate code): see docs/sandbox.md.

Pure stdlib + pydantic, never imports torch. The judge builds the runner's environment with
`runner_env`, prefixes its argv with `spawn_prefix()`, becomes a subreaper and kills the job's process
tree with `kill_descendants`; the runner calls `confine(private_dir)` (or `confine_dict`, which
needs no pydantic) first, before importing torch if it can, and always before the candidate.
Linux-only features degrade gracefully; reports say what is missing.
"""

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "SandboxReport": "report", "confine": "landlock", "confine_dict": "landlock", "runner_env": "env",
    "probe": "host", "spawn_prefix": "host", "become_subreaper": "procs", "descendants": "procs",
    "kill_descendants": "procs", "reap_zombies": "procs",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # the names __getattr__ exports, for type checkers
    from egg_mcp.sandbox.env import runner_env  # noqa: F401
    from egg_mcp.sandbox.host import probe, spawn_prefix  # noqa: F401
    from egg_mcp.sandbox.landlock import confine, confine_dict  # noqa: F401
    from egg_mcp.sandbox.procs import become_subreaper, descendants, kill_descendants, reap_zombies  # noqa: F401
    from egg_mcp.sandbox.report import SandboxReport  # noqa: F401


def __getattr__(name: str):
    """Lazy exports: a runner importing `confine_dict` never pays for pydantic."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'egg_mcp.sandbox' has no attribute {name!r}")
    return getattr(importlib.import_module(f"egg_mcp.sandbox.{_EXPORTS[name]}"), name)
