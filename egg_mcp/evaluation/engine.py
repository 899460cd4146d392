"""The evaluation engine as the server sees it: `WorkerEvaluator`.

Runs in the server process and never imports torch or candidate code. Every job runs in a worker
process (`python -m egg_mcp.evaluation.worker`) in a new session (so a timeout can kill the whole
process group), with stdin closed, stdout/stderr drained into bounded buffers, a private working
directory and a private Triton cache. Results come back as JSON lines over a dedicated pipe.

A warm pool of pre-started spare workers (torch/triton imported, CUDA initialised) hides the
~5 s start-up of a fresh Python; each spare serves exactly one job. While jobs queue, up to
`burst_spares` extra spares start in parallel: one spare alone refills in ~7 s while a verify takes
~2 s, which capped a queue of 50 submissions at one job per ~8 s on the H200. GPU jobs take a FIFO lock per
device so their timings never overlap; everything else keeps being answered meanwhile.

Verify jobs run in workers started with `--prestart-runner`: the worker is the trusted judge and
starts the untrusted runner (the only process that imports the candidate) during its preload.
A job ends as soon as its result message is in: after a short grace the worker's whole tree (every
descendant, found through /proc, then its process group) is killed, whatever a child still holds.
Workers never receive secrets (EGG_MCP_TOKEN and other *TOKEN/*KEY/... variables are dropped), and
the server makes itself non-dumpable so a same-user process cannot read its memory or environment
through /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import egg_mcp
from egg_mcp.evaluation.api import (
    BaselineResult,
    ErrorReport,
    EvalOptions,
    EvalResult,
    JobOutcome,
    ProgressFn,
)
from egg_mcp.evaluation import confinement
from egg_mcp.evaluation.engine_results import (  # noqa: F401  (LogCapture re-exported)
    LogCapture,
    _death_report,
    _reset_capture,
    evaluation_result,
)
from egg_mcp.evaluation.worker import TARGET_PATTERN

log = logging.getLogger(__name__)

PACKAGE_PARENT = str(Path(egg_mcp.__file__).resolve().parent.parent)
"""Put on the workers' PYTHONPATH: they import egg_mcp from where the server has it, installed or not."""

STARTUP_ALLOWANCE_S = 180.0
"""A fresh worker may take this long to import torch and initialise CUDA before its job timer starts."""

KILL_MARGIN_S = 0.05
RESULT_GRACE_S = 0.5
"""After the result message, the worker has this long to exit by itself before its tree is killed."""
RUNNER_POOL = "+runner"
MAX_RESULT_LINE = 64 * 1024 * 1024



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
    spawned_at: float = field(default_factory=time.monotonic)

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


@dataclass
class _JobState:
    phase: str = "starting"
    result_message: dict | None = None
    forged: list[str] = field(default_factory=list)
    timed_out: bool = False
    timeout_phase: str | None = None
    server_phase_s: dict[str, float] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)


