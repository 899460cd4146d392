"""Drives the whole EGG workflow through an MCP client (in-process or stdio), as a client LLM would."""

from __future__ import annotations

from typing import Any, Sequence

from mcp.types import TextContent, TextResourceContents

from tests.conftest import FIXTURES

SEEDS = [
    (FIXTURES / "softmax" / "row_per_program.py").read_text(),
    (FIXTURES / "softmax" / "online_blocked.py").read_text(),
]
WRONG = (FIXTURES / "softmax" / "wrong_missing_max.py").read_text()


async def call(client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise AssertionError(f"{tool} failed: {result.content[0].text}")
    assert result.structured_content is not None, f"{tool} returned no structured content"
    return result.structured_content


async def call_error(client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
    return result.content[0].text


def first_text(blocks: Sequence[Any]) -> str:
    """The text of the first block of a tool result's content or a resource's contents (a test fails on any
    other kind of block)."""
    block = blocks[0]
    assert isinstance(block, (TextContent, TextResourceContents)), f"not text: {type(block).__name__}"
    return block.text


def decision(summary: str) -> dict[str, Any]:
    return {"summary": summary, "changes": [summary], "rationale": "test drive", "evidence": []}


async def drive_to_done(client) -> dict[str, Any]:
    """start_task -> seeds -> every stage -> DONE -> export; returns the final status."""
    started = await call(client, "start_task", reference="softmax", k_seeds=2)
    tid = started["task_id"]
    assert started["stage"] == "SEEDS" and started["brief"]
    seeds = await call(client, "generate_seeds", task_id=tid)
    assert seeds["k"] == 2 and seeds["brief"]
    verified = [await call(client, "verify", task_id=tid, source=src, note=f"seed {i}") for i, src in enumerate(SEEDS)]
    assert [v["verdict"] for v in verified] == ["correct", "correct"], [v["summary"] for v in verified]
    wrong = await call(client, "verify", task_id=tid, source=WRONG)
    assert wrong["verdict"] == "incorrect" and wrong["debug_brief"]
    best = verified[1]["candidate_id"]  # the online seed: it has tunables (BLOCK_N, NUM_WARPS) for TILING
    commit = await call(client, "commit_stage", task_id=tid, candidate_id=best, decision=decision("online seed"))
    assert commit["new_stage"] == "ALGORITHM" and commit["context"]["committed_candidate_id"] == best
    for stage in ("ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY"):
        status = await call(client, "task_status", task_id=tid)
        assert status["stage"] == stage
        again = await call(client, "verify", task_id=tid, source=SEEDS[1])
        assert again["cached"] is True and again["candidate_id"] == best
        if stage == "TILING":
            tiling = await call(client, "propose_tiling", task_id=tid, candidate_id=best)
            assert tiling["proposal"]["measured"] is False
            # the launch probe (meta device, a worker job) gave the kernel its own dims from its launch
            assert tiling["proposal"]["kernels"][0]["dims_from"] == "launch", tiling["proposal"]["warnings"]
        if stage == "MEMORY":
            prof = await call(client, "profile_ncu", task_id=tid, candidate_id=best)
            assert prof["report"]["source"] == "fallback"
        commit = await call(client, "commit_stage", task_id=tid, candidate_id=best, decision=decision(f"{stage} kept"),
                            stage=stage)
    assert commit["new_stage"] == "DONE"
    exported = await call(client, "export_kernel", task_id=tid)
    assert "class ModelNew" in exported["source"]
    final = await call(client, "task_status", task_id=tid)
    assert [h["stage"] for h in final["history"]] == ["SEEDS", "ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY"]
    return final
