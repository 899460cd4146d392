"""A fork server for the interpreter's runners: one process per judge imports torch and Triton once, and each
runner is a fork of it instead of a fresh Python.

Why: a runner's own work on the interpreter is small next to its start-up (importing torch and Triton: ~2.4 CPU-s
on a 2-core CI machine, where 229 runners of the test suite took 720 CPU-s,
benchmarks/results/cpu_2026-12-03/suite_cpu_by_role_spares_83a7672_5987ee8.json). A fork is ready in a fraction
of that.

Trust: the template is started as a runner is (the allow-listed environment, no secret, a private dir of its own,
its own session) and never holds candidate code, the judge's memory or anything the judge read. Each runner is
forked twice (the middle process exits at once), so it is re-parented to the judge, this process's parent and a
subreaper: the judge waits for it, reads its exit status and kills its tree exactly as for an exec'd runner. Before
any candidate code the child closes every descriptor but its channel (the template's own socket included), starts
its own session, takes its own environment and dir, enters fresh namespaces through the same launcher code
(egg_mcp/sandbox/launch.py's `run`), and goes through runner.py's `main`: the same confinement, capability drop
and `no_tells`. What stays of the template: its imports, and /proc/self/cmdline and /proc/self/environ, which show
the template's argv and its allow-listed environment (no secret; a tell that the server's static check flags like
the others, evaluation/runner.py). GPU runners are exec'd as before: CUDA does not survive a fork.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from egg_mcp.config import replace_environment
from egg_mcp.evaluation import confinement, wire

REPLY_TIMEOUT_S = 120.0
"""How long the judge waits for the template to fork a runner it asked for (its imports come first)."""
_MAX_FD = 1 << 16


# -- the judge's side ------------------------------------------------------------------------------------------
class Forked:
    """The judge's handle on a runner the template forked: Popen's pid, poll, wait and returncode, for a child that
    was re-parented to the judge. The pid is known once the template answered (`resolve`)."""

    def __init__(self, template: Template):
        self._template = template
        self._pid: int | None = None
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        """The runner's pid; -1 when the template died before forking it."""
        if self._pid is None:
            self._template.resolve(self)
        return -1 if self._pid is None else self._pid

    def poll(self) -> int | None:
        if self.returncode is None:
            pid = self.pid
            if pid < 0:
                self.returncode = 1
                return self.returncode
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else (reap_orphans): Popen says 0 then, so do we
                self.returncode = 0
                return self.returncode
            if got == pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(["runner"], timeout or 0.0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode


class Template:
    """The judge's template process for interpreter runners, and the runners it was asked for, oldest first."""

    def __init__(self, private: Path, env: dict[str, str]):
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "egg_mcp.evaluation.runner_template", "--fd", str(theirs.fileno()),
             "--judge", str(os.getpid())], stdin=subprocess.DEVNULL, cwd=private, env=env, close_fds=True,
            pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        self.sock = ours
        self.pending: list[Forked] = []
        self.broken = ""

    def alive(self) -> bool:
        return not self.broken and self.proc.poll() is None

    def fork(self, channel_fd: int, argv: list[str], env: dict[str, str], cwd: Path, namespaced: bool) -> Forked:
        """Ask for a runner (it starts once the template's imports are done); the handle resolves its pid later."""
        handle = Forked(self)
        try:
            wire.send(self.sock, {"type": "fork", "argv": argv, "env": env, "cwd": str(cwd), "namespaced": namespaced,
                                  "judge": os.getpid()}, fds=[channel_fd])
        except OSError as exc:
            self.broken = f"the runner template's channel failed: {exc}"
            handle._pid = -1
            return handle
        self.pending.append(handle)
        return handle

    def resolve(self, handle: Forked) -> None:
        """Read the template's answers, which come in the order of the asks, until `handle` has its pid (-1 for
        every pending one when the template is gone)."""
        while handle in self.pending:
            oldest = self.pending[0]
            try:
                ready = select.select([self.sock], [], [], REPLY_TIMEOUT_S)[0]
                if not ready:
                    raise TimeoutError(f"no answer within {REPLY_TIMEOUT_S:.0f} s")
                message, _ = wire.recv(self.sock, max_blob_bytes=0, timeout_s=10.0)
                pid = message.get("pid")
                oldest._pid = pid if isinstance(pid, int) and pid > 0 else -1
            except (OSError, wire.WireError, TimeoutError) as exc:
                self.broken = f"the runner template failed: {type(exc).__name__}: {exc}"
                for left in self.pending:
                    left._pid = -1
                self.pending.clear()
                self.close()
                return
            self.pending.pop(0)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, 9)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5.0)
        with contextlib.suppress(OSError):
            self.sock.close()


