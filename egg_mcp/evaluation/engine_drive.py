"""Driving one job through a worker: hand it the job, follow its messages and deadlines, end it, and
turn what came back into a JobOutcome. Server side, no torch.

A job ends as soon as its result message is in. A one-shot worker then gets a short grace to exit
before its whole tree (every descendant, found through /proc, then its process group) is killed,
whatever a child still holds; a persistent judge (engine_judges.py) is kept: it has already killed
its runner's tree itself, and it is recycled on any sign of trouble.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from egg_mcp.contract import ErrorReport, JobOutcome, ProgressFn
from egg_mcp.evaluation.engine_pool import EngineSettings, _Worker
from egg_mcp.evaluation.engine_results import _death_report, _reset_capture

STARTUP_ALLOWANCE_S = 180.0
"""A fresh worker may take this long to import torch and initialise CUDA before its job timer starts."""
KILL_MARGIN_S = 0.05
RESULT_GRACE_S = 0.5
"""After the result message, a one-shot worker has this long to exit by itself before its tree is killed."""
QUIET = ("ready", "idle")
"""Messages without a job nonce that the harness itself sends between jobs."""


@dataclass
class _JobState:
    phase: str = "starting"
    result_message: dict | None = None
    sandbox: dict | None = None  # what the worker said it applied, before the job's code ran
    forged: list[str] = field(default_factory=list)
    timed_out: bool = False
    timeout_phase: str | None = None
    limit_s: float = 0.0  # the limit the running deadline was armed with (what a timeout message names)
    limit_phase: str = "starting"  # the phase that armed it
    server_phase_s: dict[str, float] = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)


def timeout_message(limit_s: float, armed_phase: str, phase: str | None) -> str:
    """The timeout sentence, naming the limit the deadline was armed with and the phase that ran out."""
    phase = phase or armed_phase
    since = "" if armed_phase == phase else f", counted from the start of phase '{armed_phase}'"
    return (f"no result within {limit_s:g} s (timed out in phase '{phase}'{since}); "
            "the worker's whole process group was killed")


async def _on_message(message: dict, nonce: str, state: _JobState, deadline: float, first_timeout_s: float,
                      run_timeout_s: float | None, progress: ProgressFn | None) -> float:
    """Take one worker message into `state`; returns the deadline, re-armed when the job starts or its run
    phase begins. A message without the job's nonce is recorded as forged."""
    kind = message.get("type")
    if kind in QUIET:
        return deadline
    if message.get("nonce") != nonce:
        state.forged.append(str(message)[:200])
        return deadline
    if kind == "started":
        state.marks["started"] = time.monotonic()
        state.phase = "load"
        deadline = time.monotonic() + first_timeout_s
        state.limit_s, state.limit_phase = first_timeout_s, state.phase
    elif kind == "phase":
        state.phase = str(message.get("phase"))
        if state.phase == "run" and run_timeout_s is not None:
            deadline = time.monotonic() + run_timeout_s
            state.limit_s, state.limit_phase = run_timeout_s, state.phase
        if progress is not None:
            with contextlib.suppress(Exception):
                await progress(
                    float(message.get("done", 0)),
                    message.get("total"),
                    message.get("message") or state.phase,
                )
    elif kind == "confined" and state.sandbox is None and state.result_message is None:
        state.sandbox = message.get("sandbox") if isinstance(message.get("sandbox"), dict) else None
    elif kind == "result":
        if state.result_message is not None:
            state.forged.append("a second result message")
        else:
            state.result_message = message
            state.marks["result"] = time.monotonic()
    return deadline


async def _drain(worker: _Worker, state: _JobState, seen: int, nonce: str) -> None:
    """Stragglers (threads/processes the candidate left) die with the group; then the pipes are drained and
    the messages that came after the loop are read (the result, or forged ones)."""
    worker.kill_group()
    if worker.tasks:
        await asyncio.wait(worker.tasks[2:], timeout=1.0)  # the result reader: every message in
        await asyncio.wait(worker.tasks[:2], timeout=0.5)  # logs: an escaped process may hold them
    for message in worker.messages[seen:]:
        if message.get("type") == "result" and message.get("nonce") == nonce and state.result_message is None:
            state.result_message = message
        elif message.get("type") not in QUIET and message.get("nonce") != nonce:
            state.forged.append(str(message)[:200])


