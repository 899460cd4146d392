"""Interpreter runners forked from the judge's template (evaluation/runner_template.py): each is the judge's child
in a session of its own, holds no descriptor but its channel, reports its exit status like an exec'd runner, and
the judge falls back to exec'd runners when the template cannot serve. Each case runs a judge of its own (a
subprocess: the template and the subreaper are per process)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

JUDGE = textwrap.dedent('''
    import json, os, sys, tempfile, time
    from pathlib import Path
    from egg_mcp.evaluation import confinement, runner_process

    def facts(pid):
        st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return {"ppid": int(st[1]), "pgid": int(st[2]), "sid": int(st[3]),
                "fds": sorted(int(f) for f in os.listdir(f"/proc/{pid}/fd"))}

    case = sys.argv[1]
    if case != "no_subreaper":
        confinement.become_subreaper()
    wd = Path(tempfile.mkdtemp())
    out = {"judge": os.getpid()}
    if case == "template_killed":
        first = runner_process.RunnerProcess("interp", wd)
        first.wait_ready()
        first.kill()
        os.kill(runner_process._templates[0].proc.pid, 9)
        runner_process._templates[0].proc.wait()
    t0 = time.monotonic()
    r = runner_process.RunnerProcess("interp", wd)
    if case == "template_dies_first":  # while it imports: the runner asked of it is never forked
        os.kill(runner_process._templates[0].proc.pid, 9)
    r.wait_ready()
    out["ready_s"] = time.monotonic() - t0
    out["kind"] = type(r.proc).__name__
    tree = r.tree()
    out["top"] = facts(tree[0])
    out["runner"] = facts(tree[-1])  # the process that serves (PID 2 of its namespace where there are namespaces)
    out["template_alive_before"] = bool(runner_process._templates) and runner_process._templates[0].alive()
    r.kill()
    out["returncode"] = r.proc.returncode
    out["template_alive_after"] = bool(runner_process._templates) and runner_process._templates[0].alive()
    print(json.dumps(out))
''')


def _judge(case: str) -> dict:
    done = subprocess.run([sys.executable, "-c", JUDGE, case], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform != "linux", reason="the template needs Linux (prctl, /proc)")
def test_a_forked_runner_is_the_judges_child_in_its_own_session_with_only_its_channel():
    out = _judge("plain")
    assert out["kind"] == "Forked"
    top, runner = out["top"], out["runner"]
    assert top["ppid"] == out["judge"], top  # re-parented to the judge: it waits for it and reads its status
    assert top["sid"] != out["judge"] and top["pgid"] == top["sid"], top  # killpg(pid) reaches the whole tree
    assert runner["fds"] == [0, 1, 2, max(runner["fds"])], runner  # stdio and its channel, not the template's socket
    assert out["returncode"] == -9
    assert out["template_alive_before"] and out["template_alive_after"]  # kill() spares the template


@pytest.mark.skipif(sys.platform != "linux", reason="the template needs Linux (prctl, /proc)")
def test_a_judge_that_is_no_subreaper_execs_its_runners():
    out = _judge("no_subreaper")
    assert out["kind"] == "Popen" and out["top"]["ppid"] == out["judge"]
    assert out["returncode"] == -9


@pytest.mark.skipif(sys.platform != "linux", reason="the template needs Linux (prctl, /proc)")
def test_a_dead_template_gives_way_to_exec():
    out = _judge("template_killed")
    assert out["kind"] == "Popen" and not out["template_alive_after"]
    assert out["returncode"] == -9


@pytest.mark.skipif(sys.platform != "linux", reason="the template needs Linux (prctl, /proc)")
def test_a_runner_the_dead_template_never_forked_is_execd_instead():
    out = _judge("template_dies_first")
    assert out["kind"] == "Popen" and not out["template_alive_after"]
    assert out["returncode"] == -9


def test_a_newer_runners_pid_is_read_past_the_older_ones_answers():
    """The template answers in the order it was asked; asking a newer handle first must not take the older
    one's answer for it (nor call it dead)."""
    import socket

    from egg_mcp.evaluation import runner_template, wire

    ours, theirs = socket.socketpair()
    template = runner_template.Template.__new__(runner_template.Template)
    template.sock, template.pending, template.broken = ours, [], ""
    older, newer = runner_template.Forked(template), runner_template.Forked(template)
    template.pending += [older, newer]
    wire.send(theirs, {"type": "forked", "pid": 101})
    wire.send(theirs, {"type": "forked", "pid": 202})
    assert newer.pid == 202 and older.pid == 101 and not template.pending
    ours.close()
    theirs.close()
