"""Worker target: measure this GPU's ceilings with short, standard probes (CUDA only).

Runs inside an evaluation worker: `Evaluator.run_job("egg_mcp.calibration.probes:run_probes", payload,
uses_gpu=True)`, so it never overlaps another GPU job. Every probe is timed with the project's one timer
(`egg_mcp.evaluation.timing.GpuTimer`: L2 read-flushed before each run, CUDA events), a few runs, and
the best run is the ceiling (a ceiling is what the hardware can do, not what it usually does). Each
result names its method, the bytes or FLOPs counted, and the peak of the same unit it is compared with.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any, Callable

import torch
import triton
import triton.language as tl

from egg_mcp.calibration.fma import fma_probe, fp32_fma_peak, sample_clock
from egg_mcp.calibration.peaks import FP32_LANES_PER_SM, device_peaks

MiB = 1 << 20


@triton.jit
def _read_reduce(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    """Each program sums ITERS blocks, grid-strided; one partial sum per program (reads n elements once)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(ITERS):
        offs = (pid + i * nprog) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def _l2_reread(x_ptr, out_ptr, n_blocks, PASSES: tl.constexpr, BLOCK: tl.constexpr):
    """Each program walks the (L2-resident) buffer PASSES times with L1-bypassing loads (.cg)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    per_prog = tl.cdiv(n_blocks, nprog)
    for p in range(PASSES):
        for j in range(per_prog):
            blk = (pid + j * nprog + p * 7) % n_blocks
            offs = blk * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def _gemm_tf32x3(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                 GROUP: tl.constexpr):
    """Plain tiled GEMM C = A @ B (row-major fp32) with 3xTF32 dots (tensor cores, ~fp32 accuracy)."""
    pid = tl.program_id(0)
    n_m = tl.cdiv(M, BM)
    n_n = tl.cdiv(N, BN)
    group = pid // (GROUP * n_n)
    first_m = group * GROUP
    size_m = min(n_m - first_m, GROUP)
    pid_m = first_m + (pid % size_m)
    pid_n = (pid % (GROUP * n_n)) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


def _best_ms(timer, fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    """(best, median) ms of `runs` timed calls through the project's timer (L2 read-flushed each run)."""
    stats, _ = timer.measure(lambda _inputs: fn(), lambda _k: [], n_runs=runs, allow_graph=False)
    return float(stats.min_ms), float(stats.median_ms)


def _entry(key: str, kind: str, amount: float, best_ms: float, median_ms: float, method: str,
           peaks: dict[str, dict[str, Any]], note: str = "") -> dict[str, Any]:
    value = amount / (best_ms * 1e-3)
    peak = peaks.get(key)
    return {
        "key": key, "unit": "bytes/s" if kind == "bytes" else "FLOP/s", "value": value,
        "best_ms": best_ms, "median_ms": median_ms, "amount": amount, "method": method,
        "peak": peak["value"] if peak else None, "peak_source": peak["source"] if peak else None,
        "ratio_to_peak": value / peak["value"] if peak and peak["value"] else None, "note": note,
    }


def _fma_entry(timer, facts: dict[str, Any], runs: int, quick: bool, peaks) -> dict[str, Any]:
    """fp32 FMA ceiling: the best of a few grid layouts (fma.py), with the SM clock sampled under load
    and the peak at that clock beside the max-clock peak."""
    probe = fma_probe(lambda fn: _best_ms(timer, fn, runs), facts["sm_count"], quick=quick)
    best = probe["best"]
    others = "; ".join(f"{r['layout']}: {r['rate'] / 1e12:.1f}" for r in probe["layouts"])
    entry = _entry("fp32_fma", "flops", best["flops"], best["best_ms"], best["median_ms"],
                   f"Triton tl.fma kernel, 8 independent chains per element, runtime scalar operands, best layout "
                   f"{best['layout']}, best of {runs}", peaks, f"layouts tried (TFLOP/s): {others}")
    clock = sample_clock(best["launch"], best["best_ms"] * 1e-3, timer.nvml.read, torch.cuda.synchronize)
    entry["layouts"] = probe["layouts"]
    entry["clock_under_load"] = clock
    if clock:
        lanes = FP32_LANES_PER_SM.get(str(facts.get("compute_capability")), 128)
        adjusted = fp32_fma_peak(facts["sm_count"], lanes, clock["median_mhz"])
        entry["clock_adjusted_peak"] = adjusted
        entry["ratio_to_clock_adjusted_peak"] = entry["value"] / adjusted
        entry["note"] += (f"; SM clock under load {clock['median_mhz']:.0f} MHz (NVML, {clock['samples']} samples, "
                          f"{clock['min_mhz']}-{clock['max_mhz']}): peak at that clock {adjusted / 1e12:.1f} TFLOP/s, "
                          f"measured {entry['value'] / adjusted:.0%} of it")
    else:
        entry["note"] += "; SM clock under load unknown (no NVML): only the max-clock peak is known"
    return entry


