"""The tiling cost model's shared constants and per-step costs (a leaf: model.py, attention.py and stream.py
all price with these, so none of them imports another)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from egg_mcp.hardware import GpuSpec
from egg_mcp.tiling.space import persistent_programs
from egg_mcp.tiling.tiling_types import CandidateSpace, ConfigEstimate

KB = 1024
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# Model constants. Those in seconds or bytes/s set a GPU's time scale: `time_scale(gpu)` takes them from `calibrate` on
# the GPU at hand (calibration/model_constants.py), or scales the latencies fitted on the H200 by its SM clock, and
# says which. The dimensionless ones (exponents, ratios, register fits) are the model's shape.
LAUNCH_OVERHEAD_S = 3e-6  # the H200's: ~3 us per launch (do_bench at ~5 us kernels)
L2_OVER_DRAM = 2.5  # L2 bandwidth / DRAM bandwidth (Hopper-class parts: ~2.5-3x)
DRAM_LATENCY_S = 1.0e-6
"""Loaded DRAM round trip charged once per program that covers its row in one block (an assumption, not measured
here: published unloaded HBM latencies on Hopper are a few hundred ns). A loop over the row is not priced by it:
charged per trip it predicted rowsum_a's small-block loops 2x slower than they run; WARP_STREAM_BPS prices those
(benchmarks/results/archive/tiling/README.md)."""
SM_MAX_SHARE = 4.0  # one SM can pull at most this multiple of its fair share of DRAM bandwidth
ACC_SPILL_REGS = 256  # accumulator registers per thread at which every H200 config spilled
MAX_REGS = 255
GEMM_TILE_FIXED_S = 1.0e-6  # pipeline fill + epilogue latency per output tile (at FIT_CLOCK_MHZ)
PROGRAM_FIXED_S = 0.5e-6  # launch of one program (CTA) + index math (at FIT_CLOCK_MHZ)
REDUCTION_STEP_S = 0.1e-6  # one cross-warp reduction level (shared memory + barrier) (at FIT_CLOCK_MHZ)
FIT_CLOCK_MHZ = 1980  # the H200's max SM clock, where the three latencies above were chosen: they scale as cycles
WARP_STREAM_BPS = 2.78e9
"""DRAM bytes per second one resident warp streams in a loop over a row (rowsum_a, fp32 8192x8192 on the H200:
the median over its 33 unspilled configs with <= 16 resident warps per SM of per-SM bytes / measured time /
resident warps, the warps counted from registers compiled for sm_90; `per_warp_rate_gbs` of
benchmarks/results/archive/tiling/compile_study_rowsum_a.json, from tiling_bench_2026-11-30_layernorm_a_rowsum_a.json).
Measured on one case and one GPU: in-sample for rowsum_a, held out for layernorm_a, rowsum_b and the softmaxes
(rank_replay_4a3dfb2.md)."""
OVERLAP_P = 3.0  # exponent of the smooth max of bandwidth and latency time (inf = perfect overlap)
WARP_ILP = (52.6, 0.67, 3.5)
"""(registers, exponent, cap): a looping warp streams WARP_STREAM_BPS x min(cap, max(1, regs / registers)) ** exponent.
A thread holding more registers keeps more loads in flight: in the H200 row_sum sweep (one program per SM, so no DRAM
contention) warps of <= 48-register configs streamed 2.0-2.5 GB/s whatever their bytes per trip, those at 96-128
registers 3.5-6.8 (benchmarks/results/archive/tiling/probes_2026-12-01_4bb37b3-2f0d984/stream_sweep_events.json, fit by
fit_sweep.py there over its 560 unspilled points; the other fitted constants of that fit are not used here)."""
LOOP_TRIP_OPS = 5
"""Issue slots every thread spends per trip of a loop over the row (address, mask, compare, branch), whatever its
elements: it is what makes many warps over a small block slow (layernorm_a bf16: [1,256,8] 72 us against [1,256,1] 39 us
in the exhaustive run of probes_2026-12-01_4bb37b3-2f0d984/). Chosen on the replays of the b4a4599 and 42095a3
tiling_search runs (A / B), not measured per instruction (probes_2026-12-01_4bb37b3-2f0d984/ablation.md: 0 lowers
layernorm_a to 0.71 / 0.71 on runs A / B)."""
OCC_REGS = (4.0, 1.1, 4.0, 32)
"""(base, per accumulator element, per row a thread covers, floor): the registers a looping row program compiles to, for
occupancy. Fit to the registers ptxas gave the row_sum sweep's 76 configs on the H200
(probes_2026-12-01_4bb37b3-2f0d984/regfit9.py): the resident CTAs per SM it implies match the compiled ones on 63 of 76
configs, the older 24 + 1.4 per element on 31; relative RMS error 12 %, median 4 %. The per-element term scales with the
kind's live values (_LIVE_PER_ELEMENT_LOOPING / 1.4, the row sum's)."""
L2_REUSE = (0.713, 5.4, 0.89, 0.013)
"""(half-point as a fraction of the L2, steepness, cost of a miss, cost of a hit): a second pass over a row costs
cost(miss) x miss + cost(hit) x (1 - miss) of the first pass, miss = x / (1 + x), x = (working set / (half x L2)) **
steepness, working set = resident programs x row bytes. Measured on the H200
(probes_2026-12-01_4bb37b3-2f0d984/l2_reuse.py -> l2_reuse.json: a row summed twice, 512 MB of rows, 2 KB-512 KB rows):
the second pass added 0.2-0.3 % at 4-8 MB, 6 % at 25 MB, 19 % at 33 MB, 61 % at 50 MB, 83 % at 66 MB, 86-89 % beyond;
least-squares fit. It replaces a hard step at the whole L2 (60 MB) with hits charged 1 / L2_OVER_DRAM = 0.4 of a DRAM
read."""
STREAM_KNEE_P = 1.64
"""Exponent of the smooth max of a looping program's DRAM-share time and its warps' streaming time (OVERLAP_P = 3
elsewhere): the soft knee the H200 row_sum sweep shows as resident warps approach the DRAM roof (fit_sweep.py,
p = 1.64 over 560 configs at 64-4224 programs)."""
REG_SPREAD = 0.10
"""Occupancy steps at register thresholds that the estimate above misses by ~10 % (its RMS error): a looping config's
time is the mean over its register estimate x (1 - REG_SPREAD, 1, 1 + REG_SPREAD), not a bet on one side of a step
(probes_2026-12-01_4bb37b3-2f0d984/ablation.md: without it rowsum_a ranks 0.65 / 0.61 on runs A / B, with it 0.88 /
0.85)."""

_BASE_OPS = {"softmax": 10, "norm": 12, "reduction": 3, "elementwise": 6}  # instructions per element
_TRANSCENDENTAL = {"exp", "exp2", "log", "log2", "erf", "tanh", "sigmoid", "sqrt", "rsqrt", "sin", "cos", "pow"}
TRANSCENDENTAL_OPS = 12  # MUFU-based functions cost ~a dozen issue slots per element (an assumption)
_FUNCTION_OPS = {"erf": 32}
"""Issue slots per element of functions that are not one MUFU op. erf is a libdevice polynomial: bias+erf-GELU
(benchmarks/tiling_kernels/bias_gelu.py, bf16) compiled for sm_90 on the CPU (`compile_sm90` of
benchmarks/tiling_compile_study.py, cuobjdump -sass) is 37.5-38.3 SASS instructions per element at 32-64 elements per
thread, the same kernel without the GELU 2.3-6.1: the GELU adds 32-36, so erf 32 beside the elementwise base of 6
(benchmarks/tiling_sass_count.py -> benchmarks/results/archive/tiling/sass_bias_gelu.json). With 12, bias_gelu's issue
time was half the H200's: every fast config was predicted ~75 us against 96-100 us measured, the model calling it
bandwidth-bound."""
PROGRAM_DISPATCH_S = 80e-9
"""Seconds per program an SM needs to start programs, however little they do (the block dispatch rate). Measured on the
H200 (tiling_bench_2026-11-30_biasgelu_a_biasgelu_b.json, biasgelu_a): 1,048,576 programs of 64 elements ran 633.5 /
634.5 us at 1 / 2 warps, 524,288 ran 319-321 us, 262,144 at 1-2 warps 162 us: linear in programs, not in warps or bytes,
79.7-81.6 ns per program per SM. In-sample for those six configs of biasgelu_a; held out for biasgelu_b, where 196,608
programs of 256 elements ran 120 us (predicted 91-93 without it, 119 with it)."""
_REDUCTIONS = {"softmax": 2, "norm": 2, "reduction": 1, "elementwise": 0}
# fp32 values live per element of the register tile (loaded value plus what is kept alongside it)
_LIVE_PER_ELEMENT = {"softmax": 1.25, "norm": 1.25, "reduction": 1.0, "elementwise": 2.0}
"""Registers per element a program keeps live when it covers a row in one block. softmax and norm
1.25: on the H200 every single-block config with 128 elements per thread compiled without spilling
(softmax_a fp32: 160-215 registers; layernorm_a bf16: 168-255), while 256 per thread spilled
(benchmarks/results/archive/tiling/tiling_bench_2026-11-30_softmax_a.json,
tiling_bench_2026-11-30_gemm_b_softmax_b_layernorm_a.json). elementwise 2.0: bias+GELU (bf16, tanh form) used
105-152 registers at 64 elements per thread and spilled 8-16 at 128, on every one of the 2x14 configs there
(tiling_bench_2026-11-30_biasgelu_a_biasgelu_b.json; 1.5 had called those feasible)."""
_LIVE_PER_ELEMENT_LOOPING = {"softmax": 1.25, "norm": 2.0, "reduction": 1.4, "elementwise": 2.0}
"""The same when the program loops over the row in blocks (accumulators live beside the block):
layernorm_b (8192 columns in blocks) spilled 24-28 registers at 128 elements per thread where the
single-block layernorm_a did not; row_sum_b (65536 columns in blocks) compiled 128 per thread to
168-201 registers without spilling, except with 32 rows per program (tiling_bench_2026-11-30_rowsum_b_layernorm_b.json);
looping softmax did not spill at 128 per thread (softmax_a, softmax_b). Scored offline against every
recorded verdict by benchmarks/tiling_model_recheck.py (see benchmarks/results/archive/tiling/README.md)."""


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _round_up(x: float, m: int) -> int:
    return int(math.ceil(x / m) * m)


def compute_type(dtype: str, space: CandidateSpace) -> str:
    """Peak-FLOP key of GpuSpec for the kernel's dots: fp32 inputs use TF32 unless told 'ieee' (CUDA-core FMAs)
    or 'tf32x3' (three TF32 tensor-core products per fp32 product)."""
    if dtype in ("float16", "bfloat16"):
        return "fp16" if dtype == "float16" else "bf16"
    precisions = {k.dot_precision for k in space.kernels}
    if "ieee" in precisions or any(k.ieee_dot and k.dot_precision is None for k in space.kernels):
        return "fp32"
    return "tf32x3" if "tf32x3" in precisions else "tf32"


FMA_DOT_EFFICIENCY = 0.45
"""An IEEE fp32 tl.dot runs as FMAs with its operands re-read from shared memory: a Triton IEEE GEMM reached
~22 TFLOP/s on the H200 against cuBLAS's ~51 (issue 18)."""
SPLIT_OPS = 8
"""CUDA-core instructions per operand element per K step for the tf32x3 split (cvt.rna, subtract, layout moves,
done by every warp that reads the element)."""
SPILL_EFFICIENCY = 0.6
"""Rate kept when a tile's live registers exceed 255 per thread (local-memory traffic in the K loop): on the
H200 a tf32x3 128x128x32 tile ran 3.05 ms at 4 warps (accumulators + hi/lo operands ~ 288 registers) and
1.80 ms at 8 (issue 18)."""


