"""Cost model of a flash-attention kernel (one program per BLOCK_M queries of one batch x head, a loop over
the keys in BLOCK_N steps: S = Q K^T, online softmax, O += P V).

dims: BH (batch x heads), T (queries), S (keys), D (head dim as the kernel holds it, padded to a power of
two). Per key step: two dots of BLOCK_M x BLOCK_N x D at the kernel's compute type (`costs.dot_step_parts`:
tensor-core time and the tf32x3 split on CUDA cores), the softmax's exps on the SFUs, and the K and V tiles
loaded from L2. A causal kernel (a `tl.where` mask in the loop) visits only the keys up to its last query.

A key step is one dependent chain (split -> S = Q K^T -> softmax -> split -> O += P V): inside one program the
tensor-core and CUDA-core parts run one after the other, and only other programs resident on the SM fill the
idle unit. So the step costs max(tensor, CUDA-core, (tensor + CUDA-core) / programs per SM), and the programs
per SM come from the shared memory and registers the config really takes:
  * on sm_90 a BLOCK_M >= 64 tile at >= 4 warps runs wgmma, which reads Q from shared memory (its hi and lo
    parts under tf32x3): Triton 3.6 for sm_90 reported exactly stages x 2 x BLOCK_N x D + 2 x BLOCK_M x D fp32
    words on all 16 wgmma configs of the attention candidate
    (benchmarks/results/archive/tiling/compile_study_guidance.json); the mma.sync path keeps Q in registers;
  * registers: the O accumulator and the score tile, and under tf32x3 the hi and lo of the operands held in
    registers (P always, Q on the mma.sync path).
Found on the H200 (KernelBench 43, benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/guidance_6438ad0.json):
BLOCK_M=64 tiles (wgmma, 128-192 KB: one program per SM) ran 0.33-0.48 ms slower than BLOCK_M=32 ones (72-112 KB:
two per SM) where the old model, with one program's chain priced as if other programs overlapped it, predicted them
faster.
Feasibility: shared memory, and the accumulator + score registers per thread.
"""

from __future__ import annotations

import math

from egg_mcp.hardware import GpuSpec
from egg_mcp.tiling.tiling_types import CandidateSpace, ConfigEstimate

SFU_PER_SM_PER_CLK = 16  # exp2 throughput per SM per clock (Hopper-class MUFU)
SOFTMAX_OPS = 6  # CUDA-core instructions per score element (scale, mask, max, subtract, sum, rescale)


def attention_smem(bm: int, bn: int, d: int, stages: int, wgmma: bool, ctype: str) -> int:
    """Elements of shared memory one program takes, as Triton 3.6 allocates them for sm_90
    (benchmarks/results/archive/tiling/compile_study_guidance.json, its `ttg.local_alloc`s, tf32x3): Q is staged in
    shared memory, its hi and lo parts; wgmma multi-buffers K and V `stages` times; the mma.sync path buffers them
    stages - 1 times (one buffer at 1 stage) and stages P's hi and lo for the second dot. Exact on the 16 wgmma and
    the 4 pipelined mma.sync configs compiled there; at 1 stage Triton reuses buffers (48-64 KB vs 56-80 here).
    Other precisions (not compiled here) keep the earlier estimate: K/V stages and one copy of Q."""
    if ctype != "tf32x3":
        return stages * 2 * bn * d + bm * d
    if wgmma:
        return stages * 2 * bn * d + 2 * bm * d
    return (2 * (stages - 1) if stages > 1 else 1) * bn * d + 2 * (bm * d + bm * bn)


