"""The workflow on a real GPU: baselines, timed verification, the regression guard, ncu, measured tiling."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from tests.mcp_driver import SEEDS, call, call_error, decision

pytestmark = pytest.mark.gpu


def test_workflow_on_gpu(tmp_path):
    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws"))) as client:
            started = await call(client, "start_task", reference="softmax", k_seeds=2)
            assert started["timing_available"] and started["options"]["size_overrides"] == {}
            tid = started["task_id"]
            seeds = await call(client, "generate_seeds", task_id=tid)
            base = seeds["baselines"]
            assert base["eager"]["median_ms"] > 0 and base["compiled"]["median_ms"] > 0, base
            results = [await call(client, "verify", task_id=tid, source=src) for src in SEEDS]
            for r in results:
                assert r["verdict"] == "correct", r["summary"]
                assert r["time_ms"] > 0 and r["speedup_vs_eager"] > 0
                timing = r["result"]["timing"]
                assert timing["isolated"] and timing["isolated"]["median_ms"] > 0, timing.get("isolated_error")
                print(f"seed {r['candidate_id']}: {r['time_ms']:.4f} ms, {r['speedup_vs_eager']:.2f}x eager, "
                      f"{r['speedup_vs_compile']:.2f}x compile, cv {r['result']['timing']['cv']}")
            fast, slow = sorted(results, key=lambda r: r["time_ms"])
            if slow["time_ms"] > fast["time_ms"] * 1.1:
                msg = await call_error(client, "commit_stage", task_id=tid, candidate_id=slow["candidate_id"],
                                       decision=decision("slower seed"))
                assert "faster" in msg
            commit = await call(client, "commit_stage", task_id=tid, candidate_id=fast["candidate_id"],
                                decision=decision("fastest seed"))
            assert commit["committed"]["guard"].startswith("passed")
            prof = await call(client, "profile_ncu", task_id=tid, candidate_id=fast["candidate_id"])
            print("profile:", prof["report"]["source"], prof["report"]["summary"][:300])
            assert prof["report"]["kernels"]
            online = [r for r in results
                      if "online" in (r["result"]["kernels"][0]["name"] if r["result"]["kernels"] else "")]
            for kept_stage in ("ALGORITHM", "PARALLEL_MAPPING"):
                await call(client, "commit_stage", task_id=tid, candidate_id=fast["candidate_id"],
                           decision=decision("kept"), stage=kept_stage)
            if online:
                tiling = await call(client, "propose_tiling", task_id=tid, candidate_id=online[0]["candidate_id"],
                                    max_trials=4)
                prop = tiling["proposal"]
                print("tiling:", prop["measured"], prop["recommended"], prop["note"])
                assert prop["measured"] is True
                assert prop["recommended_source"] or prop["recommended_reason"].startswith("keep the current config")
            status = await call(client, "task_status", task_id=tid)
            assert status["history"][0]["time_ms"] == fast["time_ms"]

    anyio.run(main)
