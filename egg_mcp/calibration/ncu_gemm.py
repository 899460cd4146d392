"""Optional (`egg-mcp calibrate --ncu`): how busy the tensor pipe is in each calibration GEMM, and how busy
the L2 slices' SM-read path is in the L2 probe's launch (its rate, ncu's peak for it, its return path's busy
share per slice), per ncu.

A second engine job after the calibration job, wrapped by ncu the way profile_ncu is (the engine's
`wrapper_argv`; ncu's start-up is most of the cost, so ONE job): `profile_gemms` builds each GEMM at the
shape the sweep kept, then the L2 probe's launch (probes.l2_launch), warms each up outside the profiled
range (Triton compiles there), then runs it once between cudaProfilerStart/Stop (`--profile-from-start
off`). `--clock-control none` leaves the clock as the calibration saw it; ncu's default cache control
flushes the caches before the launch, as the calibration's timer does. The profiled launches are
attributed to the GEMMs and then the L2 probe in order, one kernel each; any other count is reported as
an error, never guessed. No ncu: {"error": ...} per row. A metric this ncu lacks: an error on the rows
that need it only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

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
L2_RATE = "lts__t_bytes.sum.per_second"
L2_PCT = "lts__t_bytes.sum.pct_of_peak_sustained_elapsed"
"""Bytes through the L2 slices' tag stage per second, and as a share of ncu's own sustained peak for the same
counter over the launch's elapsed cycles: ncu's peak for lts__t_bytes is their quotient (not a datasheet figure)."""
DRAM_READ = "dram__bytes_read.sum"
"""What the L2 probe's launch read from DRAM (its first pass, after ncu's cache flush): the measured factor."""
SM_READ_RATE = "lts__t_sectors_srcunit_tex_op_read.sum.per_second"
SM_READ_PCT = "lts__t_sectors_srcunit_tex_op_read.sum.pct_of_peak_sustained_elapsed"
SM_READ_PCT_AVG = "lts__t_sectors_srcunit_tex_op_read.avg.pct_of_peak_sustained_elapsed"
"""Sectors the SMs read from the L2 slices (the probe's own traffic; lts__t_bytes also counts the partition
fabric's lookups, which an SM read cannot use). Peak in bytes/s = 32 B x rate / (pct / 100), at the launch's
L2 clock. ncu's `--set full` reports the .avg share only; .sum and .avg shares are the same ratio, so both are
asked for and either serves (an ncu that rejects one still gives the other)."""
SECTOR_BYTES = 32
RETURN_BUSY = "lts__lts2xbar_cycles_active.avg.pct_of_peak_sustained_elapsed"
RETURN_BUSY_MIN = "lts__lts2xbar_cycles_active.min.pct_of_peak_sustained_elapsed"
RETURN_BUSY_MAX = "lts__lts2xbar_cycles_active.max.pct_of_peak_sustained_elapsed"
"""How busy the L2 slices' return path to the crossbar (toward the SMs) was, mean and per-slice spread: the
busy share that the SM-read rate is compared with, as a GEMM's rate is with its pipe's."""
L2_CLOCK = "lts__cycles_elapsed.avg.per_second"
XBAR2L1_PCT = "l1tex__m_xbar2l1tex_read_bytes.sum.pct_of_peak_sustained_elapsed"
DRAM_PCT = "dram__bytes_read.sum.pct_of_peak_sustained_elapsed"
OTHER_UNITS = {"L2 tag stage, all sources (lts__t_bytes)": L2_PCT, "SM-side crossbar port (xbar2l1tex)": XBAR2L1_PCT,
               "DRAM read": DRAM_PCT}
"""The other units on the probe's data path, read in the same launch, so "the busiest unit" is a measurement."""
L2_KEY = "l2_read"
L2_KERNEL = "_l2_reread"
METRICS = (PIPE_ACTIVE, PIPE_ELAPSED, FMA_ACTIVE, FMA_ELAPSED, CLOCK, DURATION, L2_RATE, L2_PCT, DRAM_READ,
           SM_READ_RATE, SM_READ_PCT, SM_READ_PCT_AVG, RETURN_BUSY, RETURN_BUSY_MIN, RETURN_BUSY_MAX, L2_CLOCK,
           XBAR2L1_PCT, DRAM_PCT)
TARGET = "egg_mcp.calibration.ncu_gemm:profile_gemms"
TIMEOUT_S = 180.0
ATTEMPTS = 4
"""An ncu that rejects metrics may name one per run: up to 3 re-runs, each without the names rejected so far."""


def ncu_prefix(ncu: str, log_file: str, metrics: tuple[str, ...] = METRICS) -> list[str]:
    """The wrapper argv (ends with '--'): raw CSV in base units, the clock left alone, profiled range only."""
    return [ncu, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(metrics),
            "--clock-control", "none", "--profile-from-start", "off", "--log-file", log_file, "--"]


def _l2_maker(payload_l2: dict):
    """The L2 probe's launch as the calibration built it (same L2 size, SM count and `quick`)."""
    import torch

    from egg_mcp.calibration.probes import l2_launch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    fn, _, _, _ = l2_launch(props.multi_processor_count, int(getattr(props, "L2_cache_size", 0) or 0),
                            bool(payload_l2.get("quick", False)))
    return fn


def profile_gemms(payload: dict) -> dict:
    """Worker target (under ncu): each (key, size) GEMM, then the L2 probe when `payload["l2"]` is given, each
    warmed 3x (compiles, cuBLAS heuristics) outside the profiled range, then run once inside it."""
    import torch

    from egg_mcp.calibration.matmul import gemm_maker

    cudart = torch.cuda.cudart()
    assert cudart is not None  # set by the CUDA initialisation cudart() runs
    makers: list[tuple[str, Callable[[], Callable]]] = [
        (key, lambda key=key, size=size: gemm_maker(key)(size)[0]) for key, size in payload["gemms"]]
    if payload.get("l2") is not None:
        makers.append((L2_KEY, lambda: _l2_maker(payload["l2"])))
    done = []
    for key, make in makers:
        fn = make()  # the very launch the calibration measured
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        cudart.cudaProfilerStart()
        fn()
        torch.cuda.synchronize()
        cudart.cudaProfilerStop()
        del fn
        done.append(key)
    return {"profiled": done}


def attribute(text: str, keys: list[str]) -> dict[str, dict[str, Any]]:
    """{key: reading or {"error"}} from ncu's raw CSV; launches map to `keys` in order, one each. A GEMM's
    reading: {"pipe", "busy_pct", "busy_active_pct", "clock_mhz", "kernel_ms", "kernel", "method"}; the L2
    probe's (key "l2_read"): see `l2_reading`."""
    from egg_mcp.profiling.ncu_csv import parse_ncu_output

    log = parse_ncu_output(text)
    if len(log.launches) != len(keys):
        why = (f"ncu profiled {len(log.launches)} kernels for {len(keys)} launches ({', '.join(keys)}; one kernel "
               f"each expected); not attributed" + (f"; ncu: {' | '.join(log.errors)[:300]}" if log.errors else ""))
        return {k: {"error": why} for k in keys}
    return {key: (l2_reading(launch) if key == L2_KEY else _pipe_reading(key, launch))
            for key, launch in zip(keys, log.launches)}


def l2_reading(launch) -> dict[str, Any]:
    """ncu's reading of the L2 probe's launch: {"sm_read": {...} or absent, "sm_read_missing": why, "bytes_per_s",
    "pct_of_peak", "peak" (lts__t_bytes, context; absent when this ncu lacks them), "other_units", "dram_read_bytes",
    "clock_mhz", "kernel_ms", "kernel", "method"}. sm_read: {"bytes_per_s", "pct_of_peak", "peak" (32 B x
    sectors/s / share: ncu's sustained peak of the L2 slices' SM-read path at the launch's L2 clock), "busy_pct",
    "busy_min_pct", "busy_max_pct" (the slices' return path, lts2xbar), "l2_clock_mhz"}. {"error"} when neither
    peak is derivable or the kernel is not the probe's (the launches were then not in the order expected)."""
    from egg_mcp.profiling.ncu_csv import short_kernel_name

    kernel = short_kernel_name(launch.kernel_name)[:120]
    if L2_KERNEL not in launch.kernel_name:
        return {"error": f"the launch attributed to the L2 probe is {kernel}, not {L2_KERNEL}: not attributed",
                "kernel": kernel}
    clock, duration = launch.value(CLOCK), launch.value(DURATION)
    out: dict[str, Any] = {"dram_read_bytes": launch.value(DRAM_READ), "clock_mhz": clock / 1e6 if clock else None,
                           "kernel_ms": duration / 1e6 if duration else None, "kernel": kernel}
    sm, why_sm = _sm_read(launch, kernel)
    rate, pct = launch.value(L2_RATE), launch.value(L2_PCT)
    missing = [m for m, v in ((L2_RATE, rate), (L2_PCT, pct)) if v is None]
    if missing:
        why_t = f"ncu gave no {' or '.join(missing)} for {kernel} (a metric this ncu lacks or renamed)"
    elif rate <= 0 or pct <= 0:
        why_t = f"ncu read {rate:.3g} B/s, {pct:.3g} % of peak at L2 for {kernel}: no peak derivable"
    else:
        why_t = ""
        out.update(bytes_per_s=rate, pct_of_peak=pct, peak=rate / (pct / 100))
    if sm is None and why_t:
        return {"error": f"{why_sm}; {why_t}: no ncu L2 peak", "kernel": kernel}
    if sm is not None:
        out["sm_read"] = sm
        how = f"32 B x {SM_READ_RATE} / ({SM_READ_PCT} / 100); busy share {RETURN_BUSY} (.min/.max per slice)"
    else:
        out["sm_read_missing"] = why_sm
        how = f"{L2_RATE} / ({L2_PCT} / 100) (no SM-read path reading: {why_sm})"
    out["other_units"] = {name: launch.value(m) for name, m in OTHER_UNITS.items() if launch.value(m) is not None}
    out["method"] = f"ncu --clock-control none, one launch after 3 warm-ups: {how}"
    return out


def _sm_read(launch, kernel: str) -> tuple[dict[str, Any] | None, str]:
    """(the SM-read path's reading, "") or (None, why not): its peak needs the rate and the share; the busy
    share is optional (explain.py then falls back to the first-pass model)."""
    rate = launch.value(SM_READ_RATE)
    pct = launch.value(SM_READ_PCT)
    if pct is None:
        pct = launch.value(SM_READ_PCT_AVG)
    if rate is None or pct is None:
        lacks = [m for m, v in ((SM_READ_RATE, rate), (SM_READ_PCT, pct)) if v is None]
        return None, f"ncu gave no {' or '.join(lacks)} for {kernel} (an older ncu, or one that renamed it)"
    if rate <= 0 or pct <= 0:
        return None, f"ncu read {rate:.3g} SM-read sectors/s at {pct:.3g} % of peak for {kernel}: no peak derivable"
    l2_clock = launch.value(L2_CLOCK)
    return {"bytes_per_s": SECTOR_BYTES * rate, "pct_of_peak": pct, "peak": SECTOR_BYTES * rate / (pct / 100),
            "busy_pct": launch.value(RETURN_BUSY), "busy_min_pct": launch.value(RETURN_BUSY_MIN),
            "busy_max_pct": launch.value(RETURN_BUSY_MAX), "l2_clock_mhz": l2_clock / 1e6 if l2_clock else None}, ""


def _pipe_reading(key: str, launch) -> dict[str, Any]:
    """One GEMM's pipe busy share: the FMA pipe for cuBLAS's IEEE fp32 GEMM, the tensor pipe otherwise."""
    from egg_mcp.profiling.ncu_csv import short_kernel_name

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
        return {"error": f"ncu gave no {row['pipe']}-pipe metric for {row['kernel']}", "kernel": row["kernel"]}
    if row["busy_pct"] <= 0:
        row["error"] = (f"ncu read the {row['pipe']} pipe 0 % busy in {row['kernel']}: the pipe metric does not "
                        f"count this kernel's instructions")
    return row


async def read_tensor_pipe(evaluator, gemms: list[tuple[str, int]], timeout_s: float = TIMEOUT_S,
                           l2: dict | None = None) -> dict[str, dict[str, Any]]:
    """Run the ncu-wrapped job; {key: reading or {"error"}} for every GEMM, and for "l2_read" when `l2` (the
    L2 probe's build options, {"quick": ...}) is given: its launch is profiled last, in the same job."""
    from egg_mcp.profiling.ncu_command import find_ncu

    keys = [k for k, _ in gemms] + ([L2_KEY] if l2 is not None else [])
    ncu = find_ncu()
    if ncu is None:
        return {k: {"error": "ncu not found (set EGG_MCP_NCU or install Nsight Compute)"} for k in keys}
    from egg_mcp.profiling.ncu_csv import invalid_metrics, parse_ncu_output

    metrics = METRICS
    payload: dict[str, Any] = {"gemms": [list(g) for g in gemms], **({"l2": dict(l2)} if l2 is not None else {})}
    with tempfile.TemporaryDirectory(prefix="egg-calib-ncu-") as tmp:
        for attempt in range(1, ATTEMPTS + 1):
            log = Path(tmp) / f"ncu_{attempt}.csv"
            outcome = await evaluator.run_job(TARGET, payload, timeout_s=timeout_s,
                                              uses_gpu=True, wrapper_argv=ncu_prefix(ncu, str(log), metrics))
            text = log.read_text(errors="replace") if log.exists() else ""
            bad = invalid_metrics(text + (outcome.stderr_tail or ""), metrics)
            if attempt < ATTEMPTS and bad and not parse_ncu_output(text).launches:
                metrics = tuple(m for m in metrics if m not in bad)  # an older ncu: no elapsed rollup, no L2 metric
                continue
            break
        if not outcome.ok or not text:
            why = (outcome.error.message if outcome.error else
                   "timed out" if outcome.timed_out else f"worker exited {outcome.exit_code}")
            tail = (text or outcome.stderr_tail or "")[-300:]
            return {k: {"error": f"the ncu job failed: {why}; {tail}"} for k in keys}
        return attribute(text, keys)
