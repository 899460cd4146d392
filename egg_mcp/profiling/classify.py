"""From readings to a verdict: the bottleneck of each kernel, its distance to the floor, and the next
moves that make sense in the current stage.

The rules follow Nsight Compute's speed-of-light logic: a unit above ~60% of its peak is the roof
the kernel is pressed against (memory or compute); when neither is busy the kernel is starved of
parallelism (latency or occupancy); when the kernel is only a few microseconds long, launch
overhead (~3 us measured on the H200) dominates. The roofline of the task (FLOPs and minimum bytes)
says how far the measured time is from the physical floor; near the floor, further work is waste.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from egg_mcp.analysis.analysis_types import RooflineFloor
from egg_mcp.analysis.roofline import ceilings_short, floor_provenance, roofline_floor
from egg_mcp.analysis.verdict import roofline_verdict
from egg_mcp.hardware import GpuSpec
from egg_mcp.profiling import bottleneck as rules
from egg_mcp.profiling.metrics import STALL_REASONS, stall_metric
from egg_mcp.profiling.occupancy import OccupancyEstimate
from egg_mcp.profiling.profile_report import (
    Classification,
    Evidence,
    KernelProfile,
    Metric,
    MetricSource,
    Roofline,
)
from egg_mcp.stages import Stage

# Names of readings that do not come from ncu (fallback path and cross-checks).
EVENT_DURATION = "event.duration"
TRITON_REGS = "triton.n_regs"
TRITON_SPILLS = "triton.n_spills"
TRITON_SHARED = "triton.shared"
TRITON_NUM_WARPS = "triton.num_warps"
TRITON_NUM_STAGES = "triton.num_stages"
GRID_BLOCKS = "launch.grid_blocks"


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
        ld = self.get("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum")
        st = self.get("l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum")
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

    @property
    def duration_metric(self) -> str:
        """The reading `duration_ns` cites: ncu's when it ran, else the event timing."""
        return "gpu__time_duration.sum" if self.get("gpu__time_duration.sum") is not None else EVENT_DURATION

    @property
    def registers_metric(self) -> str:
        return "launch__registers_per_thread" if self.get("launch__registers_per_thread") is not None else TRITON_REGS

    @property
    def grid_metric(self) -> str:
        return "launch__grid_size" if self.get("launch__grid_size") is not None else GRID_BLOCKS

    spills_metric: ClassVar[str] = TRITON_SPILLS

    @property
    def spills(self) -> float | None:
        return self.get(TRITON_SPILLS)

    @property
    def shared_source(self) -> MetricSource:
        return self.sources.get("launch__shared_mem_per_block_dynamic", self.sources.get(TRITON_SHARED, "computed"))

    @property
    def sm_pct(self) -> float | None:
        return self.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")

    @property
    def memory_pct(self) -> float | None:
        return self.first("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                          "dram__throughput.avg.pct_of_peak_sustained_elapsed")

    @property
    def dram_pct(self) -> float | None:
        return self.get("dram__throughput.avg.pct_of_peak_sustained_elapsed")

    def stalls(self) -> list[tuple[str, float]]:
        found = [(r, v) for r in STALL_REASONS if (v := self.get(stall_metric(r))) is not None]
        return sorted(found, key=lambda rv: -rv[1])



def roofline(
    gpu: GpuSpec | None, *, flops: float | None, min_bytes: float | None, measured_ms: float | None,
    compute_type: str = "fp32", floor_ms: float | None = None, floor: RooflineFloor | None = None,
    has_dots: bool | None = None,
) -> Roofline | None:
    """Place the task on `gpu`'s roofline and measure the distance of `measured_ms` to the floor (None
    without a GPU spec: no ceilings, no roofline). `floor` is the task's floor now
    (`analysis.roofline.current_floor`: the fastest admissible path, tensor-core FLOPs apart, with its
    ceilings' provenance), the one floor verify and the briefs use; without it, `roofline_floor` prices every
    FLOP at `compute_type` (a lower bound), or `floor_ms` is taken as given. Every number says where its
    ceilings come from; the words come from `analysis.verdict.roofline_verdict`."""
    if gpu is None or (not flops and not min_bytes):
        return None
    if floor is not None:
        compute_type = floor.compute_type
    if compute_type not in gpu.peak_flops:
        raise ValueError(f"unknown compute type {compute_type!r}; use one of {', '.join(gpu.peak_flops)}")
    flops_v, bytes_v = flops or 0.0, min_bytes or 0.0
    if floor is None:
        floor = roofline_floor(flops_v, flops_v, bytes_v, gpu, compute_type)
        if floor_ms:
            floor = floor.model_copy(update={"floor_ms": floor_ms})
    ridge = gpu.ridge_point(compute_type)
    ai = flops_v / bytes_v if bytes_v else None
    roof = Roofline(
        compute_type=compute_type, flops=flops, min_bytes=min_bytes, arithmetic_intensity=ai, ridge_point=ridge,
        bound_by=floor.bound, floor_ms=floor.floor_ms, measured_ms=measured_ms,
        ceilings_source=floor.spec_source or floor_provenance(gpu, compute_type), has_dots=has_dots,
    )
    ai_text = f"{ai:.3g} FLOP/B vs ridge {ridge:.3g}" if ai is not None else "no minimum bytes given"
    verdict = roofline_verdict(measured_ms, floor.floor_ms, compute_type, bound=floor.bound, has_dots=has_dots)
    roof.fraction_of_floor = verdict.fraction_of_floor
    roof.near_floor = verdict.status == "at_roof"
    ceilings = roof.ceilings = floor.ceilings or ceilings_short(gpu, compute_type)
    roof.summary = (f"{floor.bound}-bound task ({ai_text}) on the {compute_type} roof; {verdict.text} "
                    f"(ceilings: {ceilings})")
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
    found = rules.Findings()
    sms = gpu.sm_count if gpu else None
    dur_ns = r.duration_ns
    distance, near_floor = rules.distance_to_floor(r, gpu, task_roofline, found)
    bound, headline = rules.bound_of(r, task_roofline, occupancy_estimate, found)
    occ = rules.occupancy_limit(r, occupancy_estimate, found)
    limiter: str | None = None
    if bound == "latency-or-occupancy-bound":
        limiter = rules.latency_limiter(r, occ, sms)
        headline += f"; limited by {limiter}"
    rules.register_and_shared_moves(r, occ, found)
    rules.grid_moves(r, sms, found)
    rules.coalescing_moves(r, bound, found)
    rules.bound_moves(r, bound, near_floor, admissible_path, found)
    rules.stall_moves(r, bound, found)
    rules.occupancy_moves(bound, limiter, occ, found)

    # near the floor: say so, and nothing else
    if near_floor:
        headline += f"; {distance}"
        next_moves = [f"{distance}; commit it and move on"]
    else:
        if distance:
            headline += f"; {distance}"
        next_moves = found.moves.for_stage(stage)

    dur_ms = dur_ns / 1e6 if dur_ns is not None else None
    if dur_ms is not None:
        found.evidence.insert(0, rules.evidence(r, r.duration_metric, value=dur_ns, unit="ns",
                                                why="kernel time (sum over its launches)"))
    if occ.limiter and limiter is None and occ.low:
        limiter = f"occupancy ({occ.limiter})"
    return KernelProfile(
        name=name, launches=launches, duration_ms=dur_ms, time_share=time_share, metrics=metrics,
        occupancy=occupancy_estimate, occupancy_source="computed" if occupancy_estimate is not None else (
            "ncu" if occ.theoretical is not None else None),
        classification=Classification(bound=bound, headline=headline, limiter=limiter, near_floor=near_floor),
        evidence=_dedupe(found.evidence), next_moves=next_moves,
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
        rest = ", ".join(f"{k.name} {k.classification.bound}"
                         + (f" {100 * k.time_share:.0f}%" if k.time_share is not None else "")
                         for k in ranked[1:4])
        text += f" Other kernels: {rest}."
    if roof is not None:
        text += f" Task: {roof.summary}."
    if top.next_moves:
        text += f" Next: {top.next_moves[0]}"
    return text
