"""Verdicts for each failure class, from real candidates run in real worker processes (CPU interpreter)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.problems.builtin import builtin_source

CORRECT = (Path(__file__).parent / "adversarial" / "correct_row_softmax.py").read_text()
QUICK: dict[str, int | list[int]] = {"batch_size": 8, "dim": 100}

# ~35 s on 2 cores for the module (one worker process per candidate, two at a time).
pytestmark = pytest.mark.slow


def with_forward_prefix(statement: str) -> str:
    """The correct candidate with `statement` executed at the top of forward."""
    return CORRECT.replace("    def forward(self, x):\n", f"    def forward(self, x):\n        {statement}\n", 1)


FAULTS = {
    "compile_error": CORRECT.replace("    x = x - tl.max(x, axis=0)", "    x = x - tl.no_such_function(x, axis=0)"),
    "syntax_error": CORRECT.replace("class ModelNew(nn.Module):", "class ModelNew(nn.Module)"),
    "runtime_error": with_forward_prefix("raise ValueError('boom from the candidate')"),
    "sys_exit": with_forward_prefix("import sys; sys.exit(3)"),
    "os_exit": with_forward_prefix("import os; os._exit(7)"),
    "segfault": with_forward_prefix("import ctypes; ctypes.string_at(0)"),
    "memory_error": with_forward_prefix("raise MemoryError('simulated host OOM')"),
    "loud_but_correct": "print('x' * (100 * 1024 * 1024))\n" + CORRECT,
    "endless_loop": with_forward_prefix("while True: pass"),
}
RUN_TIMEOUT_S = 4.0
OTHERS_RUN_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    async def run_all():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path_factory.mktemp("faults"), force_interpreter=True,
                                    spare_workers=0, log_limit_bytes=4096)
        reference = builtin_source("softmax")

        async def one(name, source):
            # only the endless loop is meant to reach its limit: the others get one no loaded machine reaches
            # (at 4 s, three test workers on 2 cores timed out a compile error and an exception in forward)
            limit = RUN_TIMEOUT_S if name == "endless_loop" else OTHERS_RUN_TIMEOUT_S
            options = EvalOptions(size_overrides=QUICK, correctness_trials=2, run_timeout_s=limit)
            start = time.monotonic()
            result = await evaluator.evaluate(reference, source, options)
            return result, time.monotonic() - start

        try:
            outs = await asyncio.gather(*[one(name, src) for name, src in FAULTS.items()])
            return dict(zip(FAULTS, outs))
        finally:
            await evaluator.aclose()

    return asyncio.run(run_all())


def test_compile_error_points_at_the_candidate_line(outcomes):
    result, _ = outcomes["compile_error"]
    assert result.verdict == "compile_error", result.summary
    bad_line = FAULTS["compile_error"].splitlines().index("    x = x - tl.no_such_function(x, axis=0)") + 1
    assert result.error.candidate_line == bad_line
    assert "no_such_function" in result.error.traceback


def test_syntax_error_is_a_compile_error_with_its_line(outcomes):
    result, _ = outcomes["syntax_error"]
    assert result.verdict == "compile_error"
    assert result.error.candidate_line == FAULTS["syntax_error"].splitlines().index("class ModelNew(nn.Module)") + 1


def test_exception_in_forward_is_a_runtime_error_with_its_line(outcomes):
    result, _ = outcomes["runtime_error"]
    assert result.verdict == "runtime_error"
    assert "boom from the candidate" in result.summary
    lines = FAULTS["runtime_error"].splitlines()
    assert lines[result.error.candidate_line - 1].strip().startswith("raise ValueError")


def test_sys_exit_is_reported_not_obeyed(outcomes):
    result, _ = outcomes["sys_exit"]
    assert result.verdict == "runtime_error"
    assert result.error.kind == "exit" and "sys.exit(3)" in result.error.message


def test_os_exit_is_a_runtime_error_naming_the_exit(outcomes):
    result, _ = outcomes["os_exit"]
    assert result.verdict == "runtime_error"
    assert result.error.kind == "exit" and "code 7" in result.error.message


def test_segfault_is_a_runtime_error_naming_the_signal(outcomes):
    result, _ = outcomes["segfault"]
    assert result.verdict == "runtime_error"
    assert result.error.kind == "signal" and "SIGSEGV" in result.error.message


def test_memory_error_is_oom(outcomes):
    result, _ = outcomes["memory_error"]
    assert result.verdict == "oom"


def test_100mb_of_stdout_is_truncated_and_the_verdict_stands(outcomes):
    result, _ = outcomes["loud_but_correct"]
    assert result.verdict == "correct", result.summary
    assert len(result.stdout_tail) < 4096 + 200
    assert "bytes omitted" in result.stdout_tail


def test_endless_python_loop_is_killed_within_the_timeout(outcomes):
    result, wall = outcomes["endless_loop"]
    assert result.verdict == "timeout"
    assert result.error.kind == "timeout"
    # run timeout plus start-up, load and a margin; the point is that it did not run for minutes. Time spent
    # queued behind this module's 8 other jobs (2 CPU slots; each job now starts a judge and a runner) is
    # not the job's: the engine reports it as server_phase_s["queue_wait"].
    assert wall - result.server_phase_s.get("queue_wait", 0.0) < RUN_TIMEOUT_S + 30


def test_next_evaluation_after_faults_is_correct(outcomes, tmp_path):
    async def run():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, spare_workers=0)
        try:
            return await evaluator.evaluate(builtin_source("softmax"), CORRECT,
                                            EvalOptions(size_overrides=QUICK, correctness_trials=2))
        finally:
            await evaluator.aclose()

    assert asyncio.run(run()).verdict == "correct"


def test_unknown_size_override_is_a_clear_error(tmp_path):
    async def run():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, spare_workers=0)
        try:
            return await evaluator.evaluate(builtin_source("softmax"), CORRECT,
                                            EvalOptions(size_overrides={"no_such_size": 3}))
        finally:
            await evaluator.aclose()

    result = asyncio.run(run())
    assert result.verdict == "runtime_error"
    assert "no_such_size" in result.summary and "batch_size" in result.summary
