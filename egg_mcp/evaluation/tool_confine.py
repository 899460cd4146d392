"""Confinement for a process that a tool wraps (ncu around a profiling worker, compute-sanitizer around
a memcheck runner): the same Landlock domain as any job, plus read access to the tool's install tree.

The tool's frontend (ncu, compute-sanitizer) is started by trusted code and stays outside the domain;
its injection library runs inside the wrapped process and talks to the frontend. Measured on the H200
(lead's probe, ncu and compute-sanitizer 2025.3.1, Landlock ABI 7): a target that initialised CUDA and
then confined itself with the DEFAULT rules (TCP bind/connect denied, abstract unix sockets and signals
scoped, writes only to its private dir) was still profiled, and the sanitizer still wrote its report.
So the default is the full domain. For a tool version whose injection opens new connections after
confinement, the operator sets EGG_MCP_TOOL_IPC=open in the server's environment: the wrapped process
then may bind/connect TCP on the tool's port range only (49152 + 64, or its --port/--max-connections)
and abstract unix sockets are left unscoped (signals stay scoped); the sandbox report says so.
Writes: only the process's own dir (the tools' temporary files follow TMPDIR, which points there).

Counters on an admin-only driver: where the NVIDIA driver restricts GPU performance counters to admins
(/proc/driver/nvidia/params: RmProfilingAdminOnly: 1, the default) ncu's injection reads them with the
profiled process's capabilities, so a process that dropped every capability gets "Failed to profile"
(H200, root, 2026-12-01: benchmarks/results/h200_2026-12-01_s6/). There, an ncu-wrapped process that
holds CAP_SYS_ADMIN keeps that one capability, under a seccomp deny-list (egg_mcp/sandbox/seccomp.py:
bpf, perf_event_open, fanotify, keyctl, namespaces, mounts, ptrace, modules, ...) and the same Landlock
domain; the sandbox report says so. Profile jobs never decide a verdict. Operators who do not want that
set EGG_MCP_NCU_ADMIN=never (profile_ncu then answers without counters) or, better, allow counters to all
users on the host (`options nvidia NVreg_RestrictProfilingToAdminUsers=0`), and nothing is kept.
Stdlib only: runners import this before torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PORT_BASE = 49152
"""ncu's and compute-sanitizer's default base port for frontend <-> target connections."""
MAX_CONNECTIONS = 64
"""ports tried from the base (ncu's default --max-connections)."""


def tool_ports(argv: Sequence[str] = ()) -> list[int]:
    """The TCP ports the tool may use: its --port / --max-connections when given, else the defaults."""
    base, count = PORT_BASE, MAX_CONNECTIONS
    args = list(argv)
    for i, arg in enumerate(args[:-1]):
        if arg == "--port" and args[i + 1].isdigit():
            base = int(args[i + 1])
        elif arg == "--max-connections" and args[i + 1].isdigit():
            count = max(count, int(args[i + 1]))
    return list(range(base, min(base + count, 65536)))


def tool_root(tool: str | None, avoid: Sequence[str] = ()) -> str | None:
    """The install tree of a tool executable (the dir above its bin/, or its own dir): read+execute. Never
    a tree that holds one of `avoid` (the job's dir, the user's home): a tool installed in ~/bin gets its
    bin dir only, not the home."""
    if not tool:
        return None
    real = Path(os.path.realpath(tool))
    guarded = [Path(os.path.realpath(a)) for a in avoid if a]
    for root in ((real.parent.parent, real.parent) if real.parent.name == "bin" else (real.parent,)):
        if str(root) in ("/", "/usr", "/bin"):
            return None
        if not any(g == root or root in g.parents for g in guarded):
            return str(root)
    return None


INJECTION_VARS = ("LD_PRELOAD", "CUDA_INJECTION64_PATH")
"""Where a tool's frontend names the libraries it injects into the wrapped process (set by the tool, read here
before any job code runs)."""


def injection_roots(env: Mapping[str, str], avoid: Sequence[str] = ()) -> list[str]:
    """The install trees of the libraries a tool injected (read+execute). Why: on the H200 `ncu` in
    /usr/local/cuda/bin is a launcher for /opt/nvidia/nsight-compute/<version>; its injection libraries
    (LD_PRELOAD, target/linux-desktop-*/) and what they load lazily lie under that tree, which the tool's own
    path does not reveal. Under Landlock without this grant ncu printed "Failed to profile" and the worker
    exited with code 11. The tree is the part before `target/` (ncu's layout) or the library's own dir;
    never "/", a top-level dir such as /usr or /opt, or a tree holding one of `avoid`."""
    guarded = [Path(os.path.realpath(a)) for a in avoid if a]
    roots: list[str] = []
    for var in INJECTION_VARS:
        for item in env.get(var, "").replace(":", " ").split():
            if not os.path.isabs(item):
                continue
            real = Path(os.path.realpath(item))
            parts = real.parts
            root = Path(*parts[:parts.index("target")]) if "target" in parts[:-1] else real.parent
            if len(root.parts) < 3 or any(g == root or root in g.parents for g in guarded):
                continue
            if str(root) not in roots and root.exists():
                roots.append(str(root))
    return roots


IPC_VAR = "EGG_MCP_TOOL_IPC"
"""'open': let the tool's injection use its TCP ports and abstract sockets (see the module docstring)."""


CAP_SYS_ADMIN = 21
NCU_ADMIN_VAR = "EGG_MCP_NCU_ADMIN"
"""'never': an ncu-wrapped process drops CAP_SYS_ADMIN too (no counters on an admin-only driver)."""
DRIVER_PARAMS = "/proc/driver/nvidia/params"


def counters_admin_only(params_path: str = DRIVER_PARAMS) -> bool:
    """Whether the NVIDIA driver restricts GPU performance counters to admins (unknown: False)."""
    try:
        with open(params_path) as f:
            for line in f:
                if line.startswith("RmProfilingAdminOnly:"):
                    return line.split(":", 1)[1].strip() == "1"
    except OSError:
        pass
    return False


def caps_to_keep(tool: str | None, env: Mapping[str, str], params_path: str = DRIVER_PARAMS) -> list[int]:
    """[CAP_SYS_ADMIN] for an ncu-wrapped process on an admin-only driver (unless the operator said never)."""
    if not tool or os.path.basename(tool) != "ncu" or env.get(NCU_ADMIN_VAR, "").strip().lower() == "never":
        return []
    return [CAP_SYS_ADMIN] if counters_admin_only(params_path) else []


def confine_wrapped(private_dir: Path, tool: str | None, tool_argv: Sequence[str] = ()) -> dict[str, Any]:
    """Confine the calling process, wrapped by `tool` (see module docstring); what was applied (a dict)."""
    from egg_mcp.evaluation import confinement

    keep = caps_to_keep(tool, os.environ)
    os.environ.pop(NCU_ADMIN_VAR, None)
    ipc_open = os.environ.pop(IPC_VAR, "") == "open"
    root = tool_root(tool, avoid=[str(private_dir), os.path.expanduser("~")])
    rules: dict[str, Any] = {"tcp_ports": tool_ports(tool_argv), "scope_abstract_sockets": False} if ipc_open else {}
    avoid = [str(private_dir), os.path.expanduser("~")]
    extra = [Path(r) for r in ([root] if root else []) + injection_roots(os.environ, avoid) if r]
    if keep:
        rules["keep_caps"] = keep
    report = confinement.confine(Path(private_dir), extra_read=extra, **rules)
    report["wrapped_by"] = os.path.basename(tool) if tool else "unknown tool"
    return report


def ipc_env(base_env: Mapping[str, str]) -> dict[str, str]:
    """The operator's EGG_MCP_TOOL_IPC, passed on to a wrapped process (it pops it before any job code)."""
    return {var: base_env[var] for var in (IPC_VAR, NCU_ADMIN_VAR) if base_env.get(var)}


def wrapped_worker_env(base_env: Mapping[str, str], workdir: Path, *, interpreter: bool,
                       server_pid: int) -> dict[str, str]:
    """The whole environment of a tool-wrapped worker and its tool: the runners' allow-list (no token, no
    EGG_MCP_* but the server's pid for the watchdog) and private HOME/TMPDIR/caches under `workdir`."""
    from egg_mcp.evaluation import confinement

    env = confinement.runner_env(base_env, Path(workdir) / "private", interpreter=interpreter,
                                 extra={"EGG_MCP_SERVER_PID": str(server_pid), **ipc_env(base_env)})
    return env
