"""`analyze_reference` through an evaluator double that runs the job in a subprocess, as the
engine will (the reference is user code: it must never be imported by the server process)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

import egg_mcp
from egg_mcp.analysis.reference import AnalysisError, analyze_reference
from egg_mcp.contract import LOOSE, ErrorReport, JobOutcome
from egg_mcp.hardware import spec_for
from egg_mcp.problems.builtin import builtin_source

RUNNER = r"""
import importlib, json, sys, traceback
target, = sys.argv[1:]
mod, fn = target.split(":")
payload = json.load(sys.stdin)
try:
    result = getattr(importlib.import_module(mod), fn)(payload)
    print("RESULT" + json.dumps({"ok": True, "result": result}))
except Exception as exc:
    print("RESULT" + json.dumps({"ok": False, "kind": type(exc).__name__, "message": str(exc),
                                  "traceback": traceback.format_exc()}))
"""


class SubprocessEvaluator:
    """Just enough of the `Evaluator` protocol: run_job in a fresh python process."""

    def __init__(self):
        self.calls: list[tuple[str, dict, float, bool]] = []

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        self.calls.append((target, payload, timeout_s, uses_gpu))
        env = dict(os.environ, PYTHONPATH=str(Path(egg_mcp.__file__).resolve().parent.parent))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", RUNNER, target, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            return JobOutcome(ok=False, timed_out=True)
        line = next((ln for ln in out.decode().splitlines() if ln.startswith("RESULT")), None)
        if line is None:
            return JobOutcome(ok=False, exit_code=proc.returncode, stderr_tail=err.decode()[-2000:])
        data = json.loads(line[len("RESULT"):])
        if data["ok"]:
            return JobOutcome(ok=True, result=data["result"], exit_code=0)
        return JobOutcome(ok=False, exit_code=0, error=ErrorReport(
            kind=data["kind"], message=data["message"], traceback=data["traceback"]))


def test_analyze_reference_runs_in_a_worker_and_validates():
    ev = SubprocessEvaluator()
    analysis = asyncio.run(analyze_reference(
        ev, builtin_source("gemm_bias_relu"), dtype="float32", gpu=spec_for("H200"),
        size_overrides={"batch_size": 256}, tolerance=LOOSE,
    ))
    target, payload, _, uses_gpu = ev.calls[0]
    assert target == "egg_mcp.analysis.reference:analyze_job" and uses_gpu is False
    assert payload["size_overrides"] == {"batch_size": 256}
    assert analysis.input_shapes == [[256, 4096]]
    # the measured precision ladder travels back from the worker; at 1e-2 a tensor-core path passes
    assert analysis.floor.compute_type in ("tf32", "fp16", "bf16")
    assert {e.path for e in analysis.precision_errors} >= {"fp32", "tf32x3", "tf32"}
    assert analysis.op_classes == ["gemm", "elementwise"]


BROKEN = """
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("weights file not found")
def get_inputs(): return []
def get_init_inputs(): return []
"""


def test_worker_error_becomes_a_clear_analysis_error():
    with pytest.raises(AnalysisError, match="weights file not found"):
        asyncio.run(analyze_reference(SubprocessEvaluator(), BROKEN, dtype="float32", gpu=spec_for("H200")))


class _Fixed:
    def __init__(self, outcome):
        self.outcome = outcome

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        return self.outcome


def test_timeout_and_crash_messages_say_what_to_do():
    with pytest.raises(AnalysisError, match="size_overrides"):
        asyncio.run(analyze_reference(_Fixed(JobOutcome(ok=False, timed_out=True)), "src",
                                      dtype="float32", gpu=spec_for("H200"), timeout_s=5))
    with pytest.raises(AnalysisError, match="code -11.*Segmentation"):
        asyncio.run(analyze_reference(_Fixed(JobOutcome(ok=False, exit_code=-11, stderr_tail="Segmentation fault")),
                                      "src", dtype="float32", gpu=spec_for("H200")))


def test_server_import_does_not_pull_torch():
    code = ("import sys; import egg_mcp.analysis.reference, egg_mcp.expertise.seeds, egg_mcp.expertise.briefs; "
            "print('torch' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(Path(egg_mcp.__file__).resolve().parent.parent))
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
