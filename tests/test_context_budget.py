"""What a client's context pays for egg-mcp: tools/list under 20 KB, every result's summary under ~1.5 KB
beside its full structured content, the guidance of the guidance tools in the text under 4 KB and never cut
on the demo problem, unknown arguments refused (CPU interpreter, in-process MCP)."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from egg_mcp.surface.summaries import BRIEF_MARK, MAX_BRIEF, MAX_TEXT
from tests.mcp_driver import SEEDS, call, drive_to_done, first_text

TOOLS_LIST_BUDGET = 20_000
PROFILE_BUDGET = 3 * 1024  # the whole reply, ids and the brief's pointer included, as JSON on the wire
ALL_TOOLS = {"start_task", "generate_seeds", "verify", "profile_ncu", "propose_tiling", "compare", "commit_stage",
             "task_status", "list_tasks", "get_context", "get_candidate", "export_kernel"}


def _server(ws):
    return create_server(ServerConfig(workspace=ws, force_interpreter=True))


def test_tools_list_fits_the_budget_with_every_capability(tmp_path):
    async def main():
        async with Client(_server(tmp_path / "ws")) as client:
            listed = await client.list_tools()
            size = len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())
            assert size <= TOOLS_LIST_BUDGET, f"tools/list is {size} bytes"
            tools = {t.name: t for t in listed.tools}
            assert set(tools) == ALL_TOOLS
            for t in tools.values():
                assert t.output_schema and t.output_schema["properties"], t.name
                assert t.input_schema.get("additionalProperties") is False, t.name
                assert all("title" not in prop for prop in t.input_schema.get("properties", {}).values()), t.name
            # what a client needs is still in the one-level output schemas
            verify_out = tools["verify"].output_schema["properties"]
            assert {"verdict", "time_ms", "candidate_id", "next_step", "result"} <= set(verify_out)
            assert "correct" in verify_out["verdict"]["enum"]
            assert "egg://schemas/verify" in verify_out["result"]["description"]
            assert "size_overrides" in tools["verify"].input_schema["properties"]
            assert "size_overrides" in tools["profile_ncu"].input_schema["properties"]
            # the detail moved behind resources
            full = json.loads(first_text((await client.read_resource("egg://schemas/verify")).contents))
            assert "EvalResult" in full["$defs"] and "mismatch" in full["$defs"]["EvalResult"]["properties"]
            guide = first_text((await client.read_resource("egg://docs/tools")).contents)
            assert "size_overrides" in guide and "| compare |" in guide

    anyio.run(main)


def test_unknown_arguments_are_refused_with_the_accepted_names(tmp_path):
    async def main():
        async with Client(_server(tmp_path / "ws")) as client:
            result = await client.call_tool("task_status", {"task_id": "t-nope", "verbose": True})
            assert result.is_error
            text = first_text(result.content)
            assert "unknown argument(s) verbose for task_status" in text and "it takes: task_id" in text
            result = await client.call_tool("commit_stage", {"task_id": "t", "candidate_id": "c", "decision": {
                "summary": "s"}, "forced": True})
            assert result.is_error and "unknown argument(s) forced" in first_text(result.content)

    anyio.run(main)


class _Recording:
    def __init__(self, client):
        self.client = client
        self.texts: dict[str, int] = {}
        self.guidance: dict[str, int] = {}
        self.reports: list[tuple[str, str]] = []

    async def call_tool(self, name, arguments, **kw):
        result = await self.client.call_tool(name, arguments, **kw)
        if not result.is_error:
            assert result.structured_content is not None, name
            text = "".join(c.text for c in result.content if c.type == "text")
            summary, _, guidance = text.partition(BRIEF_MARK)
            size = len(summary.encode())
            assert size <= MAX_TEXT, f"{name}: summary of {size} bytes:\n{text}"
            if guidance:  # the brief, where the model reads it: within its budget and whole
                body = guidance.split("\n", 1)[1]
                assert len(body.encode()) <= MAX_BRIEF and "… (cut at" not in body, f"{name}: brief:\n{body}"
                self.guidance[name] = max(len(body.encode()), self.guidance.get(name, 0))
            # a summary, not the structured content again
            assert text.lstrip()[:1] != "{", f"{name} text is JSON"
            self.texts[name] = max(size, self.texts.get(name, 0))
            if name == "profile_ncu":  # issue 18: compact by default, the raw metric table behind a resource
                whole = len(json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False).encode())
                assert whole <= PROFILE_BUDGET, f"profile_ncu structured content is {whole} bytes"
                self.reports.append((arguments["task_id"], result.structured_content["report_id"]))
        return result

    def __getattr__(self, name):
        return getattr(self.client, name)


@pytest.mark.slow
def test_every_result_text_is_a_short_summary_beside_the_structured_content(tmp_path):
    async def main():
        async with Client(_server(tmp_path / "ws")) as raw:
            client = _Recording(raw)
            final = await drive_to_done(client)
            tid = final["task_id"]
            ctx = await call(client, "get_context", task_id=tid)
            cid = ctx["committed_candidate_id"]
            await call(client, "get_candidate", task_id=tid, candidate_id=cid)
            await call(client, "list_tasks")
            other = await call(client, "verify", task_id=tid, source=SEEDS[0])
            await call(client, "compare", task_id=tid, candidate_a=cid, candidate_b=other["candidate_id"])
            brief = await raw.read_resource(f"egg://tasks/{tid}/brief/code")
            assert "DONE" in first_text(brief.contents)
            assert ALL_TOOLS - {"list_tasks"} <= set(client.texts) | {"list_tasks"}, client.texts
            assert {"start_task", "generate_seeds", "commit_stage", "verify"} <= set(client.guidance), client.guidance
            task_id, report_id = client.reports[0]
            raw_table = json.loads(first_text((await raw.read_resource(f"egg://tasks/{task_id}/reports/{report_id}/raw"))
                                              .contents))
            assert "kernels" in raw_table and raw_table["stage"] == "MEMORY"

    anyio.run(main)
