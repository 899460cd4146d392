"""The large-output tolerance check's common case, all within, in two fused passes on the GPU (runs in the judge).

compare_chunks.check's torch ops make about 25 passes over each chunk: at a 6 GiB softmax output they were ~0.1 s of
GPU time per trial, and the max |expected| pass ~35 ms more (py-spy, benchmarks/results/h200_2026-12-03/README.md).
These two Triton kernels read the outputs once per pass and keep only per-program partials: max |e| over finite
elements; then the bad elements' count and the largest error share, each element judged by
compare_chunks.tolerance's rule written out element-wise. Compiled without FMA contraction and divided with IEEE
rounding, so every limit and share rounds as torch's do. A bad element sends the caller to the torch path, which
builds the report: this pass only ever says "every element is within the tolerance" and how close.

Trusted only once it agreed: a judge uses the pass after `self_check` found it equal to the torch rule on the edge
cases (NaN, inf of either sign, overflow, zero limits, elements on the limit, half precision) on its own GPU; a
disagreement or a failure to build keeps that judge on the torch path.
"""

from __future__ import annotations

import math

import torch

BLOCK = 4096
"""Elements per program (16 KiB of fp32 per operand)."""
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""Judged in fp32, as compare._chunked does for every dtype but fp64 (whose outputs take the torch path)."""

_kernels: tuple | None = None
_usable: dict[str, bool] = {}  # device -> whether self_check passed there


def applies(g: torch.Tensor, e: torch.Tensor) -> bool:
    """Both on one CUDA device, contiguous, of one shape and a dtype judged in fp32."""
    return (g.is_cuda and e.is_cuda and g.device == e.device and g.shape == e.shape and g.dtype in DTYPES
            and e.dtype in DTYPES and g.is_contiguous() and e.is_contiguous() and e.numel() > 0)


def _build() -> tuple:
    """The kernels, defined at first use: the judge imports Triton only where it compares on a GPU."""
    import triton
    import triton.language as tl

    @triton.jit
    def max_abs_kernel(e_ptr, n, max_ptr, any_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        finite = (tl.abs(e) < float("inf")) & mask
        tl.store(max_ptr + tl.program_id(0), tl.max(tl.where(finite, tl.abs(e), 0.0), axis=0))
        tl.store(any_ptr + tl.program_id(0), tl.max(finite.to(tl.int32), axis=0))

    @triton.jit
    def check_kernel(g_ptr, e_ptr, n, atol, rtol, tiny, bad_ptr, share_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        g_fin = tl.abs(g) < float("inf")
        e_fin = tl.abs(e) < float("inf")
        both = g_fin & e_fin
        same_nonfinite = (~g_fin) & (~e_fin) & ((g == e) | ((g != g) & (e != e)))
        abs_err = tl.where(both, tl.abs(g - e), 0.0)
        limit = atol + rtol * tl.where(e_fin, tl.abs(e), 0.0)
        bad = ((abs_err > limit) | ((~both) & (~same_nonfinite))) & mask
        ratio = tl.math.div_rn(abs_err, tl.maximum(limit, tiny))
        share = tl.where(limit > 0, ratio, tl.where(abs_err > 0, float("inf"), 0.0))
        tl.store(bad_ptr + tl.program_id(0), tl.sum(bad.to(tl.int32), axis=0))
        tl.store(share_ptr + tl.program_id(0), tl.max(tl.where(mask, share, 0.0), axis=0))

    return max_abs_kernel, check_kernel


def _built() -> tuple:
    global _kernels
    _kernels = _kernels or _build()
    return _kernels


def _grid(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def max_abs_finite(e: torch.Tensor) -> float:
    """max |e| over finite elements; inf when none is finite (compare_chunks.max_abs_finite's convention)."""
    programs = _grid(e.numel())
    peak = torch.empty(programs, dtype=torch.float32, device=e.device)
    seen = torch.empty(programs, dtype=torch.int32, device=e.device)
    _built()[0][(programs,)](e, e.numel(), peak, seen, BLOCK=BLOCK, enable_fp_fusion=False)
    return float(peak.amax()) if bool(seen.amax()) else math.inf


def check(g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> tuple[int, float]:
    """(number of bad elements, the largest |g - e| / (atol + rtol |e|)) under compare_chunks.tolerance's rule."""
    programs = _grid(e.numel())
    bad = torch.empty(programs, dtype=torch.int32, device=e.device)
    share = torch.empty(programs, dtype=torch.float32, device=e.device)
    _built()[1][(programs,)](g, e, e.numel(), atol, rtol, torch.finfo(torch.float32).tiny, bad, share, BLOCK=BLOCK,
                             enable_fp_fusion=False)
    return int(bad.sum(dtype=torch.int64)), float(share.amax())


SPECIALS = ((math.nan, math.nan), (math.nan, 1.0), (1.0, math.nan), (math.inf, math.inf), (-math.inf, -math.inf),
            (math.inf, -math.inf), (1.0, math.inf), (math.inf, 1.0), (3e38, -3e38), (0.0, 0.0), (1e-30, 0.0))
"""(output, reference) pairs whose verdict hangs on the non-finite and overflow rules."""
TOLERANCES = ((1e-4, 1e-4), (0.0, 1e-3), (1e-2, 0.0), (0.0, 0.0))


def edge_cases(device: str | torch.device):
    """(got, expected, atol, rtol) that a faithful pass judges as compare_chunks.tolerance does: noise, elements on
    the limit and just past it, half precision, each with and without the special pairs, over a partial program."""
    gen = torch.Generator(device=device).manual_seed(0)
    n = 3 * BLOCK + 77
    e = torch.randn(n, generator=gen, device=device)
    for atol, rtol in TOLERANCES:
        limit = atol + rtol * e.abs()
        for g in (e + torch.randn(n, generator=gen, device=device) * 1e-4, e + limit, e + limit * 1.0001,
                  (e + torch.randn(n, generator=gen, device=device) * 1e-3).half()):
            for specials in ((), SPECIALS):
                gg, ee = g.clone(), e.clone()
                for i, (a, b) in enumerate(specials):
                    gg[37 * i], ee[37 * i] = a, b
                yield gg, ee, atol, rtol


def self_check(device: str | torch.device) -> bool:
    """Whether both kernels give the torch rule's exact numbers on every edge case (builds them on first use)."""
    from egg_mcp.analysis import error_share
    from egg_mcp.evaluation import compare_chunks

    for g, e, atol, rtol in edge_cases(device):
        rule = compare_chunks.tolerance(g.float(), e, atol, rtol)
        want = (int(rule.bad.sum()), float(error_share.share(rule.abs_err, rule.limit).amax()))
        if check(g, e, atol, rtol) != want:
            return False
        if max_abs_finite(e) != compare_chunks.max_abs_finite(e, torch.float32):
            return False
    return True


def usable(device: torch.device) -> bool:
    """The pass is used on `device` only after self_check passed there (once per judge); any failure: never."""
    key = str(device)
    if key not in _usable:
        try:
            _usable[key] = self_check(device)
        except Exception:  # noqa: BLE001 - no Triton, a build or launch failure: the torch path judges
            _usable[key] = False
    return _usable[key]


def distrust(device: torch.device) -> None:
    """A launch failed mid-verify: the torch path judges on `device` from now on."""
    _usable[str(device)] = False


def warm_up(device: str = "cuda") -> bool:
    """At a judge's start: build the kernels and run the self-check before the first trial needs them (keyed as the
    outputs' device will be: cuda:N)."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return usable(dev)
