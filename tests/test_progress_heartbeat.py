"""Long tool calls keep a client with a 60 s call timeout waiting: progress at least every HEARTBEAT_S seconds
(the job's last message and the elapsed time), with a strictly increasing progress value (MCP spec), and the
call's own errors unchanged (CPU interpreter, in-process MCP)."""

from __future__ import annotations

import anyio
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from egg_mcp.surface import progress as progress_mod
from tests.mcp_driver import SEEDS


class _Ctx:
    def __init__(self):
        self.sent: list[tuple[float, str]] = []

    async def report_progress(self, progress, total, message):
        self.sent.append((progress, message))


def test_the_heartbeat_repeats_the_last_phase_with_increasing_progress():
    async def main():
        ctx = _Ctx()
        async with progress_mod.long_call(ctx, "verify", every_s=0.02) as report:
            await report(0, 5, "correctness trials")
            await report(0, 5, "correctness trials")  # a phase restarting at 0 must not make progress go back
            deadline = anyio.current_time() + 60
            while len(ctx.sent) < 4 and anyio.current_time() < deadline:  # two beats at least, however loaded
                await anyio.sleep(0.01)
        values = [p for p, _ in ctx.sent]
        assert len(values) >= 4 and all(b > a for a, b in zip(values, values[1:]))
        assert all(m.startswith("verify: correctness trials (0/5)") for _, m in ctx.sent)
        n = len(ctx.sent)
        await anyio.sleep(0.06)
        assert len(ctx.sent) == n  # the heartbeat stops with the call

    anyio.run(main)


def test_an_error_inside_a_long_call_comes_out_as_itself():
    async def main():
        try:
            async with progress_mod.long_call(_Ctx(), "verify", every_s=0.01):
                raise LookupError("no such task")
        except LookupError as exc:
            return str(exc)

    assert anyio.run(main) == "no such task"


def test_every_long_tool_sends_progress_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(progress_mod, "HEARTBEAT_S", 0.2)

    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True))) as client:
            got: dict[str, list[tuple[float, str]]] = {}

            def recorder(tool):
                async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                    got.setdefault(tool, []).append((progress, message or ""))
                return on_progress

            started = await client.call_tool("start_task", {"reference": "softmax"},
                                             progress_callback=recorder("start_task"))
            tid = started.structured_content["task_id"]
            await client.call_tool("verify", {"task_id": tid, "source": SEEDS[0] + "\n# heartbeat\n"},
                                   progress_callback=recorder("verify"))
            for tool, sent in got.items():
                assert sent and all(m.startswith(f"{tool}: ") for _, m in sent), (tool, sent)
                assert all(b > a for (a, _), (b, _) in zip(sent, sent[1:])), (tool, sent)
            assert "start_task" in got  # start_task reports nothing itself: these are heartbeats
            assert any("trial" in m for _, m in got["verify"])  # the job's own phases come through

    anyio.run(main)
