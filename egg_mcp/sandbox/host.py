"""What this host can offer: `probe()` for `doctor`, `spawn_prefix()` for whoever starts runners."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from egg_mcp.sandbox import _sys as S
from egg_mcp.sandbox.landlock import NO_LANDLOCK_NOTE
from egg_mcp.sandbox.report import SandboxReport

LAUNCHER = Path(__file__).resolve().parent / "launch.py"
TELL_ARG = "--namespaces"
"""The flag under which the launcher appends the namespaces in force to the program's argv."""
_CHECK = ("import os, sys; print(sys.argv[-1] if sys.argv[-2:-1] == ['--namespaces'] else ''); "
          "sys.exit(0 if os.getpid() == 2 else 3)")


@functools.lru_cache(maxsize=1)
def _namespaces() -> tuple[list[str], str]:
    """(namespaces the launcher gets, why not); tried once per process with a throw-away child."""
    if sys.platform != "linux":
        return [], f"{sys.platform} has no Linux namespaces"
    argv = [sys.executable, "-I", "-S", str(LAUNCHER), "--tell-arg", TELL_ARG, "--", sys.executable, "-I", "-S",
            "-c", _CHECK]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": os.defpath})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"namespace launcher failed: {exc}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return [], why
    return done.stdout.strip().split(","), ""


def spawn_prefix(tell_arg: str | None = None) -> list[str]:
    """argv prefix that starts a runner in new user+PID(+mount, IPC, net) namespaces; [] where the host
    refuses (then the runner is only as contained as `confine` makes it). With `tell_arg` (e.g. TELL_ARG),
    the program's argv ends with `tell_arg names`, which it hands to `confine(namespaces=...)`; the
    environment never names the sandbox."""
    names, _ = _namespaces()
    if "pid" not in names:
        return []
    return [sys.executable, "-I", "-S", str(LAUNCHER), *(["--tell-arg", tell_arg] if tell_arg else []), "--"]


def probe() -> SandboxReport:
    """The strongest sandbox this host offers a runner (nothing is confined by calling this)."""
    report = SandboxReport(env_allowlist=True)
    if sys.platform != "linux":
        report.level = "env"
        report.notes.append(f"{sys.platform}: no Landlock or namespaces; run the server in a Linux VM or container "
                            "for a filesystem sandbox")
        return report
    report.no_new_privs = True
    report.capabilities_dropped = True  # confine empties a root runner's sets; others hold none
    abi = S.landlock_abi()
    report.landlock_abi = abi
    if abi is None:
        report.notes.append(NO_LANDLOCK_NOTE)
    else:
        report.fs_confined = True
        report.network_confined = abi >= 4
        report.signals_scoped = abi >= 6
        report.abstract_sockets_scoped = abi >= 6
        if abi < 6:
            report.notes.append(f"Landlock ABI {abi}: signals and abstract sockets are not scoped (Linux >= 6.12 "
                                "has ABI 6)" + ("; TCP is not restricted (Linux >= 6.7)" if abi < 4 else ""))
        if abi < 8:
            report.notes.append(f"Landlock ABI {abi} < 8: a runner must call confine() before torch starts a thread "
                                "(threads already running stay outside the domain); ABI 8 (TSYNC) lifts this")
    if os.path.exists("/dev/nvidiactl") and not os.path.exists("/dev/nvidia-uvm"):
        report.notes.append("/dev/nvidia-uvm does not exist yet: a confined runner cannot create it (no setuid "
                            "nvidia-modprobe under no_new_privs, no mknod under Landlock); run `nvidia-modprobe -u "
                            "-c=0` or any CUDA program once after boot")
    names, why = _namespaces()
    report.pid_namespace = "pid" in names
    if report.pid_namespace:
        report.notes.append(f"namespaces: {', '.join(names)}")
    else:
        report.notes.append(f"no PID namespace for runners ({why}): they can list other processes; allow "
                            "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                            "user.max_user_namespaces > 0, or on Ubuntu "
                            "kernel.apparmor_restrict_unprivileged_userns=0) "
                            "or run the server in a container started with --security-opt seccomp=unconfined")
    if report.fs_confined:
        report.level = "landlock+ns" if report.pid_namespace else "landlock"
    else:
        report.level = "env"
    return report