class JobDriver:
    """One job on one worker (`WorkerEvaluator.driver`): the job file, its messages, deadlines and end, and the
    JobOutcome made of them. The worker itself is the pool's (engine_pool.py): taken before, disposed of after."""

    def __init__(self, settings: EngineSettings):
        self.settings = settings  # log_limit_bytes: each job's stdout/stderr capture

    async def drive(
        self,
        worker: _Worker,
        target: str,
        payload: dict[str, Any],
        first_timeout_s: float,
        run_timeout_s: float | None,
        progress: ProgressFn | None,
        keep: bool = False,
    ) -> tuple[JobOutcome, _JobState]:
        """Run one job on `worker`; `keep` (a persistent judge): the job fd stays open for the next job
        and the worker is left alive once its result is in."""
        started = time.monotonic()
        nonce = self._hand_over(worker, target, payload, keep)
        state = _JobState()
        deadline = time.monotonic() + STARTUP_ALLOWANCE_S + first_timeout_s
        state.limit_s, state.limit_phase = STARTUP_ALLOWANCE_S + first_timeout_s, state.phase
        seen = len(worker.messages) if keep else 0  # a kept judge's earlier jobs are done
        result_deadline: float | None = None
        wait_task = asyncio.ensure_future(worker.proc.wait())
        try:
            while True:
                # Handle every message that arrived so far.
                while seen < len(worker.messages):
                    message = worker.messages[seen]
                    seen += 1
                    deadline = await _on_message(message, nonce, state, deadline, first_timeout_s, run_timeout_s,
                                                 progress)
                if wait_task.done() or worker.proc.returncode is not None:
                    break
                if keep and state.result_message is not None:
                    break  # the judge lives on; its runner's tree is already dead
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
            kept = keep and state.result_message is not None and worker.proc.returncode is None
            if worker.proc.returncode is None and not kept:
                worker.kill_group()
                await worker.wait_exit(10.0)
            wait_task.cancel()
        if kept:
            return self._finish(worker, state, started, first_timeout_s, run_timeout_s)
        await _drain(worker, state, seen, nonce)
        return self._finish(worker, state, started, first_timeout_s, run_timeout_s)

    def _hand_over(self, worker: _Worker, target: str, payload: dict[str, Any], keep: bool) -> str:
        """Write the job file, tell the worker its path; returns the job's nonce. Without `keep` the job fd
        is closed: a one-shot worker gets no second job."""
        nonce = secrets.token_hex(16)
        job_path = worker.workdir / "jobs" / f"job-{secrets.token_hex(8)}.json"
        fd = os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"nonce": nonce, "target": target, "payload": payload}, f)
        # The worker stdout/stderr so far belong to its start-up, not to this job.
        worker.stdout = _reset_capture(worker.stdout, self.settings.log_limit_bytes)
        worker.stderr = _reset_capture(worker.stderr, self.settings.log_limit_bytes)
        try:
            os.write(worker.job_fd, (str(job_path) + "\n").encode())
        except OSError:
            pass  # the worker died while waiting: reported below from its exit status
        if not keep:
            with contextlib.suppress(OSError):
                os.close(worker.job_fd)
            worker.job_fd = -1
        return nonce

    def _finish(self, worker: _Worker, state: _JobState, started: float, first_timeout_s: float,
                run_timeout_s: float | None) -> tuple[JobOutcome, _JobState]:
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
        common: dict[str, Any] = dict(
            exit_code=code,
            stdout_tail=worker.stdout.text() if worker.stdout else "",
            stderr_tail=worker.stderr.text() if worker.stderr else "",
            wall_s=round(wall, 3),
            sandbox=state.sandbox,
        )
        message = state.result_message
        if state.timed_out:
            return JobOutcome(
                ok=False,
                timed_out=True,
                result=message.get("result") if message and message.get("ok") else None,
                error=ErrorReport(
                    kind="timeout",
                    message=timeout_message(state.limit_s, state.limit_phase, state.timeout_phase),
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
