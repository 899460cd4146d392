"""The judge's view of the sandbox: `egg_mcp.sandbox` (SANDBOX_API.md) when present, a small stdlib
fallback otherwise, so the judge/runner split works on every host and grows stronger when the
sandbox package (Landlock, user+PID namespaces) is installed.

The fallback gives: an environment allow-list with private HOME/TMP/caches, no-new-privs, a
child subreaper and descendant killing through /proc. It confines no filesystem access and
scopes no signals; `report()` says so, and every EvalResult carries the report.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from egg_mcp.config import ENV_MARKER, TOKEN_VAR

try:  # the sandbox helper's package (may not be merged yet)
    from egg_mcp import sandbox as _sandbox  # type: ignore[attr-defined]
except Exception:  # noqa: BLE001
    _sandbox = None

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
PR_SET_NO_NEW_PRIVS = 38

_ALLOWED_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME",
                "CUDA_PATH", "LD_LIBRARY_PATH", "TRITON_INTERPRET", "TRITON_PTXAS_PATH", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "PYTHONHASHSEED", "TERM")
_ALLOWED_PREFIXES = ("LC_", "NVIDIA_")
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH")


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _prctl(option: int, arg: int) -> bool:
    libc = _libc()
    if libc is None or not sys.platform.startswith("linux"):
        return False
    return libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0


def is_secret(name: str) -> bool:
    """Environment names that never reach a worker or a runner (tokens, keys, passwords)."""
    upper = name.upper()
    return upper.startswith(TOKEN_VAR) or any(word in upper for word in _SECRET_WORDS)


def runner_env(base_env: Mapping[str, str], private_dir: Path, *, interpreter: bool,
               extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The runner's whole environment: an allow-list, private HOME/TMP/caches, PYTHONPATH to egg_mcp."""
    if _sandbox is not None and hasattr(_sandbox, "runner_env"):
        return dict(_sandbox.runner_env(base_env, private_dir, interpreter=interpreter, extra=extra))
    import egg_mcp

    env = {k: v for k, v in base_env.items()
           if (k in _ALLOWED_ENV or k.startswith(_ALLOWED_PREFIXES)) and not is_secret(k)}
    private = Path(private_dir)
    for key, sub in (("HOME", "home"), ("TMPDIR", "tmp"), ("TRITON_CACHE_DIR", "triton_cache"),
                     ("TORCHINDUCTOR_CACHE_DIR", "inductor_cache"), ("XDG_CACHE_HOME", "cache"),
                     ("XDG_CONFIG_HOME", "config")):
        (private / sub).mkdir(parents=True, exist_ok=True)
        env[key] = str(private / sub)
    env["PYTHONPATH"] = str(Path(egg_mcp.__file__).resolve().parent.parent)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PATH", "/usr/bin:/bin")
    if interpreter:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
    env.update(extra or {})
    return env


def take_env_marker(env: dict[str, str]) -> bool:
    """Take the sandbox's allow-list marker (runner_env's) out of a runner's environment: whether it was
    there. The judge says it in the runner's argv instead, so the environment names no sandbox."""
    return env.pop(ENV_MARKER, None) == "allowlist"


def spawn_prefix(tell_arg: str | None = None) -> list[str]:
    """argv prefix that starts the runner in its own user+PID namespaces where the sandbox offers it; with
    `tell_arg`, the launcher appends `tell_arg <namespaces>` to the runner's argv (never its environment)."""
    if _sandbox is not None and hasattr(_sandbox, "spawn_prefix"):
        try:
            return list(_sandbox.spawn_prefix(tell_arg) if tell_arg else _sandbox.spawn_prefix())
        except Exception:  # noqa: BLE001 - a missing namespace is a weaker sandbox, not a failure
            return []
    return []


