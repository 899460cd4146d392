"""Analysis of a KernelBench reference: aten operators, FLOPs, minimum bytes, op classes, floor.

The reference is user code, so the server never imports it: `analyze_reference` (server side)
sends the source to a worker process through the evaluator, and `analyze_job` (worker side) loads
it and calls the pure `analyze_model`. Tracing runs on meta tensors first — shapes without data,
so KernelBench L1's 32768x32768 inputs cost nothing — and falls back to real tensors (CUDA when
present, else a CPU small enough to hold them) only when the forward needs data (`.item()`,
`nonzero`, data-dependent control flow).

torch is imported inside the functions that need it: this module is imported by the server.
"""

from __future__ import annotations

from typing import Any, Callable

from egg_mcp.analysis.analysis_types import ReferenceAnalysis
from egg_mcp.analysis.op_classes import TENSOR_CORE_CLASSES, _dtype_name
from egg_mcp.analysis.precision import gemm_fallback
from egg_mcp.analysis.reference_build import build_model, load_reference_module
from egg_mcp.analysis.roofline import (
    admissible_compute_type,
    candidate_compute_types,
    fmt_bytes,
    fmt_flops,
    fmt_ms,
    fmt_shape,
    roofline_floor,
)
from egg_mcp.analysis.trace import AnalysisError, _chains, _collapse, _ordered_classes, _trace
from egg_mcp.contract import TolerancePolicy
from egg_mcp.hardware import NO_GPU, GpuSpec, gpu_status, spec_for, unknown_gpu_message


def analyze_model(
    model: Any,
    inputs: list[Any],
    *,
    gpu: GpuSpec | None,
    dtype: str,
    tolerance: TolerancePolicy | None = None,
    size_overrides: dict[str, int | list[int]] | None = None,
    traced_on: str | None = None,
    gpu_missing: str = NO_GPU,
    precision_probe: Callable[[list[Any]], tuple[list[Any], str]] | None = None,
) -> ReferenceAnalysis:
    """Trace `model(*inputs)` once (meta tensors welcome) and describe its workload on `gpu`.

    `model` and `inputs` must already be in the task dtype. The floor uses the tensor-core compute
    type `tolerance` allows (strict policy when None); `floors_ms` quotes the alternatives. The
    precision ladder's errors come from `precision_probe(traced ops)` (analyze_job's: at the output);
    without one, per GEMM (this function holds no module to run the whole forward from).
    """
    import torch

    raw, counter_flops, outputs, notes = _trace(model, inputs)
    ops, index = _collapse(raw)
    chains, attention = _chains(raw, index)

    flops, tc_flops = _flops(raw, counter_flops, notes)

    tensor_inputs = [t for t in inputs if isinstance(t, torch.Tensor)]
    param_count, param_bytes = _parameters(model)
    in_bytes = sum(t.numel() * t.element_size() for t in tensor_inputs)
    out_bytes = sum(t.numel() * t.element_size() for t in outputs)
    min_bytes = in_bytes + out_bytes + param_bytes

    errors, precision_method = _precision_errors([r.info for r in raw], dtype, precision_probe)
    compute_type = admissible_compute_type(dtype, tolerance, errors, gpu)
    floor, floors, floor_text = _floors(flops, tc_flops, min_bytes, gpu, dtype, compute_type, gpu_missing)
    classes = _ordered_classes(ops, attention)
    if traced_on is None:
        devs = {t.device.type for t in tensor_inputs}
        traced_on = devs.pop() if len(devs) == 1 else "cpu"

    doc = (type(model).__doc__ or "").strip().splitlines()
    problem_doc = doc[0].strip() if doc else ""
    n_calls = sum(op.count for op in ops)
    ai = flops / min_bytes if min_bytes else 0.0
    summary = (
        f"{type(model).__name__}({', '.join(fmt_shape(t.shape) for t in tensor_inputs)}) {dtype} -> "
        f"{', '.join(fmt_shape(t.shape) for t in outputs)}: {n_calls} aten ops ({', '.join(classes) or 'none'}); "
        f"{fmt_flops(flops)}, min traffic {fmt_bytes(min_bytes)}, AI {ai:.3g} FLOP/B; "
        f"{floor_text}"
    )
    notes += _fusion_and_trace_notes(raw, chains, traced_on)
    return ReferenceAnalysis(
        summary=summary,
        problem_doc=problem_doc,
        ops=ops,
        fusible_chains=chains,
        op_classes=classes,
        flops=flops,
        tensor_core_flops=tc_flops,
        min_bytes=min_bytes,
        unfused_bytes=sum(r.info.bytes for r in raw),
        arithmetic_intensity=ai,
        input_shapes=[list(t.shape) for t in tensor_inputs],
        input_dtypes=[_dtype_name(t.dtype) for t in tensor_inputs],
        output_shapes=[list(t.shape) for t in outputs],
        param_count=param_count,
        param_bytes=param_bytes,
        dtype=dtype,
        floor=floor,
        floor_unavailable=None if floor is not None else gpu_missing,
        floors_ms=floors,
        precision_errors=errors,
        precision_method=precision_method,
        size_overrides=dict(size_overrides or {}),
        traced_on=traced_on,
        notes=notes,
    )



