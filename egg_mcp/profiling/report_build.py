"""From a profiling job's readings to a ProfileReport: ncu's counters per kernel, or the no-counter fallback
(event timing, Triton metadata, computed occupancy), each number labelled with its source, on the roofline.

Pure: the CI tests feed it the captured H200 ncu logs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from egg_mcp.analysis.analysis_types import RooflineFloor
from egg_mcp.hardware import NO_GPU, GpuSpec, lookup, unknown_gpu_message
from egg_mcp.profiling import classify as C
from egg_mcp.profiling.metrics import spec
from egg_mcp.profiling.ncu_csv import NcuLaunch, parse_ncu_output, short_kernel_name
from egg_mcp.profiling.occupancy import occupancy
from egg_mcp.profiling.profile_report import KernelProfile, Metric, ProfileReport
from egg_mcp.stages import Stage

FloorFor = Callable[[GpuSpec], "RooflineFloor | None"]
"""The task's floor on the GPU a report is placed on (`analysis.roofline.current_floor` bound to the task)."""

SOURCE_NOTES = {
    "ncu": "Nsight Compute hardware counters on one forward after warm-up (kernel replay, caches flushed "
           "between passes, clocks not locked)",
    "triton_metadata": "Triton's compiled kernel metadata (registers, spills, shared memory, num_warps, "
                       "num_stages) and the launch grid",
    "event_timing": "CUDA events around each Triton launch, median over several forwards (no L2 flush)",
    "computed": "derived here from the other numbers and the GPU's limits (occupancy calculator, roofline)",
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
            readings = [(launch.metrics[metric].value, w) for launch, w in zip(group,
                                                                               weights) if metric in launch.metrics]
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
            out.append(Metric(name=name, label=f"Triton {key}", value=float(entry[key]), unit=unit,
                              source="triton_metadata"))
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
    name = (device or {}).get("name")
    if not name or name == "cpu":
        warnings.append(f"{NO_GPU}: no occupancy and no roofline (they need a GPU's limits and ceilings)")
        return None, warnings
    spec_ = lookup(name)
    if spec_ is None:
        warnings.append(f"{unknown_gpu_message(name)}: no roofline")
        return None, warnings
    spec_.name = name
    assert device is not None  # it named the GPU
    for key, attr in (("sm_count", "sm_count"), ("regs_per_sm", "regs_per_sm"), ("max_threads_per_sm",
                                                                                 "max_threads_per_sm"),
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
    floor_for: FloorFor | None = None,
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
    floor = floor_for(gpu) if floor_for is not None and gpu is not None else None
    compute_type = floor.compute_type if floor is not None else compute_type
    roof = C.roofline(gpu, flops=flops, min_bytes=min_bytes, measured_ms=total_ns / 1e6 if total_ns else None,
                      compute_type=compute_type, floor_ms=floor_ms, floor=floor,
                      has_dots=has_dots if floor_for else None)  # known from the task's analysis only
    kernels = []
    for name, (count, readings) in aggregated.items():
        metrics = [
            Metric(name=m, label=(known.label if (known := spec(m)) else m), value=v, unit=u, source="ncu")
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
    floor_for: FloorFor | None = None,
) -> ProfileReport:
    """A report without counters: event timing, Triton metadata, computed occupancy, the roofline."""
    stage = Stage(stage)
    entries = list((target_result or {}).get("kernels", []))
    warnings = list((target_result or {}).get("warnings", []))
    timed = [e for e in entries if e.get("event_ms") is not None]
    total_ms = sum(e["event_ms"] for e in timed) if timed else (target_result or {}).get("forward_event_ms")
    floor = floor_for(gpu) if floor_for is not None and gpu is not None else None
    compute_type = floor.compute_type if floor is not None else compute_type
    roof = C.roofline(gpu, flops=flops, min_bytes=min_bytes, measured_ms=total_ms, compute_type=compute_type,
                      floor_ms=floor_ms, floor=floor, has_dots=has_dots if floor_for else None)
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
        source="fallback", stage=stage.value, gpu=gpu.name if gpu else NO_GPU, kernels=kernels, roofline=roof,
        summary=summary,
        sources=_sources_used(kernels, roof), fallback_reason=reason, warnings=warnings,
    )
