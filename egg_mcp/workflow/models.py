"""Pydantic models for every tool's input and output (they become the tools' MCP schemas)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AllowInfNan, BaseModel, Field, Strict, StrictStr

from egg_mcp.contract import BaselineResult, EvalResult, TolerancePolicy, Verdict
from egg_mcp.workflow.memcheck_gate import MemcheckGate


class TaskOptions(BaseModel):
    """Fixed when the task starts; recorded with every result."""

    k_seeds: int = Field(default=3, ge=1, le=8)
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    tolerance: TolerancePolicy
    size_overrides: dict[str, int | list[int]] = Field(
        default_factory=dict, description="problem size constants overridden for evaluation (CPU quick check)"
    )
    correctness_trials: int = 5
    gpu_name: str | None = Field(default=None, description="GPU the task is measured on; None: CPU interpreter only")


# A measurement in a commit's evidence: a finite JSON number or a text; never a bool (lax pydantic read true as 1.0)
Measurement = Annotated[float, Strict(), AllowInfNan(False)] | StrictStr | None


class Evidence(BaseModel):
    metric: str = Field(description="e.g. 'median_ms', 'dram_throughput_pct', 'registers'")
    before: Measurement = None
    after: Measurement = None
    report_id: str | None = Field(default=None, description="profile/tiling report this number comes from")


class StageDecision(BaseModel):
    """What a stage finalised: the only thing (with the kernel) that travels to the next stage."""

    summary: str = Field(description="one line: what this stage decided")
    changes: list[str] = Field(default_factory=list, description="concrete changes to the kernel")
    rationale: str = Field(default="", description="why, in terms of the bottleneck it addresses")
    evidence: list[Evidence] = Field(default_factory=list, description="measurements before/after")


class CommittedStage(BaseModel):
    stage: str
    candidate_id: str
    time_ms: float | None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    decision: StageDecision
    forced: bool = False
    force_reason: str | None = None
    guard: str = ""


class HandoffContext(BaseModel):
    """Selective handoff: what a stage starts from. Exploratory candidates are deliberately absent."""

    task_id: str
    problem: str
    stage: str
    stage_goal: str
    dtype: str
    tolerance: TolerancePolicy
    gpu: str | None
    analysis_summary: str | None = None
    floor_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    committed_candidate_id: str | None = None
    committed_time_ms: float | None = None
    committed_source: str | None = None
    decisions: list[CommittedStage] = Field(default_factory=list)


class StartTaskResult(BaseModel):
    task_id: str
    problem: str
    origin: str
    stage: str
    options: TaskOptions
    analysis: dict[str, Any] | None = Field(default=None, description="reference analysis (ops, FLOPs, bytes, floor)")
    timing_available: bool
    notes: list[str] = Field(default_factory=list)
    brief: str = Field(description="the SEEDS stage brief for the Code role")
    next_step: str


class SeedsResult(BaseModel):
    task_id: str
    stage: str
    k: int
    brief: str = Field(description="markdown brief: what to write, the paradigms, the rules, how seeds are judged")
    seed_plan: dict[str, Any] = Field(description="structured form of the brief (paradigms, fusion, precision)")
    baselines: BaselineResult | None = None
    next_step: str


class VerifyResult(BaseModel):
    task_id: str
    candidate_id: str
    stage: str
    cached: bool = Field(description="true when this exact source was verified before; the stored result is returned")
    verdict: Verdict
    summary: str
    time_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speedup_vs_committed: float | None = Field(default=None,
                                               description="vs the kernel committed by the previous stage")
    best_in_stage: bool = False
    result: EvalResult
    debug_brief: str | None = Field(default=None, description="Debug-role brief when the candidate failed")
    next_step: str
    sandbox: str | None = Field(default=None, description="the sandbox the candidate ran in (its runner's level), or "
                                                          "why "
                                "candidates do not run; a weak level the operator allowed is said here")
    size_overrides: dict[str, int | list[int]] | None = Field(
        default=None, description="the quick-check sizes this result was taken at (None: the task's sizes)")


class CommitResult(BaseModel):
    task_id: str
    committed: CommittedStage
    new_stage: str
    warnings: list[str] = Field(default_factory=list)
    repeated: bool = Field(default=False, description="true: this stage was already committed with this candidate; the "
                           "stored outcome is returned and nothing changed")
    brief: str = Field(description="brief for the next stage's Code role ('' when DONE)")
    context: HandoffContext
    next_step: str
    memcheck: MemcheckGate | None = Field(default=None, description="the committed candidate's compute-sanitizer "
                                                                    "memcheck "
                                          "(GPU; run once per candidate before its commit; None on the CPU)")


class CandidateSummary(BaseModel):
    candidate_id: str
    stage: str
    verdict: str | None
    status: str
    time_ms: float | None
    note: str | None
    ran_on: str | None = Field(default=None, description="where its verify ran: host, GPU index, model, lane")
    quick_sizes: dict[str, int | list[int]] | None = Field(
        default=None, description="a quick check's sizes (its time is at these sizes, never the task's); None at the "
                                  "task's")


class TaskStatus(BaseModel):
    task_id: str
    problem: str
    origin: str
    stage: str
    next_step: str
    allowed_tools: list[str]
    options: TaskOptions
    eager_ms: float | None = None
    compile_ms: float | None = None
    history: list[CommittedStage] = Field(description="per committed stage: time and speedup (the ablation)")
    candidates_in_stage: list[CandidateSummary]
    running_jobs: int
    reports: list[dict[str, Any]] = Field(default_factory=list)
    baselines_ran_on: str | None = Field(default=None, description="where the eager/compile baselines were measured")
    cluster: dict[str, Any] | None = Field(
        default=None, description="the evaluation lanes (one per GPU; Ray nodes in cluster mode), GPUs by model, queue "
                                  "depth")


class TaskSummary(BaseModel):
    task_id: str
    problem: str
    stage: str
    created_at: float
    best_time_ms: float | None = None


class TaskList(BaseModel):
    tasks: list[TaskSummary]
    workspace: str


class ExportResult(BaseModel):
    task_id: str
    candidate_id: str
    stage: str
    path: str | None = None
    source: str


class CandidateDetail(BaseModel):
    task_id: str
    candidate: CandidateSummary
    source: str
    result: EvalResult | None = None
    memcheck: MemcheckGate | None = Field(default=None, description="its memcheck before commit, when one ran or was "
                                                                    "skipped")