def _flops(raw, counter_flops: int, notes: list[str]) -> tuple[int, int]:
    """(all FLOPs, tensor-core FLOPs): torch's FlopCounterMode count for GEMM/conv where it disagrees (noted)."""
    tc_flops = sum(r.info.flops for r in raw if r.info.op_class in TENSOR_CORE_CLASSES)
    if counter_flops and counter_flops != tc_flops:
        notes.append(f"torch FlopCounterMode counted {counter_flops} GEMM/conv FLOPs, per-op sum {tc_flops}; "
                     "using the counter")
        tc_flops = counter_flops
    other_flops = sum(r.info.flops for r in raw if r.info.op_class not in TENSOR_CORE_CLASSES)
    return tc_flops + other_flops, tc_flops


def _parameters(model: Any) -> tuple[int, int]:
    """(parameter count, bytes of parameters and buffers), each tensor once."""
    seen: set[int] = set()
    param_count = param_bytes = 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        param_count += t.numel() if t.is_floating_point() or t.dim() else 0
        param_bytes += t.numel() * t.element_size()
    return param_count, param_bytes


def _precision_errors(infos, dtype: str, precision_probe) -> tuple[Any, str]:
    """The precision ladder's errors and how they were found: `precision_probe` at the output, else per GEMM."""
    if precision_probe is None:
        return gemm_fallback(infos, dtype, "no module given")
    return precision_probe(infos)


def _floors(flops: int, tc_flops: int, min_bytes: int, gpu: GpuSpec | None, dtype: str, compute_type: str,
            gpu_missing: str):
    """(the roofline floor at `compute_type`, the floor at each admissible alternative, the summary's floor text);
    without a GPU: (None, {}, why)."""
    if gpu is None:
        return None, {}, f"floor: {gpu_missing}"
    floor = roofline_floor(flops, tc_flops, min_bytes, gpu, compute_type)
    floors = {ct: roofline_floor(flops, tc_flops, min_bytes, gpu, ct).floor_ms
              for ct in dict.fromkeys([*candidate_compute_types(dtype), compute_type]) if ct in gpu.peak_flops}
    floor_text = f"floor {fmt_ms(floor.floor_ms)} on {gpu.name} ({compute_type}, {floor.bound}-bound, {gpu.source})"
    return floor, floors, floor_text


def _fusion_and_trace_notes(raw, chains, traced_on: str) -> list[str]:
    """What fusing the chains saves over eager's traffic, and what a trace on meta tensors means."""
    notes = []
    if chains:
        notes.append(
            f"eager's ops move at least {fmt_bytes(sum(r.info.bytes for r in raw))} through DRAM (each reading its "
            f"inputs and writing its output once; their own passes can move more); fusing the chains saves at least "
            f"{fmt_bytes(sum(c.saved_bytes for c in chains))}"
        )
    if traced_on == "meta":
        notes.append("traced on meta tensors: shapes and FLOPs exact, no data touched")
    return notes

# ----------------------------------------------------------------------------------------------
# Worker side


CPU_TRACE_LIMIT_BYTES = 2 * 1024**3
"""Largest inputs + parameters a CPU fallback trace may allocate (the CPU is shared)."""


def _input_bytes(module: Any) -> int | None:
    """Bytes of inputs + parameters, from a meta build (None when even that fails)."""
    try:
        model, inputs = build_model(module, "meta", "float32")
    except Exception:
        return None
    import torch

    total = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    return total + sum(p.numel() * p.element_size() for p in model.parameters())


def _output_probe(source: str, dtype: str, overrides: dict[str, Any],
                  tolerance: TolerancePolicy | None) -> Callable[[list[Any]], tuple[list[Any], str]]:
    """The precision measurement for analyze_model: at the output (`precision_output`), per GEMM when that
    cannot run (the reason goes into the ladder's method). Its shares are computed at the task's tolerance."""
    from egg_mcp.analysis.op_classes import TENSOR_CORE_CLASSES
    from egg_mcp.analysis.precision_output import OutputProbeError, measure_output_errors
    from egg_mcp.contract import default_tolerance

    policy = tolerance or default_tolerance("float32" if dtype == "float32" else "float16")

    def probe(ops: list[Any]) -> tuple[list[Any], str]:
        if not any(op.op_class in TENSOR_CORE_CLASSES for op in ops):
            return [], ""
        try:
            return measure_output_errors(source, dtype, overrides, policy.atol, policy.rtol, ops)
        except OutputProbeError as exc:
            return gemm_fallback(ops, dtype, str(exc))

    return probe


