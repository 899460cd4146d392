"""The MCP server: thin tool wrappers over `EggService`, plus resources and per-stage prompts.

Every tool takes and returns pydantic models (so every tool publishes an output schema). A failure
the client can fix (wrong stage, unknown id, bad argument) is raised as `ToolError` with a message
saying what to do next; a kernel that fails to compile or is wrong is a successful call whose
verdict says so.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field

from egg_mcp import __version__
from egg_mcp.config import ServerConfig
from egg_mcp.evaluation.api import Evaluator
from egg_mcp.hardware import GpuSpec, detect_gpu
from egg_mcp.profiling.models import ProfileReport
from egg_mcp.tiling.models import TilingProposal
from egg_mcp.workflow import service as svc
from egg_mcp.workflow.models import (
    CandidateDetail,
    CommitResult,
    ExportResult,
    HandoffContext,
    SeedsResult,
    StageDecision,
    StartTaskResult,
    TaskList,
    TaskStatus,
    VerifyResult,
)
from egg_mcp.workflow.service import EggService, WorkflowError
from egg_mcp.workflow.stages import Stage
from egg_mcp.workspace.store import Workspace

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
egg-mcp makes you a staged Triton kernel engineer (EGG: expert-guided kernel generation).
Workflow per task: start_task(reference) -> generate_seeds -> write k structurally different ModelNew
seeds, verify each -> commit_stage(best) -> ALGORITHM (fusion, dataflow) -> PARALLEL_MAPPING ->
TILING (propose_tiling) -> MEMORY -> DONE -> export_kernel. In every stage: verify candidates,
profile_ncu the promising ones, commit_stage one decision with evidence. Only committed decisions
carry to the next stage (get_context). All code you submit runs in isolated worker processes;
correctness is checked on fresh random inputs and cheating (torch compute ops, cached outputs,
side streams) is detected and rejected.
"""


class ProfileResult(BaseModel):
    task_id: str
    candidate_id: str
    report_id: str
    report: ProfileReport
    brief: str = Field(description="Profile-role brief: how to turn this report into one structured fix")


class TilingResult(BaseModel):
    task_id: str
    candidate_id: str
    report_id: str
    proposal: TilingProposal
    next_step: str


def _tool_errors(fn):
    """Turn workflow errors into tool errors the model can read and act on."""

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except WorkflowError as exc:
            raise ToolError(str(exc)) from None

    return wrapper


def _progress(ctx: Context | None):
    if ctx is None:
        return None

    async def report(done: float, total: float | None = None, message: str | None = None) -> None:
        try:
            await ctx.report_progress(done, total, message)
        except Exception:  # a client that went away must not fail the job
            log.debug("progress report failed", exc_info=True)

    return report


async def _calibrate_on_first_use(service: EggService, workspace_root) -> None:
    """First GPU use of this workspace: measure the GPU's ceilings (one short GPU job, queued with the
    others), then let the roofline and briefs use them. Failure leaves the datasheet leads, logged."""
    from egg_mcp.calibration.run import CalibrationError, ensure_calibrated
    from egg_mcp.hardware import apply_calibration, nvml_gpu_uuids

    uuids = nvml_gpu_uuids()
    try:
        calibration = await ensure_calibrated(service.evaluator, workspace_root, uuids[0] if uuids else None)
    except CalibrationError as exc:
        log.warning("calibration on first GPU use failed (%s); ceilings stay datasheet leads", exc)
        return
    if calibration is not None:
        service.gpu = apply_calibration(service.gpu, calibration)
        detect_gpu(workspace_root=workspace_root)  # registers the calibrated spec for lookup() by name


