"""The server's prompts: one per stage and role, the stage briefs filled with a task's facts."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from egg_mcp.stages import Stage
from egg_mcp.workflow.service import EggService, WorkflowError
from egg_mcp.workspace.damage import WorkspaceError


def register_prompts(mcp: MCPServer, service: EggService) -> None:
    """One prompt per stage and role (`<stage>_<role>`)."""
    from egg_mcp.expertise.briefs import list_briefs

    for stage, role, description in list_briefs():
        _register_prompt(mcp, service, stage, role, description)


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
