"""The MCP server: thin tool wrappers over `EggService`, plus resources and per-stage prompts.

Every tool takes and returns pydantic models (so every tool publishes an output schema). Each tool
hands the SDK a `CallToolResult` built by `surface.summaries.tool_result`: structuredContent is the
whole model (the SDK still validates it against the output model), the text block a short summary
instead of the SDK's default JSON dump of the model (plus the guidance itself for the guidance tools).
`surface.schemas.harden_tools` then makes the
argument models refuse unknown names and publishes compact schemas. A failure
the client can fix (wrong stage, unknown id, bad argument) is raised as `ToolError` with a message
saying what to do next; a kernel that fails to compile or is wrong is a successful call whose
verdict says so.

Here: `create_server`; the tools by group (`task_tools`, `measure_tools`, `view_tools`) over what their
wrappers share (`wrappers`), each tool's hints (`tool_metadata`), `resources` and `prompts`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import MCPServer

from egg_mcp import __version__
from egg_mcp.config import ServerConfig
from egg_mcp.contract import Evaluator
from egg_mcp.hardware import GpuSpec, detect_gpu
from egg_mcp.server.measure_tools import register_measure_tools
from egg_mcp.server.prompts import register_prompts
from egg_mcp.server.resources import register_resources
from egg_mcp.server.task_tools import register_commit_tool, register_task_tools
from egg_mcp.server.tool_metadata import finish_tool_metadata
from egg_mcp.server.view_tools import register_view_tools
from egg_mcp.surface.schemas import harden_tools
from egg_mcp.workflow.service import EggService
from egg_mcp.workspace.store import Workspace

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
egg-mcp makes you a staged Triton kernel engineer (EGG: expert-guided kernel generation).
start_task -> generate_seeds -> verify k distinct seeds -> commit_stage(fastest) -> ALGORITHM ->
PARALLEL_MAPPING -> TILING (propose_tiling) -> MEMORY -> DONE -> export_kernel. Each stage: verify
rewrites, profile_ncu, compare close calls, commit_stage with evidence. Results: short text plus full
structuredContent. Details: resource egg://docs/tools. Code runs isolated; cheating is rejected.
"""


def create_server(
    config: ServerConfig | None = None,
    *,
    evaluator: Evaluator | None = None,
    gpu: GpuSpec | None = None,
) -> MCPServer:
    """Build the server. `evaluator` defaults to the isolated worker engine."""
    config = config or ServerConfig()
    assert config is not None  # (ServerConfig is built on first use: type checkers read it as unknown)
    workspace = Workspace(config.workspace, config.scratch_dir())
    auto_calibrate = evaluator is None and not config.force_interpreter
    analysis_evaluator = None
    if evaluator is None:
        evaluator, analysis_evaluator = _build_evaluators(config, workspace)
    if gpu is None and not config.force_interpreter:
        gpu = _detect_gpu(evaluator, workspace)
    service = EggService(config, workspace, evaluator, gpu, analysis_evaluator=analysis_evaluator)
    lifespan = _lifespan(service, evaluator, workspace, auto_calibrate)
    mcp = MCPServer("egg-mcp", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)
    mcp.egg_service = service  # type: ignore[attr-defined]  # for tests and the demo

    # tools/list keeps this order: start_task, generate_seeds, verify, profile_ncu, propose_tiling, compare,
    # commit_stage, then the views and export
    register_task_tools(mcp, service)
    register_measure_tools(mcp, service)
    register_commit_tool(mcp, service)
    register_view_tools(mcp, service)
    finish_tool_metadata(mcp)
    full_schemas = harden_tools(mcp)
    register_resources(mcp, service, full_schemas)
    register_prompts(mcp, service)
    return mcp


def _build_evaluators(config: ServerConfig, workspace: Workspace) -> tuple[Evaluator, Evaluator | None]:
    """The isolated worker engine (or lanes) every job runs on, and start_task's own analysis engine (None in
    cluster mode)."""
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
    analysis_evaluator = None
    if not config.ray_address:
        analysis_evaluator = build_engine(workspace.scratch, force_interpreter=config.force_interpreter,
                                          spare_workers=0, burst_spares=0, max_cpu_jobs=2, protect=protect,
                                          sandbox_required=required)
    return evaluator, analysis_evaluator


def _detect_gpu(evaluator: Evaluator, workspace: Workspace) -> GpuSpec | None:
    """This host's GPU; in cluster mode on a server without a GPU, the lanes' model (it sets the roofline)."""
    gpu = detect_gpu(workspace_root=workspace.root)
    lanes = getattr(evaluator, "lanes", None)
    if gpu is None and lanes:  # cluster mode on a server without a GPU: the lanes' model sets the roofline
        from egg_mcp.hardware import gpu_for

        gpu = gpu_for(lanes[0].device_model, None, workspace.root)
    return gpu


def _lifespan(service: EggService, evaluator: Evaluator, workspace: Workspace, auto_calibrate: bool):
    """Calibration on first GPU use while serving; the engines closed at the end."""

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

    return lifespan


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


__all__ = ["create_server"]
