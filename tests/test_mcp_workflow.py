"""The whole workflow over the real MCP protocol, on the CPU interpreter (CI)."""

from __future__ import annotations

import sys

import anyio
import pytest
from mcp import Client, StdioServerParameters

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from tests.conftest import REPO, SANDBOX_OPT_IN_ARGS
from tests.mcp_driver import SEEDS, call, call_error, decision, drive_to_done, first_text

pytestmark = pytest.mark.slow


def _server(ws):
    return create_server(ServerConfig(workspace=ws, force_interpreter=True))


def test_tools_publish_input_and_output_schemas(tmp_path):
    async def main():
        async with Client(_server(tmp_path / "ws")) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            for name in ("start_task", "generate_seeds", "verify", "profile_ncu", "propose_tiling", "commit_stage",
                         "task_status", "list_tasks", "export_kernel", "get_context", "get_candidate"):
                assert name in tools, name
                assert tools[name].output_schema, f"{name} has no output schema"
                assert tools[name].description
            prompts = {p.name for p in (await client.list_prompts()).prompts}
            for stage in ("seeds", "algorithm", "parallel_mapping", "tiling", "memory"):
                for role in ("code", "profile", "debug"):
                    assert f"{stage}_{role}" in prompts
            templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
            assert "egg://tasks/{task_id}/context" in templates

    anyio.run(main)


def test_full_workflow_in_process(tmp_path):
    async def main():
        async with Client(_server(tmp_path / "ws")) as client:
            final = await drive_to_done(client)
            assert final["stage"] == "DONE"
            # long work reports MCP progress
            messages: list[str] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                messages.append(message or "")

            tid = (await call(client, "start_task", reference="softmax"))["task_id"]
            result = await client.call_tool("verify", {"task_id": tid, "source": SEEDS[0] + "\n# progress\n"},
                                            progress_callback=on_progress)
            assert not result.is_error and messages, "verify sent no progress notifications"
            ctx = await client.read_resource(f"egg://tasks/{final['task_id']}/context")
            assert "committed_source" in first_text(ctx.contents)

    anyio.run(main)


def _stdio_server(tmp_path) -> StdioServerParameters:
    """`egg-mcp serve` over stdio as a real subprocess, on the CPU interpreter."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "egg_mcp", "serve", "--workspace", str(tmp_path / "ws"), "--interpreter", *SANDBOX_OPT_IN_ARGS],
        cwd=str(REPO),
    )


async def _workflow_over_stdio(client) -> None:
    final = await drive_to_done(client)
    assert final["stage"] == "DONE"


async def _candidate_flooding_stdout(client) -> None:
    noisy = SEEDS[0].replace("        x = x.contiguous()\n",
                             "        print('x' * (100 * 1024 * 1024))\n        x = x.contiguous()\n", 1)
    assert noisy != SEEDS[0]
    tid = (await call(client, "start_task", reference="softmax"))["task_id"]
    flooded = await call(client, "verify", task_id=tid, source=noisy)
    assert flooded["verdict"] == "correct", flooded["summary"]
    assert len(flooded["result"]["stdout_tail"]) < 200_000
    status = await call(client, "task_status", task_id=tid)  # the protocol stream is intact
    assert status["candidates_in_stage"][0]["verdict"] == "correct"


@pytest.fixture(scope="module")
def over_stdio(tmp_path_factory) -> dict[str, BaseException | None]:
    """One `egg-mcp serve` over stdio for the scenarios below, in order (one server start and one judge, not one
    each): what each raised, or None. A scenario that fails is its test's failure, not the other's."""
    params = _stdio_server(tmp_path_factory.mktemp("stdio"))
    outcomes: dict[str, BaseException | None] = {}

    async def main():
        async with Client(params, read_timeout_seconds=300) as client:
            for name, scenario in (("workflow", _workflow_over_stdio), ("flood", _candidate_flooding_stdout)):
                try:
                    await scenario(client)
                    outcomes[name] = None
                except Exception as exc:  # noqa: BLE001 - re-raised by the scenario's test
                    outcomes[name] = exc

    anyio.run(main)
    return outcomes


def _raise_if_failed(outcomes: dict[str, BaseException | None], name: str) -> None:
    assert name in outcomes, f"the {name} scenario did not run (the server ended before it)"
    failure = outcomes[name]
    if failure is not None:
        raise failure


def test_full_workflow_over_stdio(over_stdio):
    _raise_if_failed(over_stdio, "workflow")


def test_clear_errors(tmp_path):
    async def main():
        async with Client(_server(tmp_path / "ws")) as client:
            msg = await call_error(client, "task_status", task_id="t-nope")
            assert "unknown task id" in msg and "start_task" in msg
            msg = await call_error(client, "start_task", reference="class Model:\n  pass\n")
            assert "get_inputs" in msg
            msg = await call_error(client, "start_task", reference="/etc/passwd")
            assert "outside the directories" in msg
            tid = (await call(client, "start_task", reference="softmax"))["task_id"]
            msg = await call_error(client, "propose_tiling", task_id=tid, candidate_id="c-x")
            assert "not allowed in stage SEEDS" in msg and "generate_seeds" in msg
            msg = await call_error(client, "verify", task_id=tid, source="import torch\nclass Model: pass\n")
            assert "defines no ModelNew" in msg
            msg = await call_error(client, "verify", task_id=tid, source="class ModelNew: pass\n" + "#" * 300_000)
            assert "limit" in msg
            broken = await call(client, "verify", task_id=tid, source="class ModelNew(:\n    pass\n")
            assert broken["verdict"] == "compile_error" and broken["result"]["error"]["candidate_line"] == 1
            msg = await call_error(client, "commit_stage", task_id=tid, candidate_id=broken["candidate_id"],
                                   decision=decision("x"))
            assert "not correct" in msg
            msg = await call_error(client, "get_candidate", task_id=tid, candidate_id="c-typo")
            assert "unknown candidate" in msg

    anyio.run(main)


def test_restart_mid_task_resumes(tmp_path):
    ws = tmp_path / "ws"

    async def first():
        async with Client(_server(ws)) as client:
            tid = (await call(client, "start_task", reference="softmax", k_seeds=1))["task_id"]
            v = await call(client, "verify", task_id=tid, source=SEEDS[0])
            await call(client, "commit_stage", task_id=tid, candidate_id=v["candidate_id"], decision=decision("seed"))
            return tid, v["candidate_id"]

    tid, cid = anyio.run(first)
    # simulate a job that was running when the server died
    server = _server(ws)
    service = server.egg_service  # pyright: ignore[reportAttributeAccessIssue]  # set by create_server
    with service.ws.transaction() as db:
        db.execute("INSERT INTO candidates (id, task_id, stage, source_sha, created_at, status, owner)"
                   " VALUES ('c-dead', ?, 'ALGORITHM', ?, 0, 'running', 'gone-host:1')",
                   (tid, service.ws.put_text("class ModelNew: pass\n")))

    async def second():
        async with Client(_server(ws)) as client:
            status = await call(client, "task_status", task_id=tid)
            assert status["stage"] == "ALGORITHM"
            assert status["history"][0]["candidate_id"] == cid
            dead = [c for c in status["candidates_in_stage"] if c["candidate_id"] == "c-dead"][0]
            assert dead["status"] == "interrupted"
            listed = await call(client, "list_tasks")
            assert listed["tasks"][0]["task_id"] == tid

    anyio.run(second)


def test_candidate_flooding_stdout_does_not_reach_the_stdio_stream(over_stdio):
    _raise_if_failed(over_stdio, "flood")
