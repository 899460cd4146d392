"""The fp32 FMA probe: peak FFMA issue rate, and the SM clock it ran at.

The first probe measured 66 % of the 1980 MHz peak on the H200. Its sm_90 SASS (nvdisasm) was already
a clean FFMA stream (each unrolled loop step: 256 FFMA, 3 loop instructions, b/c from the operand
reuse cache), so the instruction mix does not explain it; the suspects are the SM clock while the FMA
kernel runs (the lead's 100 ms nvidia-smi samples cannot see a ~10 ms probe) and the grid (4 programs
per SM relies on the block scheduler spreading them evenly; an SM given 5 takes 1.25x as long). So:
- every FMA is `tl.fma(a, b, c)`: one FFMA whatever fp-fusion default Triton compiles with (Triton
  3.9 warns that the default becomes "no fusion" in 3.10, which would split `a * b + c` in two);
- 8 independent chains per element, several elements per thread (8-64 chains per thread);
- `b` and `c` are runtime scalar arguments, so nothing folds (tests/test_calibration_kernels.py
  compiles the kernel for sm_90 and counts the FFMAs in the loop);
- a few grid layouts (programs per SM x warps x elements), the best one is the ceiling, every one is
  recorded;
- the SM clock is sampled through NVML while a ~0.2 s batch of the best layout runs, so the report
  states the peak at that clock beside the one at the maximum clock.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import triton
import triton.language as tl

CHAINS = 8
B_SCALE = 0.999
"""a <- a * 0.999 + c converges (to c / 0.001): no overflow or denormals however long it runs."""
C_ADD = 1e-3


@triton.jit
def fma_chains(out_ptr, b, c, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """8 independent FMA chains per element, ITERS steps each (2 FLOP per FMA); b, c runtime scalars."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = offs.to(tl.float32) * 1e-9
    a0 = x + 0.1
    a1 = x + 0.2
    a2 = x + 0.3
    a3 = x + 0.4
    a4 = x + 0.5
    a5 = x + 0.6
    a6 = x + 0.7
    a7 = x + 0.8
    for _ in range(ITERS):
        a0 = tl.fma(a0, b, c)
        a1 = tl.fma(a1, b, c)
        a2 = tl.fma(a2, b, c)
        a3 = tl.fma(a3, b, c)
        a4 = tl.fma(a4, b, c)
        a5 = tl.fma(a5, b, c)
        a6 = tl.fma(a6, b, c)
        a7 = tl.fma(a7, b, c)
    tl.store(out_ptr + offs, a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7)


@dataclass(frozen=True)
class Layout:
    """One grid of the FMA probe: `per_sm` programs per SM of `warps` warps, `block` elements each."""

    per_sm: int
    warps: int
    block: int
    iters: int

    def programs(self, sm_count: int) -> int:
        return sm_count * self.per_sm

    def flops(self, sm_count: int) -> float:
        return 2.0 * CHAINS * self.iters * self.programs(sm_count) * self.block

    def label(self) -> str:
        return (f"{self.per_sm}/SM x {self.warps} warps x {self.block} elements "
                f"({self.block // (32 * self.warps) * CHAINS} chains/thread) x {self.iters} FMAs")


LAYOUTS = (
    Layout(per_sm=4, warps=4, block=1024, iters=4096),  # the first probe's grid (scalar b, c now)
    Layout(per_sm=32, warps=4, block=512, iters=1024),  # many short programs: self-balancing
    Layout(per_sm=16, warps=8, block=1024, iters=1024),
    Layout(per_sm=64, warps=4, block=128, iters=2048),  # one element per thread: high occupancy, 8 chains
)
"""Each does the same FLOPs per SM (~35 GFLOP on 132 SMs, ~0.55 ms at the H200's peak)."""


def fp32_fma_peak(sm_count: int, lanes: int, clock_mhz: float) -> float:
    """FLOP/s of `sm_count` SMs x `lanes` FP32 FMA lanes x 2 FLOP at `clock_mhz`."""
    return sm_count * lanes * 2 * clock_mhz * 1e6


def sample_clock(launch: Callable[[], Any], seconds_per_launch: float, read: Callable[[], dict[str, Any]],
                 synchronize: Callable[[], Any], busy_s: float = 0.2, max_launches: int = 2000
                 ) -> dict[str, Any] | None:
    """Queue ~`busy_s` of back-to-back launches, read NVML (`read`: the timer's NvmlProbe.read) every
    ~10 ms while they run, then wait. None when NVML gives no clock."""
    n = max(1, min(max_launches, int(busy_s / max(seconds_per_launch, 1e-6))))
    for _ in range(n):
        launch()
    time.sleep(0.02)  # let the clock settle under load
    samples: list[int] = []
    reasons: set[str] = set()
    deadline = time.monotonic() + max(0.05, busy_s * 0.7)
    while time.monotonic() < deadline:
        got = read()
        if got.get("sm_clock_mhz"):
            samples.append(int(got["sm_clock_mhz"]))
        reasons |= set(got.get("throttle_reasons") or ())
        time.sleep(0.01)
    synchronize()
    if not samples:
        return None
    return {"median_mhz": statistics.median(samples), "min_mhz": min(samples), "max_mhz": max(samples),
            "samples": len(samples), "launches": n, "throttle_reasons": sorted(reasons)}


def fma_probe(measure: Callable[[Callable[[], Any]], tuple[float, float]], sm_count: int, *, quick: bool,
              device: str = "cuda", layouts: tuple[Layout, ...] = LAYOUTS) -> dict[str, Any]:
    """Time every layout with `measure(fn) -> (best_ms, median_ms)`; the best FLOP rate is the ceiling.

    Returns {"best": {layout, flops, best_ms, median_ms, rate}, "layouts": [...all...], "launch": fn}."""
    import torch

    rows = []
    for layout in layouts:
        if quick:
            layout = Layout(layout.per_sm, layout.warps, layout.block, max(1, layout.iters // 2))
        programs = layout.programs(sm_count)
        out = torch.empty(programs * layout.block, device=device, dtype=torch.float32)

        def launch(layout=layout, programs=programs, out=out):
            fma_chains[(programs,)](out, B_SCALE, C_ADD, ITERS=layout.iters, BLOCK=layout.block,
                                    num_warps=layout.warps)  # pyright: ignore[reportCallIssue]  # launch option (Triton's typing)

        launch()  # compile outside the timing
        best_ms, median_ms = measure(launch)
        flops = layout.flops(sm_count)
        rows.append({"layout": layout.label(), "flops": flops, "best_ms": best_ms, "median_ms": median_ms,
                     "rate": flops / (best_ms * 1e-3), "launch": launch})
    best = max(rows, key=lambda r: r["rate"])
    return {"best": best, "layouts": [{k: v for k, v in r.items() if k != "launch"} for r in rows]}
