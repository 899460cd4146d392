"""Cost model of a flash-attention kernel (one program per BLOCK_M queries of one batch x head, a loop over
the keys in BLOCK_N steps: S = Q K^T, online softmax, O += P V).

dims: BH (batch x heads), T (queries), S (keys), D (head dim as the kernel holds it, padded to a power of
two). Per key step: two dots of BLOCK_M x BLOCK_N x D at the kernel's compute type (`model.dot_step_s`,
with the tf32x3 split and register pressure), the softmax's exps on the SFUs, and the K and V tiles
loaded from L2. A causal kernel (a `tl.where` mask in the loop and the source saying "causal") visits
only the keys up to its last query. Feasibility: shared memory for the K/V stages and Q, and the
accumulator + score registers per thread.
"""

from __future__ import annotations

import math

from egg_mcp.hardware import GpuSpec
from egg_mcp.tiling.models import CandidateSpace, ConfigEstimate

SFU_PER_SM_PER_CLK = 16  # exp2 throughput per SM per clock (Hopper-class MUFU)
SOFTMAX_OPS = 6  # CUDA-core instructions per score element (scale, mask, max, subtract, sum, rescale)


def attention(values: dict[str, int], k, space: CandidateSpace, gpu: GpuSpec, dims: dict[str, int], dtype: str,
              est: ConfigEstimate) -> list[tuple[str, str]]:
    from egg_mcp.tiling.costs import (
        DTYPE_BYTES, GEMM_TILE_FIXED_S, L2_OVER_DRAM, LAUNCH_OVERHEAD_S, MAX_REGS, _ctas_per_sm, _persistent,
        compute_type, dot_step_s,
    )

    fired: list[tuple[str, str]] = []
    bh, t, s_len, d = dims.get("BH", 1), dims["T"], dims.get("S", dims["T"]), dims["D"]
    bm, bn = k.blocks.get("T", 64), k.blocks.get("S", 64)
    d = max(d, k.blocks.get("D", d))
    nbytes = DTYPE_BYTES[dtype]
    w, stages = k.warps, max(1, k.stages)
    name = lambda ax, v: f"{k.block_params.get(ax, 'BLOCK_' + ('M' if ax == 'T' else 'N'))}={v}"  # noqa: E731
    tile = f"{name('T', bm)}, {name('S', bn)}"
    if min(bm, bn) < 16:
        fired.append(("dot_min", f"{tile}: tl.dot needs every tile dimension >= 16"))
    est.smem_bytes = (stages * 2 * bn * d + bm * d) * nbytes
    if est.smem_bytes > gpu.smem_per_block_optin_bytes:
        fired.append(("smem", f"{tile}, D={d}, {k.names.get('stages', 'num_stages')}={stages} needs "
                              f"{est.smem_bytes / 1024:.0f} KB shared memory > {gpu.smem_per_block_optin_bytes / 1024:.0f} KB"))
    live = (bm * d + bm * bn) / (32 * w)  # output accumulator + the score tile
    est.regs_per_thread = min(MAX_REGS, int(math.ceil((live + 40) / 8) * 8))
    if live >= 256:
        fired.append(("spill", f"{tile}, D={d}, {k.names.get('warps', 'num_warps')}={w} keeps {live:.0f} fp32 "
                               "accumulator + score registers per thread (>= 256): spills"))
    c = _ctas_per_sm(gpu, 32 * w, est.regs_per_thread, est.smem_bytes)
    est.ctas_per_sm = c
    est.occupancy = c * w * 32 / gpu.max_threads_per_sm
    q_blocks = math.ceil(t / bm)
    programs = q_blocks * bh
    est.grid = [q_blocks, bh]
    est.waves = programs / (gpu.sm_count * max(c, 1))
    _persistent(est, space, gpu, values, programs, c)
    est.tail_waste = 1 - t / (q_blocks * bm)
    if fired:
        return fired

    causal = any("where" in kn.tl_calls for kn in space.kernels)
    if causal:
        steps = [math.ceil(min((i + 1) * bm, s_len) / bn) for i in range(q_blocks)]
    else:
        steps = [math.ceil(s_len / bn)] * q_blocks
    ctype = compute_type(dtype, space)
    t_dots = 2 * dot_step_s(bm, bn, d, w, ctype, gpu, dtype, est.notes, what="attention tile")
    clock = (gpu.sm_clock_mhz or 1500) * 1e6
    t_softmax = bm * bn * (1 / (SFU_PER_SM_PER_CLK * clock) + SOFTMAX_OPS / (128 * clock))
    l2_sm = L2_OVER_DRAM * gpu.dram_bytes_per_s / gpu.sm_count
    t_load = 2 * bn * d * nbytes / l2_sm
    pipeline = {1: 0.6, 2: 0.85}.get((stages - 1) * max(c, 1) + 1, 1.0)
    t_step = max(t_dots + t_softmax, t_load) / pipeline
    total_steps = bh * sum(steps)
    per_sm = max(total_steps / gpu.sm_count, max(steps))
    t_sm = per_sm * t_step + math.ceil(programs / gpu.sm_count) * GEMM_TILE_FIXED_S / max(c, 1)
    est.predicted_ms = (t_sm + LAUNCH_OVERHEAD_S) * 1e3
    est.intensity = 4 * bm * bn * d / (2 * bn * d * nbytes)
    if t_softmax > t_dots:
        est.notes.append(f"softmax-bound: exps {t_softmax * 1e9:.0f} ns > dots {t_dots * 1e9:.0f} ns per key step")
    return fired
