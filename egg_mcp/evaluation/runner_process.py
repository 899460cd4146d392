"""The judge's handle on one runner process: start it (sandboxed), talk to it, kill it and every
descendant. Runs in the judge (the worker process); never imports candidate code."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from egg_mcp.config import environment_copy, sandbox_protect
from egg_mcp.contract import ErrorReport
from egg_mcp.evaluation import bounds as bounds_mod
from egg_mcp.evaluation import confinement, launchers, runner_template, wire

SIGNAL_NAMES: dict[int, str] = {
    signal.SIGSEGV: "segmentation fault (SIGSEGV)", signal.SIGBUS: "bus error (SIGBUS)",
    signal.SIGILL: "illegal instruction (SIGILL)", signal.SIGFPE: "floating-point exception (SIGFPE)",
    signal.SIGABRT: "abort (SIGABRT)", signal.SIGKILL: "killed (SIGKILL)", signal.SIGTERM: "terminated (SIGTERM)",
}
NAMESPACES_ARG = "--namespaces"
"""The launcher appends `--namespaces user,pid,...` to the runner's argv (launch.py --tell-arg)."""
RUNNER_DIRS_FILE = ".runner-dirs"
"""In the judge's dir: every runner private dir it made, one a line (workspace/store.py removes those a killed
judge left, at the next server's start)."""
WATCH_PERIOD_S = 0.25
"""How often a wait on the runner checks its resource bounds (a /proc walk of its tree; the dir walk: every 1 s)."""
MESSAGE_TIMEOUT_S = 60.0
"""Once a message has started, the rest of it must arrive within this (a half-sent message is garbage)."""


class RunnerGone(Exception):
    """The runner died or closed its channel; `report` says how."""

    def __init__(self, report: ErrorReport):
        super().__init__(report.message)
        self.report = report