def mma_sync_operand_regs(bm: int, bn: int, d: int, ctype: str) -> float:
    """Registers per thread of the A operands on the mma.sync path (BLOCK_M < 64 on sm_90, or pre-Hopper). Triton 3.6
    lays the warps along N there (warpsPerCTA [1, num_warps] in every such attention config compiled for sm_90,
    benchmarks/results/archive/tiling/compile_study_guidance.json and attn_layouts_sm90.json), so each warp holds all
    BLOCK_M rows of Q (for S = Q K^T) and of P (for O += P V), whatever the warp count; tf32x3 holds hi and lo.
    Hence 32-row tf32x3 tiles take ~255 registers at 4 and at 8 warps alike (the compiler: 255 / 244), so 8 warps
    fit one program per SM where 4 fit two."""
    copies = 2 if ctype == "tf32x3" else 1
    return copies * (bm * d + bm * bn) / 32


def columns_redone(bn: int, w: int) -> float:
    """How many times S = Q K^T is computed when the mma.sync path splits BLOCK_N over the warps in slices narrower
    than an mma tile (8 columns). Triton 3.6 for sm_90: a 32x32 tile at 8 warps issues 1.5x the HMMAs of 4 warps
    (1152 vs 768 per program per key step: S twice, P V once), 32x64 at 8 warps the same 1536 as at 4
    (attn_layouts_sm90.json)."""
    return max(1.0, 8 * w / bn)


