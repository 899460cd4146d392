"""Memcheck before commit (issue 12): on a GPU with compute-sanitizer, commit_stage runs one memcheck
forward per candidate (stored, so it runs once), refuses a memory_error naming kernel and address, says
"memcheck unavailable" when it cannot run, and accepts an opt-out with a stored reason. Fake evaluator:
no workers, no GPU."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from egg_mcp.contract import ErrorReport
from egg_mcp.evaluation import memcheck as memcheck_module
from egg_mcp.evaluation.memcheck import MemcheckResult, MemoryAccessError
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.workflow.models import StageDecision
from egg_mcp.workflow.service import WorkflowError
from tests.workspace_fakes import FakeEvaluator, make_service

SEED = (Path(__file__).parent / "fixtures" / "softmax" / "row_per_program.py").read_text()
BAD = SEED + "\n# writes one past the end (the fake sanitizer says so)\n"
HOG = SEED + "\n# allocates too much host memory under the sanitizer\n"
DECISION = StageDecision(summary="seed", changes=["x"], rationale="test")


class SanitizingEvaluator(FakeEvaluator):
    """A GPU fake whose memcheck finds an error in sources marked BAD."""

    def __init__(self):
        super().__init__(time_ms=1.0, gpu=True)
        self.memchecked = []

    async def memcheck(self, reference_source, candidate_source, options):
        self.memchecked.append(candidate_source)
        if "too much host memory" in candidate_source:
            return memcheck_module.over_bound_result(
                ErrorReport(kind="oom",
                            message="an allocation reached the runner's memory bound (4.1 GiB, RLIMIT_DATA)"),
                MemcheckResult(verdict="clean", summary="compute-sanitizer memcheck found no invalid access"))
        if "one past the end" in candidate_source:
            return MemcheckResult(verdict="memory_error", error_count=1, summary="memory_error: ...", errors=[
                MemoryAccessError(kernel="softmax_kernel", access="Invalid __global__ write of size 4 bytes",
                                  address="0x7f3a4c000c80", detail="is 1 bytes after the nearest allocation")])
        return MemcheckResult(verdict="clean", summary="compute-sanitizer memcheck found no invalid access")


@pytest.fixture
def sanitizer(monkeypatch):
    monkeypatch.setattr(memcheck_module, "find_compute_sanitizer",
                        lambda env=None: "/usr/local/cuda/bin/compute-sanitizer")


def run(coro):
    return asyncio.run(coro)


async def _task(service, *sources):
    task = await service.start_task(builtin_source("softmax"), k_seeds=1)
    ids = [(await service.verify(task.task_id, s)).candidate_id for s in sources]
    return task.task_id, ids


def test_a_memory_error_refuses_the_commit_naming_kernel_and_address_and_runs_once(tmp_path, sanitizer):
    ev = SanitizingEvaluator()
    service = make_service(tmp_path / "ws", ev)
    tid, (bad,) = run(_task(service, BAD))
    for _ in range(2):
        with pytest.raises(WorkflowError, match=r"softmax_kernel at 0x7f3a4c000c80.*Fix the masks"):
            run(service.commit_stage(tid, bad, DECISION))
    assert len(ev.memchecked) == 1, "memcheck runs once per candidate (stored in the workspace)"
    assert service.status(tid).stage == "SEEDS"
    detail = service.candidate(tid, bad)
    assert detail.memcheck.status == "memory_error" and detail.memcheck.cached
    with pytest.raises(WorkflowError, match="softmax_kernel"):  # an opt-out does not override a found error
        run(service.commit_stage(tid, bad, DECISION, skip_memcheck="false positive?"))


def test_a_clean_candidate_commits_with_its_memcheck_and_cost_in_the_reply(tmp_path, sanitizer):
    ev = SanitizingEvaluator()
    service = make_service(tmp_path / "ws", ev)
    tid, (good,) = run(_task(service, SEED))
    result = run(service.commit_stage(tid, good, DECISION))
    assert result.memcheck.status == "clean" and result.memcheck.cost_s is not None
    assert result.new_stage == "ALGORITHM"
    again = run(service.commit_stage(tid, good, DECISION))  # the repeat returns the stored outcome
    assert again.repeated and again.memcheck.status == "clean" and len(ev.memchecked) == 1
    from egg_mcp.surface.summaries import commit_stage as summary

    assert "memcheck clean" in summary(result)


def test_a_runner_over_its_bound_under_memcheck_refuses_the_commit_naming_the_bound(tmp_path, sanitizer):
    """over_bound (the memcheck runner is bounded as verify's): refused with the bound named, tried again at the
    next commit (not cached as final), and a client may skip it with a reason."""
    ev = SanitizingEvaluator()
    service = make_service(tmp_path / "ws", ev)
    tid, (hog,) = run(_task(service, HOG))
    for _ in range(2):
        with pytest.raises(WorkflowError, match=r"went over a resource bound.*memory bound \(4\.1 GiB, RLIMIT_DATA\)"):
            run(service.commit_stage(tid, hog, DECISION))
    assert len(ev.memchecked) == 2 and service.status(tid).stage == "SEEDS"
    assert service.candidate(tid, hog).memcheck.status == "over_bound"
    result = run(service.commit_stage(tid, hog, DECISION, skip_memcheck="the forward needs the memory"))
    assert result.memcheck.status == "skipped" and result.new_stage == "ALGORITHM"


def test_the_opt_out_is_stored_with_its_reason(tmp_path, sanitizer):
    ev = SanitizingEvaluator()
    service = make_service(tmp_path / "ws", ev)
    tid, (good,) = run(_task(service, SEED))
    with pytest.raises(WorkflowError, match="skip_memcheck needs a reason"):
        run(service.commit_stage(tid, good, DECISION, skip_memcheck="  "))
    result = run(service.commit_stage(tid, good, DECISION, skip_memcheck="sanitizer too slow at this size"))
    assert result.memcheck.status == "skipped" and result.memcheck.skip_reason == "sanitizer too slow at this size"
    assert ev.memchecked == []
    assert service.candidate(tid, good).memcheck.skip_reason == "sanitizer too slow at this size"


def test_without_the_sanitizer_the_commit_goes_on_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(memcheck_module, "find_compute_sanitizer", lambda env=None: None)
    ev = SanitizingEvaluator()
    service = make_service(tmp_path / "ws", ev)
    tid, (good,) = run(_task(service, SEED))
    result = run(service.commit_stage(tid, good, DECISION))
    assert result.memcheck.status == "unavailable" and ev.memchecked == []
    assert result.memcheck.summary.startswith("memcheck unavailable: compute-sanitizer not found")
    assert result.memcheck.summary.endswith("guarded allocations only")


def test_on_the_cpu_the_verify_guard_is_the_check(tmp_path, sanitizer):
    service = make_service(tmp_path / "ws", FakeEvaluator())
    tid, (good,) = run(_task(service, SEED))
    result = run(service.commit_stage(tid, good, DECISION))
    assert result.memcheck is None and result.new_stage == "ALGORITHM"


def test_doctor_says_what_the_commit_memcheck_will_do(monkeypatch, capsys):
    from egg_mcp.doctor import _memcheck_line

    monkeypatch.setattr(memcheck_module, "find_compute_sanitizer", lambda env=None: None)
    _memcheck_line(gpu=True)
    assert "compute-sanitizer not found: commits get guarded allocations only" in capsys.readouterr().out
    monkeypatch.setattr(memcheck_module, "find_compute_sanitizer",
                        lambda env=None: "/usr/local/cuda/bin/compute-sanitizer")
    _memcheck_line(gpu=True)
    assert "runs one memcheck forward per candidate" in capsys.readouterr().out
