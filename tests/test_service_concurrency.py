"""Many verify calls at once on one task (what a parallel agent or bench_load does)."""

from __future__ import annotations

import asyncio

from egg_mcp.config import ServerConfig
from egg_mcp.contract import BaselineResult, ErrorReport, EvalResult, JobOutcome, TimingStats
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.workflow.service import EggService
from egg_mcp.workspace.store import Workspace

SEED = open(__import__("pathlib").Path(__file__).parent / "fixtures" / "softmax" / "row_per_program.py").read()


class SlowBaselinesEvaluator:
    """A GPU evaluator double whose baseline job takes a while, as torch.compile does."""

    def __init__(self):
        self.baseline_calls = 0
        self.evaluated = 0
        self.options = []

    def has_gpu(self) -> bool:
        return True

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        return JobOutcome(ok=False, error=ErrorReport(kind="fake", message="no reference analysis in this test"))

    async def baselines(self, reference_source, options, progress=None):
        self.baseline_calls += 1
        await asyncio.sleep(0.2)
        return BaselineResult(eager=TimingStats(median_ms=4.0), compiled=TimingStats(median_ms=2.0))

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        self.evaluated += 1
        self.options.append(options)
        return EvalResult(verdict="correct", summary="fake correct", timing=TimingStats(median_ms=1.0))


def test_concurrent_verifies_on_a_new_task_measure_the_baselines_once(tmp_path):
    fake = SlowBaselinesEvaluator()
    service = EggService(ServerConfig(workspace=tmp_path / "ws"), Workspace(tmp_path / "ws"), fake, None)

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        results = await asyncio.gather(*(service.verify(task.task_id, SEED + f"\n# variant {i}\n") for i in range(8)))
        return results

    results = asyncio.run(scenario())
    assert fake.baseline_calls == 1
    assert fake.evaluated == 8
    assert all(r.verdict == "correct" and r.speedup_vs_eager == 4.0 for r in results)


def test_verify_asks_for_the_isolated_reading_unless_the_server_is_told_not_to(tmp_path, monkeypatch):
    """Every verified candidate also gets the ncu-comparable reading; EGG_MCP_ISOLATED_TIMING=0 turns it off."""
    for env, expected in ((None, True), ("0", False)):
        if env is None:
            monkeypatch.delenv("EGG_MCP_ISOLATED_TIMING", raising=False)
        else:
            monkeypatch.setenv("EGG_MCP_ISOLATED_TIMING", env)
        fake = SlowBaselinesEvaluator()
        ws = tmp_path / f"ws_{env}"
        service = EggService(ServerConfig(workspace=ws), Workspace(ws), fake, None)

        async def scenario():
            task = await service.start_task(builtin_source("softmax"))
            await service.verify(task.task_id, SEED)

        asyncio.run(scenario())
        assert [o.isolated_timing for o in fake.options] == [expected]