def _matmul_probes(timer, size: int, runs: int, cap: tuple[int, int], peaks, skipped: dict) -> list[dict]:
    out = []
    flops = 2.0 * size ** 3
    gen = torch.Generator(device="cuda").manual_seed(0)
    a32 = torch.randn(size, size, device="cuda", generator=gen)
    b32 = torch.randn(size, size, device="cuda", generator=gen)
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        for key, tf32, label in (("mm_fp32_ieee", False, "IEEE fp32 (allow_tf32=False)"),
                                 ("mm_tf32", True, "TF32 (allow_tf32=True)")):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            best, med = _best_ms(timer, lambda: torch.matmul(a32, b32), runs)
            out.append(_entry(key, "flops", flops, best, med,
                              f"torch.matmul fp32 {size}^3, {label} (cuBLAS), best of {runs}", peaks,
                              "cuBLAS SGEMM reaches ~75 % of the FMA peak" if key == "mm_fp32_ieee" else ""))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    for key, dtype in (("mm_bf16", torch.bfloat16), ("mm_fp16", torch.float16)):
        a, b = a32.to(dtype), b32.to(dtype)
        best, med = _best_ms(timer, lambda: torch.matmul(a, b), runs)
        out.append(_entry(key, "flops", flops, best, med, f"torch.matmul {dtype} {size}^3 (cuBLAS), best of {runs}",
                          peaks))
    if cap >= (8, 9) and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
        try:
            a8 = a32.to(torch.float8_e4m3fn)
            b8 = b32.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major B, as _scaled_mm requires
            one = torch.ones((), device="cuda", dtype=torch.float32)
            fn = lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
            fn()
            best, med = _best_ms(timer, fn, runs)
            out.append(_entry("mm_fp8", "flops", flops, best, med,
                              f"torch._scaled_mm e4m3 {size}^3, bf16 out, best of {runs}", peaks))
        except Exception as exc:  # noqa: BLE001 - reported, never invented
            skipped["mm_fp8"] = f"torch._scaled_mm failed: {type(exc).__name__}: {str(exc)[:200]}"
    else:
        skipped["mm_fp8"] = f"no fp8 tensor cores on sm_{cap[0]}{cap[1]} (needs sm_89+)"
    if cap >= (8, 0):
        try:
            c = torch.empty_like(a32)
            grid = (triton.cdiv(size, 128) * triton.cdiv(size, 128),)
            fn = lambda: _gemm_tf32x3[grid](a32, b32, c, size, size, size, BM=128, BN=128, BK=32, GROUP=8,  # noqa: E731
                                            num_warps=8, num_stages=3)
            fn()
            best, med = _best_ms(timer, fn, runs)
            torch.backends.cuda.matmul.allow_tf32 = False
            ref = torch.matmul(a32, b32)
            torch.backends.cuda.matmul.allow_tf32 = previous
            err = float((c - ref).abs().max() / ref.abs().max())
            out.append(_entry("mm_tf32x3", "flops", flops, best, med,
                              f"Triton tl.dot(input_precision='tf32x3') GEMM {size}^3, 128x128x32 tiles, 8 warps, "
                              f"3 stages, best of {runs}", peaks,
                              "a plain Triton GEMM, not a tuned library: a lower bound of the 3xTF32 rate"
                              + f"; max error vs IEEE fp32 {err:.2g} of max |C|"))
        except Exception as exc:  # noqa: BLE001
            skipped["mm_tf32x3"] = f"Triton tf32x3 GEMM failed: {type(exc).__name__}: {str(exc)[:200]}"
    return out


