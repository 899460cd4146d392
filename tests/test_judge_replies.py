"""Every runner answer is read the same way (Judge._reply): a harness error in the runner is a harness fault and a
GPU that fills up in harness code is `oom`, never a protocol breach. On the H200 an honest softmax over a 6 GiB
input read `integrity_violation (runner_protocol): expected outputs, got 'runner_error'` because the trial path
read its answer by itself."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import pytest
import torch

from egg_mcp.evaluation import runner_loop, wire
from egg_mcp.evaluation.judge import Judge
from egg_mcp.evaluation.judge_verdicts import Rejected


def _judge(reply: dict) -> Judge:
    judge = Judge.__new__(Judge)
    judge.findings, judge.trials_run, judge.trials_passed, judge.judge_info = [], 0, 0, {}
    judge.runner = SimpleNamespace(  # pyright: ignore[reportAttributeAccessIssue]  # a stand-in runner
        mode="interpreter", send=lambda header: None, recv=lambda limit: (reply, []))
    judge._expected = lambda seed: (torch.zeros(4), [torch.zeros(4)])
    return judge


def _rejected(judge: Judge) -> dict:
    with pytest.raises(Rejected) as caught:
        judge._trial({"seed": 1}, 0, "correctness")
    return caught.value.result


def test_a_runner_error_in_a_trial_is_a_harness_fault_not_a_protocol_breach():
    judge = _judge({"type": "runner_error", "kind": "RuntimeError", "message": "boom", "traceback": ""})
    result = _rejected(judge)
    assert result["verdict"] == "runtime_error" and result["fault"] == "harness" and "boom" in result["summary"]
    assert not [f for f in judge.findings if f.check == "runner_protocol"]


def test_a_failed_trial_keeps_its_verdict_and_an_unknown_type_is_a_protocol_breach():
    failed = _rejected(_judge({"type": "failed", "verdict": "oom", "summary": "CUDA out of memory",
                               "error": {"kind": "oom", "message": "CUDA out of memory"}}))
    assert failed["verdict"] == "oom" and failed["correctness_trials"] == 1
    judge = _judge({"type": "timing"})
    assert _rejected(judge)["verdict"] == "integrity_violation"
    assert [f.check for f in judge.findings] == ["runner_protocol"]


def test_the_runner_answers_an_out_of_memory_in_harness_code_as_oom():
    """The runner loop: a CUDA OOM raised outside candidate code (making an audit's input set, say) goes back as the
    candidate run's `oom` failure, naming the harness step."""
    ours, theirs = socket.socketpair()

    def trial(cmd):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB.")

    side = SimpleNamespace(trial=trial, candidate_path=None, new_findings=lambda: [], confine=None, load=None,
                           calls=None, report=None, guard=None)
    loop = threading.Thread(target=runner_loop.serve, args=(theirs, side), daemon=True)
    loop.start()
    wire.send(ours, {"type": "trial", "seed": 1})
    reply, _ = wire.recv(ours, max_blob_bytes=0)
    wire.send(ours, {"type": "exit"})
    loop.join(5)
    assert reply["type"] == "failed" and reply["verdict"] == "oom"
    assert "harness's 'trial' step" in reply["summary"] and "6.00 GiB" in reply["summary"]
