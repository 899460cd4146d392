"""The engine's worker processes: how one is started, read and disposed of, and the pool of spares.

Server side, no torch. A worker is `python -m egg_mcp.evaluation.worker` (one job, then it exits) or,
for persistent judges, `python -m egg_mcp.evaluation.judge_host` (engine_judges.py). Each starts in a
new session (a timeout kills the whole group), stdin closed, stdout/stderr drained into bounded
buffers, a private working directory and Triton/inductor caches, and no secret in its environment.
Results come back as JSON lines over a dedicated pipe.

A warm pool of pre-started spares (torch/triton imported, CUDA initialised) hides the ~5 s start-up
of a fresh Python; each one-shot spare serves one job. While jobs queue, up to `burst_spares` extra
spares start in parallel (one spare alone refills in ~7 s while a verify takes ~2 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import egg_mcp
from egg_mcp.config import PROTECT_VAR, REQUIRED_VAR, SERVER_PID_VAR, environment_copy
from egg_mcp.evaluation import confinement
from egg_mcp.evaluation.engine_results import LogCapture
from egg_mcp.evaluation.tool_confine import wrapped_worker_env

PACKAGE_PARENT = str(Path(egg_mcp.__file__).resolve().parent.parent)
"""Put on the workers' PYTHONPATH: they import egg_mcp from where the server has it, installed or not."""
RUNNER_POOL = "+runner"
"""Pool-mode suffix: one-shot verify workers (the judge) that pre-start their candidate runner."""
JUDGE_POOL = "+judge"
"""Pool-mode suffix: persistent judges (judge_host.py), spares until their first job binds them to a task."""
MAX_RESULT_LINE = 64 * 1024 * 1024


@dataclass(frozen=True)
class EngineSettings:
    """What one engine was built with (WorkerEvaluator's keywords, normalised): shared, read-only, by the
    evaluator and its parts (the pool, the judges, the driver)."""

    scratch_dir: Path  # every worker's private directory is made under it
    force_interpreter: bool = False  # no GPU even when one is visible
    judge: str = "persistent"  # the verify path: 'persistent' or 'oneshot' (engine_judges.judge_mode_from)
    spare_workers: int = 1  # pre-started spares per mode (0: every job starts a fresh process)
    burst_spares: int = 3  # extra spares started side by side while jobs queue
    log_limit_bytes: int = 64 * 1024  # head + tail of a worker's stdout/stderr kept per job
    max_judges: int = 2  # idle persistent judges kept (least recently used go first)
    judge_max_jobs: int = 20  # a persistent judge is recycled after this many jobs
    judge_idle_s: float = 600.0  # ... or after this long idle
    judge_ahead: bool = True  # a persistent judge starts the next runner during a job (Landlock hosts)
    device: str | None = None  # CUDA_VISIBLE_DEVICES of the workers: a lane pinned to one GPU (None: inherit)
    # paths no tool or toolchain grant to a confined job or runner may expose (the workspace, the allowed
    # folders): said to the workers in config.PROTECT_VAR (every home directory is protected anyway)
    protect: tuple[str, ...] = ()
    # the server's sandbox floor (egg_mcp.sandbox.floor): the judge and every confined job check their
    # runner's or their own report against it before candidate code runs (config.REQUIRED_VAR)
    sandbox_required: tuple[str, ...] = ()
    bounds_floor: dict[str, int] = field(default_factory=dict)  # the runners' resource-bound floors (bounds.py)


@dataclass(eq=False)
class _Worker:
    """One worker process and the pipes the parent holds to it."""

    mode: str
    proc: asyncio.subprocess.Process
    job_fd: int
    workdir: Path
    messages: list[dict] = field(default_factory=list)
    new_message: asyncio.Event = field(default_factory=asyncio.Event)
    stdout: LogCapture | None = None
    stderr: LogCapture | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)
    transport: asyncio.BaseTransport | None = None
    judge_key: str | None = None  # a persistent judge: the task it is bound to after its first job
    jobs: int = 0
    idle_since: float = 0.0

    def alive(self) -> bool:
        return self.proc.returncode is None

    def kill_group(self) -> None:
        """Every descendant (the runner, its setsid children: new sessions leave the group, not the
        tree), then the worker's process group."""
        if self.proc.returncode is None:
            confinement.kill_descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def wait_exit(self, timeout_s: float) -> bool:
        """Wait for the worker itself to exit. Not `proc.wait()`: that also waits for the stdout/stderr
        pipes to close, which an escaped grandchild can hold open for as long as it lives."""
        deadline = time.monotonic() + timeout_s
        while self.proc.returncode is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return self.proc.returncode is not None


