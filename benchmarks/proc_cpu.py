"""CPU seconds by process role for a benchmark's whole process tree, read from /proc (no psutil).

Why: on a shared 2-core machine a wall-clock ratio mixes our overhead with other users' load. The CPU
time each of our processes burned does not: it says which process does work that is not the
candidate's (the Ray driver, raylet and GCS, the lane actors, the gateway, judges, runners, one-shot
workers). A sampler thread walks the tree under `root` every `every_s` and keeps each pid's latest
utime+stime; a process that exits between two samples loses at most `every_s` of CPU (runners live
seconds), and the report says so.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")

ROLES = (  # first match on the command line wins
    ("runner", "egg_mcp.evaluation.runner"),
    ("judge", "egg_mcp.evaluation.judge_host"),
    ("worker", "egg_mcp.evaluation.worker"),
    ("gateway", "egg_mcp.cluster.gateway"),
    ("ray_lane_actor", "ray::NodeLane"),
    ("ray_idle_worker", "ray::IDLE"),
    ("ray_raylet", "raylet"),
    ("ray_gcs", "gcs_server"),
    ("ray_other", "ray"),
)


def _stat(pid: str) -> tuple[int, float] | None:
    """(ppid, cpu seconds) of a live pid, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()  # fields after the command name (which may hold spaces)
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def role_of(cmdline: str, is_root: bool) -> str:
    if is_root:
        return "driver"
    for role, needle in ROLES:
        if needle in cmdline:
            return role
    return "other"


class TreeCPU:
    """Samples CPU seconds of `root` and all its descendants, by role. Use as a context manager."""

    def __init__(self, root: int | None = None, every_s: float = 0.25):
        self.root = root or os.getpid()
        self.every_s = every_s
        self.cpu: dict[int, float] = {}
        self.tree: set[int] = set()
        self.outside: set[int] = set()
        self.role: dict[int, str] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._base: dict[int, float] = {}
        self.sampler_cpu_s = 0.0

    def sample(self) -> None:
        """Read the tree's pids' stat files; a pid seen for the first time is read once to learn its parent
        (a pid outside the tree is remembered as such: each sample stays cheap)."""
        live = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        parents = {}
        for pid in live - self.tree - self.outside:
            st = _stat(str(pid))
            if st is not None:
                parents[pid] = st[0]
        grown = True
        while grown:  # parent before child whatever their pids (pids wrap around: a child may have the lower)
            grown = False
            for pid, ppid in list(parents.items()):
                if pid == self.root or ppid in self.tree:
                    self.tree.add(pid)
                    self.role[pid] = role_of(_cmdline(str(pid)), pid == self.root)
                    del parents[pid]
                    grown = True
        self.outside |= set(parents)
        for pid in self.tree & live:
            st = _stat(str(pid))
            if st is not None:
                self.cpu[pid] = st[1]
        self.outside &= live
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()
        self.sampler_cpu_s = time.thread_time()  # this thread's own CPU: taken off the driver's

    def __enter__(self) -> "TreeCPU":
        self.sample()
        self._base = dict(self.cpu)  # processes alive at the start count only what they burn from now
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
        self.wall_s = time.monotonic() - self._t0

    def report(self) -> dict[str, Any]:
        by_role: dict[str, float] = {"driver": -self.sampler_cpu_s}
        count: dict[str, int] = {}
        for pid, cpu in self.cpu.items():
            role = self.role[pid]
            by_role[role] = by_role.get(role, 0.0) + cpu - self._base.get(pid, 0.0)
            if pid not in self._base:
                count[role] = count.get(role, 0) + 1
        total = sum(by_role.values())
        return {"cpu_s_by_role": {k: round(v, 2) for k, v in sorted(by_role.items(), key=lambda kv: -kv[1])},
                "processes_started_by_role": count, "cpu_s_total": round(total, 2),
                "wall_s": round(self.wall_s, 2), "cores_busy": round(total / self.wall_s, 2) if self.wall_s else None,
                "sampler_cpu_s": round(self.sampler_cpu_s, 2),
                "method": f"/proc/<pid>/stat utime+stime of the benchmark's process tree every {self.every_s} s "
                "(a process that exits between samples loses at most that much); the sampler thread's own CPU "
                "is taken off the driver's"}


EVALUATION_ROLES = frozenset({"runner", "judge", "worker"})
"""The processes our engines start: while one of them is runnable, an engine is still starting something."""


def _runnable(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return False
    return data[data.rfind(")") + 2:][:1] in ("R", "D")


async def wait_quiet(root: int | None = None, below_cores: float = 0.15, window_s: float = 1.0,
                     max_s: float = 120.0, quiet_windows: int = 2) -> dict[str, Any]:
    """Wait until, for `quiet_windows` windows of `window_s` in a row, no runner, judge or worker of the
    tree under `root` was runnable at any 0.1 s look (load-proof: a process waiting for a CPU is
    runnable too) and the whole tree burned less than `below_cores` (engines done starting their spares
    and each lane's next runner); at most `max_s`. Returns how long it took, when an evaluation process
    was last seen runnable (`last_busy_s`, 0.1 s resolution), the last rate, and the CPU
    seconds burned meanwhile by role (what a timed round started at once would have shared the machine
    with). A pid that exits between two looks counts nothing; a new one counts all its CPU."""
    import asyncio

    t = TreeCPU(root)
    t.sample()
    start = dict(t.cpu)
    began = time.monotonic()
    calm = 0
    last_busy = 0.0
    while True:
        before, t0 = dict(t.cpu), time.monotonic()
        busy = False
        while time.monotonic() - t0 < window_s:
            await asyncio.sleep(0.1)
            t.sample()
            if any(_runnable(pid) for pid in t.tree if pid != t.root and t.role.get(pid) in EVALUATION_ROLES):
                busy, last_busy = True, time.monotonic() - began
        dt = time.monotonic() - t0
        burned = sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in t.cpu.items() if pid != t.root)
        rate = burned / dt
        calm = calm + 1 if rate < below_cores and not busy else 0
        waited = time.monotonic() - began
        if calm >= quiet_windows or waited >= max_s:
            by_role: dict[str, float] = {}
            for pid, cpu in t.cpu.items():
                if pid != t.root:
                    by_role[t.role[pid]] = by_role.get(t.role[pid], 0.0) + cpu - start.get(pid, 0.0)
            return {"waited_s": round(waited, 1), "last_busy_s": round(last_busy, 2),
                    "cores_at_end": round(rate, 2), "quiet": calm >= quiet_windows,
                    "cpu_s_while_waiting": {k: round(v, 2) for k, v in sorted(by_role.items(), key=lambda kv: -kv[1])
                                            if v >= 0.01}}


def suite_test_cpu(out: Path, quick: bool) -> dict[str, Any]:
    """The README's pytest command (`-m "not slow"` with --quick) under TreeCPU: CPU seconds by process role and
    the wall, for the test suite's own cost (what the 10-minute CI bound is spent on)."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadscope", "-p", "no:cacheprovider"] + (
        ["-m", "not slow"] if quick else [])
    with TreeCPU(every_s=0.1) as tree:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    report = tree.report()
    report["pytest_summary"] = (done.stdout.strip().splitlines() or [""])[-1]
    report["returncode"] = done.returncode
    return report
