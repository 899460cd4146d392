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
from egg_mcp.tiling.costs import (
    ACC_SPILL_REGS,
    DTYPE_BYTES,
    KB,
    MAX_REGS,
    SMEM_BYTES_PER_CLK,
    _ctas_per_sm,
    _is_pow2,
    _persistent,
    _round_up,
    compute_type,
    dot_regs,
    dot_step_parts,
    resident,
    rows_redone,
    time_scale,
)
from egg_mcp.tiling.dims import next_pow2
from egg_mcp.tiling.tiling_types import CandidateSpace, ConfigEstimate, KernelCall, TilingConfig, TunableParam


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
    ctype = compute_type(dtype, space)
    est.regs_per_thread = min(MAX_REGS, _round_up(dot_regs(bm, bn, bk, w, ctype), 8))  # tf32x3 hi/lo included
    if acc >= ACC_SPILL_REGS:
        fired.append(("spill", f"{tile}, {k.names.get('warps', 'num_warps')}={w} keeps {acc:.0f} fp32 accumulator "
                               f"registers per thread (>= {ACC_SPILL_REGS}): spills to local memory"))
    threads = 32 * w
    c = _ctas_per_sm(gpu, threads, est.regs_per_thread, est.smem_bytes)
    est.ctas_per_sm = c
    tm, tn = math.ceil(M / bm), math.ceil(N / bn)
    tiles = tm * tn * k.split
    est.grid = [tiles]
    est.waves = tiles / (gpu.sm_count * max(c, 1))
    launched = _persistent(est, space, gpu, values, tiles, c)
    held = resident(c, launched, gpu.sm_count)  # what hides latency: the programs an SM really holds
    est.occupancy = held * w * 32 / gpu.max_threads_per_sm
    est.tail_waste = 1 - (M * N) / (tm * bm * tn * bn)
    est.intensity = 2 * bm * bn / ((bm + bn) * nbytes)
    if fired:
        return fired

    scale = time_scale(gpu)
    l2_sm = scale.l2_over_dram * gpu.dram_bytes_per_s / gpu.sm_count
    eff = 1.0
    hopper = gpu.arch == "sm_90"
    if hopper and (w < 4 or bm < 64):
        eff *= 0.5
        est.notes.append("no wgmma (needs num_warps >= 4 and BLOCK_M >= 64 on sm_90): ~half tensor-core rate")
    eff *= min(1.0, acc / 64) ** 0.35  # few accumulators per thread: too little work per operand load
    row_bytes = bk * nbytes
    eff *= 1.0 if row_bytes >= 128 else 0.85 if row_bytes >= 64 else 0.65
    s_eff = (s - 1) * held + 1  # co-resident programs hide latency like extra stages
    eff *= {1: 0.45, 2: 0.75, 3: 0.95}.get(s_eff, 1.0)
    k_iters = math.ceil(math.ceil(K / k.split) / bk)
    t_tensor, t_split = dot_step_parts(bm, bn, bk, w, ctype, gpu, est.notes)
    redo = rows_redone(bm, w, gpu) if ctype == "tf32x3" else 1.0
    t_convert = 0.0
    if redo > 1:  # two of the three products on warps along M, the accumulator converted between the layouts
        t_tensor *= (2 * redo + 1) / 3
        t_convert = 2 * bm * bn * 4 / (SMEM_BYTES_PER_CLK * (gpu.sm_clock_mhz or 1500) * 1e6)
        est.notes.append(f"tf32x3 at {label('M', bm)} with {w} warps: {16 * w} rows of warps on {bm} rows, two of its "
                         f"three products computed {redo:.0f}x and the accumulator moved through shared memory every "
                         "K step; use 4 warps or a larger BLOCK_M")
    t_math = (t_tensor + t_split + t_convert) / eff
    t_load = (bm + bn) * bk * nbytes / l2_sm
    t_tile = scale.gemm_tile_fixed_s / held + k_iters * max(t_math, t_load)
    t_compute = math.ceil(tiles / gpu.sm_count) * t_tile
    dram = (M * K + K * N) * nbytes + M * N * nbytes
    if (M * K + K * N) * nbytes > gpu.l2_bytes / 2 and k.group <= 1 and tm > 1:
        dram += 0.25 * (tm - 1) * K * N * nbytes  # without grouping, B is re-read from DRAM by row bands
    if k.split > 1:
        dram += 2 * M * N * 4 * k.split
    t_dram = dram / gpu.dram_bytes_per_s
    est.predicted_ms = (max(t_compute, t_dram) + scale.launch_overhead_s) * 1e3
    if t_load > t_math:
        est.notes.append(f"L2-bound tile: operand loads {t_load * 1e9:.0f} ns > math {t_math * 1e9:.0f} ns per K step")
    if launched < gpu.sm_count:
        est.notes.append(f"only {launched} programs for {gpu.sm_count} SMs")
    elif launched == tiles and est.waves > 1 and est.waves % 1 and est.waves < 4:
        est.notes.append(f"{est.waves:.2f} waves: the last wave is {est.waves % 1:.0%} full")
    return fired


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
    """The space as one launch sees it: only its own parameters, each with the role of the name the kernel knows
    it by and the dim it tiles there (`kernels.call_axis`), its fixed launch values as
    one-choice parameters, and only its own kernel's facts."""
    from egg_mcp.tiling.dims import axis_for
    from egg_mcp.tiling.kernel_calls import call_axis
    from egg_mcp.tiling.source_index import role_of

    params: list[TunableParam] = []
    for seen, name in call.params.items():
        p = space.param(name)
        if p is None:
            continue
        role = role_of(seen) if role_of(seen) != "other" else p.role
        params.append(p.model_copy(update={"role": role, "axis": call_axis(seen, p, call)}))
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
    the candidate's launches (`space.calls`, see tiling/kernel_calls.py), each priced with its own kind, dims and
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
        # (a feasible estimate has its time)
        est.predicted_ms = sum(e.predicted_ms or 0.0 for _, e in parts)
        heavy = max((e for _, e in parts), key=lambda e: e.predicted_ms or 0.0)
    else:
        heavy = next(e for _, e in parts if not e.feasible)
    for field in ("smem_bytes", "regs_per_thread", "ctas_per_sm", "occupancy", "grid", "waves", "tail_waste",
                  "intensity"):
        setattr(est, field, getattr(heavy, field))
    return est


