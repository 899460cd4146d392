"""SEEDS' next step follows what was done: "call generate_seeds" only until it was called (issue 30's small
items: it used to repeat after generate_seeds, e.g. beside a wrong first seed)."""

from __future__ import annotations

import anyio
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from tests.mcp_driver import WRONG, call


def test_next_step_stops_asking_for_generate_seeds_once_called(tmp_path):
    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True))) as client:
            tid = (await call(client, "start_task", reference="softmax", k_seeds=2))["task_id"]
            assert "call generate_seeds" in (await call(client, "task_status", task_id=tid))["next_step"]
            await call(client, "generate_seeds", task_id=tid)
            wrong = await call(client, "verify", task_id=tid, source=WRONG)
            assert wrong["verdict"] == "incorrect"
            assert "call generate_seeds" not in wrong["next_step"]
            step = (await call(client, "task_status", task_id=tid))["next_step"]
            assert "call generate_seeds" not in step and "write 2 structurally different" in step, step

    anyio.run(main)
