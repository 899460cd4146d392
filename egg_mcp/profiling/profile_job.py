"""profile_candidate: run Nsight Compute on a candidate's forward and turn the counters into a report.

One worker job does everything: `ncu ... -- <worker>` runs `target.run_forward`, which warms up,
times each kernel with CUDA events, then profiles exactly one forward between cudaProfilerStart and
Stop (`--profile-from-start off`). So the wall time is ncu's start-up plus one Python start plus
the replay passes — the same as a bare ncu run on the same program. When ncu is missing or cannot
read counters, the same job's event timing and Triton metadata make the fallback report, without a
second process where the first one already ran.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from egg_mcp.analysis.roofline import compute_type_for
from egg_mcp.contract import EvalOptions, Evaluator, JobOutcome, ProgressFn
from egg_mcp.hardware import GpuSpec
from egg_mcp.profiling import ncu_command
from egg_mcp.profiling.metrics import metrics_for_stage
from egg_mcp.profiling.ncu_command import (
    TARGET,
    TIMING_ITERS_UNDER_NCU,
    build_payload,
    kernel_filter,
    ncu_argv,
    triton_kernel_names,
)
from egg_mcp.profiling.ncu_csv import (
    counter_access_problem,
    invalid_metrics,
    no_kernels_profiled,
    parse_ncu_output,
)
from egg_mcp.profiling.profile_report import ProfileReport
from egg_mcp.profiling.report_build import (
    FloorFor,
    build_fallback_report,
    build_ncu_report,
    resolve_gpu,
)
from egg_mcp.stages import Stage


class ProfileError(RuntimeError):
    """The candidate could not be profiled (it failed, or the job timed out): the message says what to do."""


# --- the entry point -----------------------------------------------------------------------------

async def _progress(progress: ProgressFn | None, done: float, total: float, message: str) -> None:
    if progress is not None:
        await progress(done, total, message)


def _job_text(outcome: JobOutcome, log_path: Path) -> str:
    log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return "\n".join([log_text, outcome.stdout_tail or "", outcome.stderr_tail or ""])


def sandbox_line(sandbox: dict[str, Any] | None) -> str | None:
    """One line for a job's sandbox report: level first, then what it holds (and the wrapping tool)."""
    if not sandbox:
        return None
    try:
        from egg_mcp.sandbox import SandboxReport

        line = SandboxReport.model_validate(sandbox).summary()
    except Exception:  # noqa: BLE001 - the sandbox package may be absent: the level alone
        line = str(sandbox.get("level", "unknown"))
    return line + (f"; wrapped by {sandbox['wrapped_by']}" if sandbox.get("wrapped_by") else "")


_INJECTION_SIGNS = (re.compile(r"==ERROR== Failed to profile[^\n]*"),
                    re.compile(r"ERROR: ld\.so: object '[^']*' from LD_PRELOAD cannot be preloaded[^\n]*"))


def ncu_injection_failure(outcome: JobOutcome, log_path: Path) -> str | None:
    """The line that shows ncu's own injection failed in a job that died (seen on the H200 when its libraries
    were outside the sandbox's read rules: "Failed to profile" and exit code 11), or None."""
    text = _job_text(outcome, log_path)
    for sign in _INJECTION_SIGNS:
        m = sign.search(text)
        if m:
            return m.group(0).strip()[:300]
    return None


def _candidate_failure(outcome: JobOutcome, timeout_s: float) -> ProfileError | None:
    if outcome.timed_out:
        return ProfileError(f"profiling timed out after {timeout_s:.0f} s: raise timeout_s, or profile at smaller "
                            "sizes "
                            "(size_overrides) if the forward itself is slow")
    if outcome.error is not None:
        where = f" (candidate line {outcome.error.candidate_line})" if outcome.error.candidate_line else ""
        return ProfileError(f"the candidate failed in the profiling worker{where}: {outcome.error.kind}: "
                            f"{outcome.error.message}. Run verify on it first; only a verified candidate can be "
                            "profiled.")
    return None

@dataclass
class _Request:
    """One profile_candidate call: what its ncu attempts, its fallbacks and its report all read."""

    evaluator: Evaluator
    reference_source: str
    candidate_source: str
    options: EvalOptions
    stage: Stage
    gpu: GpuSpec | None
    flops: float | None
    min_bytes: float | None
    compute_type: str
    roof_kw: dict[str, Any]
    has_gpu: bool
    timeout_s: float
    progress: ProgressFn | None
    t0: float

    def deadline(self) -> float:
        return max(5.0, self.timeout_s - (time.perf_counter() - self.t0))

    async def fallback(self, reason: str) -> ProfileReport:
        return await _fallback(self.evaluator, self.reference_source, self.candidate_source, self.options, self.stage,
                               self.gpu, self.flops, self.min_bytes, self.compute_type, reason, self.has_gpu,
                               self.deadline(), **self.roof_kw)

    async def done(self, report: ProfileReport, message: str) -> ProfileReport:
        report.wall_s = time.perf_counter() - self.t0
        await _progress(self.progress, 3, 3, message)
        return report


