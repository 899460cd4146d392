"""The Nsight Compute metric set, by stage: the one table that says what profile_ncu collects.

Every metric costs replay passes, and ncu's fixed start-up (2-4 s) plus one pass per counter group
is most of profile_ncu's wall time, so each stage collects only what its next moves depend on.
Names are raw ncu metric names valid on Hopper (sm_90) with Nsight Compute 2025.x; a name the
installed ncu rejects is dropped and reported (see `runner`), never fatal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from egg_mcp.stages import Stage

MetricGroup = Literal[
    "sol", "time", "dram", "occupancy", "launch", "spills", "cache", "coalescing", "tensor", "stalls"
]


class MetricSpec(BaseModel):
    """One ncu metric: what it is called in reports and why a kernel engineer looks at it."""

    name: str
    label: str
    group: MetricGroup
    why: str


def _m(name: str, label: str, group: MetricGroup, why: str) -> MetricSpec:
    return MetricSpec(name=name, label=label, group=group, why=why)


# Stall reasons worth naming (per issue-active cycle, so they add up to the cycles between issues).
STALL_REASONS: dict[str, str] = {
    "long_scoreboard": "waiting on global/local memory (L1TEX) results: latency not hidden",
    "short_scoreboard": "waiting on shared memory or MUFU results",
    "barrier": "waiting at a block barrier (reductions, tl.debug_barrier)",
    "mio_throttle": "shared-memory / special-instruction queue full",
    "lg_throttle": "local/global memory queue full: too many narrow memory instructions",
    "math_pipe_throttle": "a math pipe is saturated (compute-bound signal)",
    "wait": "fixed-latency dependencies (instruction-level parallelism too low)",
    "not_selected": "eligible but another warp was picked (enough parallelism: healthy)",
}


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


_ALL: list[MetricSpec] = [
    # speed of light
    _m("gpu__time_duration.sum", "duration", "time", "kernel time on the GPU: the number every change must lower"),
    _m("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM throughput (SOL compute)", "sol",
       "busiest SM unit as % of peak: high means compute-bound"),
    _m("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "memory throughput (SOL memory)", "sol",
       "busiest memory unit (DRAM, L2, L1) as % of peak: high means memory-bound"),
    _m("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput", "sol",
       "DRAM bandwidth as % of peak: the roof of a streaming kernel"),
    _m("dram__bytes_read.sum", "DRAM bytes read", "dram", "traffic actually read from HBM; compare with the task's "
                                                          "minimum"),
    _m("dram__bytes_write.sum", "DRAM bytes written", "dram", "traffic actually written to HBM"),
    # occupancy
    _m("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy", "occupancy",
       "warps resident per cycle as % of the SM maximum: latency hiding actually obtained"),
    _m("sm__maximum_warps_per_active_cycle_pct", "theoretical occupancy", "occupancy",
       "the most warps the launch configuration allows: bounded by registers, shared memory, block count"),
    _m("launch__occupancy_limit_registers", "block limit: registers", "occupancy",
       "blocks per SM allowed by registers"),
    _m("launch__occupancy_limit_shared_mem", "block limit: shared memory", "occupancy",
       "blocks per SM allowed by shared memory"),
    _m("launch__occupancy_limit_blocks", "block limit: blocks", "occupancy", "blocks per SM allowed by the hardware "
                                                                             "block cap"),
    _m("launch__occupancy_limit_warps", "block limit: warps", "occupancy", "blocks per SM allowed by the warp cap"),
    # launch configuration
    _m("launch__registers_per_thread", "registers per thread", "launch",
       "register pressure: 255 is the cap, beyond it values spill to local memory"),
    _m("launch__shared_mem_per_block_static", "static shared memory per block", "launch", "shared memory the kernel "
                                                                                          "declares"),
    _m("launch__shared_mem_per_block_dynamic", "dynamic shared memory per block", "launch",
       "Triton's shared memory (tiles, pipelining buffers): num_stages multiplies it"),
    _m("launch__grid_size", "grid size (blocks)", "launch",
       "programs launched: fewer than the SM count leaves SMs idle"),
    _m("launch__block_size", "block size (threads)", "launch", "32 x num_warps"),
    _m("launch__waves_per_multiprocessor", "waves per SM", "launch",
       "grid / (SMs x blocks per SM): a small fractional last wave is a tail effect"),
    # spills
    _m("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "local-memory load bytes", "spills",
       "register spills read back: each spill is memory traffic in the inner loop"),
    _m("l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum", "local-memory store bytes", "spills", "register spills written"),
    # caches and coalescing
    _m("l1tex__t_sector_hit_rate.pct", "L1 hit rate", "cache", "reuse captured in L1"),
    _m("lts__t_sector_hit_rate.pct", "L2 hit rate", "cache", "reuse captured in L2: low with re-reads means DRAM "
                                                             "traffic"),
    _m("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "global load sectors", "coalescing",
       "32-byte sectors fetched by global loads"),
    _m("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "global load requests", "coalescing",
       "warp-level global load instructions: sectors/request shows the access width"),
    _m("smsp__sass_data_bytes_mem_global_op_ld.sum", "global load bytes requested", "coalescing",
       "bytes the threads asked for; / (sectors x 32) is the coalescing efficiency"),
    # tensor cores
    # ncu 2025.3 on the H200 has no separate gmma cycles metric (a request for one is dropped
    # silently); the hmma pipe counts HMMA and Hopper's HGMMA (wgmma) alike.
    _m("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "tensor pipe (mma / wgmma)",
       "tensor", "tensor-core activity of tl.dot on fp16/bf16/tf32 (HMMA and Hopper HGMMA)"),
    # warp state
    _m("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue slot utilisation", "stalls",
       "cycles an instruction was issued: low with low SOL means latency-bound"),
    *[
        _m(stall_metric(reason), f"stall: {reason}", "stalls", why)
        for reason, why in STALL_REASONS.items()
    ],
]

METRICS: dict[str, MetricSpec] = {m.name: m for m in _ALL}


def _group(*groups: MetricGroup) -> list[str]:
    return [m.name for m in _ALL if m.group in groups]


_CORE = ("time", "sol", "dram", "launch")

# The one table: stage -> the metrics profile_ncu collects in that stage.
STAGE_METRICS: dict[Stage, list[str]] = {
    # Seeds and algorithm: where does the time go and which roof is the kernel under.
    Stage.SEEDS: _group(*_CORE, "occupancy", "tensor"),
    Stage.ALGORITHM: _group(*_CORE, "occupancy", "tensor", "cache"),
    # Parallel mapping: is the whole GPU busy (grid, waves, occupancy and its limiter).
    Stage.PARALLEL_MAPPING: _group(*_CORE, "occupancy", "stalls"),
    # Tiling: registers / shared memory vs reuse, spills, tensor pipe.
    Stage.TILING: _group(*_CORE, "occupancy", "spills", "tensor", "stalls"),
    # Memory: access patterns, caches, spills, latency stalls.
    Stage.MEMORY: _group(*_CORE, "occupancy", "spills", "cache", "coalescing", "stalls"),
    Stage.DONE: _group(*_CORE),
}

ALL_METRICS: list[str] = [m.name for m in _ALL]
"""Every metric of the table (fixture capture uses it so one CSV serves every stage's tests)."""


def metrics_for_stage(stage: Stage | str) -> list[str]:
    """The ncu metric names to collect in `stage` (ordered, no duplicates)."""
    return list(STAGE_METRICS[Stage(stage)])


def spec(name: str) -> MetricSpec | None:
    return METRICS.get(name)
