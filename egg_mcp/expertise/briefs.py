"""Stage briefs: what a senior kernel engineer tells a colleague at each stage and role.

The text lives in markdown under `stage_prompts/` (one file per stage and role, plus shared
fragments whose names start with `_`), so it can be read and edited without touching code.
`render_brief` fills in the task's facts; a fact that is missing renders as "unknown" (or
"needs a GPU" for timings on a machine without one), never as an error: briefs are shown in
every status and a missing baseline must not break the workflow.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any, Literal

from pydantic import BaseModel, Field

from egg_mcp.analysis.analysis_types import ReferenceAnalysis, RooflineFloor
from egg_mcp.analysis.precision import PATHS
from egg_mcp.analysis.roofline import compute_type_for, fmt_bytes, fmt_ms, fmt_tol, summary_now
from egg_mcp.analysis.verdict import roofline_verdict
from egg_mcp.contract import TolerancePolicy
from egg_mcp.hardware import ceiling, lookup
from egg_mcp.stages import STAGE_ORDER, Stage

Role = Literal["code", "profile", "debug"]
ROLES: tuple[Role, ...] = ("code", "profile", "debug")
ROLE_TITLES = {"code": "Code", "profile": "Profile", "debug": "Debug"}
BRIEF_STAGES: tuple[Stage, ...] = tuple(s for s in STAGE_ORDER if s is not Stage.DONE)

UNKNOWN = "unknown"
NEEDS_GPU = "needs a GPU"
MAX_DECISIONS = 5
"""Only the latest committed decisions are repeated in a brief (older ones are in get_context)."""

_DESCRIPTION = re.compile(r"^<!--\s*description:\s*(.*?)\s*-->\s*\n", re.S)
_LEFTOVER = re.compile(r"\$\{[A-Za-z0-9_]+\}")


class BriefFacts(BaseModel):
    """The task's facts a brief quotes. Every field is optional: missing ones render as unknown."""

    task_id: str | None = None
    problem_name: str | None = None
    dtype: str | None = None
    tolerance: TolerancePolicy | str | None = None
    gpu_name: str | None = None
    analysis_summary: str | None = None
    floor_ms: float | None = None
    floor_ceilings: str | None = Field(default=None, description="the floor's ceilings and where they come from")
    bandwidth: str | None = Field(default=None, description="the DRAM ceiling in force, with its provenance")
    dram_bytes_per_s: float | None = Field(default=None, description="that ceiling's rate")
    eager_ms: float | None = None
    compile_ms: float | None = None
    best_ms: float | None = None
    committed_decisions: list[str] = Field(default_factory=list)
    stage: Stage | None = None
    has_gpu: bool | None = Field(default=None, description="False: timings render as 'needs a GPU'")
    min_bytes: int | None = None
    unfused_bytes: int | None = None
    fusion_opportunities: list[str] = Field(default_factory=list)
    k: int | None = Field(default=None, description="number of seeds asked for (SEEDS stage)")
    commits: int = Field(default=0, description="stages committed so far (a commit without timing still counts)")
    compute_path: str | None = Field(default=None, description="the fastest compute path the precision ladder admits "
                                                       "(the floor's compute type)")
    has_dots: bool | None = Field(default=None, description="False: the problem has no matmul/conv, so no dot "
                                                            "precision "
                                                    "rule applies")

    @classmethod
    def from_analysis(cls, analysis: ReferenceAnalysis, floor: RooflineFloor | None = None, **facts) -> "BriefFacts":
        """Facts that come straight from the reference analysis; pass the rest as keywords. `floor` is the task's
        floor now (`analysis.roofline.current_floor`), the one verify and profile_ncu hold times to; without it,
        the stored one."""
        from egg_mcp.expertise.seeds import fusion_opportunities

        floor = floor or analysis.floor
        base: dict[str, Any] = dict(
            analysis_summary=summary_now(analysis, floor),
            floor_ms=floor.floor_ms if floor else None,
            floor_ceilings=(floor.ceilings or floor.spec_source) if floor else None,
            compute_path=floor.compute_type if floor else None,
            gpu_name=floor.gpu_name if floor else None,
            dtype=analysis.dtype,
            min_bytes=analysis.min_bytes,
            unfused_bytes=analysis.unfused_bytes,
            fusion_opportunities=fusion_opportunities(analysis),
        )
        base.update(facts)
        base.setdefault("has_dots", bool(analysis.tensor_core_flops))
        if base.get("compute_path") is None and base.get("dtype"):  # no floor (no GPU): the same rule as the seeds
            from egg_mcp.analysis.roofline import admissible_compute_type

            tol = base.get("tolerance") if isinstance(base.get("tolerance"), TolerancePolicy) else None
            try:
                base["compute_path"] = admissible_compute_type(base["dtype"], tol, analysis.precision_errors, None)
            except ValueError:
                pass
        return cls(**base)


