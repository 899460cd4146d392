"""The MCP server: thin tool wrappers over `EggService`, plus resources and per-stage prompts.

Every tool takes and returns pydantic models (so every tool publishes an output schema). Each tool
hands the SDK a `CallToolResult` built by `surface.summaries.tool_result`: structuredContent is the
whole model (the SDK still validates it against the output model), the text block a short summary
instead of the SDK's default JSON dump of the model (plus the guidance itself for the guidance tools). `surface.schemas.harden_tools` then makes the
argument models refuse unknown names and publishes compact schemas. A failure
the client can fix (wrong stage, unknown id, bad argument) is raised as `ToolError` with a message
saying what to do next; a kernel that fails to compile or is wrong is a successful call whose
verdict says so.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ToolAnnotations
from pydantic import BaseModel, Field

from egg_mcp import __version__
from egg_mcp.config import ServerConfig
from egg_mcp.contract import Evaluator
from egg_mcp.hardware import GpuSpec, detect_gpu
from egg_mcp.profiling.compact import CompactProfile, fit_reply
from egg_mcp.profiling.models import ProfileReport
from egg_mcp.tiling.models import TilingProposal
from egg_mcp.surface.progress import long_call
from egg_mcp.surface.schemas import harden_tools
from egg_mcp.surface.summaries import tool_result
from egg_mcp.workflow import service as svc
from egg_mcp.workflow.compare import CompareResult
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
from egg_mcp.workflow import limits
from egg_mcp.workflow.service import EggService, WorkflowError
from egg_mcp.stages import Stage
from egg_mcp.workspace.faults import tool_error_text
from egg_mcp.workspace.store import Workspace, WorkspaceError

# Input constraints published in the tool schemas (the service checks them again for other callers). Every
# argument model is strict (surface.schemas.strict_arguments): no bools or strings for numbers.
Tolerance = Annotated[float, Field(ge=limits.MIN_TOLERANCE, le=limits.MAX_TOLERANCE, allow_inf_nan=False)]
SizeInt = Annotated[int, Field(ge=1, le=limits.MAX_SIZE_VALUE)]
SizeValue = SizeInt | Annotated[list[SizeInt], Field(min_length=1, max_length=limits.MAX_SIZE_LIST)]
"""A size constant's override: an int, or a list of ints for a list constant (1_MLP's layer_sizes)."""
CommitStage = Literal["SEEDS", "ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY"]

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
egg-mcp makes you a staged Triton kernel engineer (EGG: expert-guided kernel generation).
start_task -> generate_seeds -> verify k distinct seeds -> commit_stage(fastest) -> ALGORITHM ->
PARALLEL_MAPPING -> TILING (propose_tiling) -> MEMORY -> DONE -> export_kernel. Each stage: verify
rewrites, profile_ncu, compare close calls, commit_stage with evidence. Results: short text plus full
structuredContent. Details: resource egg://docs/tools. Code runs isolated; cheating is rejected.
"""


def _hints(read_only: bool, destructive: bool, idempotent: bool) -> ToolAnnotations:
    # openWorldHint is false for every tool: each one works on this server's workspace, its isolated
    # workers and (Ray mode) the configured cluster's lanes, never on an open set of outside systems.
    return ToolAnnotations(read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent,
                           open_world_hint=False)


# Per tool: its MCP hints (no titles: the names say it, and tools/list has a size budget). Idempotent:
# a repeat with the same arguments changes nothing more.
TOOL_ANNOTATIONS: dict[str, ToolAnnotations] = {
    # a new task on every call
    "start_task": _hints(read_only=False, destructive=False, idempotent=False),
    # measures and stores the baselines once; later calls reuse them
    "generate_seeds": _hints(read_only=False, destructive=False, idempotent=True),
    # stores a candidate; the same source at the same sizes returns the stored result
    "verify": _hints(read_only=False, destructive=False, idempotent=True),
    # each call stores a new report
    "profile_ncu": _hints(read_only=False, destructive=False, idempotent=False),
    "propose_tiling": _hints(read_only=False, destructive=False, idempotent=False),
    # times two stored candidates, stores nothing
    "compare": _hints(read_only=True, destructive=False, idempotent=True),
    # advances the task (never undoes a commit); a repeat of a stored commit returns the stored outcome
    "commit_stage": _hints(read_only=False, destructive=False, idempotent=True),
    "task_status": _hints(read_only=True, destructive=False, idempotent=True),
    "list_tasks": _hints(read_only=True, destructive=False, idempotent=True),
    "get_context": _hints(read_only=True, destructive=False, idempotent=True),
    "get_candidate": _hints(read_only=True, destructive=False, idempotent=True),
    # writes a file, replacing one already at that path
    "export_kernel": _hints(read_only=False, destructive=True, idempotent=True),
}


def _finish_tool_metadata(server: MCPServer) -> None:
    """Every tool gets its hints (a tool missing from TOOL_ANNOTATIONS is a startup error) and a
    dedented description (no source indentation reaches the client)."""
    for tool in server._tool_manager.list_tools():
        if tool.name not in TOOL_ANNOTATIONS:
            raise RuntimeError(f"tool {tool.name} has no entry in TOOL_ANNOTATIONS")
        tool.annotations = TOOL_ANNOTATIONS[tool.name]
        tool.description = inspect.cleandoc(tool.description or "")


