"""Plain errors: unknown built-ins name the nearest ones, timeouts name the limit that applied, and no
message repeats its exception type."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.evaluation.engine_drive import timeout_message
from egg_mcp.evaluation.failures import _failure
from egg_mcp.problems.builtin import BUILTIN_PROBLEMS
from egg_mcp.problems.loader import ProblemError, resolve_reference
from egg_mcp.server import create_server
from tests.mcp_driver import call, call_error, first_text


def test_unknown_builtin_suggests_the_nearest_and_lists_them(tmp_path):
    with pytest.raises(ProblemError) as info:
        resolve_reference("sofmax", ServerConfig(workspace=tmp_path / "ws"))
    msg = str(info.value)
    assert "not a built-in" in msg and "did you mean 'softmax'" in msg
    assert all(name in msg for name in BUILTIN_PROBLEMS)
    assert "file path" in msg and "working directory" not in msg and "outside the directories" not in msg


def test_timeout_message_names_the_limit_and_both_phases():
    msg = timeout_message(90.0, "run", "recheck")
    assert "within 90 s" in msg and "'recheck'" in msg and "'run'" in msg
    assert "counted from" not in timeout_message(12.5, "load", "load")


def test_failure_summary_does_not_repeat_the_exception_type():
    try:
        raise SyntaxError("SyntaxError: invalid syntax")
    except SyntaxError as exc:
        out = _failure("compile_error", exc, None, "Importing the candidate failed")
    assert "SyntaxError: SyntaxError" not in out["summary"], out["summary"]
    assert not out["error"]["message"].startswith("SyntaxError:")


SLEEPY = '''
import time
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(600)
        return x
'''


@pytest.mark.slow
def test_timeout_names_the_run_limit_that_was_used(tmp_path):
    from egg_mcp.contract import EvalOptions
    from egg_mcp.evaluation.engine import WorkerEvaluator
    from egg_mcp.problems.builtin import builtin_source

    async def main():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, spare_workers=0)
        try:
            options = EvalOptions(size_overrides={"batch_size": 8, "dim": 100}, correctness_trials=1,
                                  compile_timeout_s=60.0, run_timeout_s=3.0)
            return await evaluator.evaluate(builtin_source("softmax"), SLEEPY, options)
        finally:
            await evaluator.aclose()

    result = asyncio.run(main())
    text = f"{result.summary} {result.error.message if result.error else ''}"
    assert "within 3 s" in result.summary and "within 3 s" in result.error.message, text
    assert "within 60 s" not in text


@pytest.mark.slow
def test_unknown_builtin_and_syntax_error_over_mcp(tmp_path):
    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True))) as client:
            msg = await call_error(client, "start_task", reference="sofmax")
            assert "not a built-in" in msg and "'softmax'" in msg and "gemm_bias_relu" in msg, msg
            tid = (await call(client, "start_task", reference="softmax"))["task_id"]
            result = await client.call_tool("verify", {"task_id": tid, "source": "class ModelNew(:\n    pass\n"})
            text = first_text(result.content) + str(result.structured_content)
            assert result.structured_content["verdict"] == "compile_error"
            assert "SyntaxError: SyntaxError" not in text, text

    anyio.run(main)
