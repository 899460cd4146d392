"""The rules of `classify.classify_kernel`, one function per rule: each reads the kernel's readings,
adds the evidence it rests on and the next moves it suggests (tagged by stage) to `Findings`, and
returns what the later rules need (the distance to the floor, the bound, the occupancy limiter).
The order in which `classify_kernel` calls them is the order of the evidence and of the moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from egg_mcp.analysis.verdict import AT_ROOF_FRACTION, roofline_verdict
from egg_mcp.hardware import GpuSpec, ceiling
from egg_mcp.profiling.metrics import STALL_REASONS, spec, stall_metric
from egg_mcp.profiling.occupancy import OccupancyEstimate
from egg_mcp.profiling.profile_report import Bound, Evidence, MetricSource, Roofline
from egg_mcp.stages import Stage

if TYPE_CHECKING:
    from egg_mcp.profiling.classify import Readings

BUSY_PCT = 60.0
"""A unit above this % of peak is the bottleneck (ncu's SOL guidance)."""
LAUNCH_BOUND_NS = 5_000.0
"""Kernels shorter than this are dominated by launch overhead (~3 us per launch on the H200)."""
NEAR_FLOOR = AT_ROOF_FRACTION
"""floor / measured at or above this: the kernel is at the roof (the one rule of `analysis.verdict`)."""
TENSOR_PATHS = {"tf32x3": 'input_precision="tf32x3"', "tf32": 'input_precision="tf32"',
                "fp16x3": "fp16 hi/lo operands: three dots a_hi*b_lo, a_lo*b_hi, a_hi*b_hi",
                "bf16x3": "bf16 hi/lo operands: three dots a_hi*b_lo, a_lo*b_hi, a_hi*b_hi",
                "bf16": "bf16 operands", "fp16": "fp16 operands", "fp8": "fp8 operands"}
"""Compute paths that run dots on tensor cores, and how a tl.dot asks for each."""
LOW_BYTES_PER_SECTOR = 20.0
"""Fewer useful bytes per 32-byte sector than this: global loads are poorly coalesced."""
UNCOALESCED_SECTORS_PER_REQUEST = 16.0
"""More sectors per warp-wide load than a 16-byte-per-thread vector load needs: scattered."""

_ALL_STAGES = frozenset(Stage) - {Stage.DONE}
_S, _A, _P, _T, _M = Stage.SEEDS, Stage.ALGORITHM, Stage.PARALLEL_MAPPING, Stage.TILING, Stage.MEMORY


@dataclass
class Moves:
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


@dataclass
class Findings:
    """What the rules found for one kernel, in the order they fired: evidence and next moves."""

    evidence: list[Evidence] = field(default_factory=list)
    moves: Moves = field(default_factory=Moves)


@dataclass
class Occupancy:
    """Theoretical occupancy and what limits it, from ncu's limits or else the calculator's estimate."""

    theoretical: float | None
    limiter: str | None
    blocks_per_sm: float | None

    @property
    def low(self) -> bool:
        return self.theoretical is not None and self.theoretical < 50


def fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def evidence(r: Readings, name: str, why: str | None = None, value: float | None = None, unit: str = "",
             source: MetricSource | None = None) -> Evidence:
    """One reading as evidence, with the metric table's reason unless the rule gives its own."""
    s = spec(name)
    return Evidence(
        metric=name, value=r.get(name) if value is None else value, unit=unit,
        why=why or (s.why if s else ""), source=source or r.sources.get(name, "computed"),
    )


def distance_to_floor(r: Readings, gpu: GpuSpec | None, task_roofline: Roofline | None,
                      found: Findings) -> tuple[str, bool]:
    """How far the kernel is from the task's floor (or from DRAM peak for the bytes it moves), and
    whether it is at the roof; traffic well above the task's minimum bytes suggests reuse moves."""
    dur_ns = r.duration_ns
    dur_ms = dur_ns / 1e6 if dur_ns is not None else None
    distance = ""
    near_floor = False
    dram_frac = None
    if gpu and r.dram_bytes is not None and dur_ns:
        dram_frac = (r.dram_bytes / (dur_ns * 1e-9)) / gpu.dram_bytes_per_s
        found.evidence.append(evidence(r, "computed.dram_bandwidth_of_peak", value=100 * dram_frac, unit="%",
                                       source="computed",
                                       why=f"{fmt_bytes(r.dram_bytes)} moved in {dur_ms:.3g} ms vs the "
                                           f"DRAM ceiling of {gpu.name}: {ceiling(gpu, 'dram').label()}"))
    if task_roofline is not None and task_roofline.floor_ms is not None and dur_ms:
        verdict = roofline_verdict(dur_ms, task_roofline.floor_ms, task_roofline.compute_type,
                                   bound=task_roofline.bound_by, has_dots=task_roofline.has_dots)
        near_floor = verdict.status == "at_roof"
        distance = verdict.text + (f" (ceilings: {task_roofline.ceilings})" if task_roofline.ceilings else "")
        if task_roofline.min_bytes and r.dram_bytes:
            excess = r.dram_bytes / task_roofline.min_bytes
            found.evidence.append(Evidence(
                metric="computed.dram_bytes_vs_minimum", value=excess, unit="x", source="computed",
                why=f"DRAM traffic {fmt_bytes(r.dram_bytes)} vs the task's minimum {fmt_bytes(task_roofline.min_bytes)}"
                    + ("; the excess is re-reads or spills" if excess > 1.2 else ""),
            ))
            if excess > 1.5:
                found.moves.add({_A}, f"moves {excess:.1f}x the minimum DRAM bytes: fuse or reorder so each byte is "
                                      "read once")
                found.moves.add({_T}, f"moves {excess:.1f}x the minimum DRAM bytes: larger tiles raise reuse of each "
                                      "load")
                found.moves.add({_M}, f"moves {excess:.1f}x the minimum DRAM bytes: reorder programs (grouped pid) for "
                                      "L2 reuse")
    elif dram_frac is not None:
        distance = f"at {100 * dram_frac:.0f}% of DRAM peak for the bytes it moves"
    return distance, near_floor


def bound_of(r: Readings, task_roofline: Roofline | None, occupancy_estimate: OccupancyEstimate | None,
             found: Findings) -> tuple[Bound, str]:
    """The bound and the headline: launch overhead first, then the speed-of-light counters, else
    (no counters) the task roofline and the computed occupancy."""
    dur_ns = r.duration_ns
    if dur_ns is not None and dur_ns < LAUNCH_BOUND_NS:
        return launch_bound(r, dur_ns, found)
    if r.sm_pct is not None or r.memory_pct is not None:
        return speed_of_light_bound(r, found)
    return counterless_bound(r, task_roofline, occupancy_estimate)


def launch_bound(r: Readings, dur_ns: float, found: Findings) -> tuple[Bound, str]:
    """A kernel of a few microseconds: launch overhead dominates, only fewer launches help."""
    headline = f"{dur_ns / 1e3:.2g} us per launch, comparable to the ~3 us launch overhead"
    found.evidence.append(evidence(r, r.duration_metric, value=dur_ns, unit="ns",
                                   why="a kernel this short is dominated by launch overhead, not by its own work"))
    found.moves.add({_S, _A}, f"fuse this kernel with its neighbours: at {dur_ns / 1e3:.2g} us it is mostly launch "
                              "overhead")
    found.moves.add({_P},
                    "give each program more work (fewer, larger programs or a persistent loop) and fewer launches")
    found.moves.add({_T, _M}, "tuning tiles or memory will not help a launch-bound kernel: reduce launches (fusion, "
                              "CUDA graphs)")
    return "launch-bound", headline


def speed_of_light_bound(r: Readings, found: Findings) -> tuple[Bound, str]:
    """ncu's speed-of-light: the busiest real roof (tensor pipe or DRAM), else the busiest unit, else
    neither is busy and the kernel is starved of parallelism."""
    sm_pct, mem_pct, dram_pct, tensor = r.sm_pct, r.memory_pct, r.dram_pct, r.tensor_pct
    compute_pct = max(sm_pct or 0.0, tensor or 0.0)
    memory_pct = max(mem_pct or 0.0, dram_pct or 0.0)
    if sm_pct is not None:
        found.evidence.append(evidence(r, "sm__throughput.avg.pct_of_peak_sustained_elapsed", unit="%"))
    if mem_pct is not None:
        found.evidence.append(evidence(r, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", unit="%"))
    bound: Bound
    roof_pct = max(tensor or 0.0, dram_pct or 0.0)
    if roof_pct >= BUSY_PCT:
        # the two real roofs first: a busy tensor pipe (a GEMM also keeps shared memory busy,
        # which inflates the memory SOL) or busy DRAM
        bound = "compute-bound" if (tensor or 0.0) >= (dram_pct or 0.0) else "memory-bound"
    elif max(compute_pct, memory_pct) >= BUSY_PCT:
        bound = "memory-bound" if memory_pct >= compute_pct else "compute-bound"
    else:
        bound = "latency-or-occupancy-bound"
    return bound, f"{bound}: SM {compute_pct:.0f}% / memory {memory_pct:.0f}% of peak"


def counterless_bound(r: Readings, task_roofline: Roofline | None,
                      occupancy_estimate: OccupancyEstimate | None) -> tuple[Bound, str]:
    """No counters: judge from the task roofline (single kernel) and the computed occupancy."""
    dur_ns = r.duration_ns
    dur_ms = dur_ns / 1e6 if dur_ns is not None else None
    bound: Bound = "unknown"
    headline = "no hardware counters"
    if task_roofline is not None and dur_ms and task_roofline.floor_ms:
        frac = task_roofline.floor_ms / dur_ms
        if frac >= BUSY_PCT / 100:
            bound = "memory-bound" if task_roofline.bound_by == "memory" else "compute-bound"
            headline = f"{bound} by the roofline (event timing, no counters)"
    if bound == "unknown" and occupancy_estimate is not None and occupancy_estimate.occupancy_pct < 25:
        bound = "latency-or-occupancy-bound"
        headline = f"occupancy {occupancy_estimate.occupancy_pct:.0f}% (computed; no counters)"
    return bound, headline


def occupancy_limit(r: Readings, occupancy_estimate: OccupancyEstimate | None, found: Findings) -> Occupancy:
    """Theoretical occupancy and its limiter (ncu's launch limits, else the calculator's); a low or
    poorly achieved occupancy is evidence."""
    achieved = r.get("sm__warps_active.avg.pct_of_peak_sustained_active")
    theoretical = r.get("sm__maximum_warps_per_active_cycle_pct")
    limits = {k: r.get(f"launch__occupancy_limit_{k}") for k in ("registers", "shared_mem", "blocks", "warps")}
    ncu_limits = {k: v for k, v in limits.items() if v is not None}
    occ_limiter = None
    blocks_per_sm = None
    if ncu_limits:
        blocks_per_sm = min(ncu_limits.values())
        occ_limiter = min(ncu_limits, key=lambda k: (ncu_limits[k], ("warps", "blocks", "registers",
                                                                     "shared_mem").index(k)))
        occ_limiter = {"shared_mem": "shared_memory"}.get(occ_limiter, occ_limiter)
    elif occupancy_estimate is not None:
        blocks_per_sm = occupancy_estimate.blocks_per_sm
        occ_limiter = occupancy_estimate.limiter
        theoretical = theoretical if theoretical is not None else occupancy_estimate.occupancy_pct
    occ = Occupancy(theoretical=theoretical, limiter=occ_limiter, blocks_per_sm=blocks_per_sm)
    if theoretical is not None and (occ.low or (achieved is not None and achieved < 0.6 * theoretical)):
        src: MetricSource = "ncu" if r.get("sm__maximum_warps_per_active_cycle_pct") is not None else "computed"
        found.evidence.append(Evidence(metric="sm__maximum_warps_per_active_cycle_pct" if src == "ncu"
                                       else "computed.theoretical_occupancy",
                                       value=theoretical, unit="%", source=src,
                                       why=f"theoretical occupancy limited by {occ_limiter or 'unknown'}: fewer warps "
                                           "to hide latency"))
        if achieved is not None:
            found.evidence.append(evidence(r, "sm__warps_active.avg.pct_of_peak_sustained_active", unit="%"))
    return occ


def latency_limiter(r: Readings, occ: Occupancy, sms: int | None) -> str:
    """What starves a latency-or-occupancy-bound kernel: its occupancy limiter, a grid smaller than
    the GPU, or else the stall it waits on most."""
    if occ.low and occ.limiter in ("registers", "shared_memory"):
        return f"occupancy ({occ.limiter})"
    if sms and r.grid is not None and r.grid < sms:
        return "grid smaller than the SM count"
    stalls = r.stalls()
    return f"latency ({stalls[0][0]} stalls)" if stalls else "latency"


def register_and_shared_moves(r: Readings, occ: Occupancy, found: Findings) -> None:
    """Register spills, registers or shared memory that cap occupancy: smaller tiles, fewer stages."""
    regs = r.registers
    spills_n = r.spills
    local = r.local_bytes
    spilling = (spills_n or 0) > 0 or (local or 0) > 0
    if spilling:
        if local:
            found.evidence.append(Evidence(metric="l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum+st", value=local,
                                           unit="byte",
                                           source="ncu", why="local-memory traffic from register spills"))
        if spills_n:
            found.evidence.append(evidence(r, r.spills_metric, unit="register", why="registers the compiler spilled to "
                                                                                    "local memory"))
        regs_text = f"registers {regs:.0f}" if regs is not None else "registers at the cap"
        found.moves.add({_T}, f"{regs_text} with spills: smaller BLOCK_N/BLOCK_K or fewer num_stages (or more "
                              "num_warps to spread the tile)")
        found.moves.add({_M}, "register spills cause local-memory traffic "
                              f"({fmt_bytes(local) if local else f'{spills_n:.0f} spilled'}): shorten live ranges or "
                              "shrink tiles")
        found.moves.add({_S, _A}, "the kernel spills registers: keep less live state per program (smaller blocks)")
    if regs is not None and (regs >= 128 or spilling):
        found.evidence.append(evidence(r, r.registers_metric, unit="register/thread"))
    if occ.limiter == "registers" and occ.low and not spilling:
        found.moves.add({_T}, f"registers {regs:.0f}/thread cap occupancy at {occ.theoretical:.0f}%: smaller tiles or "
                              "fewer live values"
                        if regs is not None else "registers cap occupancy: smaller tiles")
    smem = r.shared_bytes
    if occ.limiter == "shared_memory" and occ.low and smem:
        found.moves.add({_T, _M}, f"shared memory {smem / 1024:.0f} KiB/block allows {occ.blocks_per_sm:.0f} "
                                  "block(s)/SM: "
                        "fewer num_stages or a smaller BLOCK_K")
        found.evidence.append(Evidence(metric="launch__shared_mem_per_block", value=smem, unit="byte",
                                       source=r.shared_source, why="shared memory per block is the occupancy limiter"))


def grid_moves(r: Readings, sms: int | None, found: Findings) -> None:
    """A grid smaller than the SM count, or a mostly empty last wave, leaves SMs idle."""
    grid = r.grid
    if sms and grid is not None and grid < sms:
        idle = 100 * (1 - grid / sms)
        found.evidence.append(evidence(r, r.grid_metric, unit="block",
                                       why=f"{grid:.0f} blocks for {sms} SMs: {idle:.0f}% of the SMs have "
                                           "nothing to do"))
        found.moves.add({_P}, f"grid {grid:.0f} blocks < {sms} SMs: {idle:.0f}% of the GPU idle; split another "
                              "dimension across "
                        "programs (smaller BLOCK_M, split-K) so every SM gets work")
        found.moves.add({_T}, f"grid {grid:.0f} blocks < {sms} SMs: smaller tiles make more programs")
    waves = r.get("launch__waves_per_multiprocessor")
    if waves is not None and 1 < waves < 4:
        efficiency = waves / math.ceil(waves)
        if efficiency < 0.8:
            found.evidence.append(evidence(r, "launch__waves_per_multiprocessor", unit="wave",
                                           why=f"the last wave is {100 * (waves - math.floor(waves)):.0f}% full: "
                                               f"{100 * (1 - efficiency):.0f}% of SM time idles in the tail"))
            found.moves.add({_P}, f"{waves:.2f} waves: the last wave is mostly empty; size the grid to whole waves or "
                                  "use a persistent grid")


def coalescing_moves(r: Readings, bound: Bound, found: Findings) -> None:
    """Uncoalesced global loads (few useful bytes per sector, or many sectors per request), and a
    poor L2 hit rate behind a memory bound."""
    bps = r.bytes_per_sector
    if bps is not None:
        if bps < LOW_BYTES_PER_SECTOR:
            found.evidence.append(Evidence(metric="computed.global_load_bytes_per_sector", value=bps,
                                           unit="byte/sector",
                                           source="computed",
                                           why="useful bytes per 32-byte sector fetched: below 32 the loads are "
                                               "uncoalesced"))
            found.moves.add({_M}, f"loads {bps:.1f} B/sector (32 is ideal): uncoalesced; make the innermost tl.arange "
                                  "walk the "
                            "stride-1 dimension (or stage the tile through shared memory)")
            found.moves.add({_P}, f"loads {bps:.1f} B/sector: map adjacent program lanes to contiguous addresses")
    spr = r.sectors_per_request
    if bps is None and spr is not None and spr > UNCOALESCED_SECTORS_PER_REQUEST:
        # without the requested-bytes counter: a warp's load touching more sectors than even a
        # 16-byte-per-thread vector load needs (16) is scattered
        found.evidence.append(Evidence(metric="computed.global_load_sectors_per_request", value=spr,
                                       unit="sector/request",
                                       source="computed",
                                       why="32-byte sectors per warp-wide load: 4 (4 B/thread) to 16 (16 B/thread) "
                                           "when "
                                           "coalesced, 32 when every thread hits its own sector"))
        found.moves.add({_M}, f"loads touch {spr:.0f} sectors per request (4-16 when coalesced): uncoalesced; make the "
                        "innermost tl.arange walk the stride-1 dimension (or stage the tile through shared memory)")
    l2 = r.get("lts__t_sector_hit_rate.pct")
    if l2 is not None and l2 < 50 and bound == "memory-bound":
        found.evidence.append(evidence(r, "lts__t_sector_hit_rate.pct", unit="%"))


def bound_moves(r: Readings, bound: Bound, near_floor: bool, admissible_path: str | None, found: Findings) -> None:
    """The bound's own moves, away from the floor: dots onto the tensor cores when an admissible path
    runs there, then what a memory or compute bound asks for."""
    tensor = r.tensor_pct
    idle_tensor = admissible_path in TENSOR_PATHS and (tensor is None or tensor < 30)
    if idle_tensor and not near_floor and admissible_path is not None:  # (idle_tensor: a key of TENSOR_PATHS)
        pipe = "unread" if tensor is None else f"{tensor:.0f}%"
        found.moves.add({_S, _A, _T, _M}, f"dots off the tensor cores (tensor pipe {pipe}) "
                        f"while {admissible_path} passes this tolerance: tl.dot(..., {TENSOR_PATHS[admissible_path]}) "
                        "changes the class before any traffic work")
    if bound == "memory-bound" and not near_floor:
        found.moves.add({_M}, f"memory-bound at {r.memory_pct or r.dram_pct or 0:.0f}% of peak: vectorised contiguous "
                              "loads, "
                        "more bytes in flight (num_stages, larger BLOCK), evict-first hints on streamed data")
        if not idle_tensor:
            found.moves.add({_A, _S}, "memory-bound: only less traffic helps now (fuse producers/consumers, lower "
                                      "precision I/O)")
    if bound == "compute-bound" and not near_floor:
        if tensor is not None:
            found.evidence.append(Evidence(metric="tensor pipe", value=tensor, unit="%", source="ncu",
                                           why="tensor-core activity: GEMM-like work should run here"))
        if tensor is not None and tensor < 30:
            found.moves.add({_S, _A, _T}, f"SM busy but the tensor pipe at {tensor:.0f}%: put the math on tl.dot "
                            "(fp16/bf16, or tf32 where the tolerance allows)")
        found.moves.add({_T}, "compute-bound: larger BLOCK_M/BLOCK_N (more MMA per load), num_warps 8, num_stages 3-4")
        found.moves.add({_M}, "compute-bound: memory changes will not help; check instruction mix (fewer integer/index "
                              "ops)")


def stall_moves(r: Readings, bound: Bound, found: Findings) -> None:
    """The top stall reason of a latency- or memory-bound kernel names the move."""
    stalls = r.stalls()
    if not (stalls and bound in ("latency-or-occupancy-bound", "memory-bound")):
        return
    top, value = stalls[0]
    found.evidence.append(evidence(r, stall_metric(top), unit="cycles/issue", why=STALL_REASONS[top]))
    if top == "long_scoreboard":
        found.moves.add({_M}, f"warps wait on global memory ({value:.1f} cycles/issue): more loads in flight "
                        "(num_stages+1, prefetch the next tile) or more warps")
        found.moves.add({_P}, "warps wait on memory: more resident warps/programs per SM to hide the latency")
    elif top == "barrier":
        found.moves.add({_A, _T}, f"barrier stalls ({value:.1f} cycles/issue): fewer block-wide reductions per tile, "
                                  "more work between them")
    elif top in ("mio_throttle", "short_scoreboard"):
        found.moves.add({_M, _T}, f"{top} stalls ({value:.1f} cycles/issue): shared-memory pressure; fewer shared "
                                  "round trips, wider accesses")
    elif top == "lg_throttle":
        found.moves.add({_M}, f"lg_throttle stalls ({value:.1f} cycles/issue): too many narrow loads; vectorise "
                              "(contiguous BLOCK, 16 B per thread)")
    elif top == "wait":
        found.moves.add({_T}, f"wait stalls ({value:.1f} cycles/issue): more independent work per thread (ILP), e.g. "
                              "larger BLOCK per program")


def occupancy_moves(bound: Bound, limiter: str | None, occ: Occupancy, found: Findings) -> None:
    """A latency bound from register-limited occupancy: fewer warps or smaller tiles per program."""
    if (bound == "latency-or-occupancy-bound" and limiter and limiter.startswith("occupancy")
            and occ.limiter == "registers"):
        found.moves.add({_P}, "occupancy is limited by registers: fewer warps per program or smaller per-program tiles")
