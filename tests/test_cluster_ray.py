"""Cluster mode on a local Ray cluster: two lanes (fake GPUs: Ray's logical `num_gpus` plus a model label),
the interpreter, verify jobs from two tasks. Same verdicts as the plain local engine; a lane whose Ray
worker is killed mid-job is survived (the job runs again on the other lane).

CI installs ray (README's test command); without it these tests skip, as a local convenience only.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from egg_mcp.cluster.lanes import LanePool
from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from tests.conftest import FIXTURES, REPO

pytestmark = pytest.mark.xdist_group("ray")  # one worker runs every Ray module: one local cluster at a time

PROBLEMS = FIXTURES / "bench" / "problems" / "level1"
SOLUTIONS = FIXTURES / "bench" / "solutions"
ADD_RELU = (PROBLEMS / "2_AddRelu.py").read_text()
SOFTMAX = (PROBLEMS / "1_Softmax.py").read_text()
ADD_RELU_OK = (SOLUTIONS / "2_AddRelu.py").read_text()
ADD_RELU_WRONG = ADD_RELU_OK.replace("tl.maximum(a + b, 0.0)", "tl.maximum(a - b, 0.0)")
SOFTMAX_WRONG = (SOLUTIONS / "level1" / "1_Softmax.py").read_text().replace("num / tl.sum(", "num * tl.sum(")

JOBS = [(ADD_RELU, ADD_RELU_OK), (SOFTMAX, SOFTMAX_WRONG)]  # two tasks, one verdict each
OPTS = {ADD_RELU: EvalOptions(device="interpreter", size_overrides={"batch_size": 8, "dim": 300}),
        SOFTMAX: EvalOptions(device="interpreter", size_overrides={"batch_size": 16, "dim": 96})}


@pytest.fixture(scope="module")
def pool(ray_cluster):
    """Two lanes for the module (actor and spare start-up paid once); the last test kills one."""
    from egg_mcp.cluster.ray_lanes import connect, describe_cluster

    lanes = connect("auto", force_interpreter=True, pythonpath=str(REPO), timeout_s=120)
    pool = LanePool(lanes, describe_cluster=describe_cluster)
    yield pool
    asyncio.run(pool.aclose())


async def verify_all(evaluator, jobs):
    return await asyncio.gather(*(evaluator.evaluate(ref, cand, OPTS[ref]) for ref, cand in jobs))


def test_two_tasks_through_ray_give_the_local_verdicts(pool, tmp_path):
    assert len(pool.lanes) == 2 and {ln.device_model for ln in pool.lanes} == {"TEST-GPU"}
    view = pool.describe()
    assert view["gpus_by_model"] == {"TEST-GPU": 2} and view["cluster"]["nodes_alive"] == 1

    async def main():
        local = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True)
        try:
            return await asyncio.gather(verify_all(pool, JOBS), verify_all(local, JOBS))
        finally:
            await local.aclose()

    on_ray, on_local = asyncio.run(main())
    assert [r.verdict for r in on_ray] == [r.verdict for r in on_local] == ["correct", "incorrect"]
    assert all(r.placement.via == "ray" and r.placement.device_model == "TEST-GPU" for r in on_ray)
    assert {r.placement.lane for r in on_ray} == {ln.name for ln in pool.lanes}  # both lanes took a job
    assert on_ray[1].mismatch is not None and on_ray[1].mismatch.fraction_mismatched == pytest.approx(
        on_local[1].mismatch.fraction_mismatched)  # the same report comes back as data


def test_a_killed_ray_worker_is_survived(pool):

    async def main():
        job = asyncio.ensure_future(pool.evaluate(ADD_RELU, ADD_RELU_OK, OPTS[ADD_RELU]))
        deadline = time.monotonic() + 60
        while not pool._busy and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        busy = next(ln for ln in pool.lanes if ln.name in pool._busy)
        os.kill(busy.info["pid"], signal.SIGKILL)  # the node's Ray worker dies mid-job
        return busy.name, await job

    killed, result = asyncio.run(main())
    assert result.verdict == "correct" and result.placement.attempts == 2
    assert result.placement.lane != killed and killed in " ".join(pool.lost)
    assert len(pool.lanes) == 1


def test_without_ray_the_error_names_the_extra(monkeypatch):
    import builtins

    from egg_mcp.cluster import ray_lanes

    real = builtins.__import__

    def no_ray(name, *args, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ray_lanes.ClusterError, match=r'pip install "egg-mcp\[ray\]"'):
        ray_lanes.require_ray()


def test_serve_mode_gateway_runs_jobs_and_a_vanished_cluster_falls_back(ray_cluster, tmp_path):
    """What `serve --ray` builds: the Ray driver in a gateway process (Ray ends a driver whose cluster is
    gone); the gateway killed = the cluster gone: the pool serves on this host's lanes."""
    from egg_mcp.cluster.build import build_evaluator
    from egg_mcp.cluster.gateway import GatewayLane
    from egg_mcp.cluster.lanes import LanePool

    address = ray_cluster.get_runtime_context().gcs_address
    pool = build_evaluator(tmp_path, force_interpreter=True, ray_address=address, pythonpath=str(REPO), max_lanes=1)
    assert isinstance(pool, LanePool)
    assert [ln.via for ln in pool.lanes] == ["ray"] and pool.lanes[0].device_model == "TEST-GPU"

    async def main():
        try:
            first = await pool.evaluate(ADD_RELU, ADD_RELU_OK, OPTS[ADD_RELU])
            lane = pool.lanes[0]
            assert isinstance(lane, GatewayLane)
            lane.gateway.proc.kill()  # the cluster (as the server sees it) disappears
            after = await pool.run_job("tests.doubles.jobs:echo", {"x": 1}, timeout_s=120, uses_gpu=True)
            return first, after
        finally:
            await pool.aclose()

    first, after = asyncio.run(main())
    assert first.verdict == "correct" and first.placement.via == "ray"
    assert after.ok and after.result["payload"] == {"x": 1} and after.placement.via == "local"
    assert pool.fell_back and "gateway" in " ".join(pool.lost)
    assert pool.describe()["fell_back_to_local"]
