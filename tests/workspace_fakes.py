"""A fast evaluator double for workspace/workflow tests (no worker processes, no GPU)."""

from __future__ import annotations

import asyncio

from egg_mcp.config import ServerConfig
from egg_mcp.contract import BaselineResult, ErrorReport, EvalResult, JobOutcome, TimingStats
from egg_mcp.workflow.service import EggService
from egg_mcp.workspace.store import Workspace


class FakeEvaluator:
    """Every candidate is correct at `time_ms`; `delay_s` makes evaluation take a while."""

    def __init__(self, time_ms: float | None = None, delay_s: float = 0.0, gpu: bool = False):
        self.time_ms = time_ms
        self.delay_s = delay_s
        self.gpu = gpu
        self.evaluated = 0
        self.options = []
        self.jobs = []

    def has_gpu(self) -> bool:
        return self.gpu

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        self.jobs.append((target, timeout_s))
        return JobOutcome(ok=False, error=ErrorReport(kind="fake", message="no reference analysis in this test"))

    async def baselines(self, reference_source, options, progress=None):
        return BaselineResult(eager=TimingStats(median_ms=4.0), compiled=TimingStats(median_ms=2.0))

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        self.evaluated += 1
        self.options.append(options)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        timing = TimingStats(median_ms=self.time_ms) if self.time_ms is not None else None
        return EvalResult(verdict="correct", summary="fake correct", timing=timing)


def make_service(ws_dir, evaluator=None, **config) -> EggService:
    cfg = ServerConfig(workspace=ws_dir, force_interpreter=not (evaluator and evaluator.gpu), **config)
    return EggService(cfg, Workspace(ws_dir), evaluator or FakeEvaluator(), None)
