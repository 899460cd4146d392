"""Start a program as PID 2 of fresh user + PID (+ mount, IPC, network) namespaces.

    python -I -S .../egg_mcp/sandbox/launch.py [--tell-arg FLAG] -- argv...     (what spawn_prefix() returns)

Stdlib only and no package imports, so it starts in milliseconds. The outer process L calls unshare(2),
maps its uid/gid, and forks C, which is PID 1 of the new PID namespace: C mounts a private /proc (so the
program sees only its own namespace) and a private /dev/shm, forks G which execs argv, reaps orphans,
forwards signals to G, and reports G's wait status to L through a pipe. When G ends, C exits at once and the kernel
kills every
process left in the namespace (whatever a child of the candidate did); L then exits with G's status
(or dies of G's signal). If L is killed, C gets SIGKILL (PR_SET_PDEATHSIG), which again ends the
namespace. Exit status 125 with a message on stderr: no namespace could be created.

With `--tell-arg FLAG` the program is told which namespaces (and private mounts) are in force by two words
appended to its argv, `FLAG user,pid,...`; nothing is put in its environment, which candidate code inherits
and reads (a marker there would tell a candidate that it runs in the sandbox).
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import struct
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x10000000, \
    0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 1, 24
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

_libc = ctypes.CDLL(None, use_errno=True)
_MAX_FD = min(max(os.sysconf("SC_OPEN_MAX"), 1 << 16), 1 << 20)  # closerange uses close_range(2) where it can


def _err(what: str) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, f"{what}: {os.strerror(e)}")


def _attempts(root: bool) -> list[tuple[int, list[str]]]:
    full = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET
    out = [(CLONE_NEWUSER | full, ["user", "pid", "mount", "ipc", "net"]),
           (CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS, ["user", "pid", "mount"])]
    if root:  # root may create the namespaces without a user namespace (e.g. userns disabled by sysctl)
        out += [(full, ["pid", "mount", "ipc", "net"]), (CLONE_NEWPID | CLONE_NEWNS, ["pid", "mount"])]
    return out


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def enter_namespaces() -> list[str]:
    """unshare(2) the strongest set this host allows; returns the namespace names (raises OSError if none)."""
    uid, gid = os.geteuid(), os.getegid()
    last: OSError | None = None
    for flags, names in _attempts(uid == 0):
        if _libc.unshare(flags) != 0:
            last = _err(f"unshare({'+'.join(names)})")
            continue
        if flags & CLONE_NEWUSER:  # identity map: same uid/gid inside, capabilities only over our namespaces
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
            _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
        return names
    raise last or OSError("no namespace attempt")


def _private_mounts() -> list[str]:
    """In the new mount namespace: a /proc of the new PID namespace, and a private /dev/shm (the host's
    is shared by every process; this one only by the program and its children)."""
    if _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return []
    done = []
    if _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0:
        done.append("proc")
    if os.path.isdir("/dev/shm") and _libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV,
                                                  b"mode=1777,size=1g") == 0:
        done.append("shm")
    return done


def _forward(pid: int) -> None:
    def handler(sig: int, _frame: object) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, handler)


def _become_program() -> None:
    """G, before it becomes the program: dies with C, and holds no capability (the program may run as uid 0 of
    the namespace: with an empty bounding set it gets none, over the namespace's mounts or anything else)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)


def _exec(argv: list[str], marker: str, tell_arg: str | None) -> None:
    """G: become the program (never returns)."""
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED):
            signal.signal(sig, signal.SIG_DFL)
        if tell_arg:
            argv = [*argv, tell_arg, marker]
        os.execvp(argv[0], argv)
    except BaseException as exc:  # noqa: BLE001 - report and die, never fall back into the launcher
        os.write(2, f"egg_mcp.sandbox.launch: cannot exec {argv[0]!r}: {exc}\n".encode())
    os._exit(127)


def _init(program: Callable[[str], None], names: list[str], status_w: int, life_r: int) -> None:
    """C: PID 1 of the new namespace (never returns); G runs `program(namespaces)`, which never returns."""
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if select.select([life_r], [], [], 0)[0]:  # L died before PDEATHSIG was armed
            os._exit(1)
        if "mount" in names:
            names = [*names, *_private_mounts()]
        child = os.fork()
        if child == 0:
            os.close(status_w)
            os.close(life_r)
            try:
                _become_program()
                program(",".join(names))
            finally:
                os._exit(127)
        _forward(child)
        os.close(life_r)
        os.closerange(3, status_w)
        os.closerange(status_w + 1, _MAX_FD)
        while True:
            pid, status = os.waitpid(-1, 0)  # reaps orphans of the program too
            if pid == child:
                os.write(status_w, struct.pack("i", status))
                os._exit(0)  # PID 1 exits: the kernel kills everything left in the namespace
    except BaseException as exc:  # noqa: BLE001
        os.write(2, f"egg_mcp.sandbox.launch (init): {exc}\n".encode())
    os._exit(1)


def run(program: Callable[[str], None]) -> int:
    """L: enter the namespaces and run `program(namespaces)` (which never returns) as G in them; G's status the way
    a shell reports it (a signal: this process dies of it). 125 with a message: no namespace could be created.
    The exec launcher below uses it, and so does a process that forked itself instead of exec-ing a program (the
    interpreter runners' template, egg_mcp/evaluation/runner_template.py)."""
    try:
        names = enter_namespaces()
    except OSError as exc:
        print(f"egg_mcp.sandbox.launch: no namespaces on this host: {exc}", file=sys.stderr)
        return 125
    status_r, status_w = os.pipe()
    life_r, life_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        os.close(life_w)
        _init(program, names, status_w, life_r)
    os.close(status_w)
    os.close(life_r)
    _forward(init)
    keep = sorted((status_r, life_w))
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, _MAX_FD)
    _, init_status = os.waitpid(init, 0)
    data = os.read(status_r, 4)
    status = struct.unpack("i", data)[0] if len(data) == 4 else init_status
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def main(args: list[str]) -> int:
    tell_arg = None
    if "--" in args:
        options, args = args[:args.index("--")], args[args.index("--") + 1:]
        if "--tell-arg" in options and options.index("--tell-arg") + 1 < len(options):
            tell_arg = options[options.index("--tell-arg") + 1]
    if not args:
        print("usage: launch.py [--tell-arg FLAG] -- program [args...]", file=sys.stderr)
        return 2
    return run(lambda marker: _exec(args, marker, tell_arg))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
