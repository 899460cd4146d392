"""profile_ncu's default reply: per kernel the stage's handful of metrics, the bottleneck, the evidence and the
next moves, within MAX_BYTES (issue 18: full replies were ~95 KB, of which ~2 KB was used).

The full report (every metric ncu returned) is stored and read through the resources
`egg://tasks/{task_id}/reports/{report_id}` (the report) and `.../raw` (the per-kernel metric table), or
with `profile_ncu(detail=true)`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from egg_mcp.profiling.metrics import metrics_for_stage
from egg_mcp.profiling.profile_report import ProfileReport

MAX_BYTES = 3000
METRICS_PER_KERNEL = 6


class CompactKernel(BaseModel):
    name: str
    launches: int = 1
    duration_ms: float | None = None
    time_share: float | None = None
    bound: str
    headline: str
    metrics: dict[str, Any] = Field(default_factory=dict, description="the stage's metrics: name -> [value, unit]")
    evidence: list[str] = Field(default_factory=list)
    next_moves: list[str] = Field(default_factory=list)


class CompactProfile(BaseModel):
    compact: bool = True
    source: str
    stage: str
    gpu: str | None = None
    summary: str
    roofline: str | None = Field(default=None, description="the one roofline verdict (floor, compute path, % of it)")
    kernels: list[CompactKernel] = Field(default_factory=list)
    kernels_left_out: int = 0
    warnings: list[str] = Field(default_factory=list)
    sandbox: str | None = Field(default=None, description="the sandbox the profiled process ran in (level first)")
    full_report: str = Field(description="where every metric is: the report and raw-table resources, or detail=true")


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _round(v: Any) -> Any:
    return float(f"{v:.4g}") if isinstance(v, float) else v


def _kernel(k: Any, wanted: list[str], clip: int, n_moves: int) -> CompactKernel:
    picked = [m for name in wanted for m in k.metrics if m.name == name and m.value is not None]
    metrics = {m.name: [_round(m.value), m.unit] for m in picked[:METRICS_PER_KERNEL]}
    evidence = [_clip(f"{e.metric}={_round(e.value)}{e.unit and ' ' + e.unit}: {e.why}", clip) for e in k.evidence[:3]]
    return CompactKernel(
        name=_clip(k.name, 60), launches=k.launches, duration_ms=_round(k.duration_ms), time_share=_round(k.time_share),
        bound=k.classification.bound, headline=_clip(k.classification.headline, clip + 60), metrics=metrics,
        evidence=evidence, next_moves=[_clip(m, clip) for m in k.next_moves[:n_moves]])


def compact_report(report: ProfileReport, pointer: str, max_bytes: int = MAX_BYTES) -> CompactProfile:
    """The report within `max_bytes` of JSON: fewer kernels, then shorter texts, until it fits."""
    try:
        wanted = metrics_for_stage(report.stage)
    except (KeyError, ValueError):
        wanted = []
    wanted += [m for k in report.kernels for m in (e.metric for e in k.evidence) if m not in wanted]
    out = None
    for n_kernels, clip, n_moves in ((4, 160, 3), (3, 120, 3), (2, 100, 2), (1, 90, 2), (1, 60, 1)):
        kernels = report.kernels[:n_kernels]
        out = CompactProfile(
            source=report.source, stage=report.stage, gpu=report.gpu, summary=_clip(report.summary, clip * 2),
            roofline=_clip(report.roofline.summary, clip * 2) if report.roofline else None,
            kernels=[_kernel(k, wanted, clip, n_moves) for k in kernels],
            kernels_left_out=len(report.kernels) - len(kernels),
            warnings=[_clip(w, clip) for w in report.warnings[:2]], full_report=pointer,
            sandbox=_clip(report.sandbox, 90) if report.sandbox else None)
        if len(out.model_dump_json()) <= max_bytes:
            return out
    return out  # type: ignore[return-value]


def fit_reply(report: ProfileReport, pointer: str, wrap: Callable[[CompactProfile], BaseModel],
              max_bytes: int = MAX_BYTES) -> CompactProfile:
    """The compact report sized so that `wrap(report)`, the tool's whole reply (ids, the brief's pointer),
    stays within `max_bytes` (on the H200 an attention profile's reply was 3.3 KB around a 3 KB report)."""
    compact = compact_report(report, pointer, max_bytes)
    envelope = len(wrap(compact).model_dump_json()) - len(compact.model_dump_json())
    return compact_report(report, pointer, max_bytes - envelope) if envelope > 0 else compact


def raw_table(report: dict[str, Any]) -> str:
    """Per kernel, every metric the profile holds: name -> [value, unit, source] (the `.../raw` resource)."""
    table = {k["name"]: {m["name"]: [m.get("value"), m.get("unit"), m.get("source")] for m in k.get("metrics", [])}
             for k in report.get("kernels", [])}
    return json.dumps({"stage": report.get("stage"), "source": report.get("source"), "kernels": table}, indent=1)

