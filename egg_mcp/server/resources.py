"""The server's resources: a task's context, candidates, briefs and reports; full tool schemas; the tools guide."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from egg_mcp.server.wrappers import resource_errors
from egg_mcp.stages import Stage
from egg_mcp.workflow.service import EggService


def register_resources(mcp: MCPServer, service: EggService, full_schemas: dict[str, Any]) -> None:
    """Every resource, in the order resources/templates list them."""
    _register_task_resources(mcp, service)
    _register_doc_resources(mcp, full_schemas)
    _register_report_resources(mcp, service)


def _register_task_resources(mcp: MCPServer, service: EggService) -> None:
    @mcp.resource("egg://tasks/{task_id}/context", mime_type="application/json")
    @resource_errors
    def task_context(task_id: str) -> str:
        """Handoff context of a task (committed kernel and decisions)."""
        return service.context(task_id).model_dump_json(indent=2)

    @mcp.resource("egg://tasks/{task_id}/candidates/{candidate_id}/source", mime_type="text/x-python")
    @resource_errors
    def candidate_source(task_id: str, candidate_id: str) -> str:
        """Source of one candidate."""
        return service.candidate(task_id, candidate_id).source

    @mcp.resource("egg://tasks/{task_id}/candidates/{candidate_id}/result", mime_type="application/json")
    @resource_errors
    def candidate_result(task_id: str, candidate_id: str) -> str:
        """Verification result of one candidate."""
        detail = service.candidate(task_id, candidate_id)
        return detail.result.model_dump_json(indent=2) if detail.result else "null"

    @mcp.resource("egg://tasks/{task_id}/brief/{role}", mime_type="text/markdown")
    @resource_errors
    def task_brief(task_id: str, role: str) -> str:
        """The current stage's brief for a role (code, profile or debug), filled with the task's facts."""
        if role not in ("code", "profile", "debug"):
            raise ResourceError(f"unknown role {role!r}; use code, profile or debug")
        row = service._task_row(task_id)
        return service.brief_for(Stage(row.stage), role, task_id)  # type: ignore[arg-type]


def _register_doc_resources(mcp: MCPServer, full_schemas: dict[str, Any]) -> None:
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


def _register_report_resources(mcp: MCPServer, service: EggService) -> None:
    @mcp.resource("egg://tasks/{task_id}/reports/{report_id}", mime_type="application/json")
    @resource_errors
    def task_report(task_id: str, report_id: str) -> str:
        """A stored profile or tiling report."""
        import json

        return json.dumps(service.report(task_id, report_id), indent=2)

    @mcp.resource("egg://tasks/{task_id}/reports/{report_id}/raw", mime_type="application/json")
    @resource_errors
    def task_report_raw(task_id: str, report_id: str) -> str:
        """A stored profile's raw metric table: per kernel, every metric with its value, unit and source."""
        from egg_mcp.profiling.compact import raw_table

        return raw_table(service.report(task_id, report_id))
