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
from typing import Any

import torch
import triton

from egg_mcp.calibration.explain import relabel
from egg_mcp.calibration.fma import fma_probe, fp32_fma_peak, sample_clock
from egg_mcp.calibration.matmul import best_ms as _best_ms
from egg_mcp.calibration.matmul import entry as _entry
from egg_mcp.calibration.matmul import matmul_probes
from egg_mcp.calibration.model_constants import constant_probes
from egg_mcp.calibration.peaks import FP32_LANES_PER_SM, device_peaks
from egg_mcp.calibration.probe_kernels import _gemm_tf32x3, _l2_reread, _read_reduce  # noqa: F401 - tests reach them here
from egg_mcp.calibration.sampler import nvml_reader

MiB = 1 << 20


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


def l2_launch(sm_count: int, l2_bytes: int, quick: bool, block: int = 4096):
    """(launch, bytes one launch reads, method, buffer) of the L2 probe: `_l2_reread` over a buffer of 1/3 of L2,
    re-read 8 (quick) or 16 times with .cg loads. The one launch both the calibration times and `calibrate
    --ncu` profiles (ncu_gemm.py), so ncu's L2 reading is of the very kernel the row measured."""
    l2_bytes = l2_bytes or 40 * MiB  # a device that reports no L2 size: the H100's
    small_bytes = max(4 * MiB, (l2_bytes // 3) // (block * 4) * (block * 4))
    buf = torch.ones(small_bytes // 4, device="cuda", dtype=torch.float32)
    n_blocks, passes = buf.numel() // block, 8 if quick else 16
    programs = min(n_blocks, sm_count * 4)
    per_prog = triton.cdiv(n_blocks, programs)
    out = torch.empty(programs, device="cuda", dtype=torch.float32)

    def fn():
        return _l2_reread[(programs,)](buf, out, n_blocks, PASSES=passes, BLOCK=block,
                                       num_warps=8)  # pyright: ignore[reportCallIssue]  # launch option (Triton's typing)

    method = (f"Triton kernel re-reading a {small_bytes // MiB} MiB buffer (1/3 of L2) {passes} times with .cg loads "
              f"(L1 bypassed)")
    return fn, 4.0 * block * per_prog * programs * passes, method, buf


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
    best, med = _best_ms(timer, lambda dst=dst, src=src: dst.copy_(src), runs)  # (bound now: both are deleted below)
    ceilings.append(_entry("dram_copy", "bytes", 2.0 * big, best, med,
                           f"torch.Tensor.copy_ {big // MiB} MiB -> {big // MiB} MiB (read+write bytes), "
                           f"best of {runs}",
                           peaks, "a copy reaches ~90 % of the pin bandwidth (read/write turnaround)"))
    del dst
    block, n = 4096, src.numel()
    programs = facts["sm_count"] * 8
    iters = triton.cdiv(n, block * programs)
    partial = torch.empty(programs, device="cuda", dtype=torch.float32)
    best, med = _best_ms(timer, lambda src=src: _read_reduce[(programs,)](src, partial, n, BLOCK=block, ITERS=iters,
                                                                  num_warps=8),  # pyright: ignore[reportCallIssue]
                           runs)  # (num_warps: a launch option, not in Triton's kernel[grid] type)
    ceilings.append(_entry("dram_read", "bytes", 4.0 * n, best, med,
                           f"Triton read-reduce kernel over {big // MiB} MiB fp32, {programs} programs, best of {runs}",
                           peaks))
    del src

    fn, amount, method, buf = l2_launch(facts["sm_count"], l2, quick)
    best, med = _best_ms(timer, fn, runs)
    ceilings.append(_entry("l2_read", "bytes", amount, best, med, f"{method}, best of {runs}", peaks,
                           "the first pass comes from DRAM (the timer flushes L2 before each run): a lower bound"))
    del fn, buf

    ceilings.append(_fma_entry(timer, facts, runs, quick, peaks))

    read = nvml_reader(getattr(timer.nvml, "nvml", None), timer.nvml.handle)
    matmuls = matmul_probes(timer, runs, cap, peaks, skipped, quick=quick, read=read)
    ceilings += matmuls
    relabel(ceilings)
    constants: list[dict[str, Any]] = []
    try:
        constants = constant_probes(timer, facts, runs, quick)
    except Exception as exc:  # noqa: BLE001 - the ceilings stand without them; the tiling model says it lacks them
        skipped["model_constants"] = f"{type(exc).__name__}: {exc}"[:300]
    return {
        "device": facts, "ceilings": ceilings, "constants": constants, "skipped": skipped,
        "timer": "egg_mcp.evaluation.timing.GpuTimer (CUDA events, L2 read-flushed before each run)",
        "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": time.perf_counter() - started, "quick": quick,
    }