def prompts_dir() -> Path:
    """Where the stage prompt files are: package data in a wheel, `<repo>/stage_prompts` in a checkout."""
    package = Path(__file__).resolve().parent.parent  # egg_mcp/
    for candidate in (package / "stage_prompts", package.parent / "stage_prompts"):
        if (candidate / "_header.md").is_file():
            return candidate
    raise FileNotFoundError(
        f"stage prompts not found in {package / 'stage_prompts'} (installed wheel) or "
        f"{package.parent / 'stage_prompts'} (source checkout); reinstall egg-mcp or run from the repository"
    )


@lru_cache(maxsize=64)
def _read(name: str) -> str:
    return (prompts_dir() / name).read_text(encoding="utf-8")


def _brief_file(stage: Stage, role: str) -> str:
    return f"{stage.value.lower()}_{role}.md"


def _split_description(text: str) -> tuple[str, str]:
    m = _DESCRIPTION.match(text)
    if not m:
        return "", text
    return m.group(1), text[m.end():]


def list_briefs() -> list[tuple[Stage, str, str]]:
    """(stage, role, one-line description) for every brief: the server's MCP prompts."""
    out = []
    for stage in BRIEF_STAGES:
        for role in ROLES:
            description, _ = _split_description(_read(_brief_file(stage, role)))
            out.append((stage, role, description or f"{stage.value} {ROLE_TITLES[role]} brief"))
    return out


def _timing(ms: float | None, has_gpu: bool | None) -> str:
    if ms is not None:
        return fmt_ms(ms)
    return NEEDS_GPU if has_gpu is False else UNKNOWN


def _tolerance_text(tol: TolerancePolicy | str | None) -> str:
    if tol is None:
        return UNKNOWN
    if isinstance(tol, str):
        return tol
    return f"{tol.name} (atol={fmt_tol(tol.atol)}, rtol={fmt_tol(tol.rtol)})"


def precision_line(dtype: str | None, tol: TolerancePolicy | str | None, path: str | None = None,
                   has_dots: bool | None = None) -> str:
    """What the dtype, the tolerance and the measured precision ladder (`path`, its fastest admissible
    compute path) imply for how dots and reductions are computed; a problem without dots gets no dot rule."""
    if dtype is None:
        return "dtype unknown: accumulate in fp32"
    if has_dots is False:
        if dtype in ("float32", "fp32"):
            return ("fp32, no dots in this problem (no tensor-core precision choice): accumulate reductions in fp32; "
                    "reassociated sums are fine at this tolerance, run-to-run atomics order may not be")
        return f"{dtype}, no dots in this problem: load/store {dtype}, accumulate in fp32, cast once at the store"
    policy = tol if isinstance(tol, TolerancePolicy) else None
    try:
        compute = path or compute_type_for(dtype, policy)
    except ValueError:
        return f"dtype {dtype}: accumulate in fp32"
    source = "measured precision ladder" if path else "policy rule (no measured ladder)"
    if compute == "tf32x3":
        return ('fp32 at a strict tolerance: 3xTF32 passes (' + source + '): tl.dot(..., input_precision="tf32x3") '
                "runs on tensor cores at several times the IEEE rate; accumulate in fp32; plain TF32 fails")
    if compute in ("fp16x3", "bf16x3"):  # the recipe as the ladder gives it (precision.PATHS), one text for both
        return (f"fp32 at a strict tolerance: the {compute} split passes ({source}): {PATHS[compute][1]}; "
                "plain TF32 fails")
    if compute == "fp32":
        return ('fp32 at a strict tolerance: tl.dot(..., input_precision="ieee") (' + source + '); accumulate in fp32')
    if compute == "tf32":
        return f"fp32 with a loose tolerance: TF32 tl.dot allowed ({source}); accumulate in fp32"
    if dtype in ("float32", "fp32") and compute in ("bf16", "fp16", "fp8"):
        return f"fp32 with a loose tolerance: {compute} dot inputs pass ({source}); accumulate in fp32"
    return f"{dtype}: load/store {dtype}, accumulate in fp32 (tl.dot does), cast once at the store"


def _decisions(decisions: list[str]) -> str:
    if not decisions:
        return "  - none yet"
    shown = decisions[-MAX_DECISIONS:]
    lines = [f"  - {d.strip().splitlines()[0][:200]}" for d in shown if d.strip()]
    if len(decisions) > len(shown):
        lines.insert(0, f"  - ({len(decisions) - len(shown)} earlier: see get_context)")
    return "\n".join(lines) or "  - none yet"


