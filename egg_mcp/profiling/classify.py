"""From readings to a verdict: the bottleneck of each kernel, its distance to the floor, and the next
moves that make sense in the current stage.

The rules follow Nsight Compute's speed-of-light logic: a unit above ~60% of its peak is the roof
the kernel is pressed against (memory or compute); when neither is busy the kernel is starved of
parallelism (latency or occupancy); when the kernel is only a few microseconds long, launch
overhead (~3 us measured on the H200) dominates. The roofline of the task (FLOPs and minimum bytes)
says how far the measured time is from the physical floor; near the floor, further work is waste.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from egg_mcp.analysis.roofline import floor_provenance
from egg_mcp.analysis.verdict import AT_ROOF_FRACTION, roofline_verdict
from egg_mcp.hardware import GpuSpec, ceiling
from egg_mcp.profiling.metrics import STALL_REASONS, spec, stall_metric
from egg_mcp.profiling.models import Bound, Classification, Evidence, KernelProfile, Metric, MetricSource, Roofline
from egg_mcp.profiling.occupancy import OccupancyEstimate
from egg_mcp.stages import Stage

BUSY_PCT = 60.0
"""A unit above this % of peak is the bottleneck (ncu's SOL guidance)."""
LAUNCH_BOUND_NS = 5_000.0
"""Kernels shorter than this are dominated by launch overhead (~3 us per launch on the H200)."""
NEAR_FLOOR = AT_ROOF_FRACTION
"""floor / measured at or above this: the kernel is at the roof (the one rule of `analysis.verdict`)."""
TENSOR_PATHS = {"tf32x3": 'input_precision="tf32x3"', "tf32": 'input_precision="tf32"',
                "bf16": "bf16 operands", "fp16": "fp16 operands", "fp8": "fp8 operands"}
"""Compute paths that run dots on tensor cores, and how a tl.dot asks for each."""
LOW_BYTES_PER_SECTOR = 20.0
"""Fewer useful bytes per 32-byte sector than this: global loads are poorly coalesced."""
UNCOALESCED_SECTORS_PER_REQUEST = 16.0
"""More sectors per warp-wide load than a 16-byte-per-thread vector load needs: scattered."""

# Names of readings that do not come from ncu (fallback path and cross-checks).
EVENT_DURATION = "event.duration"
TRITON_REGS = "triton.n_regs"
TRITON_SPILLS = "triton.n_spills"
TRITON_SHARED = "triton.shared"
TRITON_NUM_WARPS = "triton.num_warps"
TRITON_NUM_STAGES = "triton.num_stages"
GRID_BLOCKS = "launch.grid_blocks"

_ALL_STAGES = frozenset(Stage) - {Stage.DONE}
_S, _A, _P, _T, _M = Stage.SEEDS, Stage.ALGORITHM, Stage.PARALLEL_MAPPING, Stage.TILING, Stage.MEMORY


@dataclass
class Readings:
    """The handful of numbers the rules read, from whichever source had them."""

    values: dict[str, float | None]
    sources: dict[str, MetricSource]

    @classmethod
    def of(cls, metrics: list[Metric]) -> Readings:
        return cls({m.name: m.value for m in metrics}, {m.name: m.source for m in metrics})

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def first(self, *names: str) -> float | None:
        return next((v for n in names if (v := self.values.get(n)) is not None), None)

    @property
    def duration_ns(self) -> float | None:
        return self.first("gpu__time_duration.sum", EVENT_DURATION)

    @property
    def registers(self) -> float | None:
        return self.first("launch__registers_per_thread", TRITON_REGS)

    @property
    def grid(self) -> float | None:
        return self.first("launch__grid_size", GRID_BLOCKS)

    @property
    def dram_bytes(self) -> float | None:
        r, w = self.get("dram__bytes_read.sum"), self.get("dram__bytes_write.sum")
        return None if r is None and w is None else (r or 0.0) + (w or 0.0)

    @property
    def local_bytes(self) -> float | None:
        ld, st = self.get("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"), self.get("l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum")
        return None if ld is None and st is None else (ld or 0.0) + (st or 0.0)

    @property
    def shared_bytes(self) -> float | None:
        s, d = self.get("launch__shared_mem_per_block_static"), self.get("launch__shared_mem_per_block_dynamic")
        if s is None and d is None:
            return self.get(TRITON_SHARED)
        return (s or 0.0) + (d or 0.0)

    @property
    def tensor_pct(self) -> float | None:
        return self.get("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")

    @property
    def sectors_per_request(self) -> float | None:
        sectors = self.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
        requests = self.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
        if not requests or sectors is None or sectors < 64:
            return None
        return sectors / requests

    @property
    def bytes_per_sector(self) -> float | None:
        sectors = self.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
        requested = self.get("smsp__sass_data_bytes_mem_global_op_ld.sum")
        if not sectors or requested is None or sectors < 64:
            return None
        return requested / sectors

    def stalls(self) -> list[tuple[str, float]]:
        found = [(r, v) for r in STALL_REASONS if (v := self.get(stall_metric(r))) is not None]
        return sorted(found, key=lambda rv: -rv[1])


@dataclass
class _Moves:
    """Candidate next moves, each tagged with the stages where it is the right thing to do."""

    items: list[tuple[frozenset[Stage], str]] = field(default_factory=list)

    def add(self, stages: set[Stage] | frozenset[Stage], text: str) -> None:
        self.items.append((frozenset(stages), text))

    def for_stage(self, stage: Stage, limit: int = 4) -> list[str]:
        here = [t for s, t in self.items if stage in s]
        if here:
            return here[:limit]
        elsewhere = [(s, t) for s, t in self.items if s]
        if not elsewhere:
            return []
        stages, text = elsewhere[0]
        later = min(stages, key=lambda s: list(Stage).index(s))
        return [f"nothing to change for this kernel in {stage.value}; the bottleneck is a {later.value} matter: {text}"]


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def _ev(r: Readings, name: str, why: str | None = None, value: float | None = None, unit: str = "",
        source: MetricSource | None = None) -> Evidence:
    s = spec(name)
    return Evidence(
        metric=name, value=r.get(name) if value is None else value, unit=unit,
        why=why or (s.why if s else ""), source=source or r.sources.get(name, "computed"),
    )


def roofline(
    gpu: GpuSpec | None, *, flops: float | None, min_bytes: float | None, measured_ms: float | None,
    compute_type: str = "fp32", floor_ms: float | None = None
) -> Roofline | None:
    """Place the task on `gpu`'s roofline and measure the distance of `measured_ms` to the floor (None
    without a GPU spec: no ceilings, no roofline). `compute_type` is the fastest admissible path of the
    precision ladder and `floor_ms` the task analysis' floor for it (the one floor verify and the briefs
    use); the words come from `analysis.verdict.roofline_verdict`."""
    if gpu is None or (not flops and not min_bytes):
        return None
    if compute_type not in gpu.peak_flops:
        raise ValueError(f"unknown compute type {compute_type!r}; use one of {', '.join(gpu.peak_flops)}")
    flops_v, bytes_v = flops or 0.0, min_bytes or 0.0
    floor_ms = floor_ms or 1e3 * gpu.floor_seconds(flops_v, bytes_v, compute_type)
    ridge = gpu.ridge_point(compute_type)
    ai = flops_v / bytes_v if bytes_v else None
    bound_by = "memory" if bytes_v / gpu.dram_bytes_per_s >= flops_v / gpu.peak_flops[compute_type] else "compute"
    roof = Roofline(
        compute_type=compute_type, flops=flops, min_bytes=min_bytes, arithmetic_intensity=ai, ridge_point=ridge,
        bound_by=bound_by, floor_ms=floor_ms, measured_ms=measured_ms,
        ceilings_source=floor_provenance(gpu, compute_type),
    )
    ai_text = f"{ai:.3g} FLOP/B vs ridge {ridge:.3g}" if ai is not None else "no minimum bytes given"
    verdict = roofline_verdict(measured_ms, floor_ms, compute_type, bound=bound_by)
    roof.fraction_of_floor = verdict.fraction_of_floor
    roof.near_floor = verdict.status == "at_roof"
    roof.summary = f"{bound_by}-bound task ({ai_text}) on the {compute_type} roof; {verdict.text}"
    return roof


def classify_kernel(
    name: str,
    metrics: list[Metric],
    *,
    stage: Stage | str,
    gpu: GpuSpec | None,
    launches: int = 1,
    time_share: float | None = None,
    task_roofline: Roofline | None = None,
    occupancy_estimate: OccupancyEstimate | None = None,
    admissible_path: str | None = None,
) -> KernelProfile:
    """Classify one kernel from its readings (ncu metrics and/or fallback values).

    `task_roofline` is applied to this kernel only when it is the forward's single kernel (the
    task's FLOPs and bytes cannot be split between kernels honestly); `occupancy_estimate` is the
    calculator's result when ncu's occupancy metrics are absent. `admissible_path` is the fastest compute
    path the precision ladder admits when the task has dots (None without dots): a kernel whose tensor
    pipe idles while a tensor-core path is admissible is told so before "only less traffic helps".
    """
    stage = Stage(stage)
    r = Readings.of(metrics)
    evidence: list[Evidence] = []
    moves = _Moves()
    sms = gpu.sm_count if gpu else None
    dur_ns = r.duration_ns
    dur_ms = dur_ns / 1e6 if dur_ns is not None else None
    duration_source = "gpu__time_duration.sum" if r.get("gpu__time_duration.sum") is not None else EVENT_DURATION

    # --- distance to the floor --------------------------------------------------------------------
    distance = ""
    near_floor = False
    dram_frac = None
    if gpu and r.dram_bytes is not None and dur_ns:
        dram_frac = (r.dram_bytes / (dur_ns * 1e-9)) / gpu.dram_bytes_per_s
        evidence.append(_ev(r, "computed.dram_bandwidth_of_peak", value=100 * dram_frac, unit="%", source="computed",
                            why=f"{_fmt_bytes(r.dram_bytes)} moved in {dur_ms:.3g} ms vs the "
                                f"DRAM ceiling of {gpu.name}: {ceiling(gpu, 'dram').label()}"))
    if task_roofline is not None and task_roofline.floor_ms is not None and dur_ms:
        verdict = roofline_verdict(dur_ms, task_roofline.floor_ms, task_roofline.compute_type,
                                   bound=task_roofline.bound_by)
        near_floor = verdict.status == "at_roof"
        distance = verdict.text
        if task_roofline.min_bytes and r.dram_bytes:
            excess = r.dram_bytes / task_roofline.min_bytes
            evidence.append(Evidence(
                metric="computed.dram_bytes_vs_minimum", value=excess, unit="x", source="computed",
                why=f"DRAM traffic {_fmt_bytes(r.dram_bytes)} vs the task's minimum {_fmt_bytes(task_roofline.min_bytes)}"
                    + ("; the excess is re-reads or spills" if excess > 1.2 else ""),
            ))
            if excess > 1.5:
                moves.add({_A}, f"moves {excess:.1f}x the minimum DRAM bytes: fuse or reorder so each byte is read once")
                moves.add({_T}, f"moves {excess:.1f}x the minimum DRAM bytes: larger tiles raise reuse of each load")
                moves.add({_M}, f"moves {excess:.1f}x the minimum DRAM bytes: reorder programs (grouped pid) for L2 reuse")
    elif dram_frac is not None:
        distance = f"at {100 * dram_frac:.0f}% of DRAM peak for the bytes it moves"

    # --- the bound --------------------------------------------------------------------------------
    sm_pct = r.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    mem_pct = r.first("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                      "dram__throughput.avg.pct_of_peak_sustained_elapsed")
    dram_pct = r.get("dram__throughput.avg.pct_of_peak_sustained_elapsed")
    tensor = r.tensor_pct
    limiter: str | None = None
    bound: Bound = "unknown"

    if dur_ns is not None and dur_ns < LAUNCH_BOUND_NS:
        bound = "launch-bound"
        headline = f"{dur_ns / 1e3:.2g} us per launch, comparable to the ~3 us launch overhead"
        evidence.append(_ev(r, duration_source, value=dur_ns, unit="ns",
                            why="a kernel this short is dominated by launch overhead, not by its own work"))
        moves.add({_S, _A}, f"fuse this kernel with its neighbours: at {dur_ns / 1e3:.2g} us it is mostly launch overhead")
        moves.add({_P}, "give each program more work (fewer, larger programs or a persistent loop) and fewer launches")
        moves.add({_T, _M}, "tuning tiles or memory will not help a launch-bound kernel: reduce launches (fusion, CUDA graphs)")
    elif sm_pct is not None or mem_pct is not None:
        compute_pct = max(sm_pct or 0.0, tensor or 0.0)
        memory_pct = max(mem_pct or 0.0, dram_pct or 0.0)
        if sm_pct is not None:
            evidence.append(_ev(r, "sm__throughput.avg.pct_of_peak_sustained_elapsed", unit="%"))
        if mem_pct is not None:
            evidence.append(_ev(r, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", unit="%"))
        roof_pct = max(tensor or 0.0, dram_pct or 0.0)
        if roof_pct >= BUSY_PCT:
            # the two real roofs first: a busy tensor pipe (a GEMM also keeps shared memory busy,
            # which inflates the memory SOL) or busy DRAM
            bound = "compute-bound" if (tensor or 0.0) >= (dram_pct or 0.0) else "memory-bound"
        elif max(compute_pct, memory_pct) >= BUSY_PCT:
            bound = "memory-bound" if memory_pct >= compute_pct else "compute-bound"
        else:
            bound = "latency-or-occupancy-bound"
        headline = f"{bound}: SM {compute_pct:.0f}% / memory {memory_pct:.0f}% of peak"
    else:
        # no counters: judge from the task roofline (single kernel) and the computed occupancy
        headline = "no hardware counters"
        if task_roofline is not None and dur_ms and task_roofline.floor_ms:
            frac = task_roofline.floor_ms / dur_ms
            if frac >= BUSY_PCT / 100:
                bound = "memory-bound" if task_roofline.bound_by == "memory" else "compute-bound"
                headline = f"{bound} by the roofline (event timing, no counters)"
        if bound == "unknown" and occupancy_estimate is not None and occupancy_estimate.occupancy_pct < 25:
            bound = "latency-or-occupancy-bound"
            headline = f"occupancy {occupancy_estimate.occupancy_pct:.0f}% (computed; no counters)"

    # --- occupancy and its limiter -------------------------------------------------------------------
    achieved = r.get("sm__warps_active.avg.pct_of_peak_sustained_active")
    theoretical = r.get("sm__maximum_warps_per_active_cycle_pct")
    limits = {k: r.get(f"launch__occupancy_limit_{k}") for k in ("registers", "shared_mem", "blocks", "warps")}
    ncu_limits = {k: v for k, v in limits.items() if v is not None}
    occ_limiter = None
    blocks_per_sm = None
    if ncu_limits:
        blocks_per_sm = min(ncu_limits.values())
        occ_limiter = min(ncu_limits, key=lambda k: (ncu_limits[k], ("warps", "blocks", "registers", "shared_mem").index(k)))
        occ_limiter = {"shared_mem": "shared_memory"}.get(occ_limiter, occ_limiter)
    elif occupancy_estimate is not None:
        blocks_per_sm = occupancy_estimate.blocks_per_sm
        occ_limiter = occupancy_estimate.limiter
        theoretical = theoretical if theoretical is not None else occupancy_estimate.occupancy_pct
    low_theoretical = theoretical is not None and theoretical < 50
    if theoretical is not None and (low_theoretical or (achieved is not None and achieved < 0.6 * theoretical)):
        src: MetricSource = "ncu" if r.get("sm__maximum_warps_per_active_cycle_pct") is not None else "computed"
        evidence.append(Evidence(metric="sm__maximum_warps_per_active_cycle_pct" if src == "ncu" else "computed.theoretical_occupancy",
                                 value=theoretical, unit="%", source=src,
                                 why=f"theoretical occupancy limited by {occ_limiter or 'unknown'}: fewer warps to hide latency"))
        if achieved is not None:
            evidence.append(_ev(r, "sm__warps_active.avg.pct_of_peak_sustained_active", unit="%"))
    if bound == "latency-or-occupancy-bound":
        if low_theoretical and occ_limiter in ("registers", "shared_memory"):
            limiter = f"occupancy ({occ_limiter})"
        elif sms and r.grid is not None and r.grid < sms:
            limiter = "grid smaller than the SM count"
        else:
            stalls = r.stalls()
            limiter = f"latency ({stalls[0][0]} stalls)" if stalls else "latency"
        headline += f"; limited by {limiter}"

    # registers, spills, shared memory
    regs = r.registers
    spills_n = r.get(TRITON_SPILLS)
    local = r.local_bytes
    spilling = (spills_n or 0) > 0 or (local or 0) > 0
    if spilling:
        if local:
            evidence.append(Evidence(metric="l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum+st", value=local, unit="byte",
                                     source="ncu", why="local-memory traffic from register spills"))
        if spills_n:
            evidence.append(_ev(r, TRITON_SPILLS, unit="register", why="registers the compiler spilled to local memory"))
        regs_text = f"registers {regs:.0f}" if regs is not None else "registers at the cap"
        moves.add({_T}, f"{regs_text} with spills: smaller BLOCK_N/BLOCK_K or fewer num_stages (or more num_warps to spread the tile)")
        moves.add({_M}, f"register spills cause local-memory traffic ({_fmt_bytes(local) if local else f'{spills_n:.0f} spilled'}): shorten live ranges or shrink tiles")
        moves.add({_S, _A}, "the kernel spills registers: keep less live state per program (smaller blocks)")
    if regs is not None and (regs >= 128 or spilling):
        evidence.append(_ev(r, "launch__registers_per_thread" if r.get("launch__registers_per_thread") is not None else TRITON_REGS,
                            unit="register/thread"))
    if occ_limiter == "registers" and low_theoretical and not spilling:
        moves.add({_T}, f"registers {regs:.0f}/thread cap occupancy at {theoretical:.0f}%: smaller tiles or fewer live values"
                  if regs is not None else "registers cap occupancy: smaller tiles")
    smem = r.shared_bytes
    if occ_limiter == "shared_memory" and low_theoretical and smem:
        moves.add({_T, _M}, f"shared memory {smem / 1024:.0f} KiB/block allows {blocks_per_sm:.0f} block(s)/SM: "
                  "fewer num_stages or a smaller BLOCK_K")
        evidence.append(Evidence(metric="launch__shared_mem_per_block", value=smem, unit="byte",
                                 source=r.sources.get("launch__shared_mem_per_block_dynamic", r.sources.get(TRITON_SHARED, "computed")),
                                 why="shared memory per block is the occupancy limiter"))

    # grid, waves
    grid = r.grid
    if sms and grid is not None and grid < sms:
        idle = 100 * (1 - grid / sms)
        evidence.append(_ev(r, "launch__grid_size" if r.get("launch__grid_size") is not None else GRID_BLOCKS, unit="block",
                            why=f"{grid:.0f} blocks for {sms} SMs: {idle:.0f}% of the SMs have nothing to do"))
        moves.add({_P}, f"grid {grid:.0f} blocks < {sms} SMs: {idle:.0f}% of the GPU idle; split another dimension across "
                  "programs (smaller BLOCK_M, split-K) so every SM gets work")
        moves.add({_T}, f"grid {grid:.0f} blocks < {sms} SMs: smaller tiles make more programs")
    waves = r.get("launch__waves_per_multiprocessor")
    if waves is not None and 1 < waves < 4:
        efficiency = waves / math.ceil(waves)
        if efficiency < 0.8:
            evidence.append(_ev(r, "launch__waves_per_multiprocessor", unit="wave",
                                why=f"the last wave is {100 * (waves - math.floor(waves)):.0f}% full: "
                                    f"{100 * (1 - efficiency):.0f}% of SM time idles in the tail"))
            moves.add({_P}, f"{waves:.2f} waves: the last wave is mostly empty; size the grid to whole waves or use a persistent grid")

    # coalescing, caches
    bps = r.bytes_per_sector
    if bps is not None:
        if bps < LOW_BYTES_PER_SECTOR:
            evidence.append(Evidence(metric="computed.global_load_bytes_per_sector", value=bps, unit="byte/sector",
                                     source="computed",
                                     why="useful bytes per 32-byte sector fetched: below 32 the loads are uncoalesced"))
            moves.add({_M}, f"loads {bps:.1f} B/sector (32 is ideal): uncoalesced; make the innermost tl.arange walk the "
                      "stride-1 dimension (or stage the tile through shared memory)")
            moves.add({_P}, f"loads {bps:.1f} B/sector: map adjacent program lanes to contiguous addresses")
    spr = r.sectors_per_request
    if bps is None and spr is not None and spr > UNCOALESCED_SECTORS_PER_REQUEST:
        # without the requested-bytes counter: a warp's load touching more sectors than even a
        # 16-byte-per-thread vector load needs (16) is scattered
        evidence.append(Evidence(metric="computed.global_load_sectors_per_request", value=spr, unit="sector/request",
                                 source="computed",
                                 why="32-byte sectors per warp-wide load: 4 (4 B/thread) to 16 (16 B/thread) when "
                                     "coalesced, 32 when every thread hits its own sector"))
        moves.add({_M}, f"loads touch {spr:.0f} sectors per request (4-16 when coalesced): uncoalesced; make the "
                  "innermost tl.arange walk the stride-1 dimension (or stage the tile through shared memory)")
    l2 = r.get("lts__t_sector_hit_rate.pct")
    if l2 is not None and l2 < 50 and bound == "memory-bound":
        evidence.append(_ev(r, "lts__t_sector_hit_rate.pct", unit="%"))

    # the bound's own moves
    idle_tensor = admissible_path in TENSOR_PATHS and (tensor is None or tensor < 30)
    if idle_tensor and not near_floor and admissible_path is not None:  # (idle_tensor implies a path)
        moves.add({_S, _A, _T, _M}, f"dots off the tensor cores (tensor pipe {'unread' if tensor is None else f'{tensor:.0f}%'}) "
                  f"while {admissible_path} passes this tolerance: tl.dot(..., {TENSOR_PATHS[admissible_path]}) "
                  "changes the class before any traffic work")
    if bound == "memory-bound" and not near_floor:
        moves.add({_M}, f"memory-bound at {mem_pct or dram_pct or 0:.0f}% of peak: vectorised contiguous loads, "
                  "more bytes in flight (num_stages, larger BLOCK), evict-first hints on streamed data")
        if not idle_tensor:
            moves.add({_A, _S}, "memory-bound: only less traffic helps now (fuse producers/consumers, lower precision I/O)")
    if bound == "compute-bound" and not near_floor:
        if tensor is not None:
            evidence.append(Evidence(metric="tensor pipe", value=tensor, unit="%", source="ncu",
                                     why="tensor-core activity: GEMM-like work should run here"))
        if tensor is not None and tensor < 30:
            moves.add({_S, _A, _T}, f"SM busy but the tensor pipe at {tensor:.0f}%: put the math on tl.dot "
                      "(fp16/bf16, or tf32 where the tolerance allows)")
        moves.add({_T}, "compute-bound: larger BLOCK_M/BLOCK_N (more MMA per load), num_warps 8, num_stages 3-4")
        moves.add({_M}, "compute-bound: memory changes will not help; check instruction mix (fewer integer/index ops)")
    stalls = r.stalls()
    if stalls and bound in ("latency-or-occupancy-bound", "memory-bound"):
        top, value = stalls[0]
        evidence.append(_ev(r, stall_metric(top), unit="cycles/issue", why=STALL_REASONS[top]))
        if top == "long_scoreboard":
            moves.add({_M}, f"warps wait on global memory ({value:.1f} cycles/issue): more loads in flight "
                      "(num_stages+1, prefetch the next tile) or more warps")
            moves.add({_P}, "warps wait on memory: more resident warps/programs per SM to hide the latency")
        elif top == "barrier":
            moves.add({_A, _T}, f"barrier stalls ({value:.1f} cycles/issue): fewer block-wide reductions per tile, more work between them")
        elif top in ("mio_throttle", "short_scoreboard"):
            moves.add({_M, _T}, f"{top} stalls ({value:.1f} cycles/issue): shared-memory pressure; fewer shared round trips, wider accesses")
        elif top == "lg_throttle":
            moves.add({_M}, f"lg_throttle stalls ({value:.1f} cycles/issue): too many narrow loads; vectorise (contiguous BLOCK, 16 B per thread)")
        elif top == "wait":
            moves.add({_T}, f"wait stalls ({value:.1f} cycles/issue): more independent work per thread (ILP), e.g. larger BLOCK per program")
    if bound == "latency-or-occupancy-bound" and limiter and limiter.startswith("occupancy") and occ_limiter == "registers":
        moves.add({_P}, "occupancy is limited by registers: fewer warps per program or smaller per-program tiles")

    # near the floor: say so, and nothing else
    if near_floor:
        headline += f"; {distance}"
        next_moves = [f"{distance}; commit it and move on"]
    else:
        if distance:
            headline += f"; {distance}"
        next_moves = moves.for_stage(stage)

    if dur_ms is not None:
        evidence.insert(0, _ev(r, duration_source, value=dur_ns, unit="ns", why="kernel time (sum over its launches)"))
    if occ_limiter and limiter is None and low_theoretical:
        limiter = f"occupancy ({occ_limiter})"
    return KernelProfile(
        name=name, launches=launches, duration_ms=dur_ms, time_share=time_share, metrics=metrics,
        occupancy=occupancy_estimate, occupancy_source="computed" if occupancy_estimate is not None else (
            "ncu" if theoretical is not None else None),
        classification=Classification(bound=bound, headline=headline, limiter=limiter, near_floor=near_floor),
        evidence=_dedupe(evidence), next_moves=next_moves,
    )


def _dedupe(items: list[Evidence]) -> list[Evidence]:
    seen: set[str] = set()
    out = []
    for e in items:
        if e.metric not in seen:
            seen.add(e.metric)
            out.append(e)
    return out


def summarize(kernels: list[KernelProfile], roof: Roofline | None) -> str:
    """One paragraph: the dominant kernel's verdict, then the task's distance to the floor."""
    if not kernels:
        return "no Triton kernel was profiled" + (f"; {roof.summary}" if roof else "")
    ranked = sorted(kernels, key=lambda k: -(k.time_share or 0))
    top = ranked[0]
    share = f" ({100 * top.time_share:.0f}% of kernel time)" if top.time_share is not None and len(kernels) > 1 else ""
    text = f"{top.name}{share}: {top.classification.headline}."
    if len(kernels) > 1:
        rest = ", ".join(f"{k.name} {k.classification.bound}" + (f" {100 * k.time_share:.0f}%" if k.time_share is not None else "")
                         for k in ranked[1:4])
        text += f" Other kernels: {rest}."
    if roof is not None:
        text += f" Task: {roof.summary}."
    if top.next_moves:
        text += f" Next: {top.next_moves[0]}"
    return text