SMEM_BYTES_PER_CLK = 128
"""Shared-memory bandwidth of one SM per clock: 32 banks of 4 bytes each per clock (CUDA C++ Programming Guide,
"Shared Memory" of compute capabilities 5.x-9.0)."""


def rows_redone(bm: int, w: int, gpu: GpuSpec) -> float:
    """How many times a wgmma tile's rows are computed when Triton lays every warp along M. It does for chained
    dots (an attention step; and tf32x3, which Triton lowers to three dots feeding one accumulator): a warpgroup
    covers 64 rows, so BLOCK_M < 16 x num_warps leaves warpgroups redoing the same rows. Seen in Triton 3.6's sm_90
    build (benchmarks/tiling_compile_guidance.py): attention 64x64 at 8 warps issues twice the HGMMAs for S = Q K^T
    of 4 warps (96 vs 48); the 64-row tf32x3 GEMMs at 8 warps carry two MMA layouts (warps [4, 2] and [8, 1]) and
    22-40 barriers per program against 6 for 128 rows."""
    if gpu.arch != "sm_90" or bm < 64 or w < 4 or 16 * w <= bm:
        return 1.0
    return 16 * w / bm


def dot_regs(bm: int, bn: int, bk: int, w: int, ctype: str) -> float:
    """Live registers per thread of a BM x BN x BK dot step: the fp32 accumulator, ~32 for addresses and masks, and
    for tf32x3 the hi and lo parts of both operands (Triton splits them in registers before the three tensor-core
    products). The same count decides spills and how many programs an SM holds: a tf32x3 128x128x32 tile at 8 warps
    is 160 here and 208 in Triton 3.6's sm_90 build (benchmarks/results/archive/tiling/compile_study_guidance.json),
    one program per SM either way, where the accumulator alone (96) said two."""
    regs = bm * bn / (32 * w) + 32
    if ctype == "tf32x3":
        regs += 2 * (bm + bn) * bk / (32 * w)
    return regs