# -- the template's side ---------------------------------------------------------------------------------------
def _become_runner(request: dict[str, Any], channel_fd: int) -> None:
    """In the forked runner, before anything of the candidate's: its own session, descriptors, environment and
    dir, its life tied to the judge; then runner.py's main, in fresh namespaces when the host has them. Never
    returns."""
    code = 1
    try:
        os.setsid()
        confinement.protect_memory(False)  # dumpable, as an exec'd runner: its own /proc files are its own
        judge = int(request["judge"])
        deadline = time.monotonic() + 10.0
        while os.getppid() != judge and time.monotonic() < deadline:  # the middle process is exiting
            time.sleep(0.001)
        if os.getppid() != judge or not confinement.die_with_parent() or os.getppid() != judge:
            os._exit(3)
        os.closerange(3, channel_fd)
        os.closerange(channel_fd + 1, _MAX_FD)
        os.chdir(request["cwd"])
        replace_environment({str(k): str(v) for k, v in request["env"].items()})
        tempfile.tempdir = None  # found again from TMPDIR, the runner's own
        argv = [str(a) for a in request["argv"]]
        argv[argv.index("--fd") + 1] = str(channel_fd)

        def program(namespaces: str | None) -> None:
            from egg_mcp.evaluation import runner

            runner.main(argv + (["--namespaces", namespaces] if namespaces else []))
            os._exit(0)

        if request.get("namespaced"):
            from egg_mcp.sandbox import launch

            code = launch.run(program)
        else:
            program(None)
    except BaseException as exc:  # noqa: BLE001 - never back into the template's loop
        with contextlib.suppress(Exception):
            os.write(2, f"egg-mcp runner (forked): {type(exc).__name__}: {exc}\n".encode())
    os._exit(code)


def _fork_runner(request: dict[str, Any], channel_fd: int, sock: socket.socket) -> int:
    """Fork twice: the runner's pid (re-parented to the judge once the middle process is reaped), or -1."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read_end)
            child = os.fork()
            if child == 0:
                os.close(write_end)
                sock.close()
                _become_runner(request, channel_fd)
            os.write(write_end, struct.pack("q", child))
        finally:
            os._exit(0)
    os.close(write_end)
    os.waitpid(middle, 0)
    data = os.read(read_end, 8)
    os.close(read_end)
    return struct.unpack("q", data)[0] if len(data) == 8 else -1


def _preload() -> None:
    """What every runner imports before the candidate (runner.py, after its confinement)."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401  (see runner.main: a forked runner then finds it imported, for free)
    import triton  # noqa: F401
    import triton.language  # noqa: F401

    import egg_mcp.evaluation.candidate_side  # noqa: F401
    import egg_mcp.evaluation.runner  # noqa: F401
    import egg_mcp.evaluation.runner_loop  # noqa: F401
    import egg_mcp.sandbox.launch  # noqa: F401


def main(argv: list[str] | None = None, preload: Callable[[], None] = _preload) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--judge", type=int, required=True)
    args = parser.parse_args(argv)
    confinement.die_with_parent()
    if os.getppid() != args.judge:
        os._exit(3)
    confinement.protect_memory()  # no runner attaches to it or reads its memory (each fork turns dumpable again)
    preload()
    sock = socket.socket(fileno=args.fd)
    while True:
        fds: list[int] = []
        try:
            request, _ = wire.recv(sock, max_blob_bytes=0, fds=fds)
        except (OSError, wire.WireError):
            os._exit(0)  # the judge closed its end: it is done with us
        pid = -1
        if request.get("type") == "fork" and len(fds) == 1:
            pid = _fork_runner(request, fds[0], sock)
        for fd in fds:
            os.close(fd)
        wire.send(sock, {"type": "forked", "pid": pid})


if __name__ == "__main__":
    main()
