"""The streaming cost model (softmax, norm, reduction, elementwise): the busiest SM's time is a smooth max of
the bytes it moves over its bandwidth share, what its resident warps can stream (a loop over the row) or the
chains of dependent memory latencies it cannot overlap (one block per row), and its instruction issue — Little's
law at the granularity of programs. A loop over the row is priced with its registers fit to the compiler's, the
loads in flight those registers allow, a soft knee to the DRAM roof, each trip's bookkeeping, and the L2 reuse of a
second pass as measured on the H200, averaged over the register estimate's error. Constants and their evidence
live in costs.py (shared with the GEMM model)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from egg_mcp.hardware import GpuSpec
from egg_mcp.tiling.tiling_types import CandidateSpace, ConfigEstimate


def stream(values: dict[str, int], k, space: CandidateSpace, gpu: GpuSpec, dims: dict[str, int],
            dtype: str, kind: str, est: ConfigEstimate) -> list[tuple[str, str]]:
    """Price one config; its time is the mean over the register estimate's spread (costs.REG_SPREAD), so a config
    near an occupancy step is priced between its two sides."""
    from egg_mcp.tiling.costs import REG_SPREAD

    fired, looping = _stream(values, k, space, gpu, dims, dtype, kind, est, 1.0)
    if fired or not looping or est.predicted_ms is None:
        return fired
    times = [est.predicted_ms]
    for scale in (1 - REG_SPREAD, 1 + REG_SPREAD):
        other = est.model_copy(deep=True)
        _stream(values, k, space, gpu, dims, dtype, kind, other, scale)
        times.append(other.predicted_ms if other.predicted_ms is not None else est.predicted_ms)
    est.predicted_ms = sum(times) / len(times)
    return fired


def _occupancy_regs(br: int, bc: int, w: int, nbytes: int, per_thread: float, live: float) -> float:
    """Registers a looping row program compiles to (costs.OCC_REGS): accumulators plus a row pointer and mask per
    row a thread covers in Triton's default blocked layout (16-byte vectors along the row, then threads, then
    warps)."""
    from egg_mcp.tiling.costs import OCC_REGS

    base, per_element, per_row, floor = OCC_REGS
    vec = max(1, min(16 // nbytes, bc))
    threads_along_row = min(32, max(1, bc // vec))
    warps_along_row = min(w, max(1, bc // (vec * threads_along_row)))
    rows_per_thread = max(1, br // ((32 // threads_along_row) * max(1, w // warps_along_row)))
    return max(floor, base + per_element * per_thread * live / 1.4 + per_row * rows_per_thread)


def second_pass_share(working_set: float, l2_bytes: float) -> float:
    """A second pass over a row costs this share of the first (costs.L2_REUSE, measured on the H200): a logistic
    in log(working set), miss = 1 / (1 + (half x L2 / working set) ** steepness), computed overflow-safe."""
    from egg_mcp.tiling.costs import L2_REUSE

    half, steepness, miss_cost, hit_cost = L2_REUSE
    t = steepness * math.log(max(working_set, 1) / (half * l2_bytes))
    miss = 1 / (1 + math.exp(-max(-60.0, min(60.0, t))))
    return miss * miss_cost + (1 - miss) * hit_cost


@dataclass
class _Tile:
    """One launch's tile at one config as the pricing reads it: the problem's rows and columns, a program's
    block, its warps, the element size, whether the kernel loops over its row; the occupancy and grid fields
    are filled by `_occupancy_and_grid`."""

    n_rows: int
    n_cols: int
    br: int
    bc: int
    w: int
    nbytes: int
    loops: bool
    looping: bool
    per_thread: float
    live: float
    occ_regs: int = 0
    ctas: int = 0
    iters: int = 1
    grid: list[int] = field(default_factory=list)
    programs: int = 0
    launched: int = 0
    covered: int = 0

    @property
    def threads(self) -> int:
        return 32 * self.w


def _stream(values: dict[str, int], k, space: CandidateSpace, gpu: GpuSpec, dims: dict[str, int],
            dtype: str, kind: str, est: ConfigEstimate, reg_scale: float) -> tuple[list[tuple[str, str]], bool]:
    """One pricing at `reg_scale` x the register estimate; returns the rules that fired and whether the config
    loops over its row (the case the register fit and its spread are for)."""
    tile = _tile(k, space, dims, dtype, kind)
    fired = _resource_rules(tile, k, space, gpu, kind, est)
    _occupancy_and_grid(tile, values, space, gpu, kind, est, reg_scale)
    if fired:
        return fired, tile.looping
    _price(tile, space, gpu, kind, est)
    return fired, tile.looping


def _tile(k, space: CandidateSpace, dims: dict[str, int], dtype: str, kind: str) -> _Tile:
    """The launch's tile: an elementwise kernel without row/column blocks tiles the flat `n`."""
    from egg_mcp.tiling.costs import (
        _LIVE_PER_ELEMENT,
        _LIVE_PER_ELEMENT_LOOPING,
        DTYPE_BYTES,
    )
    from egg_mcp.tiling.dims import next_pow2

    w = k.warps
    loops = any(kn.has_loop for kn in space.kernels)
    if kind == "elementwise" and "n_cols" not in k.blocks and "n_rows" not in k.blocks:
        n_rows, n_cols = 1, dims["n"]
        br, bc = 1, k.blocks.get("n", 1024)
    else:
        n_rows, n_cols = dims.get("n_rows", 1), dims.get("n_cols", dims.get("n", 1))
        br = k.blocks.get("n_rows", 1)
        bc = k.blocks.get("n_cols", next_pow2(n_cols))
    looping = loops and kind != "elementwise" and bc < n_cols
    live = (_LIVE_PER_ELEMENT_LOOPING if looping else _LIVE_PER_ELEMENT)[kind]
    return _Tile(n_rows=n_rows, n_cols=n_cols, br=br, bc=bc, w=w, nbytes=DTYPE_BYTES[dtype], loops=loops,
                 looping=looping, per_thread=br * bc / (32 * w), live=live)