class WorkerPool:
    """The engine's worker processes (`WorkerEvaluator.pool`): starting, reading and disposing of them, and the
    spares kept per mode. A persistent judge is one of its processes too (`JudgePool` keeps the idle ones)."""

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        self.spares: dict[str, list[_Worker]] = {}  # pre-started workers per mode, the oldest first
        self.waiting: dict[str, int] = {}  # jobs queued in this engine per mode (WorkerEvaluator._run counts them)
        self.expected: dict[str, int] = {}  # jobs a lane pool in front of this engine holds (expect)
        self.live: set[_Worker] = set()  # every process started and not yet disposed of (aclose kills them)
        self.closed = False  # aclose ran: no spare starts and no judge is kept any more
        self._refills: set[asyncio.Task] = set()  # spares starting, surplus being disposed: aclose ends them

    async def wait_ready(self, timeout_s: float = 180.0) -> int:
        """Wait until the spare workers have finished their preloads; returns how many are ready."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._refills:
                await asyncio.wait(list(self._refills), timeout=max(0.0, deadline - time.monotonic()))
            spares = [w for ws in self.spares.values() for w in ws]
            if all(any(m.get("type") == "ready" for m in w.messages) for w in spares) and not self._refills:
                return len(spares)
            await asyncio.sleep(0.05)
        return sum(1 for ws in self.spares.values() for w in ws if any(m.get("type") == "ready" for m in w.messages))

    def _worker_env(self, mode: str, workdir: Path) -> dict[str, str]:
        env = {k: v for k, v in environment_copy().items() if not confinement.is_secret(k)}
        for key in ("TRITON_INTERPRET", "PYTHONSTARTUP", "PYTHONINSPECT"):
            env.pop(key, None)
        existing = env.get("PYTHONPATH")
        env["PYTHONPATH"] = PACKAGE_PARENT + (os.pathsep + existing if existing else "")
        env["TRITON_CACHE_DIR"] = str(workdir / "triton_cache")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(workdir / "inductor_cache")
        env["TMPDIR"] = str(workdir / "tmp")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env[SERVER_PID_VAR] = str(os.getpid())  # the worker's watchdog ends it if we die
        env.pop(PROTECT_VAR, None)
        env.pop(REQUIRED_VAR, None)
        if self.settings.sandbox_required:
            env[REQUIRED_VAR] = ",".join(self.settings.sandbox_required)
        if self.settings.protect:  # what no tool/toolchain grant may expose (landlock.grantable)
            env[PROTECT_VAR] = os.pathsep.join(self.settings.protect)
        if mode == "interp":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif self.settings.device is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.settings.device
        return env

    def _argv(self, mode: str, fds: list[str]) -> list[str]:
        """The worker's command line: a persistent judge (judge_host) or a one-job worker."""
        s = self.settings
        if mode.endswith(JUDGE_POOL):
            return [sys.executable, "-m", "egg_mcp.evaluation.judge_host", *fds,
                    "--max-jobs", str(s.judge_max_jobs), "--idle-s", str(s.judge_idle_s)] + (
                        ["--ahead"] if s.judge_ahead else [])
        return [sys.executable, "-m", "egg_mcp.evaluation.worker", *fds] + (
            ["--prestart-runner"] if mode.endswith(RUNNER_POOL) else [])

    async def _spawn(self, mode: str, wrapper_argv: list[str] | None = None) -> _Worker:
        workdir = Path(tempfile.mkdtemp(prefix=f"worker-{mode}-", dir=self.settings.scratch_dir))
        (workdir / "tmp").mkdir()
        (workdir / "jobs").mkdir(mode=0o700)  # job files: a persistent judge's between-job clean-up spares them
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        base_mode = mode.removesuffix(RUNNER_POOL).removesuffix(JUDGE_POOL)
        argv = self._argv(mode, ["--job-fd", str(job_r), "--result-fd", str(res_w), "--mode", base_mode])
        env = self._worker_env(base_mode, workdir)
        if wrapper_argv:  # the tool and the worker it wraps: allow-listed env, no token (tool_confine.py)
            argv = [*wrapper_argv, *argv, "--wrapped", "--tool", wrapper_argv[0]]
            said = {k: env[k] for k in (PROTECT_VAR, REQUIRED_VAR) if env.get(k)}
            env = wrapped_worker_env({**environment_copy(), **said}, workdir, interpreter=base_mode == "interp",
                                     server_pid=os.getpid())
            if base_mode != "interp" and self.settings.device is not None:
                env["CUDA_VISIBLE_DEVICES"] = self.settings.device
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=workdir,
                env=env,
                start_new_session=True,
                pass_fds=(job_r, res_w),
            )
        except BaseException:
            for fd in (job_r, job_w, res_r, res_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            for fd in (job_r, res_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
        worker = _Worker(mode=mode, proc=proc, job_fd=job_w, workdir=workdir)
        worker.stdout = LogCapture(self.settings.log_limit_bytes)
        worker.stderr = LogCapture(self.settings.log_limit_bytes)
        self.live.add(worker)  # before the next await: a cancelled refill must not orphan the process
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_RESULT_LINE)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(res_r, "rb", buffering=0)
        )
        worker.transport = transport
        assert proc.stdout is not None and proc.stderr is not None  # stdout=PIPE, stderr=PIPE
        worker.tasks = [
            asyncio.create_task(worker.stdout.drain(proc.stdout)),
            asyncio.create_task(worker.stderr.drain(proc.stderr)),
            asyncio.create_task(self._read_messages(worker, reader)),
        ]
        return worker

    @staticmethod
    async def _read_messages(worker: _Worker, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                worker.messages.append({"type": "garbage", "detail": "result line over the size limit"})
                worker.new_message.set()
                return
            if not line:
                return
            try:
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise ValueError("not an object")
            except ValueError:
                message = {"type": "garbage", "detail": line[:200].decode(errors="replace")}
            worker.messages.append(message)
            worker.new_message.set()

    async def dispose(self, worker: _Worker) -> None:
        """Kill the worker's tree, close its pipes and remove its directory."""
        worker.kill_group()
        await worker.wait_exit(5.0)
        with contextlib.suppress(OSError):
            os.close(worker.job_fd)
        if worker.tasks:
            await asyncio.wait(worker.tasks, timeout=0.5)
            for task in worker.tasks:
                task.cancel()
        if worker.transport is not None:
            worker.transport.close()
        self.live.discard(worker)
        shutil.rmtree(worker.workdir, ignore_errors=True)

    def _spare_target(self, mode: str) -> int:
        """Spares wanted now: the standing pool plus one per queued job (here, or in a lane pool in front
        of this engine: `expect`), up to burst_spares."""
        return self.settings.spare_workers + min(self.waiting.get(mode, 0) + self.expected.get(mode, 0),
                                                 self.settings.burst_spares)

    def expect(self, mode: str, n: int) -> None:
        """`n` jobs held in front of this engine will each take a one-shot worker of `mode`: start spares
        for them now, as for jobs queued here (WorkerEvaluator.expect_jobs)."""
        self.expected = {mode: max(0, int(n))}
        self.schedule_refill(mode)

    def schedule_refill(self, mode: str) -> None:
        """Start the spares `mode` lacks in the background; trim an idle surplus once its burst is over."""
        if self.closed or self.settings.spare_workers <= 0 or mode == "plain":
            return
        pool = self.spares.setdefault(mode, [])
        target = self._spare_target(mode)
        if not self.waiting.get(mode) and not self.expected.get(mode) and len(pool) > target:
            # burst over: idle spares hold host and GPU memory
            surplus, pool[:] = pool[target:], pool[:target]
            for worker in surplus:
                self._track(self.dispose(worker))
        pending = len(pool) + len(self._refills_for(mode))
        for _ in range(target - pending):
            self._track(self._refill(mode), mode)

    def _track(self, coro, mode: str | None = None) -> None:
        """Run coro as a background task that aclose() waits for or cancels; `mode` marks a refill."""
        task = asyncio.ensure_future(coro)
        task.egg_mode = mode  # type: ignore[attr-defined]
        self._refills.add(task)
        task.add_done_callback(self._refills.discard)

    def _refills_for(self, mode: str) -> list[asyncio.Task]:
        return [t for t in self._refills if getattr(t, "egg_mode", None) == mode and not t.done()]

    async def _refill(self, mode: str) -> None:
        worker = await self._spawn(mode)
        pool = self.spares.setdefault(mode, [])
        if self.closed or len(pool) >= self._spare_target(mode):  # closed, or the burst ended meanwhile
            # disposed outside this refill: while it dies, a take must not count it as a spare on its way
            # (it would start no replacement, and the pool would end a burst with no spare at all)
            self._track(self.dispose(worker))
            return
        pool.append(worker)

    async def take(self, mode: str, wrapper_argv: list[str] | None) -> tuple[_Worker, bool]:
        """A spare from the pool when one is alive (wrapped jobs always get a fresh process); True if pooled."""
        if wrapper_argv:
            return await self._spawn(mode, wrapper_argv), False
        spares = self.spares.setdefault(mode, [])
        while True:
            while spares:
                worker = spares.pop(0)
                if worker.alive():
                    self.schedule_refill(mode)
                    return worker, True
                await self.dispose(worker)
            starting = self._refills_for(mode)
            if not starting:
                break
            # a spare already on its way is further along than a process started now
            await asyncio.wait(starting, return_when=asyncio.FIRST_COMPLETED)
        worker = await self._spawn(mode)
        self.schedule_refill(mode)
        return worker, False

    async def aclose(self) -> None:
        """Stop starting spares, end the background tasks and kill every process still alive."""
        self.closed = True
        for task in list(self._refills):
            task.cancel()
        for task in list(self._refills):
            with contextlib.suppress(BaseException):
                await task
        for worker in list(self.live):
            await self.dispose(worker)
        self.spares.clear()
