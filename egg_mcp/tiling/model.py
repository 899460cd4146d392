"""Analytic feasibility and cost model of tile configurations on one GPU.

Two models, chosen by the kernel kind:
  * GEMM (``gemm``): output tiles BM x BN over M x N, a K loop of BK steps pipelined over
    ``num_stages`` shared-memory buffers. Time = the busiest SM's tiles x per-tile time, where a
    K step costs max(tensor-core time, L2 operand-load time), derated for small per-thread
    accumulators, short BK rows, shallow pipelines and (on Hopper) tiles too small for wgmma.
  * streaming (``softmax``, ``norm``, ``reduction``, ``elementwise``): the busiest SM's time is
    max(bytes it moves / its bandwidth share, chains of dependent memory latencies it cannot
    overlap) — Little's law at the granularity of programs.

Feasibility rules are the compiler's own limits, checked on the H200 (see benchmarks/tiling_bench.py):
  * shared memory = num_stages x (BM + BN) x BK x bytes per element for a GEMM; this matched
    Triton's reported use on every compiled config of a 216-config bf16 matmul space and separated
    all 48 out-of-resource failures;
  * fp32 accumulator registers per thread = BM x BN / (32 x num_warps); every config at >= 256
    spilled.
Every pruned config carries its reasons in words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from egg_mcp.hardware import GpuSpec
from egg_mcp.tiling.dims import next_pow2
from egg_mcp.tiling.models import CandidateSpace, ConfigEstimate, KernelCall, TilingConfig, TunableParam
from egg_mcp.tiling.space import persistent_programs

KB = 1024
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# Model constants (assumptions, not measurements; the benchmark checks the ranking they produce).
LAUNCH_OVERHEAD_S = 3e-6  # measured: ~3 us per launch on the H200 (do_bench at ~5 us kernels)
L2_OVER_DRAM = 2.5  # L2 bandwidth / DRAM bandwidth (Hopper-class parts: ~2.5-3x)
DRAM_LATENCY_S = 1.0e-6  # loaded DRAM round trip seen by one dependent chain of loads
SM_MAX_SHARE = 4.0  # one SM can pull at most this multiple of its fair share of DRAM bandwidth
ACC_SPILL_REGS = 256  # accumulator registers per thread at which every H200 config spilled
MAX_REGS = 255
GEMM_TILE_FIXED_S = 1.0e-6  # pipeline fill + epilogue latency per output tile
PROGRAM_FIXED_S = 0.5e-6  # launch of one program (CTA) + index math
REDUCTION_STEP_S = 0.1e-6  # one cross-warp reduction level (shared memory + barrier)
OVERLAP_P = 3.0  # exponent of the smooth max of bandwidth and latency time (inf = perfect overlap)

_BASE_OPS = {"softmax": 10, "norm": 12, "reduction": 3, "elementwise": 6}  # instructions per element
_TRANSCENDENTAL = {"exp", "exp2", "log", "log2", "erf", "tanh", "sigmoid", "sqrt", "rsqrt", "sin", "cos", "pow"}
TRANSCENDENTAL_OPS = 12  # MUFU-based functions cost ~a dozen issue slots per element (erf is a polynomial)
_REDUCTIONS = {"softmax": 2, "norm": 2, "reduction": 1, "elementwise": 0}
# fp32 values live per element of the register tile (loaded value plus what is kept alongside it)
_LIVE_PER_ELEMENT = {"softmax": 1.25, "norm": 1.25, "reduction": 1.0, "elementwise": 2.0}
"""Registers per element a program keeps live when it covers a row in one block. softmax and norm
1.25: on the H200 every single-block config with 128 elements per thread compiled without spilling
(softmax_a fp32: 160-215 registers; layernorm_a bf16: 168-255), while 256 per thread spilled
(benchmarks/results/tiling/batch4_tiling_bench.json, batch7_tiling_bench.json). elementwise 2.0:
bias+GELU (bf16, tanh form) used 105-152 registers at 64 elements per thread and spilled 8-16 at 128,
on every one of the 2x14 configs there (batch10_tiling_bench.json; 1.5 had called those feasible)."""
_LIVE_PER_ELEMENT_LOOPING = {"softmax": 1.25, "norm": 2.0, "reduction": 1.4, "elementwise": 2.0}
"""The same when the program loops over the row in blocks (accumulators live beside the block):
layernorm_b (8192 columns in blocks) spilled 24-28 registers at 128 elements per thread where the
single-block layernorm_a did not; row_sum_b (65536 columns in blocks) compiled 128 per thread to
168-201 registers without spilling, except with 32 rows per program (batch8_tiling_bench.json);
looping softmax did not spill at 128 per thread (softmax_a, softmax_b). Scored offline against every
recorded verdict by benchmarks/tiling_model_recheck.py (see benchmarks/results/tiling/README.md)."""


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _round_up(x: float, m: int) -> int:
    return int(math.ceil(x / m) * m)


@dataclass
class _Knobs:
    """Config values resolved onto the roles the model understands."""

    blocks: dict[str, int]  # axis -> block size
    block_params: dict[str, str]  # axis -> parameter name (for the reasons)
    warps: int
    stages: int
    group: int
    split: int
    names: dict[str, str]  # role -> parameter name


def _resolve(values: dict[str, int], space: CandidateSpace) -> _Knobs:
    blocks: dict[str, int] = {}
    block_params: dict[str, str] = {}
    names: dict[str, str] = {}
    by_role: dict[str, int] = {}
    for param in space.params:
        value = values.get(param.name, param.current)
        if value is None:
            continue
        if param.role == "block" and param.axis:
            if param.axis not in blocks or value > blocks[param.axis]:
                blocks[param.axis], block_params[param.axis] = value, param.name
        elif param.role in ("warps", "stages", "group", "split"):
            by_role[param.role], names[param.role] = value, param.name
    return _Knobs(blocks=blocks, block_params=block_params, warps=by_role.get("warps", 4),
                  stages=by_role.get("stages", 3), group=by_role.get("group", 1), split=by_role.get("split", 1),
                  names=names)


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


def dot_step_s(bm: int, bn: int, bk: int, w: int, ctype: str, gpu: GpuSpec, dtype: str, notes: list[str],
               what: str = "tile") -> float:
    """Seconds of one BM x BN x BK dot step on one SM at the compute type's rate, with the precision's own
    costs: the tf32x3 split (CUDA cores) and its register pressure, the FMA path of IEEE fp32."""
    peak_sm = gpu.peak_flops.get(ctype, gpu.peak_flops["fp32"]) / gpu.sm_count
    eff = 1.0
    acc = bm * bn / (32 * w)
    regs = acc + 32
    if ctype == "tf32x3":
        regs += 2 * (bm + bn) * bk / (32 * w)  # hi and lo of both operands live in registers
    elif ctype == "fp32":
        eff *= FMA_DOT_EFFICIENCY
    if regs > MAX_REGS:
        eff *= SPILL_EFFICIENCY
        notes.append(f"{what}: ~{regs:.0f} live registers per thread ({ctype} at {w} warps) > {MAX_REGS}: spills "
                     "in the K loop; more warps or a smaller tile")
    t = 2 * bm * bn * bk / (peak_sm * eff)
    if ctype == "tf32x3":
        lanes = 128 * (gpu.sm_clock_mhz or 1500) * 1e6  # fp32 lanes per SM per second
        t += SPLIT_OPS * (bm + bn) * bk / lanes
    return t


def _ctas_per_sm(gpu: GpuSpec, threads: int, regs: int, smem: int) -> int:
    limits = [gpu.max_blocks_per_sm, gpu.max_threads_per_sm // threads]
    limits.append(gpu.regs_per_sm // (_round_up(max(regs, 1), 8) * threads))
    if smem > 0:
        limits.append(gpu.smem_per_sm_bytes // smem)
    return max(0, min(limits))


def _common_rules(k: _Knobs, space: CandidateSpace, values: dict[str, int], gpu: GpuSpec,
                  dims: dict[str, int]) -> list[tuple[str, str]]:
    fired: list[tuple[str, str]] = []
    warps_name = k.names.get("warps", "num_warps")
    if 32 * k.warps > gpu.max_threads_per_block:
        fired.append(("threads", f"{warps_name}={k.warps} launches {32 * k.warps} threads per program > "
                                 f"{gpu.max_threads_per_block} allowed"))
    if not _is_pow2(k.warps):
        fired.append(("warps_pow2", f"{warps_name}={k.warps} is not a power of two (Triton requires one)"))
    for param in space.params:
        value = values.get(param.name)
        if value is None or param.role != "block":
            continue
        if "BLOCK" in param.name.upper() and not _is_pow2(value):
            fired.append(("block_pow2", f"{param.name}={value} is not a power of two (tl.arange needs one)"))
        if param.axis and param.axis in dims:
            extent = next_pow2(dims[param.axis])
            floor = min(param.choices) if param.choices else value
            if value > max(extent, floor):
                fired.append(("oversized", f"{param.name}={value} > {param.axis}={dims[param.axis]} (next power of "
                                           f"two {extent}): the extra lanes are all masked; a smaller block does the "
                                           "same work"))
    return fired


def _gemm(values: dict[str, int], k: _Knobs, space: CandidateSpace, gpu: GpuSpec, dims: dict[str, int],
          dtype: str, est: ConfigEstimate) -> list[tuple[str, str]]:
    fired: list[tuple[str, str]] = []
    M, N, K = dims["M"], dims["N"], dims["K"]
    bm, bn, bk = k.blocks.get("M", 64), k.blocks.get("N", 64), k.blocks.get("K", 32)
    nbytes = DTYPE_BYTES[dtype]
    w, s = k.warps, max(1, k.stages)
    label = lambda ax, v: f"{k.block_params.get(ax, 'BLOCK_' + ax)}={v}"  # noqa: E731
    tile = f"{label('M', bm)}, {label('N', bn)}"
    if min(bm, bn, bk) < 16:
        fired.append(("dot_min", f"{tile}, {label('K', bk)}: tl.dot needs every tile dimension >= 16"))
    est.smem_bytes = s * (bm + bn) * bk * nbytes
    if est.smem_bytes > gpu.smem_per_block_optin_bytes:
        fired.append(("smem", f"{tile}, {label('K', bk)}, {k.names.get('stages', 'num_stages')}={s} needs "
                              f"{est.smem_bytes / KB:.0f} KB shared memory ({s} x ({bm}+{bn}) x {bk} x {nbytes} B) > "
                              f"{gpu.smem_per_block_optin_bytes / KB:.0f} KB"))
    acc = bm * bn / (32 * w)
    est.regs_per_thread = min(MAX_REGS, _round_up(acc + 32, 8))
    if acc >= ACC_SPILL_REGS:
        fired.append(("spill", f"{tile}, {k.names.get('warps', 'num_warps')}={w} keeps {acc:.0f} fp32 accumulator "
                               f"registers per thread (>= {ACC_SPILL_REGS}): spills to local memory"))
    threads = 32 * w
    c = _ctas_per_sm(gpu, threads, est.regs_per_thread, est.smem_bytes)
    est.ctas_per_sm = c
    est.occupancy = c * w * 32 / gpu.max_threads_per_sm
    tm, tn = math.ceil(M / bm), math.ceil(N / bn)
    tiles = tm * tn * k.split
    est.grid = [tiles]
    est.waves = tiles / (gpu.sm_count * max(c, 1))
    _persistent(est, space, gpu, values, tiles, c)
    est.tail_waste = 1 - (M * N) / (tm * bm * tn * bn)
    est.intensity = 2 * bm * bn / ((bm + bn) * nbytes)
    if fired:
        return fired

    l2_sm = L2_OVER_DRAM * gpu.dram_bytes_per_s / gpu.sm_count
    eff = 1.0
    hopper = gpu.arch == "sm_90"
    if hopper and (w < 4 or bm < 64):
        eff *= 0.5
        est.notes.append("no wgmma (needs num_warps >= 4 and BLOCK_M >= 64 on sm_90): ~half tensor-core rate")
    eff *= min(1.0, acc / 64) ** 0.35  # few accumulators per thread: too little work per operand load
    row_bytes = bk * nbytes
    eff *= 1.0 if row_bytes >= 128 else 0.85 if row_bytes >= 64 else 0.65
    s_eff = (s - 1) * max(c, 1) + 1  # co-resident programs hide latency like extra stages
    eff *= {1: 0.45, 2: 0.75, 3: 0.95}.get(s_eff, 1.0)
    k_iters = math.ceil(math.ceil(K / k.split) / bk)
    t_math = dot_step_s(bm, bn, bk, w, compute_type(dtype, space), gpu, dtype, est.notes) / eff
    t_load = (bm + bn) * bk * nbytes / l2_sm
    t_tile = GEMM_TILE_FIXED_S / max(c, 1) + k_iters * max(t_math, t_load)
    t_compute = math.ceil(tiles / gpu.sm_count) * t_tile
    dram = (M * K + K * N) * nbytes + M * N * nbytes
    if (M * K + K * N) * nbytes > gpu.l2_bytes / 2 and k.group <= 1 and tm > 1:
        dram += 0.25 * (tm - 1) * K * N * nbytes  # without grouping, B is re-read from DRAM by row bands
    if k.split > 1:
        dram += 2 * M * N * 4 * k.split
    t_dram = dram / gpu.dram_bytes_per_s
    est.predicted_ms = (max(t_compute, t_dram) + LAUNCH_OVERHEAD_S) * 1e3
    if t_load > t_math:
        est.notes.append(f"L2-bound tile: operand loads {t_load * 1e9:.0f} ns > math {t_math * 1e9:.0f} ns per K step")
    if est.waves < 1:
        est.notes.append(f"only {tiles} tiles for {gpu.sm_count} SMs")
    elif est.waves % 1 and est.waves < 4:
        est.notes.append(f"{est.waves:.2f} waves: the last wave is {est.waves % 1:.0%} full")
    return fired


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


def _estimate_one(values: dict[str, int], space: CandidateSpace, gpu: GpuSpec, dims: dict[str, int], kind: str,
                  dtype: str) -> ConfigEstimate:
    knobs = _resolve(values, space)
    est = ConfigEstimate(config=TilingConfig(values=dict(values)), feasible=True)
    fired = _common_rules(knobs, space, values, gpu, dims)
    if kind == "gemm":
        fired += _gemm(values, knobs, space, gpu, dims, dtype, est)
    elif kind == "attention":
        from egg_mcp.tiling.attention import attention

        fired += attention(values, knobs, space, gpu, dims, dtype, est)
    else:
        from egg_mcp.tiling.stream import stream

        fired += stream(values, knobs, space, gpu, dims, dtype, kind, est)
    if fired:
        est.feasible = False
        est.predicted_ms = None
        est.rules = [rule for rule, _ in fired]
        est.reasons = [reason for _, reason in fired]
    return est


def call_view(space: CandidateSpace, call: KernelCall) -> CandidateSpace:
    """The space as one launch sees it: only its own parameters, each with the role and axis of the name the
    kernel knows it by (LIN_BLOCK_M passed as BLOCK_M tiles the GEMM's M), its fixed launch values as
    one-choice parameters, and only its own kernel's facts."""
    from egg_mcp.tiling.dims import axis_for
    from egg_mcp.tiling.space import role_of

    params: list[TunableParam] = []
    for seen, name in call.params.items():
        p = space.param(name)
        if p is None:
            continue
        role = role_of(seen) if role_of(seen) != "other" else p.role
        axis = axis_for(seen, call.kind, call.dims) or axis_for(name, call.kind, call.dims)
        if call.dims_from == "task" and seen == name and p.axis:
            axis = p.axis
        params.append(p.model_copy(update={"role": role, "axis": axis}))
    names = {q.name for q in params}
    for seen, value in call.fixed.items():
        if seen not in names:
            params.append(TunableParam(name=seen, role=role_of(seen), current=value, choices=[value], applicable=False,
                                       axis=axis_for(seen, call.kind, call.dims)))
    kernels = [k for k in space.kernels if k.name == call.kernel] or space.kernels
    return space.model_copy(update={"params": params, "kernels": kernels, "calls": []})


def estimate(values: dict[str, int], space: CandidateSpace, *, gpu: GpuSpec, dims: dict[str, int], kind: str,
             dtype: str = "float32") -> ConfigEstimate:
    """Feasibility and predicted time of one config (`dims` canonical, see dims.normalize_dims): the sum over
    the candidate's launches (`space.calls`, see tiling/kernels.py), each priced with its own kind, dims and
    parameters; a rule that fires names its kernel when there are several."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    if not space.calls:
        return _estimate_one(values, space, gpu, dims, kind, dtype)
    parts = [(call, _estimate_one(values, call_view(space, call), gpu, call.dims, call.kind, dtype))
             for call in space.calls]
    several = len({c.kernel for c in space.calls}) > 1 or len(space.calls) > 1
    est = ConfigEstimate(config=TilingConfig(values=dict(values)), feasible=all(e.feasible for _, e in parts))
    for call, e in parts:
        tag = f"{call.kernel} ({call.kind} {', '.join(f'{k}={v}' for k, v in call.dims.items())}): " if several else ""
        for rule, reason in zip(e.rules, e.reasons):
            if tag + reason not in est.reasons:
                est.rules.append(rule)
                est.reasons.append(tag + reason)
        est.notes += [tag + n for n in e.notes if tag + n not in est.notes]
    if est.feasible:
        est.predicted_ms = sum(e.predicted_ms for _, e in parts)
        heavy = max((e for _, e in parts), key=lambda e: e.predicted_ms)
    else:
        heavy = next(e for _, e in parts if not e.feasible)
    for field in ("smem_bytes", "regs_per_thread", "ctas_per_sm", "occupancy", "grid", "waves", "tail_waste",
                  "intensity"):
        setattr(est, field, getattr(heavy, field))
    return est


def _no_effect_duplicates(configs: list[dict[str, int]], space: CandidateSpace, kind: str) -> dict[int, str]:
    """Configs that differ from a kept one only in num_stages when nothing is pipelined."""
    if kind == "gemm" or any(k.has_loop for k in space.kernels):
        return {}
    stage_params = [p for p in space.params if p.role == "stages" and len(p.choices) > 1]
    out: dict[int, str] = {}
    for param in stage_params:
        keep = param.current if param.current in param.choices else min(param.choices)
        for i, config in enumerate(configs):
            if config.get(param.name, keep) != keep:
                out[i] = (f"{param.name}={config[param.name]} has no effect without a loop to pipeline "
                          f"(same kernel as {param.name}={keep})")
    return out


def estimate_all(configs: list[dict[str, int]], space: CandidateSpace, *, gpu: GpuSpec, dims: dict[str, int],
                 kind: str, dtype: str = "float32") -> list[ConfigEstimate]:
    """Estimates for every config, ranked: feasible by predicted time first, then the pruned."""
    duplicates = _no_effect_duplicates(configs, space, kind)
    estimates = []
    for i, config in enumerate(configs):
        est = estimate(config, space, gpu=gpu, dims=dims, kind=kind, dtype=dtype)
        if i in duplicates and est.feasible:
            est.feasible, est.predicted_ms = False, None
            est.rules.append("no_effect")
            est.reasons.append(duplicates[i])
        estimates.append(est)
    current = {p.name: p.current for p in space.params}

    def changed(e: ConfigEstimate) -> int:  # ties go to the config closest to the source as written
        return sum(1 for name, value in e.config.values.items() if current.get(name) != value)

    feasible = sorted((e for e in estimates if e.feasible), key=lambda e: (round(e.predicted_ms, 9), changed(e)))
    if feasible:
        best = feasible[0].predicted_ms
        for e in feasible:
            e.score = best / e.predicted_ms
    return feasible + [e for e in estimates if not e.feasible]


def param_by_role(space: CandidateSpace, role: str) -> TunableParam | None:
    return next((p for p in space.params if p.role == role), None)


def infer_kind(space: CandidateSpace) -> str:
    """Best guess of the kernel kind from the tl.* calls of its kernels (the caller's hint wins)."""
    calls = {c for k in space.kernels for c in k.tl_calls}
    if any(k.uses_dot for k in space.kernels):
        return "gemm"
    if "exp" in calls and "max" in calls and "sum" in calls:
        return "softmax"
    if {"rsqrt", "sqrt"} & calls and "sum" in calls:
        return "norm"
    if {"sum", "max", "min", "reduce", "argmax", "argmin", "cumsum"} & calls:
        return "reduction"
    return "elementwise"