def _resource_rules(t: _Tile, k, space: CandidateSpace, gpu: GpuSpec, kind: str,
                    est: ConfigEstimate) -> list[tuple[str, str]]:
    """The pruning rules: a row the kernel cannot cover, spilled registers, idle threads, a block's registers
    over the SM's; sets the estimate's registers and shared memory."""
    from egg_mcp.tiling.costs import _REDUCTIONS, MAX_REGS, _round_up

    fired: list[tuple[str, str]] = []
    br, bc, w, per_thread, live = t.br, t.bc, t.w, t.per_thread, t.live
    cols_name = k.block_params.get("n_cols", k.block_params.get("n", "BLOCK"))
    if kind != "elementwise" and not t.loops and bc < t.n_cols:
        fired.append(("single_pass", f"the kernel has no loop over n_cols: {cols_name}={bc} < n_cols={t.n_cols} "
                                     "leaves columns unprocessed"))
    est.regs_per_thread = min(MAX_REGS + 1, _round_up(24 + per_thread * live, 8))
    if 24 + per_thread * live > MAX_REGS:
        fired.append(("spill", f"{cols_name}={bc}" + (f", {k.block_params['n_rows']}={br}" if "n_rows" in k.block_params
                      else "") + f", {k.names.get('warps', 'num_warps')}={w}: {per_thread:.0f} elements per thread "
                      f"x {live:g} live values ~ {24 + per_thread * live:.0f} registers > {MAX_REGS}: spills"))
    if per_thread < 1 and any(p.role == "warps" and p.choices and min(p.choices) < w for p in space.params):
        fired.append(("idle_threads", f"{br * bc} elements per program for {32 * w} threads "
                                      f"({k.names.get('warps', 'num_warps')}={w}): threads sit idle; fewer warps do "
                                      "the "
                                      "same work"))
    threads = t.threads
    est.smem_bytes = br * w * 4 * 2 if _REDUCTIONS[kind] and w > 1 else 0
    if est.regs_per_thread * threads > gpu.regs_per_sm:
        cap = gpu.regs_per_sm // threads
        fired.append(("regs_per_block", f"{est.regs_per_thread} registers x {threads} threads > "
                                        f"{gpu.regs_per_sm} registers per SM"))
        if not any(rule == "spill" for rule, _ in fired):
            # the compiler caps each thread at regs_per_sm / threads and spills the rest (seen on the
            # H200: BLOCK_M=8, BLOCK_N=8192, 16 warps spilled at ~184 estimated registers, cap 128)
            fired.append(("spill", f"{threads} threads leave at most {cap} registers per thread; "
                                   f"~{est.regs_per_thread} needed: spills"))
    return fired


