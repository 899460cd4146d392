"""memcheck_job end to end on the CPU with a stand-in for compute-sanitizer (the real one needs a GPU):
the runner runs wrapped and confined, the report is read from the tool's log file or, failing that, from
its captured output, and a tool that reports nothing is a harness-side diagnosis with its output tail
(on the H200 the real tool's missing report read as a bare `unavailable`)."""

from __future__ import annotations

import asyncio
import secrets
import sys
from pathlib import Path

import pytest

from egg_mcp.evaluation.api import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.evaluation.memcheck import MemcheckResult
from egg_mcp.problems.builtin import builtin_source

CORRECT = (Path(__file__).parent / "adversarial" / "correct_row_softmax.py").read_text()
REPORT = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at softmax_kernel+0x2d0 in candidate.py:20
=========     by thread (100,0,0) in block (7,0,0)
=========     Address 0x7f3a4c000c80 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a4c000000 of size 3200 bytes
=========
========= ERROR SUMMARY: 1 error
"""
FAKE = '''
import os, subprocess, sys
args, log = sys.argv[1:], None
while args and args[0].startswith("--"):
    if args[0] == "--log-file":
        log = args[1]
    args = args[2:]
code = subprocess.call(args, close_fds=False)  # the runner's socket to the judge passes, as with the real tool
MODE = {mode!r}
if MODE == "stdout":
    sys.stdout.write({report!r})
elif MODE == "log":
    open(log, "w").write({report!r})
else:
    print("========= Error: No attachable process found. compute-sanitizer timed-out.", flush=True)
sys.exit(code)
'''


def _memcheck(tmp_path, monkeypatch, mode: str) -> tuple[MemcheckResult, Path]:
    tool = tmp_path / "cuda" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text(f"#!{sys.executable}\n" + FAKE.format(mode=mode, report=REPORT))
    tool.chmod(0o755)
    monkeypatch.setenv("EGG_MCP_COMPUTE_SANITIZER", str(tool))
    payload = {"reference_source": builtin_source("softmax"), "candidate_source": CORRECT,
               "options": EvalOptions(size_overrides={"batch_size": 8, "dim": 100}).model_dump(mode="json"),
               "init_seed": secrets.randbits(62), "seed": secrets.randbits(62)}

    async def main():
        ev = WorkerEvaluator(scratch_dir=tmp_path / "scratch", force_interpreter=True, spare_workers=0)
        try:
            return await ev.run_job("egg_mcp.evaluation.memcheck:memcheck_job", payload, timeout_s=120,
                                    uses_gpu=True)
        finally:
            await ev.aclose()

    outcome = asyncio.run(main())
    assert outcome.ok, (outcome.error, outcome.stderr_tail[-2000:])
    assert outcome.sandbox is None, "the memcheck job is a judge: it confines its runner, not itself"
    return MemcheckResult.model_validate(outcome.result), tool


@pytest.mark.parametrize("mode", ["log", "stdout"])
def test_the_report_is_read_from_the_log_file_or_the_tools_output(tmp_path, monkeypatch, mode):
    result, _ = _memcheck(tmp_path, monkeypatch, mode)
    assert result.verdict == "memory_error", result.summary
    assert result.report_source == ("log_file" if mode == "log" else "tool_output")
    assert result.errors[0].kernel == "softmax_kernel" and result.errors[0].address == "0x7f3a4c000c80"
    assert result.runner_exit == 0, "the runner left normally under the tool"
    sandbox = result.sandbox or {}
    assert sandbox.get("wrapped_by") == "compute-sanitizer", sandbox
    if sandbox.get("landlock_abi"):  # the full domain (the lead's probe: the sanitizer works under it)
        assert sandbox["fs_confined"] and sandbox["network_confined"] and sandbox["tcp_ports_allowed"] == []


def test_no_report_is_a_harness_diagnosis_with_the_tools_words(tmp_path, monkeypatch):
    result, _ = _memcheck(tmp_path, monkeypatch, "silent")
    assert result.verdict == "unavailable" and result.fault == "harness"
    assert "not your kernel" in result.summary and "No attachable process found" in result.summary
    assert "No attachable process found" in result.tool_output_tail


REPORT_2025_3 = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at k+0x270 in bad.py:22
=========     by thread (0,0,0) in block (4,0,0)
=========     Access to 0x7f89de808000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f89de804000 of size 16,384 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========
========= Target application returned an error
========= ERROR SUMMARY: 3 errors
"""


def test_the_2025_3_report_format_names_kernel_and_address():
    """compute-sanitizer 2025.3.1 on the H200 says "Access to 0x..." where older versions said "Address 0x..."."""
    from egg_mcp.evaluation.memcheck import result_from_report

    result = result_from_report(REPORT_2025_3, "compute-sanitizer", 1.0)
    assert result.verdict == "memory_error" and result.error_count == 3
    error = result.errors[0]
    assert error.kernel == "k" and error.address == "0x7f89de808000" and error.block == "4,0,0"
    assert "1 bytes after the nearest allocation" in error.detail and "0x7f89de808000" in result.summary
