"""profile_candidate: run Nsight Compute on a candidate's forward and turn the counters into a report.

One worker job does everything: `ncu ... -- <worker>` runs `target.run_forward`, which warms up,
times each kernel with CUDA events, then profiles exactly one forward between cudaProfilerStart and
Stop (`--profile-from-start off`). So the wall time is ncu's start-up plus one Python start plus
the replay passes — the same as a bare ncu run on the same program. When ncu is missing or cannot
read counters, the same job's event timing and Triton metadata make the fallback report, without a
second process where the first one already ran.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from egg_mcp.analysis.roofline import compute_type_for
from egg_mcp.contract import EvalOptions, Evaluator, JobOutcome, ProgressFn
from egg_mcp.hardware import NO_GPU, GpuSpec, lookup, unknown_gpu_message
from egg_mcp.profiling import classify as C
from egg_mcp.profiling.metrics import metrics_for_stage, spec
from egg_mcp.profiling.models import KernelProfile, Metric, ProfileReport
from egg_mcp.profiling.ncu_csv import (
    NcuLaunch,
    counter_access_problem,
    invalid_metrics,
    no_kernels_profiled,
    parse_ncu_output,
    short_kernel_name,
)
from egg_mcp.profiling.occupancy import occupancy
from egg_mcp.stages import Stage

TARGET = "egg_mcp.profiling.target:run_forward"
LAUNCH_COUNT_LIMIT = 64
"""Most launches ncu profiles per forward (each costs its replay passes)."""
TIMING_ITERS_UNDER_NCU = 5

SOURCE_NOTES = {
    "ncu": "Nsight Compute hardware counters on one forward after warm-up (kernel replay, caches flushed "
           "between passes, clocks not locked)",
    "triton_metadata": "Triton's compiled kernel metadata (registers, spills, shared memory, num_warps, "
                       "num_stages) and the launch grid",
    "event_timing": "CUDA events around each Triton launch, median over several forwards (no L2 flush)",
    "computed": "derived here from the other numbers and the GPU's limits (occupancy calculator, roofline)",
}


class ProfileError(RuntimeError):
    """The candidate could not be profiled (it failed, or the job timed out): the message says what to do."""


# --- finding ncu ---------------------------------------------------------------------------------

def find_ncu(env: Mapping[str, str] | None = None) -> str | None:
    """Path of the ncu executable: $EGG_MCP_NCU, then PATH, then the standard install locations."""
    env = os.environ if env is None else env
    explicit = env.get("EGG_MCP_NCU")
    candidates: list[str] = []
    if explicit:
        candidates.append(explicit)
    on_path = shutil.which("ncu", path=env.get("PATH"))
    if on_path:
        candidates.append(on_path)
    candidates.append("/usr/local/cuda/bin/ncu")
    candidates.extend(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), key=_version_key, reverse=True))
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", Path(path).parent.name)) or (0,)


# --- the command ---------------------------------------------------------------------------------

def triton_kernel_names(source: str) -> list[str]:
    """Names of the functions decorated with triton.jit / triton.autotune / triton.heuristics in a
    candidate source, by parsing it (never executing it: this runs in the server)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                text = ast.unparse(target)
                if text.split(".")[-1] in ("jit", "autotune", "heuristics"):
                    names.append(node.name)
                    break
    return list(dict.fromkeys(names))


def kernel_filter(names: list[str]) -> str:
    """ncu `-k` filter selecting only these kernels (all kernels when the names are unknown)."""
    if not names:
        return "regex:.*"
    return "regex:^(" + "|".join(re.escape(n) for n in names) + ")"


def ncu_argv(ncu: str, metrics: list[str], kernel_regex: str, log_file: str,
             launch_count: int = LAUNCH_COUNT_LIMIT) -> list[str]:
    """The ncu prefix for the worker command (ends with '--')."""
    return [
        ncu, "--csv", "--page", "raw", "--print-units", "base",
        "--metrics", ",".join(metrics),
        "--clock-control", "none",
        "--profile-from-start", "off",
        "-k", kernel_regex,
        "--launch-count", str(launch_count),
        "--log-file", log_file,
        "--",
    ]