async def profile_candidate(
    evaluator: Evaluator,
    *,
    reference_source: str,
    candidate_source: str,
    options: EvalOptions,
    stage: Stage,
    gpu: GpuSpec | None,
    flops: float | None = None,
    min_bytes: float | None = None,
    timeout_s: float = 120.0,
    progress: ProgressFn | None = None,
    tensor_core_flops: float | None = None,
    floor_for: FloorFor | None = None,
) -> ProfileReport:
    """Profile one candidate's forward with ncu (or the no-counter fallback) and classify each kernel.

    `floor_for(gpu)` is the task's floor on the GPU the report is placed on (`analysis.roofline.current_floor`:
    the fastest path the precision ladder admits, priced with the current ceilings): one floor and one verdict
    for verify, profile_ncu and the briefs. Raises ProfileError when the candidate itself fails or the job times
    out (verify it first)."""
    t0 = time.perf_counter()
    stage = Stage(stage)
    now = floor_for(gpu) if floor_for is not None and gpu is not None else None
    compute_type = now.compute_type if now is not None else compute_type_for(options.dtype, options.tolerance)
    roof_kw = {"floor_for": floor_for, "has_dots": bool(tensor_core_flops)}
    metrics = metrics_for_stage(stage)
    has_gpu = evaluator.has_gpu() and options.device != "interpreter"
    ncu = ncu_command.find_ncu() if has_gpu else None  # looked up on its module: one place to stub it
    await _progress(progress, 0, 3, "profiling: starting the worker" + (" under ncu" if ncu else ""))
    request = _Request(evaluator, reference_source, candidate_source, options, stage, gpu, flops, min_bytes,
                       compute_type, roof_kw, has_gpu, timeout_s, progress, t0)

    if ncu is None:
        reason = "no GPU" if not has_gpu else "ncu not found (set EGG_MCP_NCU or install Nsight Compute)"
        report = await request.fallback(reason)
        report.metrics_requested = metrics
        return await request.done(report, "profiling: done (fallback)")
    tmp = Path(tempfile.mkdtemp(prefix="egg-ncu-"))
    try:
        return await _profile_under_ncu(request, ncu, metrics, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _profile_under_ncu(request: _Request, ncu: str, metrics: list[str], tmp: Path) -> ProfileReport:
    """Up to three ncu-wrapped runs of the target: again without the metrics ncu rejected, or filtered on the
    kernels that really launched; then ncu's report, or the no-counter one saying why ncu read nothing."""
    names = triton_kernel_names(request.candidate_source)
    rejected: list[str] = []
    warnings: list[str] = []
    target_result: dict[str, Any] | None = None
    attempt = 0
    while True:
        attempt += 1
        log_path = tmp / f"ncu_{attempt}.csv"
        argv = ncu_argv(ncu, metrics, kernel_filter(names), str(log_path))
        payload = build_payload(request.reference_source, request.candidate_source, request.options, device="cuda",
                                profile=True, timing_iters=TIMING_ITERS_UNDER_NCU)
        outcome = await request.evaluator.run_job(TARGET, payload, timeout_s=request.deadline(), uses_gpu=True,
                                                  wrapper_argv=argv)
        await _progress(request.progress, 2, 3, "profiling: parsing ncu output")
        injection = ncu_injection_failure(outcome, log_path) if outcome.error is not None else None
        if injection is not None and not outcome.timed_out:
            return await _injection_fallback(request, injection, outcome, argv, warnings)
        failure = _candidate_failure(outcome, request.timeout_s)
        if failure is not None:
            raise failure
        if outcome.result is not None:
            target_result = outcome.result
        text = _job_text(outcome, log_path)
        log = parse_ncu_output(log_path.read_text(errors="replace") if log_path.exists() else "")
        if log.launches:
            return await _ncu_report(request, log_path, argv, outcome, target_result, rejected, warnings)
        bad = invalid_metrics(text, metrics)
        if bad and attempt < 3:
            rejected += bad
            metrics = [m for m in metrics if m not in bad]
            warnings.append(f"ncu rejected metric(s) {', '.join(bad)}; profiled without them")
            continue
        seen = [k["name"] for k in (target_result or {}).get("kernels", [])]
        if no_kernels_profiled(text) and seen and set(seen) != set(names) and attempt < 3:
            names = seen  # the launched kernels differ from the ones the source declares
            continue
        reason = _no_counters_reason(outcome, log.errors, text)
        return await _no_counters_report(request, reason, outcome, argv, target_result, rejected, warnings)


async def _injection_fallback(request: _Request, injection: str, outcome: JobOutcome, argv: list[str],
                              warnings: list[str]) -> ProfileReport:
    """ncu, not the candidate, failed (its injection under the sandbox): profile without counters, still
    confined; a candidate that really crashes fails there too."""
    reason = (f"ncu could not profile under the job's sandbox ({sandbox_line(outcome.sandbox)}): "
              f"{injection}; profiled without counters")
    report = await request.fallback(reason)
    report.ncu_command = argv
    report.metrics_requested = metrics_for_stage(request.stage)
    report.warnings = warnings + report.warnings
    return await request.done(report, "profiling: done (fallback)")


def _no_counters_reason(outcome: JobOutcome, errors: list[str], text: str) -> str:
    """Why ncu gave no counters: counter access, its own errors, or its exit code (and the sandbox it ran in)."""
    problem = counter_access_problem(text)
    reason = problem or ("ncu profiled no kernel" + (f": {'; '.join(errors)[:400]}" if errors else
                         f" (exit code {outcome.exit_code})"))
    if not problem and (outcome.sandbox or {}).get("fs_confined"):
        reason += (f" under the job's sandbox ({sandbox_line(outcome.sandbox)}): if ncu's injection needs a "
                   "path or port the sandbox denies, its stderr above says which")
    return reason


async def _no_counters_report(request: _Request, reason: str, outcome: JobOutcome, argv: list[str],
                              target_result: dict[str, Any] | None, rejected: list[str],
                              warnings: list[str]) -> ProfileReport:
    """The fallback report of an ncu run without counters: from the same job's readings when the target ran."""
    if target_result is None:
        report = await request.fallback(reason)
    else:
        gpu_, w = resolve_gpu(request.gpu, target_result.get("device"))
        report = build_fallback_report(target_result, stage=request.stage, gpu=gpu_, reason=reason,
                                       flops=request.flops, min_bytes=request.min_bytes,
                                       compute_type=request.compute_type, **request.roof_kw)
        report.warnings += w
    report.ncu_command = argv
    report.sandbox = report.sandbox or sandbox_line(outcome.sandbox)
    report.metrics_requested, report.metrics_rejected = metrics_for_stage(request.stage), rejected
    report.warnings = warnings + report.warnings
    return await request.done(report, "profiling: done (fallback)")


async def _ncu_report(request: _Request, log_path: Path, argv: list[str], outcome: JobOutcome,
                      target_result: dict[str, Any] | None, rejected: list[str], warnings: list[str]) -> ProfileReport:
    gpu_, w = resolve_gpu(request.gpu, (target_result or {}).get("device"))
    report = build_ncu_report(log_path.read_text(errors="replace"), stage=request.stage, gpu=gpu_,
                              target_result=target_result, flops=request.flops, min_bytes=request.min_bytes,
                              compute_type=request.compute_type, **request.roof_kw)
    report.ncu_command = argv
    report.sandbox = sandbox_line(outcome.sandbox)
    report.ncu_wall_s = outcome.wall_s
    report.metrics_requested, report.metrics_rejected = metrics_for_stage(request.stage), rejected
    report.warnings = warnings + w + report.warnings + list((target_result or {}).get("warnings", []))
    return await request.done(report, "profiling: done")


async def _fallback(evaluator: Evaluator, reference_source: str, candidate_source: str, options: EvalOptions,
                    stage: Stage, gpu: GpuSpec | None, flops: float | None, min_bytes: float | None,
                    compute_type: str, reason: str, has_gpu: bool, timeout_s: float,
                    floor_for: FloorFor | None = None, has_dots: bool = False) -> ProfileReport:
    """Run the target without ncu (GPU: metadata + event timing; CPU: interpreter, names and grids)."""
    warnings: list[str] = []
    result: dict[str, Any] | None = None
    if not has_gpu and not options.size_overrides:
        warnings.append("no GPU and no size_overrides: nothing was run or measured (the CPU interpreter at full "
                        "size is too slow), so no kernels are listed; call profile_ncu again with size_overrides "
                        "(small values for the reference's int constants) to see its kernels, grids and launches")
    else:
        payload = build_payload(reference_source, candidate_source, options,
                                device="cuda" if has_gpu else "interpreter", profile=False,
                                timing_iters=20 if has_gpu else 0)
        outcome = await evaluator.run_job(TARGET, payload, timeout_s=timeout_s, uses_gpu=has_gpu)
        failure = _candidate_failure(outcome, timeout_s)
        if failure is not None:
            raise failure
        if not outcome.ok or outcome.result is None:
            raise ProfileError(f"the profiling worker ended without a result (exit code {outcome.exit_code}): "
                               f"{(outcome.stderr_tail or '')[-400:]}")
        result = outcome.result
    gpu_, w = resolve_gpu(gpu, (result or {}).get("device"))
    report = build_fallback_report(result, stage=stage, gpu=gpu_, reason=reason, flops=flops, min_bytes=min_bytes,
                                   compute_type=compute_type, floor_for=floor_for, has_dots=has_dots)
    report.sandbox = sandbox_line(outcome.sandbox) if result is not None else None
    report.warnings = warnings + w + report.warnings
    return report
