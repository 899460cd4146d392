"""Dense matmul ceilings (cuBLAS per compute type; Triton 3xTF32, fp16x3 and bf16x3 GEMMs), each with why it sits
where it does.

Per compute type: a short shape sweep (the fastest shape is the ceiling: a too-small GEMM leaves the
tensor cores in its wave tail, and cuBLAS picks a different kernel per shape), then a ~0.5 s sustained
burst of the kept shape while a thread reads NVML (sampler.py): the SM clock, power and clocks-event
reasons of that window give the clock-adjusted peak (peak x clock under load / the clock the peak
assumes) and the reason label (explain.py). `calibrate --ncu` adds ncu's tensor-pipe busy share of the
kept GEMMs (ncu_gemm.py). The pure parts (`best_ms` aside) take injected callables and are CPU-tested.
"""

from __future__ import annotations

from typing import Any, Callable

from egg_mcp.calibration.explain import explain
from egg_mcp.calibration.sampler import sustained_burst

SIZES = (4096, 8192, 16384)
QUICK_SIZES = (2048, 4096)
FIXED_SIZE, QUICK_FIXED_SIZE = 8192, 4096
"""IEEE fp32 (~21 ms at 8192) and the Triton split GEMMs (3xTF32 ~31 ms) are not swept: 16384 would cost 8x."""
BURST_S, QUICK_BURST_S = 0.5, 0.15