def device_facts(index: int = 0) -> dict[str, Any]:
    """Name, UUID, driver, clocks and versions of CUDA device `index` (NVML where present)."""
    props = torch.cuda.get_device_properties(index)
    facts: dict[str, Any] = {
        "name": props.name, "uuid": f"GPU-{props.uuid}" if getattr(props, "uuid", None) else None,
        "compute_capability": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0), "memory_bytes": int(props.total_memory),
        "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "driver": None, "sm_clock_mhz": None, "sm_clock_max_mhz": None, "mem_clock_mhz": None,
        "mem_clock_max_mhz": None, "mem_bus_width_bits": None,
        "regs_per_sm": getattr(props, "regs_per_multiprocessor", None),
        "max_threads_per_sm": getattr(props, "max_threads_per_multi_processor", None),
        "smem_per_block_optin_bytes": getattr(props, "shared_memory_per_block_optin", None),
        "smem_per_sm_bytes": getattr(props, "shared_memory_per_multiprocessor", None),
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = None
        if facts["uuid"]:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(facts["uuid"])
            except Exception:  # noqa: BLE001
                handle = None
        handle = handle or pynvml.nvmlDeviceGetHandleByIndex(index)
        dec = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
        facts["uuid"] = dec(pynvml.nvmlDeviceGetUUID(handle))
        facts["driver"] = dec(pynvml.nvmlSystemGetDriverVersion())
        for key, fn, clock in (("sm_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
                               ("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM"),
                               ("mem_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),
                               ("mem_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM")):
            try:
                facts[key] = int(getattr(pynvml, fn)(handle, getattr(pynvml, clock)))
            except Exception:  # noqa: BLE001
                pass
        try:
            facts["mem_bus_width_bits"] = int(pynvml.nvmlDeviceGetMemoryBusWidth(handle))
        except Exception:  # noqa: BLE001
            pass
    except Exception:  # noqa: BLE001 - no NVML: clocks stay None, said so in the report
        pass
    return facts


def run_probes(payload: dict) -> dict:
    """Run every probe; returns the calibration record (see calibration.models.Calibration)."""
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA GPU in this worker: calibration measures a GPU; run it on a GPU machine")
    from egg_mcp.evaluation.timing import GpuTimer

    started = time.perf_counter()
    index = int(payload.get("device_index", 0))
    quick = bool(payload.get("quick", False))
    torch.cuda.set_device(index)
    facts = device_facts(index)
    cap = tuple(int(x) for x in facts["compute_capability"].split("."))
    peaks = device_peaks(facts)
    timer = GpuTimer(index)
    runs = 5 if quick else 10
    l2 = facts["l2_bytes"] or 40 * MiB
    ceilings: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}

    big = (256 if quick else 1024) * MiB  # >> any L2 (60 MiB on the H200)
    src = torch.empty(big // 4, device="cuda", dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    best, med = _best_ms(timer, lambda: dst.copy_(src), runs)
    ceilings.append(_entry("dram_copy", "bytes", 2.0 * big, best, med,
                           f"torch.Tensor.copy_ {big // MiB} MiB -> {big // MiB} MiB (read+write bytes), best of {runs}",
                           peaks, "a copy reaches ~90 % of the pin bandwidth (read/write turnaround)"))
    del dst
    block, n = 4096, src.numel()
    programs = facts["sm_count"] * 8
    iters = triton.cdiv(n, block * programs)
    partial = torch.empty(programs, device="cuda", dtype=torch.float32)
    best, med = _best_ms(timer, lambda: _read_reduce[(programs,)](src, partial, n, BLOCK=block, ITERS=iters,
                                                                  num_warps=8), runs)
    ceilings.append(_entry("dram_read", "bytes", 4.0 * n, best, med,
                           f"Triton read-reduce kernel over {big // MiB} MiB fp32, {programs} programs, best of {runs}",
                           peaks))
    del src

    small_bytes = max(4 * MiB, (l2 // 3) // (block * 4) * (block * 4))
    buf = torch.ones(small_bytes // 4, device="cuda", dtype=torch.float32)
    n_blocks, passes = buf.numel() // block, 8 if quick else 16
    programs_l2 = min(n_blocks, facts["sm_count"] * 4)
    per_prog = triton.cdiv(n_blocks, programs_l2)
    out = torch.empty(programs_l2, device="cuda", dtype=torch.float32)
    best, med = _best_ms(timer, lambda: _l2_reread[(programs_l2,)](buf, out, n_blocks, PASSES=passes, BLOCK=block,
                                                                   num_warps=8), runs)
    ceilings.append(_entry("l2_read", "bytes", 4.0 * block * per_prog * programs_l2 * passes, best, med,
                           f"Triton kernel re-reading a {small_bytes // MiB} MiB buffer (1/3 of L2) {passes} times "
                           f"with .cg loads (L1 bypassed), best of {runs}", peaks,
                           "the first pass comes from DRAM (the timer flushes L2 before each run): a lower bound"))
    del buf

    ceilings.append(_fma_entry(timer, facts, runs, quick, peaks))

    ceilings += _matmul_probes(timer, 4096 if quick else 8192, runs, cap, peaks, skipped)
    return {
        "device": facts, "ceilings": ceilings, "skipped": skipped,
        "timer": "egg_mcp.evaluation.timing.GpuTimer (CUDA events, L2 read-flushed before each run)",
        "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.perf_counter() - started, "quick": quick,
    }
