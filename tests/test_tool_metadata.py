"""tools/list conventions (issue 31): every tool carries the four MCP hints, chosen per tool, and its
description reaches the client without the source's indentation (in-process MCP, CPU)."""

from __future__ import annotations

import re

import anyio
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from egg_mcp.server.tool_metadata import TOOL_ANNOTATIONS

HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def _tools(tmp_path):
    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True))) as client:
            return (await client.list_tools()).tools

    return {t.name: t for t in anyio.run(main)}


def test_every_tool_has_the_four_hints_set(tmp_path):
    tools = _tools(tmp_path)
    assert set(tools) == set(TOOL_ANNOTATIONS)
    hints = {}
    for name, tool in tools.items():
        assert tool.annotations is not None, name
        wire = tool.annotations.model_dump(by_alias=True, exclude_none=True)
        assert all(isinstance(wire.get(h), bool) for h in HINTS), (name, wire)
        hints[name] = wire
    for name in ("task_status", "list_tasks", "get_context", "get_candidate", "compare"):
        assert hints[name]["readOnlyHint"] and not hints[name]["destructiveHint"], name
    # verify stores a candidate, but the same source again returns the stored result
    assert hints["verify"] == {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True,
                               "openWorldHint": False}
    assert not hints["start_task"]["idempotentHint"] and not hints["profile_ncu"]["idempotentHint"]
    # export_kernel writes a file and may replace one at that path
    assert not hints["export_kernel"]["readOnlyHint"] and hints["export_kernel"]["destructiveHint"]
    assert not any(h["openWorldHint"] for h in hints.values())


def test_descriptions_carry_no_source_indentation(tmp_path):
    for name, tool in _tools(tmp_path).items():
        text = tool.description or ""
        assert text and text == text.strip(), f"{name}: leading/trailing blank or space: {text!r}"
        for line in text.splitlines():
            # a deliberate list item or code block may be indented; code indentation may not
            if re.match(r"\s", line):
                assert re.match(r" {0,3}([-*] |\d+\. )|```", line), f"{name}: indented line {line!r}"