def best_ms(timer, fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    """(best, median) ms of `runs` timed calls through the project's timer (L2 read-flushed each run)."""
    stats, _ = timer.measure(lambda _inputs: fn(), lambda _k: [], n_runs=runs, allow_graph=False)
    return float(stats.min_ms), float(stats.median_ms)


def entry(key: str, kind: str, amount: float, best: float, median: float, method: str,
          peaks: dict[str, dict[str, Any]], note: str = "") -> dict[str, Any]:
    """One ceiling row: the best run's rate beside the peak of the same unit (and the clock that peak assumes)."""
    value = amount / (best * 1e-3)
    peak = peaks.get(key) or {}
    return {
        "key": key, "unit": "bytes/s" if kind == "bytes" else "FLOP/s", "value": value,
        "best_ms": best, "median_ms": median, "amount": amount, "method": method,
        "peak": peak.get("value"), "peak_source": peak.get("source"),
        "ratio_to_peak": value / peak["value"] if peak.get("value") else None, "note": note,
        "peak_clock_mhz": peak.get("clock_mhz"), "peak_clock_source": peak.get("clock_source"),
    }


def sweep(sizes: tuple[int, ...], make: Callable[[int], tuple[Callable[[], Any], float, str]],
          measure: Callable[[Callable[[], Any]], tuple[float, float]]) -> dict[str, Any]:
    """Time make(size) -> (fn, flops, label) for every size; {"best": row with "fn", "shapes": rows}.
    A size that fails (out of memory, unsupported) is a row with its error; none left: ValueError."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        try:
            fn, flops, label = make(size)
            fn()  # compile / pick the algorithm outside the timing
            best, median = measure(fn)
        except Exception as exc:  # noqa: BLE001 - recorded per shape
            rows.append({"size": size, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        rows.append({"size": size, "label": label, "flops": flops, "best_ms": best, "median_ms": median,
                     "rate": flops / (best * 1e-3), "fn": fn})
    timed = [r for r in rows if "rate" in r]
    if not timed:
        raise ValueError("every shape failed: " + "; ".join(f"{r['size']}: {r['error']}" for r in rows))
    return {"best": max(timed, key=lambda r: r["rate"]),
            "shapes": [{k: v for k, v in r.items() if k != "fn"} for r in rows]}


def compute_ceiling(key: str, sizes: tuple[int, ...], make, measure, burst, peaks: dict[str, dict[str, Any]],
                    runs: int, note: str = "") -> dict[str, Any]:
    """Sweep, keep the fastest shape, run it as a sustained burst under the NVML sampler, explain the row.

    `burst(fn, seconds_per_launch)` -> sampler.sustained_burst's dict."""
    swept = sweep(sizes, make, measure)
    best = swept["best"]
    others = ", ".join(f"{r['size']}: {r['rate'] / 1e12:.1f}" if "rate" in r else f"{r['size']}: {r['error'][:60]}"
                       for r in swept["shapes"])
    row = entry(key, "flops", best["flops"], best["best_ms"], best["median_ms"],
                f"{best['label']}, best of {runs}" + (f"; shape sweep (TFLOP/s) {others}" if len(sizes) > 1 else ""),
                peaks, note)
    row["shapes"] = swept["shapes"]
    row["shape"] = best["size"]
    got = burst(best["fn"], best["best_ms"] * 1e-3)
    row["sustained"] = {"rate": best["flops"] / (got["ms_per_launch"] * 1e-3), "ms_per_launch": got["ms_per_launch"],
                        "launches": got["launches"],
                        "method": "back-to-back launches timed end to end (CUDA events), no L2 flush, "
                                  "NVML read every 5 ms by a background thread"}
    row["clock_under_load"] = got["load"]
    row.update(explain(row, row.get("peak_clock_mhz"), got["load"], row["sustained"]["rate"]))
    return row


def add_tensor_pipe(rows: list[dict[str, Any]], readings: dict[str, dict[str, Any]]) -> None:
    """Attach ncu's tensor-pipe readings and re-explain the rows with them."""
    for row in rows:
        reading = readings.get(row["key"])
        if reading is None:
            continue
        row["tensor_pipe"] = reading
        row.update(explain(row, row.get("peak_clock_mhz"), row.get("clock_under_load"),
                           (row.get("sustained") or {}).get("rate"), reading))


def _operands(size: int, device: str):
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    return (torch.randn(size, size, device=device, generator=gen),
            torch.randn(size, size, device=device, generator=gen))


def gemm_maker(key: str, device: str = "cuda") -> Callable[[int], tuple[Callable[[], Any], float, str]]:
    """make(size) -> (fn, FLOPs, label) for calibration GEMM `key` (mm_fp32_ieee, mm_tf32, mm_bf16, mm_fp16,
    mm_fp8, mm_tf32x3, mm_fp16x3, mm_bf16x3): the one GEMM both the measurement and `calibrate --ncu`
    (ncu_gemm.py) run. The split paths (fp16x3, bf16x3) are one Triton kernel (`_gemm_split_x3`, the half type a
    constexpr), so each is measured, not only derived from its base type's rate."""
    import torch
    import triton
    import triton.language as tl

    from egg_mcp.calibration.probe_kernels import _gemm_split_x3 as gemm_split_x3
    from egg_mcp.calibration.probe_kernels import _gemm_tf32x3 as gemm_tf32x3

    def make(size: int):
        a, b = _operands(size, device)
        flops = 2.0 * size ** 3
        if key in ("mm_fp32_ieee", "mm_tf32"):
            tf32 = key == "mm_tf32"

            def fn():
                previous = torch.backends.cuda.matmul.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = tf32
                try:
                    return torch.matmul(a, b)
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = previous
            label = "TF32 (allow_tf32=True)" if tf32 else "IEEE fp32 (allow_tf32=False)"
            return fn, flops, f"torch.matmul fp32 {size}^3, {label} (cuBLAS)"
        if key in ("mm_bf16", "mm_fp16"):
            dtype = torch.bfloat16 if key == "mm_bf16" else torch.float16
            a2, b2 = a.to(dtype), b.to(dtype)
            del a, b
            return (lambda: torch.matmul(a2, b2)), flops, f"torch.matmul {dtype} {size}^3 (cuBLAS)"
        if key == "mm_fp8":
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major B, as _scaled_mm requires
            del a, b
            one = torch.ones((), device=device, dtype=torch.float32)
            return ((lambda: torch._scaled_mm(  # pyright: ignore[reportPrivateImportUsage]  # private, no public form
                a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)),
                    flops, f"torch._scaled_mm e4m3 {size}^3, bf16 out")
        c = torch.empty_like(a)  # mm_tf32x3, mm_fp16x3, mm_bf16x3
        grid = (triton.cdiv(size, 128) * triton.cdiv(size, 128),)
        half = {"mm_fp16x3": tl.float16, "mm_bf16x3": tl.bfloat16}.get(key)

        def tf32x3():  # (Triton types kernel[grid] as the kernel's own signature, without the launch options)
            return gemm_tf32x3[grid](a, b, c, size, size, size, BM=128, BN=128, BK=32, GROUP=8,
                                     num_warps=8, num_stages=3)  # pyright: ignore[reportCallIssue]

        def split_x3():
            return gemm_split_x3[grid](a, b, c, size, size, size, BM=128, BN=128, BK=32, GROUP=8, HALF=half,
                                       num_warps=8, num_stages=3)  # pyright: ignore[reportCallIssue]
        fn = tf32x3 if half is None else split_x3
        fn()
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            ref = torch.matmul(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
        err = float((c - ref).abs().max() / ref.abs().max())
        del ref
        what = ("tl.dot(input_precision='tf32x3')" if half is None else
                f"{key[3:]} split (hi/lo {half} casts in registers, 3 tl.dot per K step)")
        return fn, flops, (f"Triton {what} GEMM {size}^3, 128x128x32 tiles, 8 warps, "
                           f"3 stages (max error vs IEEE fp32 {err:.2g} of max |C|)")
    return make


def matmul_probes(timer, runs: int, cap: tuple[int, ...], peaks, skipped: dict, *, quick: bool,
                  read: Callable[[], dict[str, Any]], device: str = "cuda", sizes: tuple[int, ...] | None = None,
                  fixed: int | None = None, measure=None, burst=None) -> list[dict]:
    """Every dense matmul ceiling this device supports (worker side; CUDA). `device`, `sizes`, `fixed`,
    `measure` and `burst` are for the CPU wiring test only."""
    import torch

    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    fixed = fixed or (QUICK_FIXED_SIZE if quick else FIXED_SIZE)
    busy_s = QUICK_BURST_S if quick else BURST_S
    measure = measure or (lambda fn: best_ms(timer, fn, runs))

    def cuda_burst(fn, seconds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def stop() -> float:
            end.record()
            torch.cuda.synchronize()  # releases the GIL: the sampler keeps reading while the GPU drains
            return start.elapsed_time(end)

        return sustained_burst(fn, seconds, read, start.record, stop, busy_s=busy_s)

    burst = burst or cuda_burst


    plan: list[tuple[str, tuple[int, ...], str]] = [
        ("mm_fp32_ieee", (fixed,), "cuBLAS SGEMM reaches ~75 % of the FMA peak"),
        ("mm_tf32", sizes, ""), ("mm_bf16", sizes, ""), ("mm_fp16", sizes, "")]
    if cap >= (8, 9) and hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
        plan.append(("mm_fp8", sizes, ""))
    else:
        skipped["mm_fp8"] = f"no fp8 tensor cores on sm_{cap[0]}{cap[1]} (needs sm_89+)"
    if cap >= (8, 0):
        for key, words in (("mm_tf32x3", "3xTF32"), ("mm_fp16x3", "fp16x3"), ("mm_bf16x3", "bf16x3")):
            plan.append((key, (fixed,), f"a plain Triton GEMM, not a tuned library: a lower bound of the {words} "
                                        "rate"))
    out = []
    for key, key_sizes, note in plan:
        try:
            out.append(compute_ceiling(key, key_sizes, gemm_maker(key, device), measure, burst, peaks, runs, note))
        except Exception as exc:  # noqa: BLE001 - reported, never invented
            skipped[key] = f"{key} failed: {type(exc).__name__}: {str(exc)[:200]}"
        if device == "cuda":
            torch.cuda.empty_cache()
    return out
