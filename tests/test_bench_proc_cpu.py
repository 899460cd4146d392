"""benchmarks/proc_cpu.py: CPU seconds of a benchmark's process tree by role, and waiting for it to go quiet
(the lanes benchmark reports both, so a reader can tell our overhead from other users' load)."""

import asyncio
import subprocess
import sys
import time

from benchmarks.bench_lanes import _cpu_row
from benchmarks.proc_cpu import TreeCPU, role_of, wait_quiet

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"


def test_a_grandchild_s_cpu_is_counted_under_its_role():
    script = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BUSY!r}, 'egg_mcp.evaluation.runner'])"
    with TreeCPU(every_s=0.05) as tree:
        subprocess.run([sys.executable, "-c", script], check=True)
    report = tree.report()
    assert report["processes_started_by_role"].get("runner", 0) >= 1  # the grandchild's command line names it
    assert report["cpu_s_by_role"]["runner"] >= 0.4, report  # its busy loop, give or take one sample
    assert report["cpu_s_by_role"]["driver"] < 0.3, report  # the sampler's own CPU is not ours
    assert report["wall_s"] > 0 and report["cores_busy"] > 0


def test_roles_follow_the_command_line():
    assert role_of("python -m egg_mcp.evaluation.runner --fd 4", False) == "runner"
    assert role_of("python -I -S launch.py -- python -m egg_mcp.evaluation.runner", False) == "runner"
    assert role_of("python -m egg_mcp.evaluation.judge_host --job-fd 3", False) == "judge"
    assert role_of("ray::NodeLane.run", False) == "ray_lane_actor"
    assert role_of("/x/ray/core/src/ray/raylet/raylet --a", False) == "ray_raylet"
    assert role_of("anything", True) == "driver"


def test_cpu_row_splits_the_runners_from_the_rest():
    row = _cpu_row({"cpu_s_by_role": {"runner": 30.0, "judge": 1.0, "ray_raylet": 1.0}, "cpu_s_total": 32.0,
                    "cores_busy": 1.2}, 8)
    assert row["cpu_s_per_candidate"] == 4.0
    assert row["runner_cpu_s_per_candidate"] == 3.75
    assert row["other_cpu_s_per_candidate"] == 0.25


def test_wait_quiet_waits_for_a_busy_child_and_says_so():
    # named as a runner: a runnable one (even one the load keeps waiting for a CPU) is never quiet
    child = subprocess.Popen([sys.executable, "-c", BUSY.replace("0.6", "2.0"), "egg_mcp.evaluation.runner"])
    try:
        t0 = time.monotonic()
        result = asyncio.run(wait_quiet(window_s=0.5, max_s=30))
        assert result["quiet"] and time.monotonic() - t0 >= 1.0, result
        assert sum(result["cpu_s_while_waiting"].values()) >= 1.0, result  # the child's busy loop, by role
        assert 0.5 <= result["last_busy_s"] <= result["waited_s"], result  # the busy child, seen runnable
    finally:
        child.wait()
    assert not asyncio.run(wait_quiet(window_s=0.3, max_s=0.1, below_cores=-1))["quiet"]


def test_a_child_with_a_lower_pid_than_its_parent_is_in_the_tree(monkeypatch):
    """pids wrap around (pid_max): a new process can have a lower pid than its parent; it is still ours."""
    import benchmarks.proc_cpu as proc_cpu

    fake = {100: (1, 0.0), 500: (100, 1.0), 50: (500, 2.0), 60: (7, 3.0)}  # root 100 -> 500 -> 50; 60 is not ours
    monkeypatch.setattr(proc_cpu.os, "listdir", lambda path: [str(p) for p in fake])
    monkeypatch.setattr(proc_cpu, "_stat", lambda pid: fake.get(int(pid)))
    monkeypatch.setattr(proc_cpu, "_cmdline", lambda pid: "python -m egg_mcp.evaluation.runner" if pid == "50" else "")
    tree = TreeCPU(root=100)
    tree.sample()
    assert tree.tree == {100, 500, 50} and tree.role[50] == "runner" and 60 in tree.outside
