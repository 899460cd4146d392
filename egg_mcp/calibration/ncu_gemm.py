"""Optional (`egg-mcp calibrate --ncu`): how busy the tensor pipe is in each calibration GEMM, per ncu.

A second engine job after the calibration job, wrapped by ncu the way profile_ncu is (the engine's
`wrapper_argv`; ncu's start-up is most of the cost, so one job for all GEMMs): `profile_gemms` builds
each GEMM at the shape the sweep kept, warms it up outside the profiled range, then runs it once
between cudaProfilerStart/Stop (`--profile-from-start off`). `--clock-control none` leaves the clock
as the calibration saw it. The profiled launches are attributed to the GEMMs in order, one kernel
each; any other count is reported as an error, never guessed. No ncu: {"error": ...} per GEMM.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

PIPE_ACTIVE = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
PIPE_ELAPSED = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
"""ncu 2025.3 on the H200 has no separate wgmma cycles metric; the hmma pipe counts HMMA and HGMMA alike
(profiling/metrics.py). `elapsed` includes SMs idle in the wave tail, so it is the one that predicts rate."""
FMA_ACTIVE = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
FMA_ELAPSED = "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_elapsed"
"""cuBLAS's IEEE fp32 GEMM (mm_fp32_ieee) issues FFMA: its pipe is the FMA pipe, not the tensor pipe."""
FMA_KEYS = ("mm_fp32_ieee",)
CLOCK = "sm__cycles_elapsed.avg.per_second"
DURATION = "gpu__time_duration.sum"
METRICS = (PIPE_ACTIVE, PIPE_ELAPSED, FMA_ACTIVE, FMA_ELAPSED, CLOCK, DURATION)
TARGET = "egg_mcp.calibration.ncu_gemm:profile_gemms"
TIMEOUT_S = 180.0


def ncu_prefix(ncu: str, log_file: str, metrics: tuple[str, ...] = METRICS) -> list[str]:
    """The wrapper argv (ends with '--'): raw CSV in base units, the clock left alone, profiled range only."""
    return [ncu, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(metrics),
            "--clock-control", "none", "--profile-from-start", "off", "--log-file", log_file, "--"]


def profile_gemms(payload: dict) -> dict:
    """Worker target (under ncu): each (key, size) GEMM warmed 3x, then once inside the profiled range."""
    import torch

    from egg_mcp.calibration.matmul import gemm_maker

    cudart = torch.cuda.cudart()
    done = []
    for key, size in payload["gemms"]:
        fn, _, _ = gemm_maker(key)(size)  # the very GEMM the calibration measured at that shape
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        cudart.cudaProfilerStart()
        fn()
        torch.cuda.synchronize()
        cudart.cudaProfilerStop()
        done.append(key)
    return {"profiled": done}


def attribute(text: str, keys: list[str]) -> dict[str, dict[str, Any]]:
    """{key: {"busy_pct", "busy_active_pct", "clock_mhz", "kernel_ms", "kernel", "method"} or {"error"}} from
    ncu's raw CSV; launches map to `keys` in order, one each."""
    from egg_mcp.profiling.ncu_csv import parse_ncu_output, short_kernel_name

    log = parse_ncu_output(text)
    if len(log.launches) != len(keys):
        why = (f"ncu profiled {len(log.launches)} kernels for {len(keys)} GEMMs (one each expected); not attributed"
               + (f"; ncu: {' | '.join(log.errors)[:300]}" if log.errors else ""))
        return {k: {"error": why} for k in keys}
    out: dict[str, dict[str, Any]] = {}
    for key, launch in zip(keys, log.launches):
        clock, duration = launch.value(CLOCK), launch.value(DURATION)
        fma = key in FMA_KEYS
        names = (FMA_ELAPSED, FMA_ACTIVE) if fma else (PIPE_ELAPSED, PIPE_ACTIVE)
        elapsed, active = launch.value(names[0]), launch.value(names[1])
        metric = names[0] if elapsed is not None else names[1]
        row: dict[str, Any] = {
            "pipe": "FMA" if fma else "tensor",
            "busy_pct": elapsed if elapsed is not None else active, "busy_active_pct": active,
            "clock_mhz": clock / 1e6 if clock else None, "kernel_ms": duration / 1e6 if duration else None,
            "kernel": short_kernel_name(launch.kernel_name)[:120],
            "method": f"ncu --clock-control none: {metric} of one launch after 3 warm-ups"}
        if row["busy_pct"] is None:
            row = {"error": f"ncu gave no {row['pipe']}-pipe metric for {row['kernel']}", "kernel": row["kernel"]}
        elif row["busy_pct"] <= 0:
            row["error"] = (f"ncu read the {row['pipe']} pipe 0 % busy in {row['kernel']}: the pipe metric does not "
                            f"count this kernel's instructions")
        out[key] = row
    return out


async def read_tensor_pipe(evaluator, gemms: list[tuple[str, int]], timeout_s: float = TIMEOUT_S
                           ) -> dict[str, dict[str, Any]]:
    """Run the ncu-wrapped job; {key: reading or {"error"}} for every GEMM."""
    from egg_mcp.profiling.runner import find_ncu

    keys = [k for k, _ in gemms]
    ncu = find_ncu()
    if ncu is None:
        return {k: {"error": "ncu not found (set EGG_MCP_NCU or install Nsight Compute)"} for k in keys}
    from egg_mcp.profiling.ncu_csv import invalid_metrics, parse_ncu_output

    metrics = METRICS
    with tempfile.TemporaryDirectory(prefix="egg-calib-ncu-") as tmp:
        for attempt in (1, 2):
            log = Path(tmp) / f"ncu_{attempt}.csv"
            outcome = await evaluator.run_job(TARGET, {"gemms": [list(g) for g in gemms]}, timeout_s=timeout_s,
                                              uses_gpu=True, wrapper_argv=ncu_prefix(ncu, str(log), metrics))
            text = log.read_text(errors="replace") if log.exists() else ""
            bad = invalid_metrics(text + (outcome.stderr_tail or ""), metrics)
            if attempt == 1 and bad and not parse_ncu_output(text).launches:
                metrics = tuple(m for m in metrics if m not in bad)  # an older ncu without the elapsed rollup
                continue
            break
        if not outcome.ok or not text:
            why = (outcome.error.message if outcome.error else
                   "timed out" if outcome.timed_out else f"worker exited {outcome.exit_code}")
            tail = (text or outcome.stderr_tail or "")[-300:]
            return {k: {"error": f"the ncu job failed: {why}; {tail}"} for k in keys}
        return attribute(text, keys)
