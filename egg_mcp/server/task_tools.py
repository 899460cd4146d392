"""The tools that start a task, write and check its candidates, and commit a stage."""

from __future__ import annotations

from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from egg_mcp.server.wrappers import (
    CommitStage,
    SizeValue,
    Tolerance,
    said_for,
    tool_errors,
)
from egg_mcp.surface.progress import long_call
from egg_mcp.workflow import limits
from egg_mcp.workflow.models import (
    CommitResult,
    SeedsResult,
    StageDecision,
    StartTaskResult,
    VerifyResult,
)
from egg_mcp.workflow.service import EggService


def register_task_tools(mcp: MCPServer, service: EggService) -> None:
    """start_task, generate_seeds, verify (in this order in tools/list)."""
    said = said_for(service)

    @mcp.tool()
    @tool_errors
    async def start_task(
        reference: str = Field(description="KernelBench-format PyTorch module: source text, a file in an allowed "
                               "folder, a KernelBench id ('level1/23') or a built-in ('softmax', 'gemm_bias_relu')"),
        name: str | None = Field(None, max_length=limits.MAX_NAME, description="short task name"),
        k_seeds: int = Field(3, ge=1, le=limits.MAX_K_SEEDS, description="seeds to write in SEEDS"),
        dtype: Literal["float32", "float16", "bfloat16"] = "float32",
        tolerance_preset: Literal["kernelbench-v0.1", "kernelbench-v0"] = Field(
            "kernelbench-v0.1", description="v0.1: fp32 1e-4, fp16/bf16 1e-2; v0: 1e-2"),
        atol: Tolerance | None = Field(None, description="overrides the preset"),
        rtol: Tolerance | None = Field(None, description="overrides the preset"),
        size_overrides: dict[str, SizeValue] | None = Field(
            None, description="module-level int constants of the reference to override for every evaluation "
            "of this task (CPU default: its QUICK_SIZES)"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> StartTaskResult:
        """Start a task: checks the KernelBench contract, analyses the reference (ops, FLOPs, bytes, roofline
        floor); returns the task id and the SEEDS brief."""
        async with long_call(ctx, "start_task"):  # the reference's analysis runs in a worker
            return said("start_task", await service.start_task(
                reference, name=name, k_seeds=k_seeds, dtype=dtype, tolerance_preset=tolerance_preset, atol=atol,
                rtol=rtol, size_overrides=size_overrides))

    @mcp.tool()
    @tool_errors
    async def generate_seeds(task_id: str, ctx: Context = None) -> SeedsResult:  # type: ignore[assignment]
        """SEEDS: k structurally distinct paradigms for this problem, fusion, precision rules, the ModelNew
        contract and the eager / torch.compile baselines (measured once on a GPU)."""
        async with long_call(ctx, "generate_seeds") as progress:
            return said("generate_seeds", await service.generate_seeds(task_id, progress))

    @mcp.tool()
    @tool_errors
    async def verify(
        task_id: str,
        source: str = Field(description="complete Python module defining ModelNew and its @triton.jit kernels"),
        note: str | None = Field(None, max_length=limits.MAX_NOTE, description="what this candidate tries"),
        size_overrides: dict[str, SizeValue] | None = Field(
            None, description="quick check at these sizes (reference's int constants, e.g. {'dim': 100}); "
            "stored apart from full-size results, not committable, time not comparable"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> VerifyResult:
        """Check a candidate in an isolated worker: correctness on fresh random inputs, cheating checks, then
        timing (GPU). An identical source at the same sizes returns the stored result."""
        async with long_call(ctx, "verify") as progress:
            return said("verify", await service.verify(task_id, source, note, progress, size_overrides=size_overrides))


def register_commit_tool(mcp: MCPServer, service: EggService) -> None:
    """commit_stage (after the measuring tools in tools/list)."""
    said = said_for(service)

    @mcp.tool()
    @tool_errors
    async def commit_stage(
        task_id: str,
        candidate_id: str,
        decision: StageDecision,
        force: bool = Field(False, description="override the regression guard (needs force_reason; recorded)"),
        force_reason: str | None = Field(None, max_length=limits.MAX_FORCE_REASON),
        stage: CommitStage | None = Field(
            None, description="stage this commit finalises (default: the candidate's; must be the current stage: "
            "pass it to carry an earlier kernel on unchanged)"),
        skip_memcheck: str | None = Field(
            None, max_length=limits.MAX_FORCE_REASON, description="GPU only: skip compute-sanitizer memcheck before "
            "this commit, giving the reason (stored with the candidate); a memory_error already found still refuses"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> CommitResult:
        """Finish the stage with a correct candidate and a structured decision. Refused if slower than the last
        committed kernel beyond noise (SEEDS: not the fastest seed), or (GPU with compute-sanitizer) if one
        memcheck forward finds an out-of-bounds access. A repeat returns the stored outcome.
        Returns the next stage's brief."""
        async with long_call(ctx, "commit_stage"):  # a GPU commit runs a memcheck forward first
            return said("commit_stage", await service.commit_stage(task_id, candidate_id, decision, force,
                                                                   force_reason, stage, skip_memcheck))
