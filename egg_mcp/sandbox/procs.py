"""Process-tree control for the judge: adopt orphans (subreaper) and kill every descendant of a job.

A runner that forks a child which calls setsid() leaves its process group and session, so killpg misses
it; when the runner dies the child is re-parented to the nearest subreaper. With the judge a subreaper,
that is the judge, so walking /proc's parent links from the judge finds it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections import defaultdict
from collections.abc import Collection

from egg_mcp.sandbox import _sys as S


def become_subreaper() -> bool:
    """prctl(PR_SET_CHILD_SUBREAPER): orphaned descendants are re-parented to us, not to init."""
    if sys.platform != "linux":
        return False
    try:
        S.prctl(S.PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        return False
    return True


def _stat(pid: int) -> tuple[int, str] | None:
    """(ppid, state) of `pid` from /proc/<pid>/stat, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()  # the name may hold spaces and parentheses
    return int(fields[1]), fields[0].decode()


def _children() -> dict[int, list[tuple[int, str]]]:
    children: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                children[st[0]].append((int(name), st[1]))
    return children


def descendants(pid: int | None = None) -> list[int]:
    """Every live (not zombie) descendant of `pid` (default: this process), parents before children."""
    root = os.getpid() if pid is None else pid
    children = _children()
    out: list[int] = []
    frontier = [root]
    while frontier:
        nxt = []
        for p in frontier:
            for child, state in children.get(p, ()):
                nxt.append(child)
                if state != "Z":
                    out.append(child)
        frontier = nxt
    return out


def kill_descendants(pid: int | None = None, sig: int = signal.SIGKILL) -> int:
    """Send `sig` to every descendant of `pid` (default: this process); returns how many were signalled.

    Freezes the tree first (SIGSTOP, re-scanned until no new process appears) so that a fork bomb cannot
    outrun the walk, then sends `sig` (and SIGCONT when `sig` is not SIGKILL, so stopped processes act on it).
    For a process that is not our child, a descendant that has already escaped by double fork is only
    found if we are its subreaper (become_subreaper) or it is in the same PID namespace we kill.
    """
    if sys.platform != "linux":
        return 0
    seen: dict[int, None] = {}  # insertion-ordered: parents before children
    for _ in range(100):
        fresh = [p for p in descendants(pid) if p not in seen]
        if not fresh:
            break
        for p in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGSTOP)
            seen[p] = None
    order = list(seen)
    for p in reversed(order):  # leaves first
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)
            if sig != signal.SIGKILL:
                os.kill(p, signal.SIGCONT)
    return len(seen)


def reap_zombies(exclude: Collection[int] = ()) -> int:
    """Reap our zombie children except `exclude` (pids a Popen/asyncio watcher will wait for itself).

    A subreaper adopts orphans that nobody else waits for; call this after kill_descendants.
    """
    reaped = 0
    for child, state in _children().get(os.getpid(), ()):
        if state == "Z" and child not in exclude:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, os.WNOHANG)
                reaped += 1
    return reaped
