"""compare on a real GPU: an A/A pair is inconclusive, a kernel launched twice per forward is slower.

    python3 -m pytest tests/gpu/test_compare_gpu.py -q -m gpu -s
"""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from tests.mcp_driver import SEEDS, call

pytestmark = pytest.mark.gpu

TWICE = SEEDS[0] + '''

_OnceModelNew = ModelNew


class ModelNew(_OnceModelNew):
    """The same kernel, run twice per forward: about twice the time, same output."""

    def forward(self, *args):
        super().forward(*args)
        return super().forward(*args)
'''


def test_compare_interleaved_on_gpu(tmp_path):
    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws"))) as client:
            tid = (await call(client, "start_task", reference="softmax", k_seeds=2))["task_id"]
            a = await call(client, "verify", task_id=tid, source=SEEDS[0])
            same = await call(client, "verify", task_id=tid, source=SEEDS[0] + "\n# the same kernel\n")
            twice = await call(client, "verify", task_id=tid, source=TWICE)
            for r in (a, same, twice):
                assert r["verdict"] == "correct", r["summary"]
            aa = await call(client, "compare", task_id=tid, candidate_a=a["candidate_id"],
                            candidate_b=same["candidate_id"], rounds=20)
            print("A/A:", aa["summary"])
            assert aa["verdict"] == "inconclusive" and abs(aa["median_ratio"] - 1) < 0.02
            slower = await call(client, "compare", task_id=tid, candidate_a=a["candidate_id"],
                                candidate_b=twice["candidate_id"], rounds=20)
            print("A vs twice:", slower["summary"])
            assert slower["verdict"] == "slower" and slower["confidence"] >= 0.95 and slower["median_ratio"] > 1.5
            assert len(slower["times_a_ms"]) == len(slower["times_b_ms"]) == 20
            faster = await call(client, "compare", task_id=tid, candidate_a=twice["candidate_id"],
                                candidate_b=a["candidate_id"], rounds=20)
            print("twice vs A:", faster["summary"])
            assert faster["verdict"] == "faster" and faster["ci_high"] < 1
            assert "+class ModelNew(_OnceModelNew):" in slower["diff"]

    anyio.run(main)
