"""What the engine makes of a finished job: log capture, deaths, harness faults and the EvalResult.

Server side (no torch). Split from engine.py: that one runs processes, this one only reads outcomes.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from egg_mcp.contract import ErrorReport, EvalOptions, EvalResult, JobOutcome

SIGNAL_NAMES: dict[int, str] = {
    signal.SIGSEGV: "segmentation fault (SIGSEGV)",
    signal.SIGBUS: "bus error (SIGBUS)",
    signal.SIGILL: "illegal instruction (SIGILL)",
    signal.SIGFPE: "floating-point exception (SIGFPE)",
    signal.SIGABRT: "abort (SIGABRT)",
    signal.SIGKILL: "killed (SIGKILL)",
    signal.SIGTERM: "terminated (SIGTERM)",
}


class LogCapture:
    """Keeps the first and last `limit/2` bytes of a stream; the middle is counted and dropped."""

    def __init__(self, limit: int):
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        middle = f"\n... [{dropped} bytes omitted] ...\n" if dropped > 0 else ""
        return self.head.decode(errors="replace") + middle + self.tail.decode(errors="replace")

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(1 << 16)
            if not chunk:
                return
            self.add(chunk)


def evaluation_result(outcome: JobOutcome, state, options: EvalOptions) -> EvalResult:
    """The EvalResult for one finished verify job (forgery, timeout, death, harness fault, or the judge's result)."""
    logs: dict[str, Any] = dict(stdout_tail=outcome.stdout_tail, stderr_tail=outcome.stderr_tail, wall_s=outcome.wall_s,
                server_phase_s=state.server_phase_s)
    if state.forged:
        from egg_mcp.contract import IntegrityFinding

        return EvalResult(
            verdict="integrity_violation",
            summary="The worker's result channel received messages the harness did not write: candidate "
            "code tampered with the evaluation; remove whatever writes to inherited file descriptors.",
            integrity=[IntegrityFinding(check="monkeypatch", severity="violation",
                                        detail="forged result-channel messages: " + "; ".join(state.forged[:3]))],
            options=options,
            **logs,
        )
    if outcome.ok and outcome.result is not None:
        try:
            return EvalResult.model_validate({**outcome.result, **logs, "options": options})
        except ValueError as exc:  # the judge's own result does not fit the model: our bug
            return _harness_fault(f"the judge returned a malformed result ({str(exc)[:300]})", options, logs)
    if outcome.timed_out:
        phase = state.timeout_phase or "load"
        partial = outcome.result or {}
        where = "importing/compiling the candidate" if phase in ("starting", "load") else f"phase '{phase}'"
        return EvalResult(
            verdict="timeout",
            summary=f"The candidate did not finish {where} within {state.limit_s:g} s (the limit "
            f"{_armed(state, phase)}); the worker was killed. "
            "Look for an endless loop (a Python loop or a kernel loop whose bound never reaches its end), "
            "then verify again.",
            error=outcome.error,
            correctness_trials=int(partial.get("correctness_trials", 0)),
            options=options,
            **logs,
        )
    error = outcome.error or ErrorReport(kind="unknown", message="no result")
    if error.kind == "oom":
        verdict = "oom"
        summary = (f"The worker ran out of memory ({error.message}). Use less memory (smaller tiles, no huge "
                   "temporaries).")
    elif error.kind in ("exit", "signal"):
        verdict = "runtime_error"
        summary = (
            f"The worker died without a result during phase '{state.phase}': {error.message}. "
            "Fix the crash (out-of-bounds pointer, exit call, bad ctypes use) and verify again."
        )
    else:
        # The judge never imports candidate code: an exception there is egg-mcp's or the environment's.
        return _harness_fault(f"phase '{state.phase}': {error.kind}: {error.message[:300]}", options, logs,
                              error)
    return EvalResult(verdict=verdict, summary=summary, error=error, options=options, **logs)

def _harness_fault(detail: str, options: EvalOptions, logs: dict, error: ErrorReport | None = None) -> EvalResult:
    """Not the kernel's fault: a missing package, a broken install, a bug in egg-mcp."""
    fix = "run `python -m egg_mcp doctor` and fix what it reports (e.g. install the missing package)"
    if "ModuleNotFoundError" in detail or "No module named" in detail:
        fix = "install the missing package into the server's Python environment (see `python -m egg_mcp doctor`)"
    return EvalResult(
        verdict="runtime_error", fault="harness",
        summary=f"Not your kernel: egg-mcp's evaluation harness failed ({detail}). Fix: {fix}, then verify "
                "again; report it to egg-mcp if it persists.",
        error=error or ErrorReport(kind="harness", message=detail), options=options, **logs)


def _reset_capture(capture: LogCapture | None, limit: int) -> LogCapture:
    """Clear the buffers in place (the drain task keeps writing to the same object)."""
    if capture is None:
        return LogCapture(limit)
    capture.head.clear()
    capture.tail.clear()
    capture.total = 0
    return capture


def _death_report(code: int | None, phase: str) -> ErrorReport:
    """Why a worker ended without a result, from its exit status."""
    if code is not None and code < 0:
        sig = -code
        name = SIGNAL_NAMES.get(sig, f"signal {sig}")
        if sig == signal.SIGKILL:
            return ErrorReport(kind="oom", message=f"worker {name} without a timeout: most likely the host's "
                                                     "out-of-memory killer")
        return ErrorReport(kind="signal", message=f"worker ended by {name} in phase '{phase}'")
    return ErrorReport(
        kind="exit",
        message=f"worker exited with code {code} in phase '{phase}' before the harness reported "
        "(os._exit / sys.exit / abort in candidate code?)",
    )


def _armed(state, phase: str) -> str:
    """Which limit that was: the same value the job's timer ran with (engine_drive records it)."""
    armed = getattr(state, "limit_phase", phase)
    return "for that phase" if armed == phase else f"counted from the start of phase '{armed}'"