def attention(values: dict[str, int], k, space: CandidateSpace, gpu: GpuSpec, dims: dict[str, int], dtype: str,
              est: ConfigEstimate) -> list[tuple[str, str]]:
    from egg_mcp.tiling.costs import (
        DTYPE_BYTES,
        MAX_REGS,
        _ctas_per_sm,
        _persistent,
        compute_type,
        resident,
        time_scale,
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
    ctype = compute_type(dtype, space)
    wgmma = gpu.arch == "sm_90" and bm >= 64 and w >= 4
    est.smem_bytes = attention_smem(bm, bn, d, stages, wgmma, ctype) * nbytes
    if est.smem_bytes > gpu.smem_per_block_optin_bytes:
        fired.append(("smem", f"{tile}, D={d}, {k.names.get('stages', 'num_stages')}={stages} needs "
                              f"{est.smem_bytes / 1024:.0f} KB shared memory > "
                              f"{gpu.smem_per_block_optin_bytes / 1024:.0f} KB"))
    live = (bm * d + bm * bn) / (32 * w)  # output accumulator + the score tile
    if wgmma:
        split = 2 * bm * bn / (32 * w) if ctype == "tf32x3" else 0.0  # hi/lo of P
        regs = live + split + 40
    else:
        regs = live + mma_sync_operand_regs(bm, bn, d, ctype) + 40
    est.regs_per_thread = min(MAX_REGS, int(math.ceil(regs / 8) * 8))
    if live >= 256:
        fired.append(("spill", f"{tile}, D={d}, {k.names.get('warps', 'num_warps')}={w} keeps {live:.0f} fp32 "
                               "accumulator + score registers per thread (>= 256): spills"))
    c = _ctas_per_sm(gpu, 32 * w, est.regs_per_thread, est.smem_bytes)
    est.ctas_per_sm = c
    q_blocks = math.ceil(t / bm)
    programs = q_blocks * bh
    est.grid = [q_blocks, bh]
    est.waves = programs / (gpu.sm_count * max(c, 1))
    held = resident(c, _persistent(est, space, gpu, values, programs, c), gpu.sm_count)  # the programs an SM holds
    est.occupancy = held * w * 32 / gpu.max_threads_per_sm
    est.tail_waste = 1 - t / (q_blocks * bm)
    if fired:
        return fired

    steps = _key_steps(space, q_blocks, bm, bn, s_len)
    t_tensor, t_split = _dot_times(k, gpu, est, bm, bn, d, w, ctype, wgmma, name('S', bn))
    clock = (gpu.sm_clock_mhz or 1500) * 1e6
    t_softmax = bm * bn * (1 / (SFU_PER_SM_PER_CLK * clock) + SOFTMAX_OPS / (128 * clock))
    t_cuda = t_split + t_softmax
    t_chain = max(t_tensor, t_cuda, (t_tensor + t_cuda) / held)  # other programs fill the idle unit
    scale = time_scale(gpu)
    l2_sm = scale.l2_over_dram * gpu.dram_bytes_per_s / gpu.sm_count
    t_load = 2 * bn * d * nbytes / l2_sm
    pipeline = {1: 0.6, 2: 0.85}.get((stages - 1) * held + 1, 1.0)
    t_step = max(t_chain, t_load) / pipeline
    total_steps = bh * sum(steps)
    per_sm = max(total_steps / gpu.sm_count, max(steps))
    t_sm = per_sm * t_step + math.ceil(programs / gpu.sm_count) * scale.gemm_tile_fixed_s / held
    est.predicted_ms = (t_sm + scale.launch_overhead_s) * 1e3
    est.intensity = 4 * bm * bn * d / (2 * bn * d * nbytes)
    _bound_notes(est, t_tensor, t_softmax, t_cuda, c)
    return fired


def _key_steps(space: CandidateSpace, q_blocks: int, bm: int, bn: int, s_len: int) -> list[int]:
    """Key blocks each query block walks: all of them, or (causal: a tl.where mask) those up to its diagonal."""
    causal = any("where" in kn.tl_calls for kn in space.kernels)
    if causal:
        return [math.ceil(min((i + 1) * bm, s_len) / bn) for i in range(q_blocks)]
    return [math.ceil(s_len / bn)] * q_blocks


def _dot_times(k, gpu: GpuSpec, est: ConfigEstimate, bm: int, bn: int, d: int, w: int, ctype: str, wgmma: bool,
               key_block: str) -> tuple[float, float]:
    """Per key step: the two dots' tensor time (stretched when warps redo S = Q K^T) and their split-precision
    CUDA-core time."""
    from egg_mcp.tiling.costs import dot_step_parts, rows_redone

    t_tensor, t_split = (2 * x for x in dot_step_parts(bm, bn, d, w, ctype, gpu, est.notes, what="attention tile"))
    redo = rows_redone(bm, w, gpu)
    if redo > 1:  # warps along M (Triton's layout for chained dots): extra warpgroups redo S = Q K^T
        t_tensor *= (1 + redo) / 2
        est.notes.append(f"{k.names.get('warps', 'num_warps')}={w} covers {16 * w} rows of a {bm}-row tile: "
                         f"S = Q K^T is computed {16 * w // bm}x (fewer warps or a larger BLOCK_M)")
    redo_n = columns_redone(bn, w) if not wgmma else 1.0
    if redo_n > 1:  # warps along N on the mma.sync path: fewer than 8 score columns per warp
        t_tensor *= (1 + redo_n) / 2
        est.notes.append(f"{k.names.get('warps', 'num_warps')}={w} splits {key_block} into {bn // w}-column "
                         f"slices (an mma.sync tile is 8 wide): S = Q K^T is computed {redo_n:.0f}x (fewer warps or a "
                         "larger BLOCK_N)")
    return t_tensor, t_split


def _bound_notes(est: ConfigEstimate, t_tensor: float, t_softmax: float, t_cuda: float, ctas: int) -> None:
    """Say when the exps outweigh the dots, or when one program per SM serialises dots and CUDA-core work."""
    if t_softmax > t_tensor:
        est.notes.append(f"softmax-bound: exps {t_softmax * 1e9:.0f} ns > dots {t_tensor * 1e9:.0f} ns per key step")
    if ctas == 1 and t_cuda > 0.25 * t_tensor:
        est.notes.append(f"one program per SM ({est.smem_bytes / 1024:.0f} KB shared memory, {est.regs_per_thread} "
                         f"registers): its dots ({t_tensor * 1e9:.0f} ns) and CUDA-core work ({t_cuda * 1e9:.0f} ns) "
                         "per key step run one after the other; a smaller tile lets two programs overlap them")
