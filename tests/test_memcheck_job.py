"""memcheck_job end to end on the CPU with a stand-in for compute-sanitizer (the real one needs a GPU):
the runner runs wrapped and confined, the report is read from the tool's log file or, failing that, from
its captured output, and a tool that reports nothing is a harness-side diagnosis with its output tail
(on the H200 the real tool's missing report read as a bare `unavailable`)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from pathlib import Path

import pytest

from egg_mcp.contract import EvalOptions
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
CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
FAKE = '''
import json, os, subprocess, sys
RECORD = {record!r}
if RECORD:  # the command it wraps: the runner's argv, as the judge built it
    open(RECORD, "w").write(json.dumps(sys.argv[1:]))
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


def _fake_tool(tmp_path: Path, mode: str, report: str = REPORT, record: Path | None = None) -> Path:
    tool = tmp_path / "cuda" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text(f"#!{sys.executable}\n" + FAKE.format(mode=mode, report=report, record=str(record or "")))
    tool.chmod(0o755)
    return tool


def _payload(candidate: str, **extra) -> dict:
    return {"reference_source": builtin_source("softmax"), "candidate_source": candidate,
            "options": EvalOptions(size_overrides={"batch_size": 8, "dim": 100}).model_dump(mode="json"),
            "init_seed": secrets.randbits(62), "seed": secrets.randbits(62), **extra}


def _run_jobs(tmp_path: Path, payloads: list[dict], **engine) -> list:
    """memcheck_job for each payload on one interpreter engine, side by side."""
    async def main():
        ev = WorkerEvaluator(scratch_dir=tmp_path / "scratch", force_interpreter=True, spare_workers=0, **engine)
        try:
            return await asyncio.gather(*(ev.run_job("egg_mcp.evaluation.memcheck:memcheck_job", p, timeout_s=240,
                                                     uses_gpu=True) for p in payloads))
        finally:
            await ev.aclose()

    return asyncio.run(main())


def _memcheck(tmp_path, monkeypatch, mode: str) -> tuple[MemcheckResult, Path]:
    tool = _fake_tool(tmp_path, mode)
    monkeypatch.setenv("EGG_MCP_COMPUTE_SANITIZER", str(tool))
    (outcome,) = _run_jobs(tmp_path, [_payload(CORRECT)])
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


# ---------------------------------------------------------------------------- bounds, floor, protected paths


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """Over-bound candidates and an honest one under a tool that reports no error, with the small floors of
    tests/test_runner_bounds.py (which runs the same candidates through verify): verify's rlimits and watchdog."""
    from tests.test_runner_bounds import CANDIDATES, FLOOR

    tmp = tmp_path_factory.mktemp("memcheck-bounds")
    names = ["big_file", "big_allocation", "scratch_fill", "fork_burst", "honest"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EGG_MCP_COMPUTE_SANITIZER", str(_fake_tool(tmp, "log", report=CLEAN)))
        outcomes = _run_jobs(tmp, [_payload(CANDIDATES[n], bounds_floor=FLOOR) for n in names])
    for name, outcome in zip(names, outcomes):
        assert outcome.ok, (name, outcome.error, outcome.stderr_tail[-2000:])
    return {n: MemcheckResult.model_validate(o.result) for n, o in zip(names, outcomes)}


@pytest.mark.slow
def test_a_write_past_the_file_size_bound_under_memcheck_is_named(bounded):
    r = bounded["big_file"]
    assert r.verdict == "over_bound" and r.fault == "candidate", r.summary
    assert r.error.kind == "resource_limit" and "file-size bound (4 MiB, RLIMIT_FSIZE)" in r.error.message
    assert r.summary.startswith("over_bound: a file reached the runner's file-size bound") and "memcheck" in r.summary


@pytest.mark.slow
def test_an_allocation_past_the_memory_bound_under_memcheck_is_named(bounded):
    from egg_mcp.evaluation import bounds
    from tests.test_runner_bounds import FLOOR

    r = bounded["big_allocation"]
    assert r.verdict == "over_bound" and r.error.kind == "oom", r.summary
    data = bounds.data_limit(bounds.derive(0, floor=FLOOR))
    assert f"memory bound ({bounds.size(data)}, RLIMIT_DATA)" in r.error.message


@pytest.mark.slow
def test_the_watchdog_kills_a_memcheck_runner_over_its_scratch_or_task_bound(bounded):
    from tests.test_runner_bounds import _with_cmdline

    r = bounded["scratch_fill"]
    assert r.verdict == "over_bound" and r.error.kind == "resource_limit", r.summary
    assert "scratch dir, over its bound of 24 MiB" in r.error.message
    r = bounded["fork_burst"]
    assert r.verdict == "over_bound" and r.error.kind == "resource_limit", r.summary
    assert "over its bound of 96" in r.error.message or "RLIMIT_NPROC" in r.error.message
    assert _with_cmdline(b"sleep\x0061.4242\x00") == []  # the burst died with the runner


@pytest.mark.slow
def test_an_honest_candidate_under_memcheck_fits_verifys_bounds(bounded):
    r = bounded["honest"]
    assert r.verdict == "clean", r.summary
    assert r.sandbox["rlimits"]["file_bytes"] == 4 * 2**20 and r.sandbox["rlimits"]["data_bytes"] >= 1536 * 2**20
    assert r.bounds.startswith("memory 1.5 GiB") and "96 tasks" in r.bounds
    assert r.runner_peak.startswith("memory ") and "MiB" in r.runner_peak and " 0 tasks" not in r.runner_peak


@pytest.mark.slow
def test_the_memcheck_runner_gets_the_servers_floor_and_protected_paths(tmp_path, monkeypatch):
    """The server's protected paths reach the wrapped runner's argv (as a verify runner's), and a runner below the
    server's sandbox floor is refused before the candidate is sent (the job fails with BelowFloor)."""
    argv_file = tmp_path / "argv.json"
    monkeypatch.setenv("EGG_MCP_COMPUTE_SANITIZER", str(_fake_tool(tmp_path, "log", CLEAN, record=argv_file)))
    workspace = tmp_path / "ws"
    (clean,) = _run_jobs(tmp_path / "a", [_payload(CORRECT)], protect=[workspace])
    assert clean.ok and clean.result["verdict"] == "clean", clean.result
    argv = json.loads(argv_file.read_text())
    assert str(workspace) in argv[argv.index("--protect") + 1].split(os.pathsep)
    (refused,) = _run_jobs(tmp_path / "b", [_payload(CORRECT)], sandbox_required=["env_allowlist", "made_up_layer"])
    assert not refused.ok and refused.error.kind == "BelowFloor", refused.error
    assert "made_up_layer" in refused.error.message and "floor" in refused.error.message


def test_the_engine_sends_its_bound_floors_with_a_memcheck(tmp_path, monkeypatch):
    """WorkerEvaluator.memcheck (GPU only) puts the engine's bound floors in the job, as evaluate does."""
    from egg_mcp.contract import JobOutcome
    from tests.test_runner_bounds import FLOOR

    ev = WorkerEvaluator(scratch_dir=tmp_path / "scratch", spare_workers=0, bounds_floor=FLOOR)
    monkeypatch.setattr(ev, "evaluation_mode", lambda device="auto": "gpu")
    sent = []

    async def run_job(target, payload, **kw):
        sent.append((target, payload))
        return JobOutcome(ok=True, result=MemcheckResult(verdict="clean", summary="no error").model_dump())

    monkeypatch.setattr(ev, "run_job", run_job)
    result = asyncio.run(ev.memcheck(builtin_source("softmax"), CORRECT, EvalOptions()))
    assert result.verdict == "clean" and sent[0][0] == "egg_mcp.evaluation.memcheck:memcheck_job"
    assert sent[0][1]["bounds_floor"] == FLOOR