def grid_notes(space: CandidateSpace, gpu: GpuSpec, dtype: str) -> list[str]:
    """Each probed launch's programs at the source's own config against the model's count of them: where they
    differ the model does not read that grid (a batch, a split or a block it does not know of), and the proposal
    says so rather than rank on the wrong count. A persistent grid is sized at run time, which a probe without a
    GPU cannot show: the count the model assumes is said instead."""
    values = {p.name: p.current for p in space.params if p.current is not None}
    notes: list[str] = []
    for call in space.calls:
        if not call.grid:
            continue
        view = call_view(space, call)
        counted = math.prod(_estimate_one(values, view, gpu, call.dims, call.kind, dtype).grid or [0])
        seen = math.prod(call.grid)
        if any(k.persistent for k in view.kernels):
            note = (f"{call.kernel}: a persistent grid, its program count set at run time (the probe, without a GPU, "
                    f"launched {seen} programs, grid {call.grid}); the model assumes {counted} on the {gpu.name}")
        elif seen != counted:
            note = (f"{call.kernel}: launched {seen} programs (grid {call.grid}) at the current config where the model "
                    f"counts {counted} from {call.kind} {call.dims}: it does not read this grid, so its predictions "
                    f"for {call.kernel} are not to be trusted; rank by measured times")
        else:
            continue
        if note not in notes:
            notes.append(note)
    return notes


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


def infer_kind(space: CandidateSpace) -> str:
    """Best guess of the candidate's kind when no launch probe told its kernels apart (the caller's hint wins):
    the heaviest of its kernels' own kinds (`kernels.kernel_kind`, the one classifier), an attention kernel
    priced by the GEMM model here."""
    from egg_mcp.tiling.kernel_calls import kernel_kind

    kinds = {kernel_kind(k) for k in space.kernels}
    if "attention" in kinds:
        kinds.add("gemm")
    return next((kind for kind in ("gemm", "softmax", "norm", "reduction") if kind in kinds), "elementwise")