class ProfileResult(BaseModel):
    task_id: str
    candidate_id: str
    report_id: str
    report: CompactProfile | ProfileReport = Field(
        description="compact by default (<= ~3 KB: the stage's metrics, bottleneck, evidence, next moves); the full "
                    "report with detail=true or at egg://tasks/{task_id}/reports/{report_id}[/raw]")
    brief: str = Field(description="Profile-role brief (with detail=true), else where to read it")


def _out(tool: str, result: BaseModel, lead: str | None = None):
    """structuredContent: the whole result; text: a short summary (see egg_mcp.surface.summaries)."""
    return tool_result(tool, result, lead)


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
        except (WorkflowError, WorkspaceError) as exc:
            raise ToolError(str(exc)) from None
        except (ToolError, ResourceError, MCPError):
            raise
        except Exception as exc:  # a storage fault (disk full...) or a bug: a plain sentence, never a bare error
            log.exception("tool %s failed", fn.__name__)
            raise ToolError(tool_error_text(exc, fn.__name__)) from None

    return wrapper


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
    workspace = Workspace(config.workspace, config.scratch_dir())
    analysis_evaluator = None
    auto_calibrate = evaluator is None and not config.force_interpreter
    if evaluator is None:
        from egg_mcp.cluster.build import build_evaluator
        from egg_mcp.cluster.lanes import build_engine
        from egg_mcp.sandbox.floor import runner_guards

        # every runner and confined job checks its own report against the floor too (not only this host's probe);
        # below the floor the service refuses candidate tools before any job starts (require_sandbox); no tool
        # or toolchain grant to a runner may expose `protect` (landlock.grantable)
        floor, protect = runner_guards(config)
        required = floor.required if floor.runs_candidates else []
        # a plain engine (no GPU), one lane per visible GPU, or lanes on a Ray cluster (config.ray_address)
        evaluator = build_evaluator(workspace.scratch, force_interpreter=config.force_interpreter,
                                    ray_address=config.ray_address, protect=protect, sandbox_required=required)
        # start_task's analysis gets its own engine (own CPU slots, no spare pool) so it never waits
        # behind queued interpreter verifies holding every CPU slot of the main engine; in cluster mode it
        # goes to the cluster's lanes with the other jobs (CPU-only jobs never wait for a busy lane).
        if not config.ray_address:
            analysis_evaluator = build_engine(workspace.scratch, force_interpreter=config.force_interpreter,
                                              spare_workers=0, burst_spares=0, max_cpu_jobs=2, protect=protect,
                                              sandbox_required=required)
    if gpu is None and not config.force_interpreter:
        gpu = detect_gpu(workspace_root=workspace.root)
        lanes = getattr(evaluator, "lanes", None)
        if gpu is None and lanes:  # cluster mode on a server without a GPU: the lanes' model sets the roofline
            from egg_mcp.hardware import gpu_for

            gpu = gpu_for(lanes[0].device_model, None, workspace.root)
    service = EggService(config, workspace, evaluator, gpu, analysis_evaluator=analysis_evaluator)

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
            for ev in {id(evaluator): evaluator, id(service.analysis_evaluator): service.analysis_evaluator}.values():
                close = getattr(ev, "aclose", None)
                if close is not None:
                    await close()

    mcp = MCPServer("egg-mcp", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)

    def _said(tool: str, result: BaseModel) -> Any:
        """_out, with the weak sandbox level the operator allowed (--unsafe-sandbox-floor) leading every text.
        Any: each tool is annotated with its model (the SDK's output schema) and returns this CallToolResult."""
        floor = service.sandbox_floor
        return _out(tool, result, floor.line() if floor.weak else None)
    mcp.egg_service = service  # type: ignore[attr-defined]  # for tests and the demo

    @mcp.tool()
    @_tool_errors
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
            return _said("start_task", await service.start_task(
                reference, name=name, k_seeds=k_seeds, dtype=dtype, tolerance_preset=tolerance_preset, atol=atol,
                rtol=rtol, size_overrides=size_overrides))

    @mcp.tool()
    @_tool_errors
    async def generate_seeds(task_id: str, ctx: Context = None) -> SeedsResult:  # type: ignore[assignment]
        """SEEDS: k structurally distinct paradigms for this problem, fusion, precision rules, the ModelNew
        contract and the eager / torch.compile baselines (measured once on a GPU)."""
        async with long_call(ctx, "generate_seeds") as progress:
            return _said("generate_seeds", await service.generate_seeds(task_id, progress))

    @mcp.tool()
    @_tool_errors
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
            return _said("verify", await service.verify(task_id, source, note, progress, size_overrides=size_overrides))

    @mcp.tool()
    @_tool_errors
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
        return _said("profile_ncu", ProfileResult(task_id=task_id, candidate_id=candidate_id, report_id=report_id,
                                                 report=report, brief=brief))

    @mcp.tool()
    @_tool_errors
    async def propose_tiling(
        task_id: str,
        candidate_id: str,
        max_trials: int = Field(8, ge=1, le=limits.MAX_TRIALS, description="configs to measure on the GPU"),
        time_budget_s: float = Field(120.0, ge=limits.MIN_TIME_BUDGET_S, le=limits.MAX_TIME_BUDGET_S,
                                     allow_inf_nan=False, description="wall-time budget for measuring"),
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
        nxt = ("verify proposal.recommended_source, then commit_stage if it is faster" if proposal.recommended_source
               else "no rewritten source: change the tunables by hand, verify, then commit_stage")
        return _said("propose_tiling", TilingResult(task_id=task_id, candidate_id=candidate_id, report_id=report_id,
                                                   proposal=proposal, next_step=nxt))

    @mcp.tool()
    @_tool_errors
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
        from egg_mcp.workflow.compare import compare_candidates

        async with long_call(ctx, "compare") as progress:
            return _said("compare", await compare_candidates(service, task_id, candidate_a, candidate_b,
                                                            rounds=rounds, progress=progress))

    @mcp.tool()
    @_tool_errors
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
            return _said("commit_stage", await service.commit_stage(task_id, candidate_id, decision, force,
                                                                   force_reason, stage, skip_memcheck))

    @mcp.tool()
    @_tool_errors
    async def task_status(task_id: str) -> TaskStatus:
        """Stage, next step, allowed tools, per-stage history, this stage's candidates, jobs, reports."""
        return _said("task_status", service.status(task_id))

    @mcp.tool()
    @_tool_errors
    async def list_tasks() -> TaskList:
        """Tasks in this workspace, newest first."""
        return _said("list_tasks", service.list_tasks())

    @mcp.tool()
    @_tool_errors
    async def get_context(task_id: str) -> HandoffContext:
        """The handoff the stage starts from: reference summary, committed kernel and decisions only."""
        return _said("get_context", service.context(task_id))

    @mcp.tool()
    @_tool_errors
    async def get_candidate(task_id: str, candidate_id: str) -> CandidateDetail:
        """One candidate's source and full verification result."""
        return _said("get_candidate", service.candidate(task_id, candidate_id))

    @mcp.tool()
    @_tool_errors
    async def export_kernel(
        task_id: str,
        path: str | None = Field(None, max_length=limits.MAX_PATH,
                                 description="file in an allowed folder; default: workspace/exports"),
    ) -> ExportResult:
        """Write the last committed ModelNew to a file; returns its source."""
        return _said("export_kernel", service.export_kernel(task_id, path))

    _finish_tool_metadata(mcp)
    full_schemas = harden_tools(mcp)

    # -- resources -------------------------------------------------------------------------------
    def _resource(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (WorkflowError, WorkspaceError) as exc:
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

    @mcp.resource("egg://tasks/{task_id}/brief/{role}", mime_type="text/markdown")
    @_resource
    def task_brief(task_id: str, role: str) -> str:
        """The current stage's brief for a role (code, profile or debug), filled with the task's facts."""
        if role not in ("code", "profile", "debug"):
            raise ResourceError(f"unknown role {role!r}; use code, profile or debug")
        row = service._task_row(task_id)
        return service.brief_for(Stage(row.stage), role, task_id)  # type: ignore[arg-type]

    @mcp.resource("egg://schemas/{tool}", mime_type="application/json")
    def tool_schema(tool: str) -> str:
        """The full output schema of a tool (tools/list publishes one level of it)."""
        import json

        if tool not in full_schemas:
            raise ResourceError(f"no tool {tool!r}; tools: {', '.join(sorted(full_schemas))}")
        return json.dumps(full_schemas[tool], indent=1)

    @mcp.resource("egg://docs/tools", mime_type="text/markdown")
    def tools_guide() -> str:
        """Every tool's arguments, what it returns, and when to use it (the long form of tools/list)."""
        from egg_mcp.expertise.briefs import prompts_dir

        return (prompts_dir() / "_tools_guide.md").read_text(encoding="utf-8")

    @mcp.resource("egg://tasks/{task_id}/reports/{report_id}", mime_type="application/json")
    @_resource
    def task_report(task_id: str, report_id: str) -> str:
        """A stored profile or tiling report."""
        import json

        return json.dumps(service.report(task_id, report_id), indent=2)

    @mcp.resource("egg://tasks/{task_id}/reports/{report_id}/raw", mime_type="application/json")
    @_resource
    def task_report_raw(task_id: str, report_id: str) -> str:
        """A stored profile's raw metric table: per kernel, every metric with its value, unit and source."""
        from egg_mcp.profiling.compact import raw_table

        return raw_table(service.report(task_id, report_id))

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
        except (WorkflowError, WorkspaceError) as exc:
            # MCPError passes through the SDK's prompt rendering as a JSON-RPC error with this message
            # (a ValueError became "Error rendering prompt", and the cause only reached the log).
            raise MCPError(INVALID_PARAMS, str(exc)) from None

    prompt.__name__ = name
    prompt.__doc__ = description
    mcp.prompt(name=name, description=description)(prompt)


__all__ = ["create_server"]
