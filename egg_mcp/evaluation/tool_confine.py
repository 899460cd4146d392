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
Writes: only the process's own dir (the tools' temporary files follow TMPDIR, which points there), and
for ncu its host-wide lock file, /tmp/nvidia/nsight_compute/lock: ncu's injection opens it for writing
(it serialises profiling sessions on a host) whatever TMPDIR says. Without it, on the H200 (ncu 2025.3.1):
"Failed to open/create lock file /tmp/nvidia/nsight_compute/lock ... Failed to profile" for every kernel
launched after confinement (benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/ncu_caps.log). The
trusted code creates the file before confining and grants write on that one regular file (no symlink on
its path, owned by this user or root); the dir and everything else in /tmp stay closed.
Stdlib only: runners import this before torch.
"""

from __future__ import annotations

import os
import stat
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
    a tree that is or holds a home directory or one of `avoid` (the job's dir, the workspace, the allowed
    folders; landlock.grantable): a tool installed in ~/bin gets its bin dir only, not the home."""
    if not tool:
        return None
    real = Path(os.path.realpath(tool))
    protect = _protect(avoid)
    for root in ((real.parent.parent, real.parent) if real.parent.name == "bin" else (real.parent,)):
        if str(root) in ("/", "/usr", "/bin"):
            return None
        if grantable(root, protect):
            return str(root)
    return None


def _protect(avoid: Sequence[str]) -> list[str]:
    from egg_mcp.sandbox.landlock import protected_paths

    return protected_paths([a for a in avoid if a])


def grantable(root: Path, protect: Sequence[str]) -> bool:
    from egg_mcp.sandbox import landlock

    return landlock.grantable(root, protect)


INJECTION_VARS = ("LD_PRELOAD", "CUDA_INJECTION64_PATH")
"""Where a tool's frontend names the libraries it injects into the wrapped process (set by the tool, read here
before any job code runs)."""


def mapped_injections(maps_text: str | None = None) -> list[str]:
    """Injection libraries already loaded into this process (/proc/self/maps, names containing "njection":
    ncu's libcuda-injection.so, libTreeLauncherTargetInjection.so, ...). Why: on the H200 ncu 2025.3.1's
    preload library took LD_PRELOAD out of the process's environment before Python started, so the
    environment alone named nothing, and the worker's gcc/ptxas children could not load the injection."""
    if maps_text is None:
        try:
            with open("/proc/self/maps") as f:
                maps_text = f.read()
        except OSError:
            return []
    found: list[str] = []
    for line in maps_text.splitlines():
        fields = line.split(None, 5)
        path = fields[5].strip() if len(fields) == 6 else ""
        if path.startswith("/") and "njection" in os.path.basename(path) and path not in found:
            found.append(path)
    return found


def injection_roots(env: Mapping[str, str], avoid: Sequence[str] = (), maps_text: str | None = None) -> list[str]:
    """The install trees of the libraries a tool injected (read+execute). Why: on the H200 `ncu` in
    /usr/local/cuda/bin is a launcher for /opt/nvidia/nsight-compute/<version>; its injection libraries
    (LD_PRELOAD, target/linux-desktop-*/) and what they load lazily lie under that tree, which the tool's own
    path does not reveal. Under Landlock without this grant ncu printed "Failed to profile" and the worker
    exited with code 11. The tree is the part before `target/` (ncu's layout) or the library's own dir;
        never "/", a top-level dir such as /usr or /opt, or a tree holding one of `avoid`. `maps_text`: the
    process's memory map (None: this process's /proc/self/maps; see mapped_injections)."""
    roots: list[str] = []
    protect = _protect(avoid)
    named = [item for var in INJECTION_VARS for item in env.get(var, "").replace(":", " ").split()]
    for item in named + mapped_injections(maps_text):
        if not os.path.isabs(item):
            continue
        real = Path(os.path.realpath(item))
        parts = real.parts
        root = Path(*parts[:parts.index("target")]) if "target" in parts[:-1] else real.parent
        if len(root.parts) < 3 or not grantable(root, protect):
            continue
        if str(root) not in roots and root.exists():
            roots.append(str(root))
    return roots