def create_server(
    config: ServerConfig | None = None,
    *,
    evaluator: Evaluator | None = None,
    gpu: GpuSpec | None = None,
) -> MCPServer:
    """Build the server. `evaluator` defaults to the isolated worker engine."""
    config = config or ServerConfig()
    workspace = Workspace(config.workspace)
    auto_calibrate = evaluator is None and not config.force_interpreter
    if evaluator is None:
        from egg_mcp.evaluation.engine import WorkerEvaluator

        evaluator = WorkerEvaluator(scratch_dir=workspace.root / "scratch", force_interpreter=config.force_interpreter)
    if gpu is None and not config.force_interpreter:
        gpu = detect_gpu(workspace_root=workspace.root)
    service = EggService(config, workspace, evaluator, gpu)

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict[str, Any]]:
        task = None
        if auto_calibrate and evaluator.has_gpu() and (service.gpu is None or service.gpu.source != "measured"):
            task = asyncio.ensure_future(_calibrate_on_first_use(service, workspace.root))
        try:
            yield {"service": service}
        finally:
            if task is not None and not task.done():
                task.cancel()
            close = getattr(evaluator, "aclose", None)
            if close is not None:
                await close()

    mcp = MCPServer("egg-mcp", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)
    mcp.egg_service = service  # type: ignore[attr-defined]  # for tests and the demo

    @mcp.tool()
    @_tool_errors
    async def start_task(
        reference: str = Field(description="PyTorch reference in KernelBench format: source text, a file path "
                               "inside an allowed folder, a KernelBench id like 'level1/23', or a built-in "
                               "name ('softmax', 'gemm_bias_relu')"),
        name: str | None = Field(None, description="short name for the task (default: from the file/problem)"),
        k_seeds: int = Field(3, ge=1, le=8, description="number of structurally different seeds to write"),
        dtype: Literal["float32", "float16", "bfloat16"] = Field("float32", description="dtype of inputs and weights"),
        tolerance_preset: Literal["kernelbench-v0.1", "kernelbench-v0"] = Field(
            "kernelbench-v0.1", description="'kernelbench-v0.1': fp32 1e-4, fp16/bf16 1e-2; 'kernelbench-v0': 1e-2"),
        atol: float | None = Field(None, description="override the preset's absolute tolerance"),
        rtol: float | None = Field(None, description="override the preset's relative tolerance"),
        size_overrides: dict[str, int] | None = Field(
            None, description="override module-level size constants for evaluation (e.g. a quick CPU check)"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> StartTaskResult:
        """Start an optimisation task for a PyTorch module: validates the KernelBench contract, analyses the
        reference (ops, FLOPs, bytes, roofline floor) and returns the task id and the SEEDS stage brief."""
        return await service.start_task(reference, name=name, k_seeds=k_seeds, dtype=dtype,
                                        tolerance_preset=tolerance_preset, atol=atol, rtol=rtol,
                                        size_overrides=size_overrides)

    @mcp.tool()
    @_tool_errors
    async def generate_seeds(task_id: str, ctx: Context = None) -> SeedsResult:  # type: ignore[assignment]
        """SEEDS stage: the algorithmic-structure brief — what the reference computes, k structurally distinct
        paradigms for its op classes, fusion opportunities, precision rules, the ModelNew contract, and the
        eager / torch.compile baseline times (measured once, on a GPU)."""
        return await service.generate_seeds(task_id, _progress(ctx))

    @mcp.tool()
    @_tool_errors
    async def verify(
        task_id: str,
        source: str = Field(description="a complete Python module defining class ModelNew and its @triton.jit kernels"),
        note: str | None = Field(None, description="what this candidate tries (kept with it)"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> VerifyResult:
        """Submit a candidate to the current stage: it runs isolated, is checked on fresh random inputs against the
        reference (and for cheating), then timed against eager / torch.compile. Identical re-submissions return
        the stored result."""
        return await service.verify(task_id, source, note, _progress(ctx))

    @mcp.tool()
    @_tool_errors
    async def profile_ncu(task_id: str, candidate_id: str, ctx: Context = None) -> ProfileResult:  # type: ignore[assignment]
        """Profile a verified-correct candidate with Nsight Compute: per-kernel metrics for this stage, a
        bottleneck classification on the roofline, evidence and next moves. Falls back to metrics that need no
        counters (event timing, compiler metadata, occupancy) when ncu cannot read them."""
        report_id, report, brief = await svc.profile(service, task_id, candidate_id, _progress(ctx))
        return ProfileResult(task_id=task_id, candidate_id=candidate_id, report_id=report_id, report=report,
                             brief=brief)

    @mcp.tool()
    @_tool_errors
    async def propose_tiling(
        task_id: str,
        candidate_id: str,
        max_trials: int = Field(8, ge=1, le=64, description="configs to measure on the GPU"),
        time_budget_s: float = Field(120.0, gt=0, le=1800, description="wall-time budget for measuring"),
        dims: dict[str, int] | None = Field(None, description="problem dims (e.g. M,N,K); default from the analysis"),
        kind: Literal["gemm", "reduction", "elementwise", "softmax", "norm"] | None = Field(
            None, description="cost model to use; default from the reference analysis"),
        measure: bool = Field(True, description="measure the top configs on the GPU (analytic ranking only if false)"),
        ctx: Context = None,  # type: ignore[assignment]
    ) -> TilingResult:
        """TILING/MEMORY stages: enumerate the candidate's tunables (module-level UPPERCASE constants and an
        optional TUNING_SPACE dict), prune infeasible configs with stated reasons (shared memory, registers,
        occupancy, waves), rank by a cost model, measure the best few, and return the winner applied to the
        source, ready to verify."""
        report_id, proposal = await svc.tiling(service, task_id, candidate_id, max_trials=max_trials,
                                               time_budget_s=time_budget_s, dims=dims, kind=kind, measure=measure,
                                               progress=_progress(ctx))
        return TilingResult(task_id=task_id, candidate_id=candidate_id, report_id=report_id, proposal=proposal,
                            next_step="verify proposal.recommended_source, then commit_stage if it is faster")

    @mcp.tool()
    @_tool_errors
    async def commit_stage(
        task_id: str,
        candidate_id: str,
        decision: StageDecision,
        force: bool = Field(False, description="override the regression guard (needs force_reason; recorded)"),
        force_reason: str | None = None,
    ) -> CommitResult:
        """Finalise the current stage with a verified-correct candidate and a structured decision (what changed,
        why, evidence). After SEEDS, a commit may not be slower than the last committed kernel beyond noise.
        Returns the next stage's brief and the handoff context (only committed decisions carry on)."""
        return await service.commit_stage(task_id, candidate_id, decision, force, force_reason)

    @mcp.tool()
    @_tool_errors
    async def task_status(task_id: str) -> TaskStatus:
        """Where a task stands: stage, next step, allowed tools, per-stage history (time and speedup after each
        committed stage), candidates of the current stage, running jobs, reports."""
        return service.status(task_id)

    @mcp.tool()
    @_tool_errors
    async def list_tasks() -> TaskList:
        """All tasks in this workspace, newest first."""
        return service.list_tasks()

    @mcp.tool()
    @_tool_errors
    async def get_context(task_id: str) -> HandoffContext:
        """The selective-handoff context the current stage starts from: reference summary, committed kernel and
        committed decisions — never exploratory candidates."""
        return service.context(task_id)

    @mcp.tool()
    @_tool_errors
    async def get_candidate(task_id: str, candidate_id: str) -> CandidateDetail:
        """One candidate's source and full verification result."""
        return service.candidate(task_id, candidate_id)

    @mcp.tool()
    @_tool_errors
    async def export_kernel(
        task_id: str,
        path: str | None = Field(None, description="file to write (inside an allowed folder); default: workspace/exports"),
    ) -> ExportResult:
        """Write the last committed ModelNew of a task to a file and return its source."""
        return service.export_kernel(task_id, path)

    # -- resources -------------------------------------------------------------------------------
    def _resource(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except WorkflowError as exc:
                raise ResourceError(str(exc)) from None

        return wrapper

    @mcp.resource("egg://tasks/{task_id}/context", mime_type="application/json")
    @_resource
    def task_context(task_id: str) -> str:
        """Handoff context of a task (committed kernel and decisions)."""
        return service.context(task_id).model_dump_json(indent=2)

    @mcp.resource("egg://tasks/{task_id}/candidates/{candidate_id}/source", mime_type="text/x-python")
    @_resource
    def candidate_source(task_id: str, candidate_id: str) -> str:
        """Source of one candidate."""
        return service.candidate(task_id, candidate_id).source

    @mcp.resource("egg://tasks/{task_id}/candidates/{candidate_id}/result", mime_type="application/json")
    @_resource
    def candidate_result(task_id: str, candidate_id: str) -> str:
        """Verification result of one candidate."""
        detail = service.candidate(task_id, candidate_id)
        return detail.result.model_dump_json(indent=2) if detail.result else "null"

    @mcp.resource("egg://tasks/{task_id}/reports/{report_id}", mime_type="application/json")
    @_resource
    def task_report(task_id: str, report_id: str) -> str:
        """A stored profile or tiling report."""
        import json

        return json.dumps(service.report(task_id, report_id), indent=2)

    # -- prompts: one per stage and role --------------------------------------------------------------
    from egg_mcp.expertise.briefs import list_briefs

    for stage, role, description in list_briefs():
        _register_prompt(mcp, service, stage, role, description)

    return mcp


def _register_prompt(mcp: MCPServer, service: EggService, stage: Stage, role: str, description: str) -> None:
    name = f"{stage.value.lower()}_{role}"

    def prompt(task_id: str | None = None) -> str:
        try:
            return service.brief_for(stage, role, task_id)  # type: ignore[arg-type]
        except WorkflowError as exc:
            raise ValueError(str(exc)) from None

    prompt.__name__ = name
    prompt.__doc__ = description
    mcp.prompt(name=name, description=description)(prompt)


__all__ = ["create_server"]
