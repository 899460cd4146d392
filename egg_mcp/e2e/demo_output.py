"""The demo's results (pydantic rows of the run) and how they are shown: the stage table, the markdown
report and the stage-time chart next to the JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class CandidateRow(BaseModel):
    stage: str
    kernel: str = Field(description="shipped file (or how it was derived)")
    candidate_id: str
    verdict: str
    time_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    summary: str = ""


class StageRow(BaseModel):
    stage: str
    kernel: str
    candidate_id: str
    time_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    changed: str = Field(description="the committed decision's summary")
    kept_previous: bool = Field(default=False, description="no candidate of this stage beat the committed kernel")
    guard: str = ""
    evidence: list[dict[str, Any]] = Field(default_factory=list)


class DemoReport(BaseModel):
    problem: str
    task_id: str
    transport: str
    timing_available: bool
    gpu: str | None = None
    size_overrides: dict[str, int | list[int]] = Field(default_factory=dict)
    eager_ms: float | None = None
    compile_ms: float | None = None
    stages: list[StageRow] = Field(default_factory=list)
    candidates: list[CandidateRow] = Field(default_factory=list)
    reports: list[dict[str, Any]] = Field(default_factory=list, description="profile / tiling reports cited")
    export_path: str | None = None
    final_stage: str = ""
    notes: list[str] = Field(default_factory=list)
    status: dict[str, Any] | None = Field(default=None, description="final task_status")
    wall_s: float = 0.0


# -- output -------------------------------------------------------------------------------------------


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def render_table(report: DemoReport) -> str:
    """The stage-by-stage table (markdown, readable in a terminal)."""
    lines = [
        f"egg-mcp demo: {report.problem} (task {report.task_id}, "
        + (f"GPU {report.gpu}" if report.timing_available else "CPU interpreter") + ")",
        "",
        (f"baselines: eager {_ms(report.eager_ms)} ms, torch.compile {_ms(report.compile_ms)} ms"
         if report.timing_available else "baselines: need a GPU (eager and torch.compile are timed on CUDA only)"),
        "",
        "| stage | candidate | time ms | vs eager | vs torch.compile | what changed |",
        "|---|---|---|---|---|---|",
    ]
    for row in report.stages:
        kernel = row.kernel + (" (kept)" if row.kept_previous else "")
        lines.append(f"| {row.stage} | {kernel} | {_ms(row.time_ms)} | {_x(row.speedup_vs_eager)} | "
                     f"{_x(row.speedup_vs_compile)} | {row.changed} |")
    lines.append("")
    if not report.timing_available:
        sizes = ", ".join(f"{k}={v}" for k, v in report.size_overrides.items())
        lines.append("Timings need a GPU: every kernel above was verified correct in the Triton interpreter"
                     + (f" at reduced sizes ({sizes})" if sizes else "") + "; run `egg-mcp demo` on a CUDA machine "
                     "for times and speedups.")
    failed = [c for c in report.candidates if c.verdict != "correct"]
    if failed:
        lines.append("Candidates that failed: " + "; ".join(f"{c.kernel}: {c.verdict}" for c in failed))
    if report.export_path:
        lines.append(f"final kernel: {report.export_path}")
    return "\n".join(lines) + "\n"


def write_demo_report(report: DemoReport, stem: Path) -> list[Path]:
    """Markdown report and stage-time chart next to the JSON (`<stem>.md`, `<stem>_stages.png`)."""
    from egg_mcp.e2e.task_report import render_task_report, stage_time_chart

    out = [stem.with_suffix(".md")]
    if report.status is None:
        return []
    out[0].write_text(render_task_report(report.status, kernel_path=report.export_path,
                                         notes=report.notes, demo_table=render_table(report)))
    chart = stage_time_chart(report.status, stem.parent / f"{stem.name}_stages.png")
    if chart is not None:
        out.append(chart)
    return out