def confine(private_dir: Path, *, extra_read: Sequence[Path] = (), extra_write: Sequence[Path] = (),
            **tool_rules: Any) -> dict[str, Any]:
    """Inside the runner, before any candidate code: the strongest confinement on offer; what was applied.
    `tool_rules` (tcp_ports, scope_abstract_sockets) are for a process a tool wraps (tool_confine.py);
    `env_allowlist` and `namespaces` are what the judge and the launcher told the runner in its argv."""
    if _sandbox is not None:
        return dict(_sandbox.confine_dict(private_dir, extra_read=extra_read, extra_write=extra_write, **tool_rules))
    tool_rules.pop("env_allowlist", None)  # what the judge told the runner: the fallback reports env anyway
    tool_rules.pop("namespaces", None)
    tool_rules.pop("protect", None)
    nnp = _prctl(PR_SET_NO_NEW_PRIVS, 1)
    return {
        "level": "env", "env_allowlist": True, "landlock_abi": None, "fs_confined": False,
        "signals_scoped": False, "pid_namespace": False, "no_new_privs": nnp,
        "notes": ["egg_mcp.sandbox is not installed: environment allow-list and private dirs only; the "
                  "runner can still read and write what the server's user can (install the sandbox package "
                  "on a Linux kernel with Landlock for filesystem confinement)"],
    }


def drop_capabilities() -> bool:
    """Empty this process's capability sets (bounding set first). A runner started by root keeps uid 0
    but loses CAP_SYS_PTRACE / CAP_DAC_* and friends: non-dumpable processes' /proc files (the judge's,
    the server's) become unreadable to it, and no later exec regains them (no_new_privs)."""
    libc = _libc()
    if libc is None or not sys.platform.startswith("linux"):
        return False
    if os.geteuid() != 0 and not _has_effective_caps():
        return True
    PR_CAPBSET_DROP = 24
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    SYS_capset = {"x86_64": 126, "aarch64": 91}.get(os.uname().machine)
    if SYS_capset is None:
        return False
    return libc.syscall(SYS_capset, ctypes.byref(header), ctypes.byref(data)) == 0 and not _has_effective_caps()


def _has_effective_caps() -> bool:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16) != 0
    except OSError:
        pass
    return False


def become_subreaper() -> bool:
    """Orphaned descendants (a candidate's setsid children) are re-parented to this process."""
    if _sandbox is not None and hasattr(_sandbox, "become_subreaper"):
        return bool(_sandbox.become_subreaper())
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def is_subreaper() -> bool:
    """Whether become_subreaper() holds for this process (prctl PR_GET_CHILD_SUBREAPER)."""
    libc = _libc()
    if libc is None or not sys.platform.startswith("linux"):
        return False
    flag = ctypes.c_int(0)
    return libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value == 1


def protect_memory(protect: bool = True) -> bool:
    """Non-dumpable: /proc/<pid>/{mem,environ,fd,maps} of this process become root-owned, so a
    same-user runner can neither read its memory and environment nor use its file descriptors.
    `protect=False`: dumpable again (a fork of a protected process that becomes a runner)."""
    return _prctl(PR_SET_DUMPABLE, 0 if protect else 1)


def die_with_parent() -> bool:
    """SIGKILL this process when the parent (the judge) dies."""
    return _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return children
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid: int | None = None) -> list[int]:
    pid = os.getpid() if pid is None else pid
    children = _children_map()
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


def kill_descendants(pid: int | None = None, sig: int = signal.SIGKILL) -> int:
    """Kill every descendant of `pid` (default: this process); returns how many were signalled."""
    if _sandbox is not None and hasattr(_sandbox, "kill_descendants"):
        return int(_sandbox.kill_descendants(pid, sig))
    count = 0
    for _ in range(3):  # a forking child can add descendants between the walk and the kill
        found = descendants(pid)
        if not found:
            break
        for child in found:
            try:
                os.kill(child, sig)
                count += 1
            except (ProcessLookupError, PermissionError):
                pass
    return count
