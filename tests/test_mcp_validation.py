"""Validation and the new commit field through the MCP layer (in-process client, fake evaluator)."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from egg_mcp.workspace.store import sha256_text
from tests.mcp_driver import SEEDS, call, call_error, decision
from tests.workspace_fakes import FakeEvaluator


def _server(tmp_path):
    return create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True), evaluator=FakeEvaluator())


def test_prompt_with_an_unknown_task_id_is_a_clear_error(tmp_path):
    async def main():
        async with Client(_server(tmp_path)) as client:
            with pytest.raises(MCPError) as info:
                await client.get_prompt("seeds_code", {"task_id": "t-nope"})
            return info.value

    err = anyio.run(main)
    assert "unknown task id 't-nope'" in err.error.message and "start_task" in err.error.message


def test_bad_arguments_are_tool_errors_and_commit_names_its_stage(tmp_path):
    async def main():
        async with Client(_server(tmp_path)) as client:
            for bad in ({"atol": -1.0}, {"rtol": 0}, {"size_overrides": {"batch_size": 0}}, {"name": "n" * 201}):
                msg = await call_error(client, "start_task", reference="softmax", **bad)
                arg = next(iter(bad))  # one plain sentence naming the argument (no pydantic report)
                assert arg in msg and "it takes" in msg and "pydantic" not in msg, msg
            assert (await call(client, "list_tasks"))["tasks"] == []
            tid = (await call(client, "start_task", reference="softmax", k_seeds=1))["task_id"]
            v = await call(client, "verify", task_id=tid, source=SEEDS[0])
            first = await call(client, "commit_stage", task_id=tid, candidate_id=v["candidate_id"],
                               decision=decision("seed"))
            again = await call(client, "commit_stage", task_id=tid, candidate_id=v["candidate_id"],
                               decision=decision("seed"))
            assert first["new_stage"] == again["new_stage"] == "ALGORITHM" and again["repeated"] is True
            msg = await call_error(client, "commit_stage", task_id=tid, candidate_id=v["candidate_id"],
                                   decision=decision("skip"), stage="TILING")
            assert "is in stage ALGORITHM" in msg
            kept = await call(client, "commit_stage", task_id=tid, candidate_id=v["candidate_id"],
                              decision=decision("kept"), stage="ALGORITHM")
            assert kept["new_stage"] == "PARALLEL_MAPPING"
            ws = tmp_path / "ws"
            msg = await call_error(client, "export_kernel", task_id=tid, path=str(ws / "egg.sqlite3"))
            assert "may not write" in msg
            sha = sha256_text(SEEDS[0])
            (ws / "artifacts" / sha[:2] / sha).unlink()
            for tool in ("get_context", "export_kernel"):
                msg = await call_error(client, tool, task_id=tid)
                assert f"source of candidate {v['candidate_id']}" in msg and "missing" in msg, msg

    anyio.run(main)
