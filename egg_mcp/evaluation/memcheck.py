"""Out-of-bounds memory on the GPU: one forward of the candidate under NVIDIA compute-sanitizer.

`memcheck_job` runs in a GPU worker that is a judge (worker.JUDGE_TARGETS: unconfined, never imports the
candidate): it starts the candidate's runner wrapped in `compute-sanitizer --tool memcheck` with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 (without it, PyTorch's caching allocator hands out slices of large
blocks and a write one element past a tensor lands inside the same block, invisible to the sanitizer),
runs one correctness trial, lets the runner exit normally (so the tool's injection library hands over
what it holds), and parses the report into a `memory_error` naming the kernel, the access and the
address relative to the nearest allocation.

Where the report comes from: the tool's `--log-file` in the judge's dir (the runner, confined to its
private dir, cannot write there), else the tool's own stdout/stderr, which the judge captures to a
file (the runner's prints go there too, so a log file wins when both exist). No report at all is a
harness-side diagnosis (`fault="harness"`) with the tool's output tail, never the candidate's verdict.
Why it failed on the H200 (status `unavailable`): the memcheck judge was itself confined (it was not a
judge target), so compute-sanitizer's frontend, its child, ran inside the judge's Landlock domain (no
TCP, no /tmp; a probe showed the frontend writes its report when only the target is confined), and its
runner's PID namespace got no /proc (Landlock forbids mounts), which CUDA needs. The runner also left
through os._exit; it now exits normally under a tool.

The runner is bounded as a verify runner is (bounds.py: the same bounds, derived from the reference's
footprint with the job's floors; its rlimits and the judge's watchdog, which watches the tool's frontend
too since it is part of the runner tree), held to the server's sandbox floor and given the same protected
paths. Over a bound, the verdict is `over_bound` naming it (a memory error the tool still reported wins).

A clean report is "no error found", never a verdict of correctness (that comes from verify).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, Mapping

from pydantic import BaseModel, Field

from egg_mcp.config import COMPUTE_SANITIZER_VAR, environment_copy, triton_interpret
from egg_mcp.contract import ErrorReport

MEMCHECK_TIMEOUT_S = 300.0
EXIT_TIMEOUT_S = 60.0
"""the runner's exit (and the tool's report) after the trial"""
TAIL_CHARS = 3000


class MemoryAccessError(BaseModel):
    kernel: str
    access: str = Field(description="e.g. 'Invalid __global__ write of size 4 bytes'")
    address: str | None = None
    detail: str = Field(default="", description="where the address lies relative to the nearest allocation")
    thread: str | None = None
    block: str | None = None


class MemcheckResult(BaseModel):
    verdict: str = Field(description="'memory_error', 'clean' (no error found), 'over_bound' (the candidate's runner "
                         "went over a resource bound; `error` names it) or 'unavailable'")
    summary: str
    errors: list[MemoryAccessError] = Field(default_factory=list)
    error_count: int = 0
    error: ErrorReport | None = Field(default=None,
                                      description="over_bound: the bound (kind 'oom' or 'resource_limit')")
    tool: str | None = None
    wall_s: float = 0.0
    sandbox: dict[str, Any] | None = None
    bounds: str | None = Field(default=None, description="the runner's resource bounds (as verify's "
                                                         "result.judge.bounds)")
    runner_peak: str | None = Field(default=None, description="the most memory and tasks the judge's watchdog saw")
    fault: str | None = Field(default=None, description="'harness' when no report came back: the tool or egg-mcp, not "
                                                        "the "
                              "candidate")
    report_source: str | None = Field(default=None,
                                      description="'log_file' or 'tool_output': where the report was read")
    tool_output_tail: str = Field(default="", description="the end of the tool's stdout/stderr (diagnosis)")
    runner_exit: int | None = None


def find_compute_sanitizer(env: Mapping[str, str] | None = None) -> str | None:
    """$EGG_MCP_COMPUTE_SANITIZER, then PATH, then the CUDA toolkit's standard locations."""
    env = environment_copy() if env is None else env
    candidates = [env.get(COMPUTE_SANITIZER_VAR) or "", shutil.which("compute-sanitizer", path=env.get("PATH")) or "",
                  "/usr/local/cuda/bin/compute-sanitizer",
                  *sorted(glob.glob("/usr/local/cuda-*/bin/compute-sanitizer"), reverse=True),
                  *sorted(glob.glob("/opt/nvidia/compute-sanitizer*/compute-sanitizer"), reverse=True)]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


_ACCESS = re.compile(r"^=+\s+(Invalid __\w+__ (?:read|write|atomic)[^\n]*|Out-of-range[^\n]*|Misaligned[^\n]*)$", re.M)
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+) error", re.M)