def _occupancy_and_grid(t: _Tile, values: dict[str, int], space: CandidateSpace, gpu: GpuSpec, kind: str,
                        est: ConfigEstimate, reg_scale: float) -> None:
    """Occupancy, grid, waves, the persistent grid's programs and the tail the blocks overhang."""
    from egg_mcp.tiling.costs import MAX_REGS, _ctas_per_sm, _persistent, _round_up

    br, bc, w, threads = t.br, t.bc, t.w, t.threads
    # occupancy: a looping program's registers from the fit to compiled ones (the estimate above stays the spill
    # test), at this pricing's point of the register spread (stream() prices a looping config three times)
    occ_regs = (_occupancy_regs(br, bc, w, t.nbytes, t.per_thread, t.live) if t.looping
                else min(est.regs_per_thread, MAX_REGS))
    t.occ_regs = occ_regs = min(MAX_REGS, _round_up(int(occ_regs * reg_scale), 8))
    c = _ctas_per_sm(gpu, threads, occ_regs, est.smem_bytes)
    t.ctas = est.ctas_per_sm = c
    est.occupancy = c * threads / gpu.max_threads_per_sm

    if kind == "elementwise":
        grid = [math.ceil(t.n_rows / br), math.ceil(t.n_cols / bc)]
        iters = 1
    else:
        grid = [math.ceil(t.n_rows / br)]
        iters = math.ceil(t.n_cols / bc) if t.loops else 1
    t.grid, t.iters = grid, iters
    t.programs = programs = math.prod(grid)
    est.grid = grid
    est.waves = programs / (gpu.sm_count * max(c, 1))
    t.launched = _persistent(est, space, gpu, values, programs, c)
    t.covered = covered = grid[0] * br * (grid[1] * bc if kind == "elementwise" else iters * bc)
    est.tail_waste = max(0.0, 1 - t.n_rows * t.n_cols / covered)
    est.intensity = 0.0


def _traffic(t: _Tile, gpu: GpuSpec, kind: str) -> tuple[float, float, float, int]:
    """Bytes one program moves: (reads, reads + writes, the broadcast operand's once-per-SM bytes, passes)."""
    from egg_mcp.tiling.costs import time_scale

    nbytes, br, bc, n_rows, n_cols = t.nbytes, t.br, t.bc, t.n_rows, t.n_cols
    # bytes one program moves: reads (a second pass over a row re-reads it, from L2 when it fits) + writes
    row_elems = br * (bc if kind == "elementwise" else n_cols)
    reads = row_elems * nbytes
    passes = 2 if kind in ("softmax", "norm") and t.iters > 1 else 1
    if passes > 1:
        working_set = gpu.sm_count * t.ctas * row_elems * nbytes
        reads += reads * second_pass_share(working_set, gpu.l2_bytes)
    writes = row_elems * nbytes if kind != "reduction" else br * 4
    broadcast_once = 0.0
    if kind == "elementwise" and n_rows > 1:
        # the broadcast operand (a bias row), read by every program: the whole row is n_cols elements, and when it
        # fits an SM's L1 (>= its shared-memory size; 16 KB for an 8192-wide bf16 bias) each SM fetches it once
        # (from L2) and every later program hits L1. Charged at DRAM cost per program, it priced biasgelu_a's
        # BLOCK_M=1 tiles ~15 % slow (113-118 us predicted, 99-104 measured on the H200)
        if n_cols * nbytes <= gpu.smem_per_sm_bytes / 2:
            broadcast_once = n_cols * nbytes / time_scale(gpu).l2_over_dram
        else:
            reads += bc * nbytes
    return reads, reads + writes, broadcast_once, passes


