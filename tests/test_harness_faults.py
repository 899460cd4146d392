"""Issue 15 item 2: a failure of egg-mcp itself is never blamed on the candidate, and never cached."""

from __future__ import annotations

import asyncio

from egg_mcp.config import ServerConfig
from egg_mcp.contract import BaselineResult, ErrorReport, EvalOptions, EvalResult, JobOutcome
from egg_mcp.evaluation.engine_results import evaluation_result
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.workflow.service import EggService
from egg_mcp.workspace.store import Workspace
from tests.test_service_concurrency import SEED


class _State:
    forged: list = []
    timed_out = False
    timeout_phase = None
    phase = "load"
    server_phase_s: dict = {}


def test_an_exception_in_the_judge_is_a_harness_fault_with_a_fix():
    outcome = JobOutcome(ok=False, error=ErrorReport(kind="ModuleNotFoundError", message="No module named 'numpy'"))
    result = evaluation_result(outcome, _State(), EvalOptions())
    assert result.fault == "harness" and result.verdict == "runtime_error"
    assert result.summary.startswith("Not your kernel") and "install the missing package" in result.summary
    assert "candidate code may have broken" not in result.summary


def test_a_candidate_crash_stays_the_candidates_fault():
    outcome = JobOutcome(ok=True, result={"verdict": "runtime_error", "summary": "ModelNew.forward failed"})
    assert evaluation_result(outcome, _State(), EvalOptions()).fault == "candidate"


class FlakyHarness:
    """An evaluator whose first evaluation is a harness fault, the next ones correct."""

    def __init__(self):
        self.calls = 0

    def has_gpu(self) -> bool:
        return False

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        return JobOutcome(ok=False, error=ErrorReport(kind="fake", message="no analysis in this test"))

    async def baselines(self, reference_source, options, progress=None):
        return BaselineResult(unavailable_reason="cpu")

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        self.calls += 1
        if self.calls == 1:
            return EvalResult(verdict="runtime_error", fault="harness", summary="Not your kernel: numpy missing")
        return EvalResult(verdict="correct", summary="correct")


def test_a_harness_fault_is_not_served_from_the_cache(tmp_path):
    fake = FlakyHarness()
    service = EggService(ServerConfig(workspace=tmp_path / "ws"), Workspace(tmp_path / "ws"), fake, None)

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        first = await service.verify(task.task_id, SEED)
        second = await service.verify(task.task_id, SEED)  # same source: re-evaluated, not the stored fault
        return first, second

    first, second = asyncio.run(scenario())
    assert first.verdict == "runtime_error" and second.verdict == "correct" and not second.cached
    assert fake.calls == 2
