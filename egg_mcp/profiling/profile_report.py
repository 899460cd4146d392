"""The profile report: a stable, typed schema the client reads and the workspace stores.

Every number says where it came from (`source`), so a client never mistakes an occupancy computed
from Triton's metadata for one ncu measured, or event timing for ncu's duration.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from egg_mcp.profiling.occupancy import OccupancyEstimate

MetricSource = Literal["ncu", "triton_metadata", "event_timing", "computed"]
Bound = Literal["memory-bound", "compute-bound", "latency-or-occupancy-bound", "launch-bound", "unknown"]

SCHEMA_VERSION = 1


class Metric(BaseModel):
    name: str = Field(description="ncu metric name, or a descriptive name for computed / metadata values")
    label: str = ""
    value: float | None
    unit: str = ""
    source: MetricSource


class Evidence(BaseModel):
    """One reading that supports the classification or a next move."""

    metric: str
    value: float | None
    unit: str = ""
    why: str
    source: MetricSource = "ncu"


class Roofline(BaseModel):
    """Where the work sits on this GPU's roofline and how far the measured time is from the floor."""

    compute_type: str = Field(description="peak used for the compute roof: fp32, tf32, fp16, bf16, fp8")
    flops: float | None = None
    min_bytes: float | None = None
    arithmetic_intensity: float | None = Field(default=None, description="FLOP per byte of minimum traffic")
    ridge_point: float | None = None
    bound_by: Literal["memory", "compute"] | None = None
    floor_ms: float | None = None
    measured_ms: float | None = None
    fraction_of_floor: float | None = Field(default=None, description="floor / measured: 1.0 is at the roof")
    near_floor: bool = False
    summary: str = ""
    ceilings_source: str = Field(default="", description="where the DRAM and compute ceilings come from (measured here "
                                                 "and when, or datasheet leads)")
    has_dots: bool | None = Field(default=None, description="False: the task has no matmul/conv (no dot path)")
    ceilings: str = Field(default="", description="the two ceilings in short, each with its source")


class Classification(BaseModel):
    bound: Bound
    headline: str = Field(description="one sentence: the bottleneck and the distance to the floor")
    limiter: str | None = Field(default=None, description="e.g. 'registers' when occupancy is the binding limit")
    near_floor: bool = False


class KernelProfile(BaseModel):
    name: str
    launches: int = 1
    duration_ms: float | None = None
    time_share: float | None = Field(default=None, description="fraction of the profiled forward's kernel time")
    metrics: list[Metric] = Field(default_factory=list)
    occupancy: OccupancyEstimate | None = None
    occupancy_source: MetricSource | None = None
    classification: Classification
    evidence: list[Evidence] = Field(default_factory=list)
    next_moves: list[str] = Field(default_factory=list)
    ncu_rules: list[str] = Field(default_factory=list, description="ncu's own rule hints, when collected")

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)


class ProfileReport(BaseModel):
    schema_version: int = SCHEMA_VERSION
    source: Literal["ncu", "fallback"]
    stage: str
    gpu: str | None = None
    kernels: list[KernelProfile] = Field(default_factory=list)
    roofline: Roofline | None = None
    summary: str
    sources: dict[str, str] = Field(
        default_factory=dict, description="what each source contributed (ncu, triton_metadata, event_timing, computed)"
    )
    fallback_reason: str | None = None
    metrics_requested: list[str] = Field(default_factory=list)
    metrics_rejected: list[str] = Field(default_factory=list, description="names the installed ncu did not know")
    ncu_command: list[str] | None = None
    ncu_wall_s: float | None = Field(default=None, description="wall time of the profiled worker job (ncu included)")
    wall_s: float = 0.0
    sandbox: str | None = Field(default=None, description="the sandbox the profiled process ran in (level first), as "
                                                          "it "
                                "reported before the candidate was imported; None when nothing ran")
    warnings: list[str] = Field(default_factory=list)