def _issue_time(t: _Tile, space: CandidateSpace, gpu: GpuSpec, kind: str, passes: int, active: int) -> float:
    """Instruction issue: every launched lane (masked ones too) costs ~ops instructions; a scheduler
    needs ~4 resident warps to hide ALU / MUFU latency."""
    from egg_mcp.tiling.costs import (
        _BASE_OPS,
        _FUNCTION_OPS,
        _TRANSCENDENTAL,
        LOOP_TRIP_OPS,
        TRANSCENDENTAL_OPS,
    )

    calls = {c.split(".")[-1] for kn in space.kernels for c in kn.tl_calls}
    # a norm takes its sqrt / rsqrt of the row's statistic, once per row: not an element's cost
    per_row = {"sqrt", "rsqrt"} if kind == "norm" else set()
    ops = _BASE_OPS[kind] + sum(_FUNCTION_OPS.get(f, TRANSCENDENTAL_OPS) for f in (calls & _TRANSCENDENTAL) - per_row)
    lanes = t.covered * passes
    warps_per_scheduler = min(t.ctas * t.w, gpu.max_threads_per_sm // 32) / 4
    issue_rate = 4 * 32 * (gpu.sm_clock_mhz or 1500) * 1e6 * min(1.0, warps_per_scheduler / 4)
    # every thread pays each trip's bookkeeping whatever its elements (costs.LOOP_TRIP_OPS): many warps over a
    # small block are slow
    thread_trips = t.programs * t.threads * t.iters * passes if t.looping else 0
    return (lanes * ops + thread_trips * LOOP_TRIP_OPS) / active / issue_rate


def _price(t: _Tile, space: CandidateSpace, gpu: GpuSpec, kind: str, est: ConfigEstimate) -> None:
    """The busiest SM's time: a smooth max of bandwidth, latency (or warp streaming) and issue, floored by
    program dispatch, stretched by a partial last wave; notes say which bound it is."""
    from egg_mcp.tiling.costs import (
        _REDUCTIONS,
        OVERLAP_P,
        SM_MAX_SHARE,
        STREAM_KNEE_P,
        WARP_ILP,
        resident,
        time_scale,
    )

    scale = time_scale(gpu)

    w, c, iters, programs, launched = t.w, t.ctas, t.iters, t.programs, t.launched
    reads, program_bytes, broadcast_once, passes = _traffic(t, gpu, kind)
    active = min(gpu.sm_count, programs)
    share = min(SM_MAX_SHARE * gpu.dram_bytes_per_s / gpu.sm_count, gpu.dram_bytes_per_s / active)
    # narrow rows: a 32-byte sector is the unit of DRAM traffic, so a row segment under 32 B wastes the rest.
    # Per-thread access width does not cost bandwidth: a warp's accesses to consecutive addresses coalesce
    # into the 32-byte sectors that cover them, 4-byte scalars included (CUDA C++ Best Practices Guide,
    # "Coalesced Access to Global Memory", compute capability >= 6.0); narrower accesses cost issue slots
    # instead (t_issue below). The 0.9 derate this model had for accesses under 16 B per thread ranked
    # 4-byte-per-thread configs of rowsum_a (fp32) slower while they ran at the roof (stored H200 timings,
    # benchmarks/results/archive/tiling/rank_replay_4a3dfb2.md).
    sector = min(1.0, t.bc * t.nbytes / 32)
    per_sm_programs = programs / active
    t_bandwidth = (per_sm_programs * program_bytes + broadcast_once) / (share * sector)
    chain = iters * passes * scale.dram_latency_s + scale.program_fixed_s + _REDUCTIONS[kind] * (
        scale.reduction_step_s * math.log2(max(w, 1) * 2) * (iters * passes if kind == "softmax" and iters > 1 else 1))
    held = resident(c, launched, active)  # a persistent grid's SM holds its own programs, not all that fit
    rounds = math.ceil(math.ceil(per_sm_programs) / held)
    resident_warps = min(held, per_sm_programs) * w
    if iters > 1:
        # a loop over the row: its loads are not a serial chain (LLVM unrolls short bodies x4 and every resident
        # warp has its trip's loads in flight, benchmarks/tiling_compile_study.py), but each resident warp
        # streams at ~warp_stream_bps (calibrate's, or costs.WARP_STREAM_BPS), so few resident warps cannot reach
        # the SM's bandwidth share. Loads only: a store does not hold its warp (the rate was measured on a sum, whose
        # traffic is all loads). A warp with more registers keeps more loads in flight (costs.WARP_ILP)
        ilp_regs, ilp_exp, ilp_cap = WARP_ILP
        warp_bps = scale.warp_stream_bps * min(ilp_cap, max(1.0, t.occ_regs / ilp_regs)) ** ilp_exp
        t_latency = (per_sm_programs * reads / (resident_warps * warp_bps)
                     + rounds * (chain - iters * passes * scale.dram_latency_s))
    else:
        t_latency = rounds * chain
    t_issue = _issue_time(t, space, gpu, kind, passes, active)
    # smooth max: near the boundary neither bandwidth, latency nor issue is fully hidden behind the others
    memory = (t_bandwidth, t_latency)
    if t.looping:  # a loop's DRAM share and its warps' streaming meet at a soft knee (costs.STREAM_KNEE_P)
        memory = ((t_bandwidth ** STREAM_KNEE_P + t_latency ** STREAM_KNEE_P) ** (1 / STREAM_KNEE_P),)
    t_sm = sum(x ** OVERLAP_P for x in (*memory, t_issue)) ** (1 / OVERLAP_P) * (1 + 0.1 * est.tail_waste)
    # an SM starts programs at a bounded rate whatever they do: a hard floor, not blended in the smooth max (the
    # dispatcher runs beside the programs; blended, it moved softmax_b's one-row configs by ~1 %)
    t_dispatch = programs / gpu.sm_count * scale.program_dispatch_s
    if t_dispatch > t_sm:
        est.notes.append(f"dispatch-bound: {programs} programs of {t.br * t.bc} elements; an SM starts one every "
                         f"~{scale.program_dispatch_s * 1e9:.0f} ns: larger blocks help")
    t_sm = max(t_sm, t_dispatch)
    w_exact = est.waves
    if w_exact > 1:
        t_sm *= 1 + 0.3 * (math.ceil(w_exact) - w_exact) / math.ceil(w_exact)
    est.predicted_ms = (t_sm + scale.launch_overhead_s) * 1e3
    if t_latency > t_bandwidth and iters > 1:
        est.notes.append(f"warp-limited: {resident_warps:.0f} resident warps per SM stream "
                         f"~{resident_warps * warp_bps / 1e9:.0f} GB/s, below the SM's DRAM share: more "
                         "resident warps (fewer registers per thread, more programs) help")
    elif t_latency > t_bandwidth:
        est.notes.append(f"latency-bound: {math.ceil(per_sm_programs)} programs per SM, {c} resident, "
                         f"{iters * passes} dependent loads each")
    if launched < gpu.sm_count:
        est.notes.append(f"only {launched} programs for {gpu.sm_count} SMs")
