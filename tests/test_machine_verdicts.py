"""Issue 27 item 6: a verdict the machine may have caused (a timeout, an out-of-memory end that the source
is not shown to cause, a harness fault) is kept for the history but never served from the verify cache: a
re-verify of the same source runs again. A verdict the source causes (an OOM whose own request exceeds
the device, a mismatch, a correct result) is still reused."""

from __future__ import annotations

import asyncio

import pytest

from egg_mcp.config import ServerConfig
from egg_mcp.contract import BaselineResult, ErrorReport, EvalResult, Fault, JobOutcome, Verdict
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.workflow.checks import machine_caused, oom_is_own, reuse_blocker
from egg_mcp.workflow.service import EggService
from egg_mcp.workspace.store import Workspace
from tests.test_service_concurrency import SEED

# PyTorch's CUDA OOM message (2.x): the request, the device's capacity, what this process holds.
OWN_OOM = ("CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity of 139.72 GiB of which "
           "138.10 GiB is free. Including non-PyTorch memory, this process has 1.50 GiB memory in use.")
CROWDED_OOM = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.72 GiB of which "
               "1.10 GiB is free. Process 4242 has 130.00 GiB memory in use. Including non-PyTorch memory, this "
               "process has 8.50 GiB memory in use.")
KILLED = "the candidate's runner process was killed (SIGKILL) from outside: most likely the host's out-of-memory killer"


def _result(verdict: Verdict, message: str = "", fault: Fault = "candidate") -> EvalResult:
    error = ErrorReport(kind="oom" if verdict == "oom" else verdict, message=message) if message else None
    return EvalResult(verdict=verdict, summary=verdict, error=error, fault=fault)


def test_which_verdicts_are_the_machines():
    assert machine_caused(_result("timeout", "worker killed after 180 s")) is not None
    assert machine_caused(_result("oom", KILLED)) is not None
    assert machine_caused(_result("oom", CROWDED_OOM)) is not None  # others hold 130 GiB of the 140
    assert machine_caused(_result("runtime_error", "numpy missing", fault="harness")) is not None
    assert machine_caused(_result("oom", OWN_OOM)) is None  # 200 GiB asked of a 140 GiB device: the source's
    assert oom_is_own(ErrorReport(kind="RuntimeError", message="DefaultCPUAllocator: can't allocate memory: you "
                                  "tried to allocate 999999999999999 bytes."), host_memory_bytes=64 << 30)
    for verdict in ("correct", "incorrect", "runtime_error", "compile_error"):
        assert machine_caused(_result(verdict)) is None
    assert reuse_blocker(_result("incorrect")) is None


class Scripted:
    """An evaluator that answers each evaluation with the next scripted result."""

    def __init__(self, results: list[EvalResult]):
        self.results = list(results)
        self.calls = 0

    def has_gpu(self) -> bool:
        return False

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        return JobOutcome(ok=False, error=ErrorReport(kind="fake", message="no analysis in this test"))

    async def baselines(self, reference_source, options, progress=None):
        return BaselineResult(unavailable_reason="cpu")

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        self.calls += 1
        return self.results.pop(0).model_copy(deep=True)


def _verify_thrice(tmp_path, results: list[EvalResult]):
    fake = Scripted(results)
    service = EggService(ServerConfig(workspace=tmp_path / "ws"), Workspace(tmp_path / "ws"), fake, None)

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        out = [await service.verify(task.task_id, SEED) for _ in range(3)]
        return task, out, service.repo.candidates_in_stage(task.task_id, task.stage)

    task, out, rows = asyncio.run(scenario())
    return fake, out, rows


@pytest.mark.parametrize("first", [_result("timeout", "the job ran past its 180 s limit"), _result("oom", KILLED),
                                   _result("oom", CROWDED_OOM)], ids=["timeout", "oom-killer", "oom-crowded"])
def test_a_machine_verdict_is_run_again_and_kept_for_the_history(tmp_path, first):
    fake, (one, two, three), rows = _verify_thrice(tmp_path, [first, _result("correct")])
    assert one.verdict == first.verdict and not one.cached
    assert two.verdict == "correct" and not two.cached and fake.calls == 2  # ran again, not the stored verdict
    assert three.cached and three.candidate_id == two.candidate_id  # the source's own verdict is reused
    verdicts = sorted(r.verdict for r in rows)  # pyright: ignore[reportArgumentType]  # (finished rows: each has one)
    assert verdicts == sorted([first.verdict, "correct"]), verdicts  # the machine's verdict stays recorded


def test_an_oom_the_source_causes_itself_is_served_from_the_cache(tmp_path):
    fake, (one, two, _), _ = _verify_thrice(tmp_path, [_result("oom", OWN_OOM)])
    assert one.verdict == "oom" and two.cached and two.candidate_id == one.candidate_id and fake.calls == 1
