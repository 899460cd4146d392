"""Benchmarks measure through the real engine: one `WorkerEvaluator` per call, its `run_job` (the same
isolated worker processes the server uses; a `wrapper_argv` such as an ncu command always gets a fresh one)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from egg_mcp.contract import JobOutcome
from egg_mcp.evaluation.engine import WorkerEvaluator


def evaluator(scratch: Path | None = None) -> WorkerEvaluator:
    return WorkerEvaluator(scratch_dir=scratch or Path(tempfile.mkdtemp(prefix="egg-bench-engine-")), spare_workers=0)


async def _run(target: str, payload: dict[str, Any], wrapper_argv: list[str] | None, timeout_s: float,
               uses_gpu: bool) -> JobOutcome:
    ev = evaluator()
    try:
        return await ev.run_job(target, payload, timeout_s=timeout_s, uses_gpu=uses_gpu, wrapper_argv=wrapper_argv)
    finally:
        await ev.aclose()


def run_job(target: str, payload: dict[str, Any], *, wrapper_argv: list[str] | None = None, timeout_s: float = 300,
            uses_gpu: bool = True) -> tuple[JobOutcome, float]:
    """(outcome, wall seconds around the job) of one engine job."""
    t0 = time.perf_counter()
    outcome = asyncio.run(_run(target, payload, wrapper_argv, timeout_s, uses_gpu))
    return outcome, time.perf_counter() - t0
