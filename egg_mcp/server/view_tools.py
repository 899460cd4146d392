"""The tools that read a task (status, list, context, candidate) and export its kernel."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from egg_mcp.server.wrappers import said_for, tool_errors
from egg_mcp.workflow import limits
from egg_mcp.workflow.models import (
    CandidateDetail,
    ExportResult,
    HandoffContext,
    TaskList,
    TaskStatus,
)
from egg_mcp.workflow.service import EggService


def register_view_tools(mcp: MCPServer, service: EggService) -> None:
    """task_status, list_tasks, get_context, get_candidate, export_kernel (in this order in tools/list)."""
    said = said_for(service)

    @mcp.tool()
    @tool_errors
    async def task_status(task_id: str) -> TaskStatus:
        """Stage, next step, allowed tools, per-stage history, this stage's candidates, jobs, reports."""
        return said("task_status", service.status(task_id))

    @mcp.tool()
    @tool_errors
    async def list_tasks() -> TaskList:
        """Tasks in this workspace, newest first."""
        return said("list_tasks", service.list_tasks())

    @mcp.tool()
    @tool_errors
    async def get_context(task_id: str) -> HandoffContext:
        """The handoff the stage starts from: reference summary, committed kernel and decisions only."""
        return said("get_context", service.context(task_id))

    @mcp.tool()
    @tool_errors
    async def get_candidate(task_id: str, candidate_id: str) -> CandidateDetail:
        """One candidate's source and full verification result."""
        return said("get_candidate", service.candidate(task_id, candidate_id))

    @mcp.tool()
    @tool_errors
    async def export_kernel(
        task_id: str,
        path: str | None = Field(None, max_length=limits.MAX_PATH,
                                 description="file in an allowed folder; default: workspace/exports"),
    ) -> ExportResult:
        """Write the last committed ModelNew to a file; returns its source."""
        return said("export_kernel", service.export_kernel(task_id, path))
