"""The evaluation engine as the server sees it: `WorkerEvaluator`.

Runs in the server process and never imports torch or candidate code. Every job runs in a worker
process. `WorkerEvaluator` owns its parts, each declaring the state it keeps: `pool` (engine_pool.py:
spawning, spares), `judge_pool` (engine_judges.py) and `driver` (engine_drive.py: one job's messages,
deadlines and end), all reading one `EngineSettings`.
GPU jobs take a FIFO lock per device so their timings never overlap; everything else keeps being
answered meanwhile.

Verify runs in a trusted *judge* that starts an untrusted *runner* (the only process that imports the
candidate). Two paths, chosen by `judge=` or the environment variable EGG_MCP_JUDGE:
- 'persistent' (default): a long-lived judge per task reference (engine_judges.py, judge_host.py)
  holds the reference, its model and timing, and pre-starts a fresh runner for each next candidate;
- 'oneshot': a pre-started one-job worker per verify (`--prestart-runner`), killed after its result.
Workers never receive secrets (EGG_MCP_TOKEN and other *TOKEN/*KEY/... variables are dropped), and
the server makes itself non-dumpable so a same-user process cannot read its memory or environment
through /proc.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from pathlib import Path
from typing import Any

from egg_mcp.config import judge_setting
from egg_mcp.contract import BaselineResult, EvalOptions, EvalResult, JobOutcome, ProgressFn
from egg_mcp.evaluation import confinement
from egg_mcp.evaluation.engine_drive import JobDriver, _JobState
from egg_mcp.evaluation.engine_judges import JudgePool, judge_mode_from
from egg_mcp.evaluation.engine_pool import JUDGE_POOL, RUNNER_POOL, EngineSettings, WorkerPool
from egg_mcp.evaluation.engine_results import evaluation_result
from egg_mcp.evaluation.worker import target_allowed


class WorkerEvaluator:
    """Evaluator (see contract.Evaluator) that runs everything in isolated worker processes. It owns its parts:
    `settings` (EngineSettings, read-only), `pool` (WorkerPool: the processes and spares), `judge_pool`
    (JudgePool: idle persistent judges) and `driver` (JobDriver: one job on one worker). Build one through
    egg_mcp.cluster.build (build_engine, build_evaluator) rather than here."""

    def __init__(
        self,
        *,
        scratch_dir,
        force_interpreter: bool = False,
        spare_workers: int = 1,
        burst_spares: int = 3,
        log_limit_bytes: int = 64 * 1024,
        max_cpu_jobs: int | None = None,
        protect_server_memory: bool = True,
        judge: str | None = None,
        max_judges: int = 2,
        judge_max_jobs: int = 20,
        judge_idle_s: float = 600.0,
        judge_ahead: bool = True,
        device: str | None = None,
        protect=(),
        sandbox_required=(),
        bounds_floor: dict[str, int] | None = None,
    ):
        self.settings = EngineSettings(
            scratch_dir=Path(scratch_dir),
            force_interpreter=force_interpreter,
            judge=judge_mode_from(judge if judge is not None else judge_setting()),
            spare_workers=max(0, spare_workers),
            burst_spares=max(0, burst_spares),
            log_limit_bytes=log_limit_bytes,
            max_judges=max(0, max_judges),
            judge_max_jobs=max(1, judge_max_jobs),
            judge_idle_s=float(judge_idle_s),
            judge_ahead=judge_ahead,
            device=device,
            protect=tuple(str(p) for p in protect),
            sandbox_required=tuple(sandbox_required),
            bounds_floor=dict(bounds_floor or {}),
        )
        self.settings.scratch_dir.mkdir(parents=True, exist_ok=True)
        self.pool = WorkerPool(self.settings)
        self.judge_pool = JudgePool(self.settings, self.pool)
        self.driver = JobDriver(self.settings)
        self._gpu_lock = asyncio.Lock()  # FIFO: asyncio.Lock wakes waiters in arrival order
        self._cpu_slots = asyncio.Semaphore(max_cpu_jobs or max(1, (os.cpu_count() or 2)))
        self._has_gpu: bool | None = None  # NVML's answer, asked once
        if protect_server_memory:
            confinement.protect_memory()  # /proc/<server>/{environ,mem} closed to the candidate's user

    # ------------------------------------------------------------------ public API

    @property
    def judge(self) -> str:
        """The verify path: 'persistent' or 'oneshot'."""
        return self.settings.judge

    def has_gpu(self) -> bool:
        """A CUDA GPU visible through NVML (cheap: no torch in the server) and not forced off."""
        if self.settings.force_interpreter:
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
        self.pool.schedule_refill(self._verify_pool(self.evaluation_mode()))
        self.pool.schedule_refill(self.evaluation_mode())

    async def wait_pool_ready(self, timeout_s: float = 180.0) -> int:
        """Wait until the spare workers have finished their preloads; returns how many are ready."""
        return await self.pool.wait_ready(timeout_s)

    def expect_jobs(self, n: int) -> None:
        """A lane pool (egg_mcp/cluster) hands this engine one job at a time and holds `n` more that will
        each take a one-shot worker of its device mode: start spares for them now, as for jobs queued
        here (otherwise each job waits for the spare its predecessor's take began to start)."""
        self.pool.expect(self.evaluation_mode(), n)

    def judges(self) -> list[dict[str, Any]]:
        """The idle persistent judges (for tests and `doctor`-style reports)."""
        return self.judge_pool.describe()

    def _verify_pool(self, mode: str) -> str:
        return mode + (JUDGE_POOL if self.settings.judge == "persistent" else RUNNER_POOL)

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
            "bounds_floor": self.settings.bounds_floor,
        }
        outcome, state = await self._run(
            "egg_mcp.evaluation.harness:evaluate_job",
            payload,
            mode=self._verify_pool(mode),
            judge_key=JudgePool.key(payload, mode) if self.settings.judge == "persistent" else None,
            first_timeout_s=options.compile_timeout_s,
            run_timeout_s=options.run_timeout_s,
            uses_gpu=(mode == "gpu"),
            progress=progress,
        )
        return evaluation_result(outcome, state, options)

    async def memcheck(self, reference_source: str, candidate_source: str, options: EvalOptions):
        """One forward of the candidate under compute-sanitizer memcheck (GPU only), its runner bounded as
        verify's: a MemcheckResult whose verdict is 'memory_error' (kernel, access, address), 'clean',
        'over_bound' or 'unavailable'. Not part of verify: the sanitizer slows kernels 10-100x; call it once
        before a candidate is committed."""
        from egg_mcp.evaluation.memcheck import MemcheckResult

        if self.evaluation_mode(options.device) != "gpu":
            return MemcheckResult(verdict="unavailable", summary="memcheck needs a CUDA GPU; on the CPU the "
                                  "interpreter's guarded allocations (part of every verify) cover out-of-bounds writes")
        payload = {"reference_source": reference_source, "candidate_source": candidate_source,
                   "options": options.model_dump(mode="json"), "init_seed": secrets.randbits(62),
                   "seed": secrets.randbits(62), "bounds_floor": self.settings.bounds_floor}
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
        if not target_allowed(target):
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
        await self.pool.aclose()  # the idle judges are the pool's processes too
        self.judge_pool.idle.clear()

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
        judge_key: str | None = None,
    ) -> tuple[JobOutcome, _JobState]:
        """One job under the device's FIFO lock (GPU) or a CPU slot. `server_phase_s` names every second:
        queue_wait, worker_take, worker_start, judge, result_to_exit, teardown; `total` is the measured
        wall time and `unaccounted` what no phase holds (it stays near zero: tests assert it)."""
        guard = self._gpu_lock if uses_gpu else self._cpu_slots
        bursts = not wrapper_argv and judge_key is None  # ncu jobs start fresh; a task's judge needs no burst
        server_phase: dict[str, float] = {}
        began = mark = time.monotonic()

        def lap(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            server_phase[name] = round(server_phase.get(name, 0.0) + now - mark, 4)
            mark = now

        waiting = self.pool.waiting
        if bursts:
            waiting[mode] = waiting.get(mode, 0) + 1
        if not wrapper_argv:
            self.pool.schedule_refill(mode)  # spares warm up while this job waits its turn
        try:
            await guard.acquire()
        finally:
            if bursts:
                waiting[mode] -= 1
        lap("queue_wait")
        try:
            if judge_key is not None:
                worker, _ = await self.judge_pool.take(judge_key, mode.removesuffix(JUDGE_POOL))
            else:
                worker, _ = await self.pool.take(mode, wrapper_argv)
            lap("worker_take")
            outcome = state = None
            try:
                outcome, state = await self.driver.drive(
                    worker, target, payload, first_timeout_s, run_timeout_s, progress, keep=judge_key is not None
                )
                mark = time.monotonic()
                server_phase.update(state.server_phase_s)  # the job: worker_start, judge, result_to_exit
            finally:
                if judge_key is not None and outcome is not None:
                    await self.judge_pool.release(worker, outcome, state)
                else:
                    await self.pool.dispose(worker)
                lap("teardown")
        finally:
            guard.release()
        assert outcome is not None and state is not None  # drive returned (else its exception left above)
        state.server_phase_s = server_phase
        total = time.monotonic() - began
        server_phase["unaccounted"] = round(total - sum(server_phase.values()), 4)
        server_phase["total"] = round(total, 4)
        return outcome, state