def build_payload(reference_source: str, candidate_source: str, options: EvalOptions, *,
                  device: str, profile: bool, timing_iters: int, seed: int = 0) -> dict[str, Any]:
    """Under ncu (`profile`) per-kernel times come from CUDA events (ncu holds CUPTI); otherwise from CUPTI."""
    return {
        "per_kernel": "events" if profile else "cupti",
        "reference_source": reference_source,
        "candidate_source": candidate_source,
        "dtype": options.dtype,
        "size_overrides": dict(options.size_overrides),
        "seed": seed,
        "device": device,
        "warmup": 3,
        "timing_iters": timing_iters,
        "profile": profile,
    }


# --- from ncu launches to kernel readings --------------------------------------------------------

def aggregate_launches(launches: list[NcuLaunch]) -> dict[str, tuple[int, dict[str, tuple[float | None, str]]]]:
    """Per kernel name: (launch count, metric -> (value, unit)). Sums add up over launches, launch
    attributes take the largest, rates and percentages are duration-weighted means."""
    grouped: dict[str, list[NcuLaunch]] = {}
    for launch in launches:
        grouped.setdefault(short_kernel_name(launch.kernel_name), []).append(launch)
    out: dict[str, tuple[int, dict[str, tuple[float | None, str]]]] = {}
    for name, group in grouped.items():
        weights = [launch.value("gpu__time_duration.sum") or 1.0 for launch in group]
        metrics: dict[str, tuple[float | None, str]] = {}
        names = list(dict.fromkeys(m for launch in group for m in launch.metrics))
        for metric in names:
            readings = [(launch.metrics[metric].value, w) for launch, w in zip(group, weights) if metric in launch.metrics]
            unit = next(launch.metrics[metric].unit for launch in group if metric in launch.metrics)
            values = [(v, w) for v, w in readings if v is not None]
            if not values:
                metrics[metric] = (None, unit)
            elif metric.endswith(".sum"):
                metrics[metric] = (sum(v for v, _ in values), unit)
            elif metric.startswith("launch__"):
                metrics[metric] = (max(v for v, _ in values), unit)
            else:
                metrics[metric] = (sum(v * w for v, w in values) / sum(w for _, w in values), unit)
        out[name] = (len(group), metrics)
    return out


def _metadata_metrics(entry: dict[str, Any] | None) -> list[Metric]:
    if not entry:
        return []
    out = []
    for key, name, unit in (("registers", C.TRITON_REGS, "register/thread"), ("spills", C.TRITON_SPILLS, "register"),
                            ("shared_mem_bytes", C.TRITON_SHARED, "byte"), ("num_warps", C.TRITON_NUM_WARPS, "warp"),
                            ("num_stages", C.TRITON_NUM_STAGES, "stage")):
        if entry.get(key) is not None:
            out.append(Metric(name=name, label=f"Triton {key}", value=float(entry[key]), unit=unit, source="triton_metadata"))
    grid = entry.get("grid")
    if grid:
        blocks = 1
        for g in grid:
            blocks *= int(g)
        out.append(Metric(name=C.GRID_BLOCKS, label="grid (programs)", value=float(blocks), unit="block",
                          source="triton_metadata"))
    if entry.get("event_ms") is not None:
        label = "kernel duration (GpuTimer: CUPTI timestamps, clean L2)" if entry.get("cupti") \
            else "event-timed duration"
        out.append(Metric(name=C.EVENT_DURATION, label=label, value=float(entry["event_ms"]) * 1e6,
                          unit="nsecond", source="event_timing"))
    return out