NCU_LOCK = ("nvidia", "nsight_compute", "lock")


def ncu_lock_files(roots: Sequence[str] = ("/tmp",)) -> list[Path]:
    """ncu's lock file under each root, created if missing (0666, as ncu makes it for every user); only
    a regular file reached without a symlink and owned by this user or root is returned."""
    out: list[Path] = []
    for root in dict.fromkeys(roots):
        path = Path(root).joinpath(*NCU_LOCK)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
            try:
                info = os.fstat(fd)
                if info.st_uid == os.getuid() and info.st_mode & 0o777 != 0o666:
                    os.fchmod(fd, 0o666)
            finally:
                os.close(fd)
        except OSError:
            continue
        if os.path.realpath(path) != os.path.abspath(path):
            continue  # a symlink somewhere on the path: never grant write through it
        info = os.lstat(path)
        if stat.S_ISREG(info.st_mode) and info.st_uid in (os.getuid(), 0):
            out.append(path)
    return out


def confine_wrapped(private_dir: Path, tool: str | None, tool_argv: Sequence[str] = (), **told: Any) -> dict[str, Any]:
    """Confine the calling process, wrapped by `tool` (see module docstring); what was applied (a dict).
    `told`: env_allowlist / namespaces from a runner's argv (confinement.confine)."""
    from egg_mcp.config import environment_copy, take_sandbox_protect, take_tool_ipc
    from egg_mcp.evaluation import confinement
    from egg_mcp.sandbox.landlock import split_protect

    ipc_open = take_tool_ipc() == "open"
    # every home dir comes from the password database (landlock.home_dirs): here HOME is the private dir
    protected = [*told.pop("protect", ()), *split_protect(take_sandbox_protect())]
    avoid = [str(private_dir), *protected]
    root = tool_root(tool, avoid)
    rules: dict[str, Any] = {"tcp_ports": tool_ports(tool_argv), "scope_abstract_sockets": False} if ipc_open else {}
    extra = [Path(r) for r in ([root] if root else []) + injection_roots(environment_copy(), avoid)]
    locks = ncu_lock_files() if tool and os.path.basename(tool) == "ncu" else []
    report = confinement.confine(Path(private_dir), extra_read=extra, extra_write=locks, protect=protected, **rules,
                                 **told)
    if locks:
        report.setdefault("notes", []).append(f"write access to ncu's lock file {', '.join(map(str, locks))} only")
    report["wrapped_by"] = os.path.basename(tool) if tool else "unknown tool"
    return report


def ipc_env(base_env: Mapping[str, str]) -> dict[str, str]:
    """The operator's EGG_MCP_TOOL_IPC, passed on to a wrapped process (it pops it before any job code)."""
    from egg_mcp.config import TOOL_IPC_VAR

    return {TOOL_IPC_VAR: base_env[TOOL_IPC_VAR]} if base_env.get(TOOL_IPC_VAR) else {}


def wrapped_worker_env(base_env: Mapping[str, str], workdir: Path, *, interpreter: bool,
                       server_pid: int) -> dict[str, str]:
    """The whole environment of a tool-wrapped worker and its tool: the runners' allow-list (no token, no
    EGG_MCP_* but the server's pid for the watchdog) and private HOME/TMPDIR/caches under `workdir`."""
    from egg_mcp.config import EXTRA_JOB_TARGETS_VAR, PROTECT_VAR, REQUIRED_VAR, SERVER_PID_VAR
    from egg_mcp.evaluation import confinement

    # what no grant may expose and the sandbox floor (the worker pops both before the job's code runs), and the
    # extra job targets the test suite allows (tests.doubles)
    said = {k: base_env[k] for k in (PROTECT_VAR, REQUIRED_VAR, EXTRA_JOB_TARGETS_VAR) if base_env.get(k)}
    env = confinement.runner_env(base_env, Path(workdir) / "private", interpreter=interpreter,
                                 extra={SERVER_PID_VAR: str(server_pid), **ipc_env(base_env), **said})
    return env