class WorkerEvaluator:
    """Evaluator (see api.Evaluator) that runs everything in isolated worker processes."""

    def __init__(
        self,
        *,
        scratch_dir: Path,
        force_interpreter: bool = False,
        spare_workers: int = 1,
        burst_spares: int = 3,
        log_limit_bytes: int = 64 * 1024,
        max_cpu_jobs: int | None = None,
        protect_server_memory: bool = True,
        device: str | None = None,
    ):
        self.device = device  # CUDA_VISIBLE_DEVICES of this engine's workers: a lane pinned to one GPU (None: inherit)
        self.scratch_dir = Path(scratch_dir)
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        self.force_interpreter = force_interpreter
        self.spare_workers = max(0, spare_workers)
        self.burst_spares = max(0, burst_spares)
        self._waiting: dict[str, int] = {}
        self.log_limit_bytes = log_limit_bytes
        self._gpu_lock = asyncio.Lock()  # FIFO: asyncio.Lock wakes waiters in arrival order
        self._cpu_slots = asyncio.Semaphore(max_cpu_jobs or max(1, (os.cpu_count() or 2)))
        self._pool: dict[str, list[_Worker]] = {}
        self._refills: set[asyncio.Task] = set()
        self._live: set[_Worker] = set()
        self._has_gpu: bool | None = None
        self._closed = False
        if protect_server_memory:
            confinement.protect_memory()  # /proc/<server>/{environ,mem} closed to the candidate's user

    # ------------------------------------------------------------------ public API

    def has_gpu(self) -> bool:
        """A CUDA GPU visible through NVML (cheap: no torch in the server) and not forced off."""
        if self.force_interpreter:
            return False
        if self._has_gpu is None:
            from egg_mcp.hardware import nvml_gpu_names

            self._has_gpu = bool(nvml_gpu_names())
        return self._has_gpu

    def evaluation_mode(self, device: str = "auto") -> str:
        """'gpu' or 'interp' (Triton interpreter on the CPU) for an EvalOptions.device value."""
        if device == "interpreter":
            return "interp"
        if device == "cuda":
            if not self.has_gpu():
                raise ValueError(
                    "device='cuda' was requested but this machine has no usable CUDA GPU "
                    "(or the server runs with force_interpreter); use device='auto' or 'interpreter'"
                )
            return "gpu"
        return "gpu" if self.has_gpu() else "interp"

    async def start_pool(self) -> None:
        """Pre-start the spare workers now (otherwise they start with the first job): for verify (a judge
        with its runner) and for the other jobs."""
        self._schedule_refill(self.evaluation_mode() + RUNNER_POOL)
        self._schedule_refill(self.evaluation_mode())

    async def wait_pool_ready(self, timeout_s: float = 180.0) -> int:
        """Wait until the spare workers have finished their preloads; returns how many are ready."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._refills:
                await asyncio.wait(list(self._refills), timeout=max(0.0, deadline - time.monotonic()))
            spares = [w for ws in self._pool.values() for w in ws]
            if all(any(m.get("type") == "ready" for m in w.messages) for w in spares) and not self._refills:
                return len(spares)
            await asyncio.sleep(0.05)
        return sum(1 for ws in self._pool.values() for w in ws if any(m.get("type") == "ready" for m in w.messages))

    async def evaluate(
        self,
        reference_source: str,
        candidate_source: str,
        options: EvalOptions,
        progress: ProgressFn | None = None,
    ) -> EvalResult:
        mode = self.evaluation_mode(options.device)
        n_seeds = options.correctness_trials + 80
        payload = {
            "kind": "evaluate",
            "reference_source": reference_source,
            "candidate_source": candidate_source,
            "options": options.model_dump(mode="json"),
            "init_seed": secrets.randbits(62),
            "seeds": [secrets.randbits(62) for _ in range(n_seeds)],
        }
        outcome, state = await self._run(
            "egg_mcp.evaluation.harness:evaluate_job",
            payload,
            mode=mode + RUNNER_POOL,
            first_timeout_s=options.compile_timeout_s,
            run_timeout_s=options.run_timeout_s,
            uses_gpu=(mode == "gpu"),
            progress=progress,
        )
        return evaluation_result(outcome, state, options)

    async def memcheck(self, reference_source: str, candidate_source: str, options: EvalOptions):
        """One forward of the candidate under compute-sanitizer memcheck (GPU only): a MemcheckResult whose
        verdict is 'memory_error' (kernel, access, address), 'clean' or 'unavailable'. Not part of verify:
        the sanitizer slows kernels 10-100x; call it once before a candidate is committed."""
        from egg_mcp.evaluation.memcheck import MemcheckResult

        if self.evaluation_mode(options.device) != "gpu":
            return MemcheckResult(verdict="unavailable", summary="memcheck needs a CUDA GPU; on the CPU the "
                                  "interpreter's guarded allocations (part of every verify) cover out-of-bounds writes")
        payload = {"reference_source": reference_source, "candidate_source": candidate_source,
                   "options": options.model_dump(mode="json"), "init_seed": secrets.randbits(62),
                   "seed": secrets.randbits(62)}
        outcome = await self.run_job("egg_mcp.evaluation.memcheck:memcheck_job", payload,
                                     timeout_s=options.compile_timeout_s + 600.0, uses_gpu=True)
        if outcome.ok and outcome.result is not None:
            return MemcheckResult.model_validate(outcome.result)
        reason = outcome.error.message if outcome.error else "no result"
        return MemcheckResult(verdict="unavailable", summary=f"the memcheck job failed: {reason[:500]}")

    async def baselines(
        self, reference_source: str, options: EvalOptions, progress: ProgressFn | None = None
    ) -> BaselineResult:
        mode = self.evaluation_mode(options.device)
        if mode != "gpu":
            return BaselineResult(
                unavailable_reason="no CUDA GPU (Triton interpreter on the CPU): baseline timings would be "
                "meaningless, so none are reported"
            )
        payload = {
            "kind": "baselines",
            "reference_source": reference_source,
            "options": options.model_dump(mode="json"),
            "init_seed": secrets.randbits(62),
            "seeds": [secrets.randbits(62) for _ in range(80)],
        }
        outcome, state = await self._run(
            "egg_mcp.evaluation.harness:baselines_job",
            payload,
            mode=mode,
            first_timeout_s=options.compile_timeout_s,
            run_timeout_s=options.run_timeout_s + options.compile_timeout_s,
            uses_gpu=True,
            progress=progress,
        )
        if outcome.ok and outcome.result is not None:
            return BaselineResult.model_validate(outcome.result)
        reason = outcome.error.message if outcome.error else "the baseline worker gave no result"
        return BaselineResult(unavailable_reason=f"baseline measurement failed: {reason}")

    async def run_job(
        self,
        target: str,
        payload: dict[str, Any],
        *,
        timeout_s: float,
        uses_gpu: bool,
        wrapper_argv: list[str] | None = None,
    ) -> JobOutcome:
        if not TARGET_PATTERN.match(target):
            raise ValueError(
                f"refused job target {target!r}: run_job only runs trusted functions named "
                "'egg_mcp.<module>:<function>'"
            )
        if uses_gpu:
            mode = self.evaluation_mode()
        else:
            mode = "plain"
        outcome, _ = await self._run(
            target,
            payload,
            mode=mode,
            first_timeout_s=timeout_s,
            run_timeout_s=None,
            uses_gpu=uses_gpu,
            wrapper_argv=wrapper_argv,
        )
        return outcome

    async def aclose(self) -> None:
        """Kill spares and anything still running; remove nothing the caller owns."""
        self._closed = True
        for task in list(self._refills):
            task.cancel()
        for task in list(self._refills):
            with contextlib.suppress(BaseException):
                await task
        for worker in list(self._live):
            await self._dispose(worker)
        self._pool.clear()

    # ------------------------------------------------------------------ workers

    def _worker_env(self, mode: str, workdir: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not confinement.is_secret(k)}
        for key in ("TRITON_INTERPRET", "PYTHONSTARTUP", "PYTHONINSPECT"):
            env.pop(key, None)
        existing = env.get("PYTHONPATH")
        env["PYTHONPATH"] = PACKAGE_PARENT + (os.pathsep + existing if existing else "")
        env["TRITON_CACHE_DIR"] = str(workdir / "triton_cache")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(workdir / "inductor_cache")
        env["TMPDIR"] = str(workdir / "tmp")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONUNBUFFERED"] = "1"
        env["EGG_MCP_SERVER_PID"] = str(os.getpid())  # the worker's watchdog ends it if we die
        if mode == "interp":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif self.device is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.device
        return env

    async def _spawn(self, mode: str, wrapper_argv: list[str] | None = None) -> _Worker:
        workdir = Path(tempfile.mkdtemp(prefix=f"worker-{mode}-", dir=self.scratch_dir))
        (workdir / "tmp").mkdir()
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        base_mode, runner = mode.removesuffix(RUNNER_POOL), mode.endswith(RUNNER_POOL)
        argv = [
            sys.executable, "-m", "egg_mcp.evaluation.worker",
            "--job-fd", str(job_r), "--result-fd", str(res_w), "--mode", base_mode,
        ] + (["--prestart-runner"] if runner else [])
        if wrapper_argv:
            argv = [*wrapper_argv, *argv, "--wrapped"]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=workdir,
                env=self._worker_env(base_mode, workdir),
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
        worker.stdout = LogCapture(self.log_limit_bytes)
        worker.stderr = LogCapture(self.log_limit_bytes)
        self._live.add(worker)  # before the next await: a cancelled refill must not orphan the process
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_RESULT_LINE)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(res_r, "rb", buffering=0)
        )
        worker.transport = transport
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

    async def _dispose(self, worker: _Worker) -> None:
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
        self._live.discard(worker)
        shutil.rmtree(worker.workdir, ignore_errors=True)

    def _spare_target(self, mode: str) -> int:
        """Spares wanted now: the standing pool plus one per queued job, up to burst_spares."""
        return self.spare_workers + min(self._waiting.get(mode, 0), self.burst_spares)

    def _schedule_refill(self, mode: str) -> None:
        if self._closed or self.spare_workers <= 0 or mode == "plain":
            return
        pool = self._pool.setdefault(mode, [])
        target = self._spare_target(mode)
        if not self._waiting.get(mode) and len(pool) > target:  # burst over: idle spares hold host and GPU memory
            surplus, pool[:] = pool[target:], pool[:target]
            for worker in surplus:
                self._track(self._dispose(worker))
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
        pool = self._pool.setdefault(mode, [])
        if self._closed or len(pool) >= self._spare_target(mode):  # closed, or the burst ended meanwhile
            await self._dispose(worker)
            return
        pool.append(worker)

    async def _take_worker(self, mode: str, wrapper_argv: list[str] | None) -> tuple[_Worker, bool]:
        """A spare from the pool when one is alive (wrapped jobs always get a fresh process)."""
        if wrapper_argv:
            return await self._spawn(mode, wrapper_argv), False
        spares = self._pool.setdefault(mode, [])
        while True:
            while spares:
                worker = spares.pop(0)
                if worker.alive():
                    self._schedule_refill(mode)
                    return worker, True
                await self._dispose(worker)
            starting = self._refills_for(mode)
            if not starting:
                break
            # a spare already on its way is further along than a process started now
            await asyncio.wait(starting, return_when=asyncio.FIRST_COMPLETED)
        worker = await self._spawn(mode)
        self._schedule_refill(mode)
        return worker, False

    # ------------------------------------------------------------------ one job

    async def _run(
        self,
        target: str,
        payload: dict[str, Any],
        *,
        mode: str,
        first_timeout_s: float,
        run_timeout_s: float | None,
        uses_gpu: bool,
        progress: ProgressFn | None = None,
        wrapper_argv: list[str] | None = None,
    ) -> tuple[JobOutcome, _JobState]:
        guard = self._gpu_lock if uses_gpu else self._cpu_slots
        pooled_job = not wrapper_argv  # wrapped jobs (ncu) always start a fresh process
        server_phase: dict[str, float] = {}
        mark = time.monotonic()

        def lap(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            server_phase[name] = round(server_phase.get(name, 0.0) + now - mark, 4)
            mark = now

        if pooled_job:
            self._waiting[mode] = self._waiting.get(mode, 0) + 1
            self._schedule_refill(mode)  # spares warm up while this job waits its turn
        try:
            await guard.acquire()
        finally:
            if pooled_job:
                self._waiting[mode] -= 1
        lap("queue_wait")
        try:
            worker, pooled = await self._take_worker(mode, wrapper_argv)
            lap("worker_take")
            try:
                outcome, state = await self._drive(
                    worker, target, payload, first_timeout_s, run_timeout_s, progress
                )
                mark = time.monotonic()
                server_phase.update(state.server_phase_s)  # the job: worker_start, judge, result_to_exit
            finally:
                await self._dispose(worker)
                lap("teardown")
        finally:
            guard.release()
        state.server_phase_s = server_phase
        server_phase["total"] = round(sum(server_phase.values()), 4)
        return outcome, state

    async def _drive(
        self,
        worker: _Worker,
        target: str,
        payload: dict[str, Any],
        first_timeout_s: float,
        run_timeout_s: float | None,
        progress: ProgressFn | None,
    ) -> tuple[JobOutcome, _JobState]:
        started = time.monotonic()
        nonce = secrets.token_hex(16)
        job_path = worker.workdir / f"job-{secrets.token_hex(8)}.json"
        fd = os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"nonce": nonce, "target": target, "payload": payload}, f)
        # The worker stdout/stderr so far belong to its start-up, not to this job.
        worker.stdout = _reset_capture(worker.stdout, self.log_limit_bytes)
        worker.stderr = _reset_capture(worker.stderr, self.log_limit_bytes)
        try:
            os.write(worker.job_fd, (str(job_path) + "\n").encode())
        except OSError:
            pass  # the worker died while waiting: reported below from its exit status
        with contextlib.suppress(OSError):
            os.close(worker.job_fd)
        worker.job_fd = -1

        state = _JobState()
        deadline = time.monotonic() + STARTUP_ALLOWANCE_S + first_timeout_s
        seen = 0
        result_deadline: float | None = None
        wait_task = asyncio.ensure_future(worker.proc.wait())
        try:
            while True:
                # Handle every message that arrived so far.
                while seen < len(worker.messages):
                    message = worker.messages[seen]
                    seen += 1
                    kind = message.get("type")
                    if kind == "ready":
                        continue
                    if message.get("nonce") != nonce:
                        state.forged.append(str(message)[:200])
                        continue
                    if kind == "started":
                        state.marks["started"] = time.monotonic()
                        state.phase = "load"
                        deadline = time.monotonic() + first_timeout_s
                    elif kind == "phase":
                        state.phase = str(message.get("phase"))
                        if state.phase == "run" and run_timeout_s is not None:
                            deadline = time.monotonic() + run_timeout_s
                        if progress is not None:
                            with contextlib.suppress(Exception):
                                await progress(
                                    float(message.get("done", 0)),
                                    message.get("total"),
                                    message.get("message") or state.phase,
                                )
                    elif kind == "result":
                        if state.result_message is not None:
                            state.forged.append("a second result message")
                        else:
                            state.result_message = message
                            state.marks["result"] = time.monotonic()
                if wait_task.done() or worker.proc.returncode is not None:
                    break
                if state.result_message is not None and result_deadline is None:
                    result_deadline = time.monotonic() + RESULT_GRACE_S
                if result_deadline is not None and time.monotonic() >= result_deadline:
                    break  # the result is in: whatever still runs is killed below
                remaining = deadline - time.monotonic()
                if result_deadline is not None:
                    remaining = min(remaining, result_deadline - time.monotonic())
                elif remaining <= 0:
                    state.timed_out = True
                    state.timeout_phase = state.phase
                    worker.kill_group()
                    await worker.wait_exit(10.0)
                    break
                worker.new_message.clear()
                msg_wait = asyncio.ensure_future(worker.new_message.wait())
                await asyncio.wait({wait_task, msg_wait}, timeout=max(0.0, min(remaining, 0.25)) + KILL_MARGIN_S,
                                   return_when=asyncio.FIRST_COMPLETED)
                msg_wait.cancel()
        finally:
            if worker.proc.returncode is None:
                worker.kill_group()
                await worker.wait_exit(10.0)
            wait_task.cancel()
        # Stragglers (threads/processes the candidate left) die with the group; then drain pipes.
        worker.kill_group()
        if worker.tasks:
            await asyncio.wait(worker.tasks[2:], timeout=1.0)  # the result reader: every message in
            await asyncio.wait(worker.tasks[:2], timeout=0.5)  # logs: an escaped process may hold them
        for message in worker.messages[seen:]:
            if message.get("type") == "result" and message.get("nonce") == nonce and state.result_message is None:
                state.result_message = message
            elif message.get("type") not in ("ready",) and message.get("nonce") != nonce:
                state.forged.append(str(message)[:200])
        wall = time.monotonic() - started
        begun, done = state.marks.get("started", started), state.marks.get("result", started + wall)
        state.server_phase_s = {"worker_start": round(begun - started, 4), "judge": round(done - begun, 4),
                                "result_to_exit": round(started + wall - done, 4)}
        return self._outcome(worker, state, wall, first_timeout_s, run_timeout_s), state

    @staticmethod
    def _outcome(
        worker: _Worker, state: _JobState, wall: float, first_timeout_s: float, run_timeout_s: float | None
    ) -> JobOutcome:
        code = worker.proc.returncode
        common = dict(
            exit_code=code,
            stdout_tail=worker.stdout.text() if worker.stdout else "",
            stderr_tail=worker.stderr.text() if worker.stderr else "",
            wall_s=round(wall, 3),
        )
        message = state.result_message
        if state.timed_out:
            limit = run_timeout_s if (state.timeout_phase == "run" and run_timeout_s is not None) else first_timeout_s
            return JobOutcome(
                ok=False,
                timed_out=True,
                result=message.get("result") if message and message.get("ok") else None,
                error=ErrorReport(
                    kind="timeout",
                    message=f"no result within {limit:g} s (phase '{state.timeout_phase}'); the worker's whole "
                    "process group was killed",
                ),
                **common,
            )
        if message is not None:
            if message.get("ok"):
                return JobOutcome(ok=True, result=message.get("result"), **common)
            err = message.get("error") or {}
            return JobOutcome(
                ok=False,
                error=ErrorReport(
                    kind=str(err.get("kind", "error")),
                    message=str(err.get("message", "")),
                    traceback=str(err.get("traceback", "")),
                ),
                **common,
            )
        return JobOutcome(ok=False, error=_death_report(code, state.phase), **common)