class RunnerProcess:
    """One untrusted runner: own process group, allow-listed env, private dir, one socket."""

    def __init__(self, mode: str, workdir: Path, *, wrapper: list[str] | None = None,
                 extra_env: dict[str, str] | None = None, output: Path | None = None):
        """`wrapper`: a tool (compute-sanitizer) the runner runs under; `output`: a file in the judge's dir
        for the stdout/stderr of the wrapper and the runner (the tool's messages), instead of the worker's."""
        self.mode = mode
        self.private = _private_dir(workdir)
        self._workdir, self._extra_env = workdir, extra_env  # for an exec'd start if the template fails to fork it
        self._start(wrapper, output)
        self.ready = False
        self.warmup: dict[str, Any] = {}
        self.death_wait_s = 5.0  # how long a dead channel waits for the process to exit (a wrapper: longer)
        self.started_at = time.monotonic()
        self.bounds: bounds_mod.Bounds | None = None  # watched while a job waits on the runner (watch())
        self._next_check = self._next_scratch_check = 0.0
        self.over: ErrorReport | None = None
        self.peak = (0, 0)  # the most resident memory and tasks the watchdog saw (judge_info: runner_peak)

    def _start(self, wrapper: list[str] | None, output: Path | None, exec_only: bool = False) -> None:
        """Start the process: a fork of the judge's template (interpreter runners) or an exec'd Python."""
        mode = self.mode
        ours, theirs = socket.socketpair()
        env = confinement.runner_env(environment_copy(), self.private, interpreter=(mode == "interp"))
        env.update(self._extra_env or {})
        allowlisted = confinement.take_env_marker(env)  # said in argv: the environment names no sandbox
        prefix = confinement.spawn_prefix(NAMESPACES_ARG)
        self.namespaced = bool(prefix)
        protect = sandbox_protect()
        args = ["--fd", str(theirs.fileno()), "--private", str(self.private), "--mode", mode,
                # under a launcher or a wrapper, that process is the runner's parent, not the judge
                "--judge", "0" if (wrapper or prefix) else str(os.getpid())] + (["--tool", wrapper[0]] if wrapper
                                                                                 else []) + (
            ["--allowlisted"] if allowlisted else []) + (["--protect", protect] if protect else [])
        template = (_template(self._workdir) if mode == "interp" and not (wrapper or output or exec_only)
                    else None)
        sink = open(output, "ab") if output is not None else None  # noqa: SIM115 - closed below, the child keeps it
        try:
            if template is not None:  # a fork of the judge's template: its imports are done (runner_template.py)
                self.proc: subprocess.Popen | runner_template.Forked = template.fork(
                    theirs.fileno(), args, env, self.private, namespaced=self.namespaced)
            else:
                self.proc = subprocess.Popen([*prefix, *(wrapper or []), sys.executable, "-m",
                                              "egg_mcp.evaluation.runner", *args], stdin=subprocess.DEVNULL,
                                             cwd=self.private, env=env, close_fds=True, pass_fds=(theirs.fileno(),),
                                             start_new_session=True, stdout=sink,
                                             stderr=subprocess.STDOUT if sink else None)
        finally:
            theirs.close()
            if sink is not None:
                sink.close()
        self.sock = ours

    # -- resource bounds ---------------------------------------------------------------------------
    def peak_text(self) -> str:
        """What the job used, beside its bounds (a verify's judge_info.runner_peak, a memcheck's runner_peak)."""
        return f"memory {bounds_mod.size(self.peak[0])}, {self.peak[1]} tasks (polled)"

    def watch(self, job_bounds: bounds_mod.Bounds) -> None:
        """From now on, every wait for this runner checks its tree's memory and tasks and its private dir's size
        against `job_bounds` (bounds.py); over one, the runner is killed and the wait ends with the bound named."""
        self.bounds = job_bounds

    def _check_bounds(self) -> None:
        now = time.monotonic()
        if self.bounds is None or now < self._next_check or self.proc.poll() is not None:
            return
        self._next_check = now + WATCH_PERIOD_S
        scratch = None
        if now >= self._next_scratch_check:  # the dir walk costs more than /proc reads: once a second
            scratch, self._next_scratch_check = self.private, now + 1.0
        pids = self.tree()
        usage = bounds_mod.tree_usage(pids)
        self.peak = (max(self.peak[0], usage[0]), max(self.peak[1], usage[1]))
        over = bounds_mod.over_bounds(self.bounds, pids, scratch, usage)
        if over is not None:
            kind, message = over
            self.over = ErrorReport(kind=kind, message=message)
            self.kill()
            raise RunnerGone(self.over)

    def tree(self) -> list[int]:
        """The runner's process and its descendants (the launcher's processes and the candidate's children)."""
        pid = self.proc.pid
        return [pid, *confinement.descendants(pid)] if pid > 0 else []

    # -- talking ---------------------------------------------------------------------------------
    def send(self, header: dict[str, Any], fds: list[int] | None = None) -> None:
        try:
            wire.send(self.sock, header, fds=fds)
        except OSError:
            raise RunnerGone(self._death()) from None

    def recv(self, max_blob_bytes: int = 0) -> tuple[dict, list[bytearray]]:
        """The next message. RunnerGone when the runner died; wire.WireError when it sent garbage."""
        while True:
            self._check_bounds()
            readable = select.select([self.sock], [], [], 0.25)[0]
            if readable:
                try:
                    return wire.recv(self.sock, max_blob_bytes=max_blob_bytes, timeout_s=MESSAGE_TIMEOUT_S)
                except wire.PeerGone:
                    raise RunnerGone(self._death()) from None
                except TimeoutError:
                    raise wire.WireError("the runner started a message and did not finish it") from None
            if self.proc.poll() is not None:
                # A descendant may still hold the socket open: the runner's own exit is what counts.
                if not select.select([self.sock], [], [], 0.2)[0]:
                    raise RunnerGone(self._death())

    def request(self, header: dict[str, Any], max_blob_bytes: int = 0,
                fds: list[int] | None = None) -> tuple[dict, list[bytearray]]:
        self.send(header, fds)
        return self.recv(max_blob_bytes)

    def tell_launchers(self, signatures: list[tuple[str, ...]]) -> None:
        """Ask this waiting spare to build the launcher stubs of these type lists (launchers.py); no reply comes.
        A spare that died meanwhile is noticed when it is taken, not here."""
        if self.mode == "gpu" and signatures:
            with contextlib.suppress(OSError, wire.WireError):
                wire.send(self.sock, {"type": "launchers", "signatures": [list(s) for s in signatures]})

    def wait_ready(self) -> None:
        if not self.ready:
            if isinstance(self.proc, runner_template.Forked) and self.proc.pid < 0:  # the template died first
                with contextlib.suppress(OSError):
                    self.sock.close()
                self._start(None, None, exec_only=True)
            message, _ = self.recv()
            if message.get("type") != "ready":
                raise wire.WireError(f"the runner's first message was {message.get('type')!r}, not 'ready'")
            self.ready = True
            # sent before any candidate code existed (runner_warmup.py); kept as bounded data all the same
            warm, seconds = message.get("warmup"), message.get("warmup_s")
            self.warmup = {"warmup": str(warm)[:240] if warm is not None else "none",
                           "warmup_s": float(seconds) if isinstance(seconds, (int, float)) else None}

    # -- ending ----------------------------------------------------------------------------------
    def _death(self) -> ErrorReport:
        if self.over is not None:
            return self.over
        try:
            code = self.proc.wait(timeout=self.death_wait_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return ErrorReport(kind="exit", message="the runner closed its channel to the judge and kept running; "
                               "it was killed (candidate code closed or replaced file descriptors?)")
        if code < 0:
            name = SIGNAL_NAMES.get(-code, f"signal {-code}")
            if -code == signal.SIGXFSZ:  # candidate code restored SIGXFSZ's default and wrote past the bound
                limit = (f" ({bounds_mod.size(self.bounds.file_bytes)}, RLIMIT_FSIZE)" if self.bounds
                         else " (RLIMIT_FSIZE)")
                return ErrorReport(kind="resource_limit", message="the candidate's runner process was killed by "
                                   f"SIGXFSZ: a file reached the runner's file-size bound{limit}")
            if -code == signal.SIGKILL:
                return ErrorReport(kind="oom", message=f"the candidate's runner process was {name} from outside: "
                                   "most likely the host's out-of-memory killer")
            return ErrorReport(kind="signal", message=f"the candidate's runner process ended by {name}")
        return ErrorReport(kind="exit", message=f"the candidate's runner process exited with code {code} before "
                           "reporting (os._exit / abort in candidate code?)")

    def finish(self, timeout_s: float) -> int | None:
        """Ask the runner to exit by itself (a wrapper such as compute-sanitizer writes its report then);
        its exit code, or None when it had to be killed. The watched bounds hold while it exits: over one,
        it is killed and `over` names the bound."""
        with contextlib.suppress(OSError, wire.WireError):
            wire.send(self.sock, {"type": "exit"})
        deadline = time.monotonic() + timeout_s
        try:
            while self.proc.poll() is None and time.monotonic() < deadline:
                self._check_bounds()
                time.sleep(0.05)
            return self.proc.poll()
        except RunnerGone:
            return None
        finally:
            self.kill()

    def kill(self) -> int:
        """SIGKILL the runner's group and every descendant of the judge but its own helpers."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.proc.pid > 0:
                os.killpg(self.proc.pid, signal.SIGKILL)
        killed = kill_all_but_spare()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5.0)
        reap_orphans()
        with contextlib.suppress(OSError):
            self.sock.close()
        remove_private_dir(self.private)
        return killed


_private_dirs: set[Path] = set()


def neutral_base(workdir: Path) -> Path:
    """Where runners' private dirs go: the system's temp dir, as any program's scratch files (a candidate
    that checks its paths for the sandbox's names finds none); the judge's dir where there is none."""
    for base in ("/tmp", "/var/tmp"):
        if os.path.isdir(base) and not os.path.islink(base) and os.access(base, os.W_OK | os.X_OK):
            return Path(base)
    return Path(workdir)


def _private_dir(workdir: Path) -> Path:
    """A new private dir for a runner (or the runners' template), listed for clean-up."""
    # An ordinary temp dir (/tmp/tmpk3j2x9ab), not a dir under the judge's (whose path names the workspace's
    # scratch, worker and runner dirs): the runner's cwd, HOME, TMPDIR and caches are inside it.
    private = Path(tempfile.mkdtemp(dir=neutral_base(workdir)))  # mode 0700
    _private_dirs.add(private)
    with contextlib.suppress(OSError):  # for the next server's clean-up if this judge is killed (store.py)
        with open(Path(workdir) / RUNNER_DIRS_FILE, "a") as listed:
            listed.write(f"{private}\n")
    return private


_templates: list[runner_template.Template] = []  # this judge's template for interpreter runners (at most one)


def _template(workdir: Path) -> runner_template.Template | None:
    """The judge's template for interpreter runners, started on first use; None where runners are exec'd: the
    template broke, or this judge is no subreaper (a forked runner would not be its child)."""
    if _templates:
        return _templates[0] if _templates[0].alive() else None
    if not confinement.is_subreaper():
        return None
    private = _private_dir(workdir)
    env = confinement.runner_env(environment_copy(), private, interpreter=True)
    confinement.take_env_marker(env)
    _templates.append(runner_template.Template(private, env))
    return _templates[0]


def remove_private_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    _private_dirs.discard(path)


def remove_private_dirs() -> None:
    """Remove every runner dir this judge made (at its exit: spares' dirs and any a crash left)."""
    for path in list(_private_dirs):
        remove_private_dir(path)


def spares() -> list[RunnerProcess]:
    """The pre-started runners waiting for later jobs (none has imported a candidate) that are alive."""
    return [r for r in _prestarted if r.proc.poll() is None]


def kill_all_but_spare() -> int:
    """Kill every descendant of this judge (a runner, whatever a candidate forked or setsid'ed: this
    process is their subreaper) except the pre-started runners' own subtrees and the runners' template."""
    roots = [r.proc.pid for r in spares()] + ([_templates[0].proc.pid] if _templates and _templates[0].alive()
                                              else [])
    if not roots:
        return confinement.kill_descendants(os.getpid())
    count = 0
    for _ in range(3):  # a forking child can add descendants between the walk and the kill
        # the spares' subtrees are walked AFTER ours: a child a spare starts meanwhile (gcc building a launcher
        # stub) is then either not found yet or found in both walks, never killed as a stranger
        found = confinement.descendants(os.getpid())
        keep = {pid for root in roots for pid in (root, *confinement.descendants(root))}
        found = [pid for pid in found if pid not in keep]
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                count += 1
    return count


def reap_orphans() -> None:
    """Collect the exit status of re-parented descendants (this process is their subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


_prestarted: list[RunnerProcess] = []
_known_launchers = launchers.KnownSignatures()


def teach_launchers(raw: object) -> int:
    """Learn the type lists a runner reported (validated) and send the new ones to every waiting spare."""
    new = _known_launchers.learn(raw)
    for runner in spares() if new else ():
        runner.tell_launchers(new)
    return len(new)


def prestart(mode: str, depth: int = 1) -> None:
    """Start runners until `depth` wait for the next jobs (hides the runner's torch import and CUDA init)."""
    if mode not in ("gpu", "interp"):
        return
    _prestarted[:] = [r for r in _prestarted if r.proc.poll() is None]
    while len(_prestarted) < depth:
        runner = RunnerProcess(mode, Path(os.getcwd()))
        runner.tell_launchers(_known_launchers.items)  # read after its warm-up, while it waits
        _prestarted.append(runner)


def take(mode: str) -> RunnerProcess:
    """The oldest prestarted runner when it matches and is alive, else a fresh one."""
    while _prestarted:
        runner = _prestarted.pop(0)
        if runner.mode == mode and runner.proc.poll() is None:
            return runner
        runner.kill()
    return RunnerProcess(mode, Path(os.getcwd()))
