"""Least privilege for runners (the processes that import candidate code): see docs/sandbox.md.

Pure stdlib + pydantic, never imports torch. The judge builds the runner's environment with
`runner_env`, prefixes its argv with `spawn_prefix()`, becomes a subreaper and kills the job's process
tree with `kill_descendants`; the runner calls `confine(private_dir)` after importing torch/triton and
before importing the candidate. Linux-only features degrade gracefully; reports say what is missing.
"""

from egg_mcp.sandbox.confine import confine
from egg_mcp.sandbox.env import runner_env
from egg_mcp.sandbox.probe import probe, spawn_prefix
from egg_mcp.sandbox.procs import become_subreaper, descendants, kill_descendants, reap_zombies
from egg_mcp.sandbox.report import SandboxReport

__all__ = ["SandboxReport", "become_subreaper", "confine", "descendants", "kill_descendants", "probe",
           "reap_zombies", "runner_env", "spawn_prefix"]
