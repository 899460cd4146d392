"""Out-of-bounds memory on the GPU: one forward of the candidate under NVIDIA compute-sanitizer.

`memcheck_job` runs in a GPU worker (the judge): it starts the candidate's runner wrapped in
`compute-sanitizer --tool memcheck` with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (without it, PyTorch's
caching allocator hands out slices of large blocks and a write one element past a tensor lands
inside the same block, invisible to the sanitizer), runs one correctness trial, lets the runner exit
so the sanitizer writes its report, and parses that report into a `memory_error` verdict naming
the kernel, the access and the address relative to the nearest allocation.

The report file lives in the judge's directory, outside the runner's private dir; a candidate that
can write there (no filesystem sandbox) could blank it, so a clean report is "no error found",
never a verdict of correctness (that comes from verify).
"""

from __future__ import annotations

import glob
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

MEMCHECK_TIMEOUT_S = 300.0


class MemoryAccessError(BaseModel):
    kernel: str
    access: str = Field(description="e.g. 'Invalid __global__ write of size 4 bytes'")
    address: str | None = None
    detail: str = Field("", description="where the address lies relative to the nearest allocation")
    thread: str | None = None
    block: str | None = None


class MemcheckResult(BaseModel):
    verdict: str = Field(description="'memory_error', 'clean' (no error found) or 'unavailable'")
    summary: str
    errors: list[MemoryAccessError] = Field(default_factory=list)
    error_count: int = 0
    tool: str | None = None
    wall_s: float = 0.0
    sandbox: dict[str, Any] | None = None


def find_compute_sanitizer(env: dict[str, str] | None = None) -> str | None:
    """$EGG_MCP_COMPUTE_SANITIZER, then PATH, then the CUDA toolkit's standard locations."""
    env = os.environ if env is None else env
    candidates = [env.get("EGG_MCP_COMPUTE_SANITIZER") or "", shutil.which("compute-sanitizer", path=env.get("PATH")) or "",
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
        address = re.search(r"Address (0x[0-9a-fA-F]+)", block)
        where = re.search(r"^=+\s+(?:and )?(is \d+ bytes (?:after|before|inside)[^\n]*)$", block, re.M)
        out_of_bounds = re.search(r"Address 0x[0-9a-fA-F]+ (is [^\n]*)", block)
        errors.append(MemoryAccessError(
            kernel=kernel.group(1) if kernel else "unknown kernel", access=m.group(1).strip(),
            address=address.group(1) if address else None,
            detail=" ".join(x.group(1).strip() for x in (out_of_bounds, where) if x),
            thread=thread.group(1) if thread else None, block=thread.group(2) if thread else None))
    summary = _SUMMARY.search(text)
    return errors, int(summary.group(1)) if summary else None


def result_from_report(text: str, tool: str, wall_s: float, sandbox: dict | None = None) -> MemcheckResult:
    errors, count = parse_report(text)
    if count is None and not errors:
        return MemcheckResult(verdict="unavailable", tool=tool, wall_s=wall_s, sandbox=sandbox,
                              summary="compute-sanitizer wrote no report (the runner died or was killed before "
                              "it finished); see verify's verdict for the crash")
    if errors or count:
        first = errors[0] if errors else MemoryAccessError(kernel="unknown kernel", access="memory error")
        return MemcheckResult(
            verdict="memory_error", errors=errors[:20], error_count=count or len(errors), tool=tool, wall_s=wall_s,
            sandbox=sandbox,
            summary=f"memory_error: {first.access} in kernel {first.kernel} at {first.address} ({first.detail}); "
                    f"{count or len(errors)} error(s) in one forward. Fix the masks/offsets of that access.")
    return MemcheckResult(verdict="clean", tool=tool, wall_s=wall_s, sandbox=sandbox,
                          summary="compute-sanitizer memcheck found no invalid access in one forward")


def memcheck_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker target (GPU judge) behind WorkerEvaluator.memcheck."""
    from egg_mcp.evaluation.runner_process import RunnerGone, RunnerProcess

    tool = find_compute_sanitizer()
    if tool is None:
        return MemcheckResult(verdict="unavailable", summary="compute-sanitizer not found (install the CUDA toolkit "
                              "or set EGG_MCP_COMPUTE_SANITIZER)").model_dump()
    log = Path(os.getcwd()) / f"memcheck-{secrets.token_hex(6)}.txt"
    started = time.monotonic()
    runner = RunnerProcess("gpu", Path(os.getcwd()), extra_env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
                           wrapper=[tool, "--tool", "memcheck", "--print-limit", "50", "--log-file", str(log)])
    sandbox = None
    try:
        runner.wait_ready()
        sandbox = runner.request({"type": "confine"})[0].get("sandbox")
        loaded, _ = runner.request({"type": "load", "candidate_source": payload["candidate_source"],
                                    "reference_source": payload["reference_source"],
                                    "options": payload["options"], "init_seed": payload["init_seed"]})
        if loaded.get("type") == "loaded":
            runner.request({"type": "trial", "seed": payload["seed"], "trial": 0, "stage": "memcheck"},
                           max_blob_bytes=1 << 34)
        runner.finish(MEMCHECK_TIMEOUT_S)
    except (RunnerGone, Exception):  # noqa: BLE001 - a crash still leaves the report written so far
        runner.kill()
    text = log.read_text(errors="replace") if log.exists() else ""
    return result_from_report(text, tool, round(time.monotonic() - started, 3),
                              sandbox if isinstance(sandbox, dict) else None).model_dump()