def dot_step_parts(bm: int, bn: int, bk: int, w: int, ctype: str, gpu: GpuSpec, notes: list[str],
                   what: str = "tile") -> tuple[float, float]:
    """(tensor-core or FMA seconds, CUDA-core seconds) of one BM x BN x BK dot step on one SM: the products at the
    compute type's rate (derated for the FMA path of IEEE fp32 and for spills) and the tf32x3 split (CUDA cores).
    Apart because a dependent chain runs them one after the other (attention.py)."""
    peak_sm = gpu.peak_flops.get(ctype, gpu.peak_flops["fp32"]) / gpu.sm_count
    eff = FMA_DOT_EFFICIENCY if ctype == "fp32" else 1.0
    regs = dot_regs(bm, bn, bk, w, ctype)
    if regs > MAX_REGS:
        eff *= SPILL_EFFICIENCY
        notes.append(f"{what}: ~{regs:.0f} live registers per thread ({ctype} at {w} warps) > {MAX_REGS}: spills "
                     "in the K loop; more warps or a smaller tile")
    split = 0.0
    if ctype == "tf32x3":
        lanes = 128 * (gpu.sm_clock_mhz or 1500) * 1e6  # fp32 lanes per SM per second
        split = SPLIT_OPS * (bm + bn) * bk / lanes
    return 2 * bm * bn * bk / (peak_sm * eff), split


