"""Each tool's MCP hints, and the description clean-up every tool gets before tools/list."""

from __future__ import annotations

import inspect

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations


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


def finish_tool_metadata(server: MCPServer) -> None:
    """Every tool gets its hints (a tool missing from TOOL_ANNOTATIONS is a startup error) and a
    dedented description (no source indentation reaches the client)."""
    for tool in server._tool_manager.list_tools():
        if tool.name not in TOOL_ANNOTATIONS:
            raise RuntimeError(f"tool {tool.name} has no entry in TOOL_ANNOTATIONS")
        tool.annotations = TOOL_ANNOTATIONS[tool.name]
        tool.description = inspect.cleandoc(tool.description or "")
