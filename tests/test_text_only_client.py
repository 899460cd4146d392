"""A client that forwards only the text content to its model (many do): the demo problem goes from start_task to
DONE with every id and every piece of guidance read from text alone, and the guidance is there at each step
(the stage's Code brief after start_task and each commit, the seeds' rules and paradigms, the Debug brief of a
failed verify). CPU interpreter, in-process MCP."""

from __future__ import annotations

import re

import anyio
import pytest
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from egg_mcp.surface.summaries import BRIEF_MARK
from tests.mcp_driver import SEEDS, WRONG, decision

TASK = re.compile(r"\btask (t-[0-9a-f]+)")
CANDIDATE = re.compile(r"\bcandidate (c-[0-9a-f]+)")


async def text_of(client, tool: str, **args) -> str:
    """What a text-only client's model sees: the text content, nothing else."""
    result = await client.call_tool(tool, args)
    text = "".join(c.text for c in result.content if c.type == "text")
    assert not result.is_error, f"{tool}: {text}"
    return text


def guidance(text: str) -> str:
    assert BRIEF_MARK in text, f"no guidance in the text:\n{text}"
    return text.split(BRIEF_MARK, 1)[1]


@pytest.mark.slow
def test_a_text_only_client_reaches_done_from_the_text_alone(tmp_path):
    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True))) as client:
            started = await text_of(client, "start_task", reference="softmax", k_seeds=2)
            tid = TASK.search(started).group(1)
            brief = guidance(started)
            # what to write, how to return it
            assert "SEEDS · Code" in brief and "ModelNew" in brief and "## Return" in brief
            seeds = guidance(await text_of(client, "generate_seeds", task_id=tid))
            assert "paradigm" in seeds.lower() and len(seeds) > 500
            ids = []
            for i, source in enumerate(SEEDS):
                verified = await text_of(client, "verify", task_id=tid, source=source, note=f"seed {i}")
                assert re.search(r"\): correct\b", verified), verified
                assert BRIEF_MARK not in verified  # a correct candidate needs no Debug brief
                assert re.search(r"error: max \d+\.\d% of the tolerance \(p99 \d+\.\d%\)", verified), verified
                ids.append(CANDIDATE.search(verified).group(1))
            wrong = await text_of(client, "verify", task_id=tid, source=WRONG)
            assert "incorrect" in wrong.split("\n", 1)[0]
            debug = guidance(wrong)
            assert "Debug" in debug and "mismatch" in wrong
            committed = await text_of(client, "commit_stage", task_id=tid, candidate_id=ids[1],
                                      decision=decision("online seed"))
            for stage in ("ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY"):
                assert f"now in stage {stage}" in committed, committed
                assert f"{stage} · Code" in guidance(committed)
                again = await text_of(client, "verify", task_id=tid, source=SEEDS[1])
                cid = CANDIDATE.search(again).group(1)
                committed = await text_of(client, "commit_stage", task_id=tid, candidate_id=cid,
                                          decision=decision(f"{stage} kept"), stage=stage)
            assert "now in stage DONE" in committed
            exported = await text_of(client, "export_kernel", task_id=tid)
            assert f"exported task {tid}" in exported
            status = await text_of(client, "task_status", task_id=tid)
            assert "stage DONE" in status and all(s in status for s in ("SEEDS", "ALGORITHM", "MEMORY"))

    anyio.run(main)