def parse_report(text: str) -> tuple[list[MemoryAccessError], int | None]:
    """compute-sanitizer memcheck's text report -> access errors and the summary's error count."""
    errors = []
    matches = list(_ACCESS.finditer(text))
    for i, m in enumerate(matches):
        block = text[m.end(): matches[i + 1].start() if i + 1 < len(matches) else len(text)]
        kernel = re.search(r"^=+\s+at (?:0x[0-9a-f]+ in )?([^\s(+]+)", block, re.M)
        thread = re.search(r"by thread \(([^)]*)\) in block \(([^)]*)\)", block)
        address = re.search(r"(?:Address|Access to) (0x[0-9a-fA-F]+)", block)  # 2025.3 says "Access to"
        where = re.search(r"^=+\s+(?:and )?(is \d+ bytes (?:after|before|inside)[^\n]*)$", block, re.M)
        out_of_bounds = re.search(r"(?:Address|Access to) 0x[0-9a-fA-F]+ (is [^\n]*)", block)
        errors.append(MemoryAccessError(
            kernel=kernel.group(1) if kernel else "unknown kernel", access=m.group(1).strip(),
            address=address.group(1) if address else None,
            detail="; ".join(x.group(1).strip() for x in (out_of_bounds, where) if x),
            thread=thread.group(1) if thread else None, block=thread.group(2) if thread else None))
    summary = _SUMMARY.search(text)
    return errors, int(summary.group(1)) if summary else None


def result_from_report(text: str, tool: str, wall_s: float, sandbox: dict | None = None, *,
                       tool_output: str = "", runner_exit: int | None = None) -> MemcheckResult:
    """The verdict from the log file's text, else from the tool's captured output; neither: a harness-side
    diagnosis with the tool's output tail."""
    tail = tool_output[-TAIL_CHARS:]
    source = "log_file"
    errors, count = parse_report(text)
    if count is None and not errors and tool_output:
        errors, count = parse_report(tool_output)
        source = "tool_output"
    common: dict[str, Any] = dict(tool=tool, wall_s=wall_s, sandbox=sandbox, tool_output_tail=tail,
                                  runner_exit=runner_exit)
    if count is None and not errors:
        said = " ".join(tail.strip().splitlines()[-6:])[-600:] or "nothing"
        return MemcheckResult(
            verdict="unavailable", fault="harness", **common,
            summary=(f"memcheck unavailable: not your kernel: compute-sanitizer wrote no report (runner exit "
                     f"{runner_exit}); the tool said: {said}. Guarded allocations (every verify) still apply; "
                     "run `python -m egg_mcp doctor` and check compute-sanitizer can run a CUDA program here."))
    if errors or count:
        first = errors[0] if errors else MemoryAccessError(kernel="unknown kernel", access="memory error")
        return MemcheckResult(
            verdict="memory_error", errors=errors[:20], error_count=count or len(errors), report_source=source,
            **common,
            summary=f"memory_error: {first.access} in kernel {first.kernel} at {first.address} ({first.detail}); "
                    f"{count or len(errors)} error(s) in one forward. Fix the masks/offsets of that access.")
    return MemcheckResult(verdict="clean", report_source=source, **common,
                          summary="compute-sanitizer memcheck found no invalid access in one forward")


def sanitizer_argv(tool: str, log: Path) -> list[str]:
    """The wrapper: memcheck, up to 50 errors printed, the report to `log` (the judge's dir); a launch
    timeout that covers the runner's Python + torch + CUDA start on a loaded host."""
    return [tool, "--tool", "memcheck", "--print-limit", "50", "--launch-timeout", "120", "--log-file", str(log)]


SANITIZER_MEMORY_ALLOWANCE = 2 << 30
"""Host memory added to a GPU memcheck runner's watchdog bound for compute-sanitizer's frontend and the library it
injects into the runner (both in the runner tree the watchdog sums). Not measured yet: tests/gpu/test_memcheck_gpu.py
prints the clean runner's peak, which should stay well under verify's bound plus this."""

BOUND_KINDS = ("oom", "resource_limit")
"""ErrorReport kinds that name a resource bound (bounds.py), from the watchdog or from the runner's rlimits."""


def over_bound(reply: Any) -> ErrorReport | None:
    """The bound a runner's `failed` reply names (a write past RLIMIT_FSIZE, an allocation past RLIMIT_DATA, a
    fork past RLIMIT_NPROC), else None."""
    if not isinstance(reply, dict) or reply.get("type") != "failed" or not isinstance(reply.get("error"), dict):
        return None
    try:
        error = ErrorReport.model_validate(reply["error"])
    except Exception:  # noqa: BLE001 - a malformed report names no bound
        return None
    if error.kind not in BOUND_KINDS:
        return None
    return error.model_copy(update={"message": error.message[:2000], "traceback": error.traceback[-6000:]})


