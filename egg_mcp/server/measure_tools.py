"""The tools that measure a correct candidate: profile_ncu, propose_tiling, compare; and their results."""

from __future__ import annotations

from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from egg_mcp.profiling.compact import CompactProfile, fit_reply
from egg_mcp.profiling.profile_report import ProfileReport
from egg_mcp.server.wrappers import SizeInt, SizeValue, said_for, tool_errors
from egg_mcp.surface.progress import long_call
from egg_mcp.tiling.tiling_types import TilingProposal
from egg_mcp.workflow import limits
from egg_mcp.workflow import service as svc
from egg_mcp.workflow.compare_candidates import CompareResult
from egg_mcp.workflow.service import EggService


class ProfileResult(BaseModel):
    task_id: str
    candidate_id: str
    report_id: str
    report: CompactProfile | ProfileReport = Field(
        description="compact by default (<= ~3 KB: the stage's metrics, bottleneck, evidence, next moves); the full "
                    "report with detail=true or at egg://tasks/{task_id}/reports/{report_id}[/raw]")
    brief: str = Field(description="Profile-role brief (with detail=true), else where to read it")


class TilingResult(BaseModel):
    task_id: str
    candidate_id: str
    report_id: str
    proposal: TilingProposal
    next_step: str


def register_measure_tools(mcp: MCPServer, service: EggService) -> None:
    """profile_ncu, propose_tiling, compare (in this order in tools/list)."""
    said = said_for(service)

    @mcp.tool()
    @tool_errors
    async def profile_ncu(
        task_id: str,
        candidate_id: str,
        size_overrides: dict[str, SizeValue] | None = Field(
            None, description="profile at these sizes instead of the task's (e.g. the problem's QUICK_SIZES on a CPU)"),
        detail: bool = Field(False, description="true: the full report (every metric ncu returned) and the brief "
                                                "inline; default: a compact report of <= ~3 KB"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> ProfileResult:
        """Profile a correct candidate with Nsight Compute: per-kernel metrics for this stage, roofline
        bottleneck, evidence, next moves. Without ncu or a GPU it says what it could and could not measure."""
        async with long_call(ctx, "profile_ncu") as progress:
            report_id, report, brief = await svc.profile(service, task_id, candidate_id, progress,
                                                         size_overrides=size_overrides)
        if not detail:
            base = f"egg://tasks/{task_id}/reports/{report_id}"
            pointer = f"{base} (report), {base}/raw (metric table), or profile_ncu(detail=true)"
            brief = (f"Profile brief ({len(brief)} chars): resource egg://tasks/{task_id}/brief/profile, "
                     "or profile_ncu(detail=true)")
            report = fit_reply(report, pointer, lambda c: ProfileResult(  # the whole reply within ~3 KB
                task_id=task_id, candidate_id=candidate_id, report_id=report_id, report=c, brief=brief))
        return said("profile_ncu", ProfileResult(task_id=task_id, candidate_id=candidate_id, report_id=report_id,
                                                 report=report, brief=brief))

    @mcp.tool()
    @tool_errors
    async def propose_tiling(
        task_id: str,
        candidate_id: str,
        max_trials: int = Field(8, ge=1, le=limits.MAX_TRIALS, description="configs to measure on the GPU"),
        time_budget_s: float = Field(120.0, ge=limits.MIN_TIME_BUDGET_S, le=limits.MAX_TIME_BUDGET_S,
                                     allow_inf_nan=False, description="the whole call's wall-time budget"),
        dims: dict[str, SizeInt] | None = Field(
            None, description="problem dims (M,N,K or n_rows,n_cols); default: analysis"),
        kind: Literal["gemm", "reduction", "elementwise", "softmax", "norm", "attention"] | None = Field(
            None, description="cost model; default: analysis"),
        measure: bool = Field(True, description="measure the top configs (needs a GPU); false: model ranking only"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> TilingResult:
        """TILING/MEMORY: find the tunables (UPPERCASE module constants or constexprs passed at the launch,
        TUNING_SPACE), prune infeasible configs with reasons, rank by a cost model, measure the best few; the
        winner comes back applied to the source."""
        async with long_call(ctx, "propose_tiling") as progress:
            report_id, proposal = await svc.tiling(service, task_id, candidate_id, max_trials=max_trials,
                                                   time_budget_s=time_budget_s, dims=dims, kind=kind, measure=measure,
                                                   progress=progress)
        if proposal.recommended_source and proposal.reverified is not None:
            nxt = ("proposal.recommended_source passed verify's checks and timed faster than the current source: "
                   "verify it as a candidate, then commit_stage")
        elif proposal.recommended_source:
            nxt = "verify proposal.recommended_source (not measured), then commit_stage if it is faster"
        else:
            nxt = "keep the current config, or change the tunables by hand, verify, then commit_stage"
        return said("propose_tiling", TilingResult(task_id=task_id, candidate_id=candidate_id, report_id=report_id,
                                                   proposal=proposal, next_step=nxt))

    @mcp.tool()
    @tool_errors
    async def compare(
        task_id: str,
        candidate_a: str = Field(description="baseline candidate id (e.g. the committed kernel)"),
        candidate_b: str = Field(description="candidate id to judge against A"),
        rounds: int = Field(30, ge=limits.MIN_COMPARE_ROUNDS, le=limits.MAX_COMPARE_ROUNDS,
                            description="A/B rounds timed interleaved (GPU)"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> CompareResult:
        """Is B faster than A? Times both correct candidates interleaved (A B A B ...) on one GPU and returns
        faster/slower/inconclusive with its confidence, plus a unified source diff."""
        from egg_mcp.workflow.compare_candidates import compare_candidates

        async with long_call(ctx, "compare") as progress:
            return said("compare", await compare_candidates(service, task_id, candidate_a, candidate_b,
                                                            rounds=rounds, progress=progress))
