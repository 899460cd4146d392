"""Roofline floor and the compute type a tolerance policy allows (pure; no torch import).

The server process uses these to re-derive a floor when the policy changes, so they must not
pull torch in (importing torch costs seconds; the server answers in milliseconds).
"""

from __future__ import annotations

from egg_mcp.analysis.analysis_types import ReferenceAnalysis, RooflineFloor
from egg_mcp.contract import TolerancePolicy
from egg_mcp.hardware import NO_GPU, GpuSpec, ceiling

TF32_MIN_TOLERANCE = 5e-3
"""TF32 keeps 10 mantissa bits: a K=4096 fp32 dot in TF32 errs ~1e-3 relative, so a policy must
allow at least this much (atol and rtol) before TF32 tensor cores are a legal way to compute."""


def compute_type_for(dtype: str, tolerance: TolerancePolicy | None) -> str:
    """The fastest tensor-core compute type whose rounding error the policy tolerates.

    fp32 tasks at the strict KernelBench v0.1 policy (1e-4) need IEEE fp32 dots; at 1e-2
    (KernelBench v0) TF32 passes. Half-precision tasks use their own type (fp32 accumulation).
    """
    if dtype in ("float16", "fp16", "half"):
        return "fp16"
    if dtype in ("bfloat16", "bf16"):
        return "bf16"
    if dtype not in ("float32", "fp32", "float"):
        raise ValueError(f"unsupported task dtype {dtype!r}; use float32, float16 or bfloat16")
    if tolerance is not None and min(tolerance.atol, tolerance.rtol) >= TF32_MIN_TOLERANCE:
        return "tf32"
    return "fp32"


def admissible_compute_type(dtype: str, tolerance: TolerancePolicy | None, errors: list | None = None,
                            gpu: GpuSpec | None = None) -> str:
    """The compute path every floor and verdict assumes: the fastest the measured precision ladder admits
    (`analysis.precision.precision_ladder`); without measured errors, the policy rule of `compute_type_for`."""
    from egg_mcp.analysis.precision import precision_ladder
    from egg_mcp.contract import default_tolerance

    fallback = compute_type_for(dtype, tolerance)
    if not errors:
        return fallback
    policy = tolerance or default_tolerance("float32" if dtype == "float32" else "float16")
    ladder = precision_ladder(errors, dtype, policy.atol, policy.rtol, gpu)
    if gpu is None or ladder.fastest in gpu.peak_flops:
        return ladder.fastest
    # this GPU prices no such path: the fastest admissible one it does price, never one the ladder refused
    priced = [r for r in ladder.rungs if r.admissible and r.path in gpu.peak_flops]
    return max(priced, key=lambda r: gpu.peak_flops[r.path]).path if priced else fallback


def candidate_compute_types(dtype: str) -> list[str]:
    """Compute types worth quoting a floor for: both fp32 and tf32 for an fp32 task."""
    if dtype in ("float32", "fp32", "float"):
        return ["fp32", "tf32"]
    return [compute_type_for(dtype, None)]


def roofline_floor(
    flops: float, tensor_core_flops: float, min_bytes: float, gpu: GpuSpec, compute_type: str
) -> RooflineFloor:
    """max(compute time, memory time) on `gpu`.

    Tensor-core-eligible FLOPs (GEMM, conv, attention) run at the `compute_type` peak; the rest
    (elementwise, reductions) at the fp32 CUDA-core rate. Memory time is the minimum bytes at the
    achievable DRAM bandwidth (the table holds measured copy bandwidth where available).
    """
    if compute_type not in gpu.peak_flops:
        raise ValueError(f"{gpu.name} has no peak for compute type {compute_type!r}; known: {sorted(gpu.peak_flops)}")
    other_flops = max(0.0, float(flops) - float(tensor_core_flops))
    compute_s = tensor_core_flops / gpu.peak_flops[compute_type] + other_flops / gpu.peak_flops["fp32"]
    memory_s = min_bytes / gpu.dram_bytes_per_s
    return RooflineFloor(
        gpu_name=gpu.name,
        compute_type=compute_type,
        floor_ms=max(compute_s, memory_s) * 1e3,
        bound="compute" if compute_s > memory_s else "memory",
        compute_ms=compute_s * 1e3,
        memory_ms=memory_s * 1e3,
        spec_source=floor_provenance(gpu, compute_type),
        ceilings=ceilings_short(gpu, compute_type),
    )


