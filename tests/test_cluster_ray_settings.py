"""A Ray lane's engine gets what a local engine gets from the server (lanes.engine_settings): its runners and
confined jobs are held to the server's sandbox floor, no grant exposes the server's protected paths, and its
runners' bounds use the server's floors. On a local Ray cluster (interpreter, fake GPUs as in
tests/test_cluster_ray.py): through the gateway process `serve --ray` starts, and through `connect`."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from egg_mcp.cluster.lanes import LanePool
from egg_mcp.config import PROTECT_VAR, REQUIRED_VAR
from egg_mcp.contract import EvalOptions
from egg_mcp.problems.builtin import builtin_source
from tests.conftest import REPO
from tests.test_runner_bounds import CANDIDATES, FLOOR, QUICK

pytestmark = pytest.mark.xdist_group("ray")  # one worker runs every Ray module: one local cluster at a time

OPTIONS = EvalOptions(device="interpreter", size_overrides=QUICK, correctness_trials=2, run_timeout_s=120.0)
TOOL = f'''#!{sys.executable}
import json, os, sys

args = sys.argv[1:]
log = args[args.index("--log-file") + 1]
open(log, "w").write(json.dumps({{k: os.environ.get(k) for k in ({PROTECT_VAR!r}, {REQUIRED_VAR!r})}}))
rest = args[args.index("--") + 1:]
os.execv(rest[0], rest)
'''
"""A wrapper (as ncu wraps a profiling worker) that writes what the engine told its worker into its log."""


@pytest.mark.slow
def test_gateway_lanes_get_the_servers_protected_paths_floor_and_bound_floors(ray_cluster, tmp_path):
    from egg_mcp.cluster.build import build_evaluator
    from egg_mcp.cluster.lanes import LanePool

    tool = tmp_path / "tool" / "bin" / "wrap"
    tool.parent.mkdir(parents=True)
    tool.write_text(TOOL)
    tool.chmod(0o755)
    workspace, log = tmp_path / "ws", tmp_path / "wrapped.log"
    address = ray_cluster.get_runtime_context().gcs_address
    pool = build_evaluator(tmp_path / "scratch", force_interpreter=True, ray_address=address, pythonpath=str(REPO),
                           max_lanes=1, protect=[workspace], sandbox_required=["env_allowlist"], bounds_floor=FLOOR)
    assert isinstance(pool, LanePool)
    assert [ln.via for ln in pool.lanes] == ["ray"]

    async def main():
        try:
            told = await pool.run_job("tests.doubles.jobs:echo", {"x": 1}, timeout_s=120, uses_gpu=True,
                                      wrapper_argv=[str(tool), "--log-file", str(log), "--"])
            big = await pool.evaluate(builtin_source("softmax"), CANDIDATES["big_file"], OPTIONS)
            return told, big
        finally:
            await pool.aclose()

    told, big = asyncio.run(main())
    assert told.ok and told.placement.via == "ray", told.error
    env = json.loads(log.read_text())  # the node's wrapped worker's environment, carried back as its log
    assert env[PROTECT_VAR].split(os.pathsep) == [str(workspace)] and env[REQUIRED_VAR] == "env_allowlist"
    assert big.placement.via == "ray" and big.verdict == "runtime_error", (big.summary, big.error)
    assert big.error.kind == "resource_limit" and "file-size bound (4 MiB, RLIMIT_FSIZE)" in big.error.message
    assert "memory 1.5 GiB" in big.judge["bounds"] and big.sandbox["rlimits"]["file_bytes"] == FLOOR["file_bytes"]


@pytest.mark.slow
def test_a_ray_lane_refuses_a_runner_below_the_servers_floor(ray_cluster):
    """The node's judge checks its runner's own report against the server's floor before the candidate is sent:
    a floor naming a layer no runner has is a harness fault naming it, through a Ray lane as locally."""
    from egg_mcp.cluster.ray_lanes import connect, describe_cluster

    lanes = connect("auto", force_interpreter=True, pythonpath=str(REPO), max_lanes=1, timeout_s=120,
                    engine={"sandbox_required": ["env_allowlist", "made_up_layer"]})
    pool = LanePool(lanes, describe_cluster=describe_cluster)

    async def main():
        try:
            return await pool.evaluate(builtin_source("softmax"), CANDIDATES["honest"], OPTIONS)
        finally:
            await pool.aclose()

    r = asyncio.run(main())
    assert r.placement.via == "ray" and r.fault == "harness", (r.verdict, r.summary)
    assert "made_up_layer" in r.error.message and "floor" in r.error.message and r.correctness_trials == 0


def test_doctor_says_the_ray_lanes_are_held_to_the_servers_floor(ray_cluster, tmp_path):
    from egg_mcp import doctor
    from egg_mcp.config import ServerConfig

    address = ray_cluster.get_runtime_context().gcs_address
    lines = doctor.lane_lines(ServerConfig(workspace=tmp_path, ray_address=address))
    assert any(what == "ray cluster" and status == doctor.OK for status, what, _ in lines), lines
    assert any("held to this server's sandbox floor" in detail for _, _, detail in lines), lines
