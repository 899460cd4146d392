"""Worker side of `calibrate`: the tiling cost model's time constants, measured on the GPU at hand.

The model's shape (its exponents and ratios, egg_mcp/tiling/costs.py) was fitted on one H200; these four
constants carry a GPU's time scale, so `calibrate` measures them instead of borrowing the H200's:
  * launch_overhead_s: what one more kernel launch adds to a call timed as verify times it (its GpuTimer),
    from an empty kernel launched 1 and 9 times per call;
  * program_dispatch_s: seconds per program per SM of starting programs that do almost nothing, the slope of
    a one-store kernel's time between two grid sizes, times the SM count;
  * warp_stream_bps: DRAM bytes per second one warp streams in a loop over a row, one program per SM summing its
    own row at 2, 4 and 8 warps (DRAM far from its roof: the warps' loads in flight bound the rate);
  * dram_latency_s: one dependent load's round trip to DRAM, one thread chasing a chain of indices through a
    buffer 4x the L2, a new cache line every step.
Each value comes from median times (the model prices a typical run; a ceiling takes the best run). Every
probe takes a `median_ms(fn)` callable, so the CPU interpreter can check the arithmetic with a fake clock."""

from __future__ import annotations

from typing import Any, Callable

import torch

from egg_mcp.calibration.probe_kernels import _chase, _noop, _one_store, _row_stream

MiB = 1 << 20
Clock = Callable[[Callable[[], Any]], float]


def _row(key: str, unit: str, value: float, method: str, times_ms: list[float]) -> dict[str, Any]:
    return {"key": key, "unit": unit, "value": value, "method": method, "times_ms": [round(t, 6) for t in times_ms]}


def launch_overhead(median_ms: Clock, device: str = "cuda") -> dict[str, Any]:
    buf = torch.empty(1, device=device)
    one = median_ms(lambda: _noop[(1,)](buf, 1))
    nine = median_ms(lambda: [_noop[(1,)](buf, 1) for _ in range(9)])
    return _row("launch_overhead_s", "s", max(nine - one, 0.0) / 8 * 1e-3,
                "an empty Triton kernel launched 9 and 1 times per timed call: (t9 - t1) / 8", [one, nine])


def program_dispatch(median_ms: Clock, sm_count: int, device: str = "cuda", per_sm: tuple[int, int] = (256, 2048)
                     ) -> dict[str, Any]:
    small, large = (sm_count * k for k in per_sm)
    out = torch.empty(large, device=device)
    t_small = median_ms(lambda: _one_store[(small,)](out, num_warps=1))  # pyright: ignore[reportCallIssue]
    t_large = median_ms(lambda: _one_store[(large,)](out, num_warps=1))  # pyright: ignore[reportCallIssue]
    per_program = max(t_large - t_small, 0.0) * 1e-3 / (large - small)
    return _row("program_dispatch_s", "s", per_program * sm_count,
                f"one-store programs, 1 warp: (t({large}) - t({small})) / {large - small} programs x {sm_count} SMs",
                [t_small, t_large])


def warp_stream(median_ms: Clock, sm_count: int, quick: bool, device: str = "cuda",
                warps: tuple[int, ...] = (2, 4, 8), row_len: int | None = None) -> dict[str, Any]:
    row_len = row_len or (1 << (17 if quick else 18))  # 0.5-1 MiB per row
    x = torch.ones(sm_count * row_len, device=device)
    out = torch.empty(sm_count, device=device)
    rates, times = [], []
    for w in warps:
        block = 128 * w  # 4 fp32 per thread: few registers
        t = median_ms(lambda w=w, block=block: _row_stream[(sm_count,)](x, out, row_len, BLOCK=block,
                                                                        num_warps=w))  # pyright: ignore[reportCallIssue]
        times.append(t)
        rates.append(4.0 * row_len / (t * 1e-3) / w)  # one program per SM: its row's bytes over its warps
    rates_sorted = sorted(rates)
    return _row("warp_stream_bps", "bytes/s per warp", rates_sorted[len(rates) // 2],
                f"one program per SM sums its own {row_len * 4 // 1024} KiB fp32 row in a loop, 4 values per thread, "
                f"at {', '.join(map(str, warps))} warps: median of the per-warp rates "
                f"({', '.join(f'{r / 1e9:.2f}' for r in rates)} GB/s)", times)


def dram_latency(median_ms: Clock, l2_bytes: int, quick: bool, device: str = "cuda", n: int | None = None,
                 steps: int | None = None) -> dict[str, Any]:
    n = n or max(4 * (l2_bytes or 60 * MiB), 256 * MiB) // 4
    steps = steps or (1024 if quick else 4096)
    stride = 4099 * 32  # a multiple of the 128-byte line (32 int32), odd beyond it: a long cycle of distinct lines
    chain = ((torch.arange(n, device=device, dtype=torch.int64) + stride) % n).to(torch.int32)
    out = torch.empty(1, device=device, dtype=torch.int32)
    t = median_ms(lambda: _chase[(1,)](chain, out, steps, num_warps=1))  # pyright: ignore[reportCallIssue]
    return _row("dram_latency_s", "s", t * 1e-3 / steps,
                f"one thread follows {steps} dependent loads through {n * 4 // MiB} MiB (stride {stride * 4} bytes, "
                "L2 flushed first): time / steps", [t])


def constant_probes(timer, facts: dict[str, Any], runs: int, quick: bool) -> list[dict[str, Any]]:
    """The four rows, timed with verify's timer (`GpuTimer.measure`, median of `runs`)."""

    def median_ms(fn: Callable[[], Any]) -> float:
        stats, _ = timer.measure(lambda _inputs: fn(), lambda _k: [], n_runs=runs)
        return float(stats.median_ms)

    sm_count = int(facts["sm_count"])
    return [launch_overhead(median_ms), program_dispatch(median_ms, sm_count),
            warp_stream(median_ms, sm_count, quick), dram_latency(median_ms, int(facts.get("l2_bytes") or 0), quick)]