def floor_provenance(gpu: GpuSpec, compute_type: str) -> str:
    """Where the two ceilings a floor uses come from (measured here and when, or a datasheet lead)."""
    return (f"{gpu.source}: DRAM {ceiling(gpu, 'dram').label()}; {compute_type} "
            f"{ceiling(gpu, compute_type).label()}")


def ceilings_short(gpu: GpuSpec, compute_type: str) -> str:
    """The DRAM and `compute_type` ceilings a floor uses, each with its source in a few words (for texts that
    cannot hold `floor_provenance`): 'measured by egg-mcp calibrate here at <when>', 'derived from ...' or
    'datasheet lead'."""
    parts = []
    for key, name in (("dram", "DRAM"), (compute_type, compute_type)):
        c = ceiling(gpu, key)
        if c.value is None:
            parts.append(f"{name}: {c.detail}")
            continue
        shown = f"{c.value / 1e12:.3g} TB/s" if c.unit == "bytes/s" else f"{c.value / 1e12:.3g} TFLOP/s"
        if c.source == "measured":
            where = f"measured by egg-mcp calibrate here at {gpu.measured_at or 'an unrecorded time'}"
        elif c.source == "derived":
            where = ("derived from ceilings measured here" + (f" at {gpu.measured_at}" if gpu.measured_at else "")
                     if "measured" in c.detail else "derived from a datasheet lead")
        else:
            where = "datasheet lead"
        parts.append(f"{name} {shown} ({where})")
    return "; ".join(parts)


UNPRICED_PREFIXES = (NO_GPU, "unknown GPU")
"""Why a stored analysis may lack a floor that ceilings found later (a calibration) can supply."""


def floor_holds(analysis: ReferenceAnalysis) -> bool:
    """Whether a floor can be stated for this analysis: it has one, or lacks one only for want of ceilings (not,
    e.g., because it was taken at other sizes than the timed ones)."""
    return analysis.floor is not None or (analysis.floor_unavailable or NO_GPU).startswith(UNPRICED_PREFIXES)


def current_floor(analysis: ReferenceAnalysis, gpu: GpuSpec | None,
                  tolerance: TolerancePolicy | None) -> RooflineFloor | None:
    """The task's floor as of now: the stored FLOPs, bytes and precision errors priced with `gpu` (the current
    spec: calibrated when the calibration has finished, else the datasheet leads; its provenance says which) at
    the fastest path the ladder admits on it. Verify, profile_ncu, propose_tiling, the views and the briefs all
    read the floor here, so a task started before the calibration finished states the calibrated floor too.

    The stored floor when there is no current spec (or it prices no path); None when the analysis has no floor
    for another reason than missing ceilings (e.g. it was taken at other sizes than the timed ones)."""
    if not floor_holds(analysis):
        return None
    if gpu is None or "fp32" not in gpu.peak_flops or not gpu.dram_bytes_per_s:
        return analysis.floor
    try:
        path = admissible_compute_type(analysis.dtype, tolerance, analysis.precision_errors, gpu)
    except ValueError:
        return analysis.floor
    if path not in gpu.peak_flops:
        return analysis.floor
    return roofline_floor(analysis.flops, analysis.tensor_core_flops, analysis.min_bytes, gpu, path)


def summary_now(analysis: ReferenceAnalysis, floor: RooflineFloor | None) -> str:
    """The analysis' one-line summary with its floor (the last part, written when the analysis ran) replaced by
    `floor`, the one `current_floor` gives now, with its ceilings' provenance."""
    head, sep, _ = analysis.summary.rpartition("; floor")
    if floor is None or not sep:
        return analysis.summary
    return (f"{head}; floor {fmt_ms(floor.floor_ms)} on {floor.gpu_name} ({floor.compute_type}, {floor.bound}-bound; "
            f"ceilings: {floor.ceilings or floor.spec_source})")


def fmt_flops(flops: float) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.0f} FLOP"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "unknown"
    if ms >= 1:
        return f"{ms:.3g} ms"
    return f"{ms * 1e3:.3g} us"


def fmt_shape(shape: list[int] | tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def fmt_tol(x: float) -> str:
    """1e-4 rather than 0.0001: how tolerances are written everywhere else."""
    if x and abs(x) < 0.05:
        mant, exp = f"{x:.0e}".split("e")
        return f"{mant}e{int(exp)}"
    return f"{x:g}"