def _values(stage: Stage, role: str, facts: BriefFacts) -> dict[str, str]:
    gpu = lookup(facts.gpu_name) if facts.gpu_name else None
    best_vs_floor = UNKNOWN
    if facts.best_ms is not None and facts.floor_ms:
        best_vs_floor = roofline_verdict(facts.best_ms, facts.floor_ms, facts.compute_path,
                                         has_dots=facts.has_dots).text
        if facts.eager_ms:
            best_vs_floor += f", {facts.eager_ms / facts.best_ms:.2f}x vs eager"
    elif facts.best_ms is None:
        best_vs_floor = ("nothing committed yet" if not facts.commits and not facts.committed_decisions
                         else f"{max(facts.commits, len(facts.committed_decisions))} stage(s) committed, untimed")
    values = {
        "stage": stage.value,
        "role_title": ROLE_TITLES[role],
        "problem": facts.problem_name or UNKNOWN,
        "task_id": facts.task_id or UNKNOWN,
        "dtype": facts.dtype or UNKNOWN,
        "tolerance": _tolerance_text(facts.tolerance),
        "gpu": facts.gpu_name or UNKNOWN,
        "analysis": facts.analysis_summary or "not analysed yet",
        "floor": fmt_ms(facts.floor_ms) if facts.floor_ms is not None else UNKNOWN,
        "floor_basis": (f"(on the {facts.compute_path or UNKNOWN} path; ceilings: {facts.floor_ceilings})"
                        if facts.floor_ceilings else "(no ceilings)"),
        "eager": _timing(facts.eager_ms, facts.has_gpu),
        "compile": _timing(facts.compile_ms, facts.has_gpu),
        "best": _timing(facts.best_ms, facts.has_gpu) if facts.best_ms is not None or facts.has_gpu is False
        else "none yet",
        "best_vs_floor": best_vs_floor,
        "dot_errors": ('Errors ~1e-3 on a GEMM at fp32 = TF32 dot (use `input_precision="tf32x3"`, or `"ieee"`); '
                       if facts.has_dots is not False else ""),
        "precision": precision_line(facts.dtype, facts.tolerance, facts.compute_path, facts.has_dots),
        "decisions": _decisions(facts.committed_decisions),
        "k": str(facts.k) if facts.k else "k",
        "min_bytes": fmt_bytes(facts.min_bytes) if facts.min_bytes is not None else UNKNOWN,
        "unfused_bytes": eager_bytes(facts, gpu),
        "fusion": "; ".join(facts.fusion_opportunities) if facts.fusion_opportunities
        else "none found by the analysis (single op or nothing fusible)",
        "sm_count": str(gpu.sm_count) if gpu else UNKNOWN,
        "smem": f"{gpu.smem_per_block_optin_bytes // 1024} KiB" if gpu else UNKNOWN,
        "l2": f"{gpu.l2_bytes // (1024 * 1024)} MiB" if gpu else UNKNOWN,
        "bandwidth": facts.bandwidth or (ceiling(gpu, "dram").label() if gpu else UNKNOWN),
    }
    return values


def eager_bytes(facts: BriefFacts, gpu) -> str:
    """The DRAM traffic a brief quotes for eager, never below what eager's measured time implies at the DRAM
    rate (its ops' own count misses their passes' re-reads and temporaries: an H200 brief said 12.9 GB where
    eager's time at 4.3 TB/s meant 26 GB); the text says which bound it is."""
    counted = fmt_bytes(facts.unfused_bytes) if facts.unfused_bytes is not None else None
    rate = facts.dram_bytes_per_s or (gpu.dram_bytes_per_s if gpu else None)
    if not facts.eager_ms or not rate or (facts.unfused_bytes is not None
                                          and facts.eager_ms * 1e-3 * rate <= facts.unfused_bytes):
        return f"at least {counted} by its ops' count" if counted else UNKNOWN
    by_time = facts.eager_ms * 1e-3 * rate
    label = facts.bandwidth or (ceiling(gpu, "dram").label() if gpu else f"{rate / 1e12:.3g} TB/s")
    return (f"~{fmt_bytes(by_time)}: its measured {fmt_ms(facts.eager_ms)} at the DRAM rate {label}"
            + (f"; its ops' own count says at least {counted}" if counted else ""))


def render_brief(stage: Stage, role: Literal["code", "profile", "debug"], facts: BriefFacts) -> str:
    """The brief for `stage` and `role`, filled with the task's facts (missing facts: 'unknown')."""
    stage = Stage(stage)
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    if stage is Stage.DONE:
        return ("# DONE\nThe task is finished: call export_kernel to write the final ModelNew, or start_task for a new "
                "problem.\n")
    values = _values(stage, role, facts)
    _, body = _split_description(_read(_brief_file(stage, role)))
    values["header"] = Template(_read("_header.md")).safe_substitute(values).rstrip()
    values["returns"] = _read(f"_return_{role}.md").rstrip()
    text = Template(body).safe_substitute(values)
    text = _LEFTOVER.sub(UNKNOWN, text)
    return text.strip() + "\n"