def _ctas_per_sm(gpu: GpuSpec, threads: int, regs: int, smem: int) -> int:
    limits = [gpu.max_blocks_per_sm, gpu.max_threads_per_sm // threads]
    limits.append(gpu.regs_per_sm // (_round_up(max(regs, 1), 8) * threads))
    if smem > 0:
        limits.append(gpu.smem_per_sm_bytes // smem)
    return max(0, min(limits))


def _persistent(est: ConfigEstimate, space: CandidateSpace, gpu: GpuSpec, values: dict[str, int], tiles: int,
                c: int) -> int:
    """A persistent grid launches its own program count and loops over the tiles: the grid and the
    waves are those programs (the work, and so the time terms, stay per tile). Returns the programs launched."""
    cap = persistent_programs(space, gpu.sm_count, values)
    if cap is None or cap >= tiles:
        return tiles
    est.grid = [cap]
    est.waves = cap / (gpu.sm_count * max(c, 1))
    est.notes.append(f"persistent grid: {cap} programs loop over {tiles} tiles "
                     f"({math.ceil(tiles / cap)} per program at most)")
    return cap


def resident(c: int, launched: int, sm_count: int) -> int:
    """Programs an SM holds at once: as many as fit (c), but no more than the grid gives it; a persistent grid of
    one program per SM holds one, however many would fit."""
    return max(1, min(c, math.ceil(launched / sm_count)))


H200_FIT = {"launch_overhead_s": LAUNCH_OVERHEAD_S, "program_dispatch_s": PROGRAM_DISPATCH_S,
            "warp_stream_bps": WARP_STREAM_BPS, "dram_latency_s": DRAM_LATENCY_S}
"""The constants `calibrate` measures (calibration/model_constants.py), by GpuSpec.model_constants key, as fitted on
the H200: what a GPU without its own measurement is priced with (and told so)."""
MEASURED_KEYS = tuple(H200_FIT)


@dataclass(frozen=True)
class TimeScale:
    """A GPU's time constants as the cost model uses them, and where they came from."""

    launch_overhead_s: float
    program_dispatch_s: float
    warp_stream_bps: float
    dram_latency_s: float
    gemm_tile_fixed_s: float
    program_fixed_s: float
    reduction_step_s: float
    l2_over_dram: float
    borrowed: tuple[str, ...] = ()  # keys of MEASURED_KEYS this GPU's calibration did not give: the H200's fit


def time_scale(gpu: GpuSpec) -> TimeScale:
    """Measured on this GPU where `calibrate` measured them, else the H200 fit (named in `borrowed`); latencies
    chosen in cycles scale by this GPU's SM clock; L2 / DRAM is the measured ratio where both were measured."""
    got = {k: v for k, v in gpu.model_constants.items() if k in H200_FIT and v > 0}
    cycles = FIT_CLOCK_MHZ / (gpu.sm_clock_mhz or FIT_CLOCK_MHZ)
    return TimeScale(**{**H200_FIT, **got}, gemm_tile_fixed_s=GEMM_TILE_FIXED_S * cycles,
                     program_fixed_s=PROGRAM_FIXED_S * cycles, reduction_step_s=REDUCTION_STEP_S * cycles,
                     l2_over_dram=_l2_over_dram(gpu), borrowed=tuple(k for k in H200_FIT if k not in got))


def _l2_over_dram(gpu: GpuSpec) -> float:
    measured = [gpu.provenance.get(k, "").startswith("measured") for k in ("l2", "dram")]
    if all(measured) and gpu.l2_bytes_per_s and gpu.dram_bytes_per_s:
        return gpu.l2_bytes_per_s / gpu.dram_bytes_per_s
    return L2_OVER_DRAM


def time_scale_note(gpu: GpuSpec) -> str:
    """One line for the proposal: whose time constants priced the ranking."""
    scale = time_scale(gpu)
    if not scale.borrowed:
        return (f"cost model time constants measured on this GPU by calibrate ({gpu.measured_at or 'date unknown'}): "
                f"launch {scale.launch_overhead_s * 1e6:.1f} us, dispatch {scale.program_dispatch_s * 1e9:.0f} ns per "
                f"program, {scale.warp_stream_bps / 1e9:.2f} GB/s per streaming warp, DRAM latency "
                f"{scale.dram_latency_s * 1e9:.0f} ns")
    return (f"cost model time constants {', '.join(scale.borrowed)}: fitted on one H200, not measured on this "
            f"{gpu.name}; "
            "run egg-mcp calibrate to measure them (the ranking's time scale may be off, its measurements are not)")