def over_bound_result(error: ErrorReport, report: MemcheckResult) -> MemcheckResult:
    """The verdict of a runner that went over a bound under the tool: the bound named, the candidate's fault."""
    advice = ("Use less host memory in forward (no huge temporaries)" if error.kind == "oom" else
              "Write no large files and start no processes from candidate code")
    return report.model_copy(update={
        "verdict": "over_bound", "fault": "candidate", "error": error, "errors": [], "error_count": 0,
        "summary": f"over_bound: {error.message.strip().rstrip(':')} (the runner under compute-sanitizer memcheck "
                   f"has verify's bounds). {advice}, then verify and commit again."})


def memcheck_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker target (GPU judge) behind WorkerEvaluator.memcheck."""
    from egg_mcp.evaluation import bounds
    from egg_mcp.evaluation.runner_process import RunnerGone, RunnerProcess

    tool = find_compute_sanitizer()
    if tool is None:
        return MemcheckResult(verdict="unavailable", summary="compute-sanitizer not found (install the CUDA toolkit "
                              "or set EGG_MCP_COMPUTE_SANITIZER)").model_dump()
    here = Path(os.getcwd())
    token = secrets.token_hex(6)
    log, output = here / f"memcheck-{token}.txt", here / f"memcheck-{token}.out"
    started = time.monotonic()
    mode = "interp" if triton_interpret() else "gpu"  # interp: the CPU tests' fake tool
    from egg_mcp.evaluation.tool_confine import ipc_env

    runner = RunnerProcess(mode, here, extra_env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", **ipc_env(environment_copy())},
                           wrapper=sanitizer_argv(tool, log), output=output)
    # The tool writes its report after its target exited: never kill it before it ends by itself.
    runner.death_wait_s = EXIT_TIMEOUT_S
    # verify's bounds, worked out while the runner starts: watched once it is ready, rlimits on `confine`
    footprint = bounds.reference_footprint(payload["reference_source"], payload["options"], payload["init_seed"],
                                           "cpu" if mode == "interp" else "cuda", here / f"reference-{token}")
    limits = bounds.for_job(footprint, payload)
    if mode != "interp":  # the tool's frontend and its injected library count in the watched runner tree
        limits = dataclasses.replace(limits, memory_bytes=limits.memory_bytes + SANITIZER_MEMORY_ALLOWANCE)
    from egg_mcp.sandbox.floor import BelowFloor, below_floor

    sandbox, code, refused, over = None, None, None, None
    try:
        runner.wait_ready()
        runner.watch(limits)
        sandbox = runner.request({"type": "confine", "bounds": limits.to_wire()})[0].get("sandbox")
        refused = below_floor(sandbox if isinstance(sandbox, dict) else None)
        if refused is not None:  # weaker than the server's floor: the candidate is never loaded
            runner.kill()
            raise BelowFloor(refused)
        loaded, _ = runner.request({"type": "load", "candidate_source": payload["candidate_source"],
                                    "reference_source": payload["reference_source"],
                                    "options": payload["options"], "init_seed": payload["init_seed"]})
        over = over_bound(loaded)
        if loaded.get("type") == "loaded":
            tried, _ = runner.request({"type": "trial", "seed": payload["seed"], "trial": 0, "stage": "memcheck"},
                                      max_blob_bytes=1 << 34)
            over = over_bound(tried)
        code = runner.finish(EXIT_TIMEOUT_S)
    except RunnerGone as gone:  # the watchdog killed it, or it died of SIGXFSZ: named when it is a bound
        over = gone.report if gone.report.kind in BOUND_KINDS else None
        code = runner.finish(EXIT_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - a crash still leaves the report written so far
        code = runner.finish(EXIT_TIMEOUT_S)  # the tool exits by itself once its target is gone
    if refused is not None:
        raise BelowFloor(refused)
    over = runner.over or over  # the watchdog may also have fired while the runner exited (finish)
    text = log.read_text(errors="replace") if log.exists() else ""
    said = output.read_text(errors="replace")[-200_000:] if output.exists() else ""
    result = result_from_report(text, tool, round(time.monotonic() - started, 3),
                                sandbox if isinstance(sandbox, dict) else None, tool_output=said, runner_exit=code)
    result.bounds = limits.describe()
    result.runner_peak = runner.peak_text()
    if over is not None and result.verdict != "memory_error":
        result = over_bound_result(over, result)
    return result.model_dump()
