"""The runner's trusted warm-up (egg_mcp/evaluation/runner_warmup.py): never fatal, reported as bounded data."""

from __future__ import annotations

import torch

from egg_mcp.evaluation import runner_warmup
from egg_mcp.evaluation.runner_process import RunnerProcess


def test_warm_up_without_a_gpu_reports_failure_and_does_not_raise():
    if torch.cuda.is_available():
        out = runner_warmup.warm_up()
        assert out["warmup"] == "ok" and out["warmup_s"] > 0
        return
    out = runner_warmup.warm_up()
    assert out["warmup"].startswith("failed: ") and out["warmup_s"] >= 0


def _fake_runner(message: dict) -> RunnerProcess:
    runner = RunnerProcess.__new__(RunnerProcess)
    runner.ready, runner.warmup = False, {}
    setattr(runner, "proc", None)  # no process: wait_ready only asks whether it is a fork to start again
    runner.recv = lambda *args, **kwargs: (message, [])
    return runner


def test_the_ready_message_is_kept_as_bounded_data():
    runner = _fake_runner({"type": "ready", "pid": 7, "warmup": "x" * 10_000, "warmup_s": "forged"})
    runner.wait_ready()
    assert runner.ready and len(runner.warmup["warmup"]) == 240 and runner.warmup["warmup_s"] is None
    runner = _fake_runner({"type": "ready", "pid": 7, "warmup": "ok", "warmup_s": 0.61})
    runner.wait_ready()
    assert runner.warmup == {"warmup": "ok", "warmup_s": 0.61}
    runner = _fake_runner({"type": "ready", "pid": 7})  # the interpreter path does no warm-up
    runner.wait_ready()
    assert runner.warmup == {"warmup": "none", "warmup_s": None}
