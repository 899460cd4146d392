"""The server killed mid-evaluation: its worker dies with it, and after a restart the job reads
`interrupted` while the task and everything committed before are intact."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from tests.conftest import REPO
from tests.mcp_driver import call

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")]

ENDLESS = textwrap.dedent("""
    import torch.nn as nn

    class ModelNew(nn.Module):
        def forward(self, x):
            while True:
                pass
""")

CHILD = textwrap.dedent("""
    import sys, anyio
    from mcp import Client
    from egg_mcp.config import ServerConfig
    from egg_mcp.server import create_server

    async def main():
        server = create_server(ServerConfig(workspace=sys.argv[1], force_interpreter=True))
        async with Client(server) as client:
            r = await client.call_tool("start_task", {"reference": "softmax"})
            tid = r.structured_content["task_id"]
            print(tid, flush=True)
            await client.call_tool("verify", {"task_id": tid, "source": sys.argv[2]})

    anyio.run(main)
""")


def _workers_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"EGG_MCP_SERVER_PID={pid}".encode() in env:
            found.append(int(entry.name))
    return found


def _running_rows(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM candidates WHERE status='running'").fetchone()[0]


def test_server_killed_mid_evaluation(tmp_path):
    ws = tmp_path / "ws"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(ws), ENDLESS], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        task_id = child.stdout.readline().strip()
        assert task_id.startswith("t-"), task_id
        deadline = time.time() + 120
        while time.time() < deadline and not (_running_rows(ws / "egg.sqlite3") and _workers_of(child.pid)):
            time.sleep(0.2)
        workers = _workers_of(child.pid)
        assert workers, "the evaluation never started"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        deadline = time.time() + 15
        while time.time() < deadline and any(Path(f"/proc/{w}").exists() for w in workers):
            time.sleep(0.2)
        alive = [w for w in workers if Path(f"/proc/{w}").exists() and
                 (Path(f"/proc/{w}/stat").read_text().split()[2] != "Z")]
        assert not alive, f"workers outlived the killed server: {alive}"
    finally:
        if child.poll() is None:
            child.kill()

    async def after_restart():
        async with Client(create_server(ServerConfig(workspace=ws, force_interpreter=True))) as client:
            status = await call(client, "task_status", task_id=task_id)
            assert status["stage"] == "SEEDS"
            (cand,) = status["candidates_in_stage"]
            assert cand["status"] == "interrupted" and cand["verdict"] == "interrupted"
            again = await call(client, "get_candidate", task_id=task_id, candidate_id=cand["candidate_id"])
            assert "while True" in again["source"]  # nothing lost: the source is still there

    anyio.run(after_restart)