def analyze_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: payload {reference_source, dtype, size_overrides, gpu_name[, gpu_spec, tolerance]}.

    Returns `ReferenceAnalysis.model_dump(mode="json")`.
    """
    import torch

    source = payload.get("reference_source")
    if not isinstance(source, str) or not source.strip():
        raise AnalysisError("payload has no reference_source")
    dtype = payload.get("dtype") or "float32"
    overrides = dict(payload.get("size_overrides") or {})
    tol = payload.get("tolerance")
    tolerance = TolerancePolicy(**tol) if isinstance(tol, dict) else None
    gpu_name = payload.get("gpu_name")
    gpu_missing = str(payload.get("gpu_missing") or NO_GPU)
    if isinstance(payload.get("gpu_spec"), dict):
        gpu = GpuSpec.model_validate(payload["gpu_spec"])
    elif gpu_name:
        gpu = spec_for(gpu_name)
        gpu_missing = unknown_gpu_message(gpu_name) if gpu is None else gpu_missing
    else:
        gpu = None

    module = load_reference_module(source, overrides)
    probe = _output_probe(source, dtype, overrides, tolerance)
    meta_error: Exception | None = None
    try:
        model, inputs = build_model(module, "meta", dtype)
        return analyze_model(model, inputs, gpu=gpu, dtype=dtype, tolerance=tolerance, gpu_missing=gpu_missing,
                             size_overrides=overrides, traced_on="meta",
                             precision_probe=probe).model_dump(mode="json")
    except AnalysisError:
        raise
    except Exception as exc:  # data-dependent forward, explicit device= in get_inputs, ...
        meta_error = exc

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        size = _input_bytes(module)
        if size is not None and size > CPU_TRACE_LIMIT_BYTES:
            raise AnalysisError(
                f"the forward cannot run on meta tensors ({type(meta_error).__name__}: {meta_error}) and its "
                f"inputs ({size / 1e9:.1f} GB) are too large to trace on this CPU; pass size_overrides "
                "(e.g. the problem's QUICK_SIZES) or analyse on a GPU machine"
            )
    try:
        model, inputs = build_model(module, device, dtype)
        result = analyze_model(model, inputs, gpu=gpu, dtype=dtype, tolerance=tolerance, gpu_missing=gpu_missing,
                               size_overrides=overrides, traced_on=device, precision_probe=probe)
    except Exception as exc:
        raise AnalysisError(
            f"the reference forward failed on meta tensors ({type(meta_error).__name__}: {meta_error}) "
            f"and on {device} ({type(exc).__name__}: {exc}); check that Model(*get_init_inputs()) "
            "runs on get_inputs()"
        ) from exc
    result.notes.append(
        f"meta trace failed ({type(meta_error).__name__}); traced on {device} with real tensors"
    )
    return result.model_dump(mode="json")


# ----------------------------------------------------------------------------------------------
# Server side


async def analyze_reference(
    evaluator: Any,
    reference_source: str,
    *,
    dtype: str,
    gpu: GpuSpec | None,
    size_overrides: dict[str, int | list[int]] | None = None,
    timeout_s: float = 120,
    tolerance: TolerancePolicy | None = None,
) -> ReferenceAnalysis:
    """Analyse a reference in an isolated worker (the reference is user code; never import it here)."""
    payload: dict[str, Any] = {
        "reference_source": reference_source,
        "dtype": dtype,
        "size_overrides": dict(size_overrides or {}),
    }
    if gpu is not None:
        payload["gpu_name"], payload["gpu_spec"] = gpu.name, gpu.model_dump(mode="json")
    else:  # say why there are no ceilings: no GPU, or a GPU without a datasheet lead or a calibration
        payload["gpu_missing"] = gpu_status() or "no GPU ceilings (the server evaluates in the interpreter)"
    if tolerance is not None:
        payload["tolerance"] = tolerance.model_dump(mode="json")
    outcome = await evaluator.run_job(
        "egg_mcp.analysis.reference:analyze_job", payload, timeout_s=timeout_s, uses_gpu=False
    )
    if not outcome.ok or outcome.result is None:
        if outcome.timed_out:
            raise AnalysisError(
                f"reference analysis timed out after {timeout_s:.0f} s; the reference forward may be too large "
                "for the worker: pass size_overrides or raise the timeout"
            )
        if outcome.error is not None:
            where = f" (line {outcome.error.candidate_line})" if outcome.error.candidate_line else ""
            detail = f"{outcome.error.kind}: {outcome.error.message}{where}"
        else:
            tail = (outcome.stderr_tail or outcome.stdout_tail or "").strip()[-800:]
            detail = f"worker exited with code {outcome.exit_code}" + (f": {tail}" if tail else "")
        raise AnalysisError(f"reference analysis failed: {detail}")
    try:
        return ReferenceAnalysis.model_validate(outcome.result)
    except Exception as exc:
        raise AnalysisError(f"reference analysis returned an unreadable result: {exc}") from exc
