"""Persistent judges: one long-lived trusted judge per (task reference, device mode), kept between verifies.

Server side, no torch. A judge (judge_host.py) starts as a spare from the pool (mode + JUDGE_POOL);
its first verify binds it to that job's reference key (judge_held.reference_key: source, dtype, size
overrides). Later verifies with the same key go to it: it holds the loaded reference, its model and
its timing, and has the next runner pre-started, so a verify costs the candidate's import, trials and
timing only. Each job still gets a fresh runner (judge_host.py).

A judge is recycled (its whole tree killed, its directory removed) on any harness fault, timeout,
death, forged message or failed job; after `judge_max_jobs` jobs; after `judge_idle_s` idle (the
host also exits by itself then); and, least recently used first, when more than `max_judges` are idle.
"""

from __future__ import annotations

import time
from typing import Any

from egg_mcp.config import JUDGE_VAR
from egg_mcp.contract import JobOutcome
from egg_mcp.evaluation.engine_pool import JUDGE_POOL, EngineSettings, WorkerPool, _Worker
from egg_mcp.evaluation.judge_held import reference_key

JUDGE_MODES = ("persistent", "oneshot")
IDLE_MARGIN_S = 5.0


def judge_mode_from(value: str | None) -> str:
    """The verify path: 'persistent' (default) or 'oneshot' (a fresh judge per verify, the old path)."""
    mode = (value or "persistent").strip().lower()
    if mode not in JUDGE_MODES:
        raise ValueError(f"{JUDGE_VAR} / judge must be one of {JUDGE_MODES}, not {value!r}")
    return mode


class JudgePool:
    """The idle persistent judges by task key (`WorkerEvaluator.judge_pool`). Its judges are `pool`'s processes:
    a spare judge comes from the pool, and a judge not kept goes back to the pool to be disposed of."""

    def __init__(self, settings: EngineSettings, pool: WorkerPool):
        self.settings = settings  # max_judges, judge_max_jobs, judge_idle_s
        self.pool = pool
        self.idle: dict[str, list[_Worker]] = {}  # judge key -> idle judges bound to that task's reference

    @staticmethod
    def key(payload: dict[str, Any], mode: str) -> str:
        """The judge a verify goes to: its device mode and reference (judge_held.reference_key)."""
        return f"{mode}:{reference_key(payload)}"

    async def take(self, key: str, mode: str) -> tuple[_Worker, bool]:
        """The idle judge holding this task's reference, else a spare judge (bound by its first job)."""
        await self._expire()
        idle = self.idle.get(key, [])
        while idle:
            worker = idle.pop()
            if worker.alive() and worker.job_fd >= 0:
                return worker, True
            await self.pool.dispose(worker)
        worker, pooled = await self.pool.take(mode + JUDGE_POOL, None)
        worker.judge_key = key
        return worker, pooled

    def _reusable(self, worker: _Worker, outcome: JobOutcome, state) -> bool:
        result = outcome.result if isinstance(outcome.result, dict) else {}
        return (worker.alive() and outcome.ok and not state.timed_out and not state.forged
                and result.get("fault") == "candidate" and worker.jobs < self.settings.judge_max_jobs
                and not self.pool.closed)

    async def release(self, worker: _Worker, outcome: JobOutcome, state) -> None:
        """Keep a judge that finished cleanly; recycle it otherwise; trim the idle ones to max_judges."""
        worker.jobs += 1
        if not self._reusable(worker, outcome, state):
            await self.pool.dispose(worker)
            return
        worker.idle_since = time.monotonic()
        self.idle.setdefault(worker.judge_key or "", []).append(worker)
        idle = sorted((w for ws in self.idle.values() for w in ws), key=lambda w: w.idle_since)
        for old in idle[: max(0, len(idle) - self.settings.max_judges)]:
            self.idle[old.judge_key or ""].remove(old)
            await self.pool.dispose(old)

    async def _expire(self) -> None:
        now = time.monotonic()
        for key, workers in list(self.idle.items()):
            for worker in list(workers):
                # a few seconds before the host's own idle exit: a job is never written to a judge that is leaving
                if not worker.alive() or now - worker.idle_since > self.settings.judge_idle_s - IDLE_MARGIN_S:
                    workers.remove(worker)
                    await self.pool.dispose(worker)
            if not workers:
                self.idle.pop(key, None)

    def describe(self) -> list[dict[str, Any]]:
        """The idle persistent judges (WorkerEvaluator.judges: for tests and `doctor`-style reports)."""
        return [{"key": w.judge_key, "pid": w.proc.pid, "jobs": w.jobs, "alive": w.alive()}
                for ws in self.idle.values() for w in ws]