def _match_entry(name: str, entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    for entry in entries:
        if name in (entry.get("name"), entry.get("compiled_name")):
            return entry
    for entry in entries:  # compiled names may carry a suffix
        if name.startswith(str(entry.get("name"))):
            return entry
    return None


def resolve_gpu(gpu: GpuSpec | None, device: dict[str, Any] | None) -> tuple[GpuSpec | None, list[str]]:
    """The GPU to place kernels on: the caller's, else the worker's device refined with its limits; None
    (and a warning saying why) with no GPU or an unknown, uncalibrated one: never another GPU's numbers."""
    warnings: list[str] = []
    if gpu is not None:
        return gpu, warnings
    device = device or {}
    name = device.get("name")
    if not name or name == "cpu":
        warnings.append(f"{NO_GPU}: no occupancy and no roofline (they need a GPU's limits and ceilings)")
        return None, warnings
    spec_ = lookup(name)
    if spec_ is None:
        warnings.append(f"{unknown_gpu_message(name)}: no roofline")
        return None, warnings
    spec_.name = name
    for key, attr in (("sm_count", "sm_count"), ("regs_per_sm", "regs_per_sm"), ("max_threads_per_sm", "max_threads_per_sm"),
                      ("smem_per_block_optin", "smem_per_block_optin_bytes"), ("l2_bytes", "l2_bytes")):
        if device.get(key):
            setattr(spec_, attr, int(device[key]))
    return spec_, warnings


def _sources_used(kernels: list[KernelProfile], roof) -> dict[str, str]:
    used = {m.source for k in kernels for m in k.metrics} | {e.source for k in kernels for e in k.evidence}
    if any(k.occupancy is not None for k in kernels) or roof is not None:
        used.add("computed")
    return {s: SOURCE_NOTES[s] for s in SOURCE_NOTES if s in used}


def build_ncu_report(
    log_text: str,
    *,
    stage: Stage | str,
    gpu: GpuSpec | None,
    target_result: dict[str, Any] | None = None,
    flops: float | None = None,
    min_bytes: float | None = None,
    compute_type: str = "fp32",
    floor_ms: float | None = None,
    has_dots: bool = False,
) -> ProfileReport:
    """A report from ncu's CSV log (pure: the CI tests feed it the captured H200 files)."""
    stage = Stage(stage)
    log = parse_ncu_output(log_text)
    if not log.launches:
        raise ValueError("the ncu log holds no profiled launch" + (f": {'; '.join(log.errors)}" if log.errors else ""))
    entries = list((target_result or {}).get("kernels", []))
    aggregated = aggregate_launches(log.launches)
    total_ns = sum((m.get("gpu__time_duration.sum", (None, ""))[0] or 0.0) for _, m in aggregated.values())
    single = len(aggregated) == 1
    roof = C.roofline(gpu, flops=flops, min_bytes=min_bytes, measured_ms=total_ns / 1e6 if total_ns else None,
                      compute_type=compute_type, floor_ms=floor_ms)
    kernels = []
    for name, (count, readings) in aggregated.items():
        metrics = [
            Metric(name=m, label=(s.label if (s := spec(m)) else m), value=v, unit=u, source="ncu")
            for m, (v, u) in readings.items()
        ]
        metrics += _metadata_metrics(_match_entry(name, entries))
        duration = readings.get("gpu__time_duration.sum", (None, ""))[0]
        share = duration / total_ns if duration is not None and total_ns else None
        rules = [f"{r.rule}: {r.description}" for r in log.rules if short_kernel_name(r.kernel_name) == name]
        profile = C.classify_kernel(name, metrics, stage=stage, gpu=gpu, launches=count, time_share=share,
                                    task_roofline=roof if single else None,
                                    admissible_path=compute_type if has_dots else None)
        profile.ncu_rules = rules
        kernels.append(profile)
    kernels.sort(key=lambda k: -(k.time_share or 0))
    warnings = [w for w in log.warnings if "No kernels were profiled" not in w]
    return ProfileReport(
        source="ncu", stage=stage.value, gpu=gpu.name if gpu else NO_GPU, kernels=kernels, roofline=roof,
        summary=C.summarize(kernels, roof), sources=_sources_used(kernels, roof), warnings=warnings,
    )


def build_fallback_report(
    target_result: dict[str, Any] | None,
    *,
    stage: Stage | str,
    gpu: GpuSpec | None,
    reason: str,
    flops: float | None = None,
    min_bytes: float | None = None,
    compute_type: str = "fp32",
    floor_ms: float | None = None,
    has_dots: bool = False,
) -> ProfileReport:
    """A report without counters: event timing, Triton metadata, computed occupancy, the roofline."""
    stage = Stage(stage)
    entries = list((target_result or {}).get("kernels", []))
    warnings = list((target_result or {}).get("warnings", []))
    timed = [e for e in entries if e.get("event_ms") is not None]
    total_ms = sum(e["event_ms"] for e in timed) if timed else (target_result or {}).get("forward_event_ms")
    roof = C.roofline(gpu, flops=flops, min_bytes=min_bytes, measured_ms=total_ms, compute_type=compute_type,
                      floor_ms=floor_ms)
    kernels = []
    for entry in entries:
        metrics = _metadata_metrics(entry)
        occ = None
        if entry.get("num_warps") and gpu is not None:
            occ = occupancy(gpu, num_warps=int(entry["num_warps"]), registers_per_thread=entry.get("registers"),
                            shared_mem_bytes=entry.get("shared_mem_bytes"))
            metrics.append(Metric(name="computed.theoretical_occupancy", label="theoretical occupancy",
                                  value=occ.occupancy_pct, unit="%", source="computed"))
            grid_blocks = next((m.value for m in metrics if m.name == C.GRID_BLOCKS), None)
            if grid_blocks and occ.blocks_per_sm:
                metrics.append(Metric(name="launch__waves_per_multiprocessor", label="waves per SM (computed)",
                                      value=grid_blocks / (occ.blocks_per_sm * gpu.sm_count), unit="wave",
                                      source="computed"))
        share = entry["event_ms"] / total_ms if entry.get("event_ms") is not None and total_ms else None
        kernels.append(C.classify_kernel(
            entry["name"], metrics, stage=stage, gpu=gpu, launches=int(entry.get("launches_per_forward") or 1),
            time_share=share, task_roofline=roof if len(entries) == 1 else None, occupancy_estimate=occ,
            admissible_path=compute_type if has_dots else None,
        ))
    kernels.sort(key=lambda k: -(k.time_share or 0))
    if target_result and target_result.get("interpreter") and (target_result.get("size_overrides") or {}):
        warnings.append("grids come from the reduced sizes of size_overrides, not the real problem")
    if not entries:
        explain = ("no kernel information: the candidate was not run (no GPU, and the interpreter at full size "
                   "is too slow; profile_ncu with size_overrides runs it small)"
                   if target_result is None else "no Triton kernel launch was seen")
        summary = f"Fallback without counters ({reason}); {explain}."
        if roof is not None:
            summary += f" Task: {roof.summary}."
    else:
        summary = f"Fallback without counters ({reason}). " + C.summarize(kernels, roof)
    return ProfileReport(
        source="fallback", stage=stage.value, gpu=gpu.name if gpu else NO_GPU, kernels=kernels, roofline=roof, summary=summary,
        sources=_sources_used(kernels, roof), fallback_reason=reason, warnings=warnings,
    )


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
        return ProfileError(f"profiling timed out after {timeout_s:.0f} s: raise timeout_s, or profile at smaller sizes "
                            "(size_overrides) if the forward itself is slow")
    if outcome.error is not None:
        where = f" (candidate line {outcome.error.candidate_line})" if outcome.error.candidate_line else ""
        return ProfileError(f"the candidate failed in the profiling worker{where}: {outcome.error.kind}: "
                            f"{outcome.error.message}. Run verify on it first; only a verified candidate can be profiled.")
    return None


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
    floor: dict[str, Any] | None = None,
    tensor_core_flops: float | None = None,
) -> ProfileReport:
    """Profile one candidate's forward with ncu (or the no-counter fallback) and classify each kernel.

    Raises ProfileError when the candidate itself fails or the job times out (verify it first)."""
    t0 = time.perf_counter()
    stage = Stage(stage)
    # the task analysis' floor: the fastest compute path its precision ladder admits (one verdict for
    # verify, profile_ncu and the briefs); without it, the policy rule
    compute_type = (floor or {}).get("compute_type") or compute_type_for(options.dtype, options.tolerance)
    roof_kw: dict[str, Any] = dict(floor_ms=(floor or {}).get("floor_ms"), has_dots=bool(tensor_core_flops))
    metrics = metrics_for_stage(stage)
    has_gpu = evaluator.has_gpu() and options.device != "interpreter"
    ncu = find_ncu() if has_gpu else None
    warnings: list[str] = []
    await _progress(progress, 0, 3, "profiling: starting the worker" + (" under ncu" if ncu else ""))

    def deadline() -> float:
        return max(5.0, timeout_s - (time.perf_counter() - t0))

    if ncu is None:
        reason = "no GPU" if not has_gpu else "ncu not found (set EGG_MCP_NCU or install Nsight Compute)"
        report = await _fallback(evaluator, reference_source, candidate_source, options, stage, gpu, flops,
                                 min_bytes, compute_type, reason, has_gpu, deadline(), **roof_kw)
        report.metrics_requested = metrics
        report.wall_s = time.perf_counter() - t0
        await _progress(progress, 3, 3, "profiling: done (fallback)")
        return report

    names = triton_kernel_names(candidate_source)
    rejected: list[str] = []
    target_result: dict[str, Any] | None = None
    tmp = Path(tempfile.mkdtemp(prefix="egg-ncu-"))
    try:
        attempt = 0
        while True:
            attempt += 1
            log_path = tmp / f"ncu_{attempt}.csv"
            argv = ncu_argv(ncu, metrics, kernel_filter(names), str(log_path))
            payload = build_payload(reference_source, candidate_source, options, device="cuda", profile=True,
                                    timing_iters=TIMING_ITERS_UNDER_NCU)
            outcome = await evaluator.run_job(TARGET, payload, timeout_s=deadline(), uses_gpu=True, wrapper_argv=argv)
            await _progress(progress, 2, 3, "profiling: parsing ncu output")
            injection = ncu_injection_failure(outcome, log_path) if outcome.error is not None else None
            if injection is not None and not outcome.timed_out:
                # ncu, not the candidate, failed (its injection under the sandbox): profile without counters,
                # still confined; a candidate that really crashes fails there too
                reason = (f"ncu could not profile under the job's sandbox ({sandbox_line(outcome.sandbox)}): "
                          f"{injection}; profiled without counters")
                report = await _fallback(evaluator, reference_source, candidate_source, options, stage, gpu, flops,
                                         min_bytes, compute_type, reason, has_gpu, deadline(), **roof_kw)
                report.ncu_command = argv
                report.metrics_requested = metrics_for_stage(stage)
                report.warnings = warnings + report.warnings
                report.wall_s = time.perf_counter() - t0
                await _progress(progress, 3, 3, "profiling: done (fallback)")
                return report
            failure = _candidate_failure(outcome, timeout_s)
            if failure is not None:
                raise failure
            if outcome.result is not None:
                target_result = outcome.result
            text = _job_text(outcome, log_path)
            log = parse_ncu_output(log_path.read_text(errors="replace") if log_path.exists() else "")
            if log.launches:
                break
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
            problem = counter_access_problem(text)
            reason = problem or ("ncu profiled no kernel" + (f": {'; '.join(log.errors)[:400]}" if log.errors else
                                 f" (exit code {outcome.exit_code})"))
            if not problem and (outcome.sandbox or {}).get("fs_confined"):
                reason += (f" under the job's sandbox ({sandbox_line(outcome.sandbox)}): if ncu's injection needs a "
                           "path or port the sandbox denies, its stderr above says which")
            if target_result is None:
                report = await _fallback(evaluator, reference_source, candidate_source, options, stage, gpu, flops,
                                         min_bytes, compute_type, reason, has_gpu, deadline(), **roof_kw)
            else:
                gpu_, w = resolve_gpu(gpu, target_result.get("device"))
                report = build_fallback_report(target_result, stage=stage, gpu=gpu_, reason=reason, flops=flops,
                                               min_bytes=min_bytes, compute_type=compute_type, **roof_kw)
                report.warnings += w
            report.ncu_command = argv
            report.sandbox = report.sandbox or sandbox_line(outcome.sandbox)
            report.metrics_requested, report.metrics_rejected = metrics_for_stage(stage), rejected
            report.warnings = warnings + report.warnings
            report.wall_s = time.perf_counter() - t0
            await _progress(progress, 3, 3, "profiling: done (fallback)")
            return report
        gpu_, w = resolve_gpu(gpu, (target_result or {}).get("device"))
        report = build_ncu_report(log_path.read_text(errors="replace"), stage=stage, gpu=gpu_,
                                  target_result=target_result, flops=flops, min_bytes=min_bytes,
                                  compute_type=compute_type, **roof_kw)
        report.ncu_command = argv
        report.sandbox = sandbox_line(outcome.sandbox)
        report.ncu_wall_s = outcome.wall_s
        report.metrics_requested, report.metrics_rejected = metrics_for_stage(stage), rejected
        report.warnings = warnings + w + report.warnings + list((target_result or {}).get("warnings", []))
        report.wall_s = time.perf_counter() - t0
        await _progress(progress, 3, 3, "profiling: done")
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def _fallback(evaluator: Evaluator, reference_source: str, candidate_source: str, options: EvalOptions,
                    stage: Stage, gpu: GpuSpec | None, flops: float | None, min_bytes: float | None,
                    compute_type: str, reason: str, has_gpu: bool, timeout_s: float,
                    floor_ms: float | None = None, has_dots: bool = False) -> ProfileReport:
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
                                   compute_type=compute_type, floor_ms=floor_ms, has_dots=has_dots)
    report.sandbox = sandbox_line(outcome.sandbox) if result is not None else None
    report.warnings = warnings + w + report.warnings
    return report
