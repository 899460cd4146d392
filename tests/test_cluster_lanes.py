"""LanePool: one queue over lanes, exclusive devices, model affinity, retry on a lost lane, fallback.

Fake lanes run jobs through the real `job_specs.execute` on a fake engine, so the dispatch rules are tested
without worker processes; the Ray path is in test_cluster_ray.py, the GPU path in tests/gpu/.
"""

from __future__ import annotations

import asyncio

import pytest

from egg_mcp.cluster import job_specs
from egg_mcp.cluster.lanes import LaneLost, LanePool, LocalLane
from egg_mcp.contract import EvalOptions, EvalResult, JobOutcome, TimingStats
from tests.workspace_fakes import FakeEvaluator

REF_A, REF_B = "# reference A\n", "# reference B\n"


class TrackingEvaluator(FakeEvaluator):
    """Records how many jobs ran at once on this lane."""

    def __init__(self, delay_s: float = 0.05, fail: Exception | None = None):
        super().__init__(time_ms=1.0, delay_s=delay_s, gpu=True)
        self.running = 0
        self.max_running = 0
        self.fail = fail

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if self.fail is not None:
                await asyncio.sleep(0.01)
                raise self.fail
            return await super().evaluate(reference_source, candidate_source, options, progress)
        finally:
            self.running -= 1


class DyingLane(LocalLane):
    """A lane whose node dies during its first `dies` jobs."""

    def __init__(self, *args, dies: int = 1, **kw):
        super().__init__(*args, **kw)
        self.dies = dies

    async def run(self, spec, progress=None):
        if self.dies > 0:
            self.dies -= 1
            await asyncio.sleep(0.01)
            raise LaneLost("node died")
        return await super().run(spec, progress)


def lane(i: int, model: str = "GPU-X", cls=LocalLane, **kw):
    return cls(TrackingEvaluator(), device_index=i, device_model=model, host="h", **kw)


def run(coro):
    return asyncio.run(coro)


def test_one_job_per_lane_and_both_lanes_used():
    lanes = [lane(0), lane(1)]
    pool = LanePool(lanes)

    async def main():
        return await asyncio.gather(*(pool.evaluate(REF_A, f"# cand {i}", EvalOptions()) for i in range(6)))

    results = run(main())
    assert all(r.verdict == "correct" for r in results)
    assert {r.placement.lane for r in results} == {"local/gpu0", "local/gpu1"}
    assert all(ln.evaluator.max_running == 1 for ln in lanes)  # a device is never shared
    assert pool.describe()["queue_depth"] == 0 and pool.jobs_done == 6


def test_a_task_stays_on_one_gpu_model():
    lanes = [lane(0, "GPU-X"), lane(1, "GPU-Y"), lane(2, "GPU-Y")]
    pool = LanePool(lanes)

    async def main():
        first = await pool.evaluate(REF_A, "# c0", EvalOptions())
        rest = await asyncio.gather(*(pool.evaluate(REF_A, f"# c{i}", EvalOptions()) for i in range(1, 6)),
                                    pool.baselines(REF_A, EvalOptions()))
        return first, rest

    first, rest = run(main())
    model = first.placement.device_model
    assert all(r.placement.device_model == model for r in rest)


def test_a_lost_lane_is_retried_once_elsewhere_and_dropped():
    pool = LanePool([lane(0, cls=DyingLane), lane(1)])
    result = run(pool.evaluate(REF_A, "# c", EvalOptions()))
    assert result.verdict == "correct"
    assert result.placement.attempts == 2 and result.placement.lane == "local/gpu1"
    assert result.placement.note is not None
    assert "node died" in result.placement.note
    assert [ln.name for ln in pool.lanes] == ["local/gpu1"] and pool.lost


def test_lost_twice_is_a_clear_harness_verdict():
    pool = LanePool([lane(0, cls=DyingLane), lane(1, cls=DyingLane)])
    result = run(pool.evaluate(REF_A, "# c", EvalOptions()))
    assert result.verdict == "runtime_error" and result.fault == "harness"
    assert result.summary.startswith("Not your kernel") and "lost" in result.summary


def test_every_lane_gone_falls_back_to_local_lanes():
    local = [lane(7, "LOCAL")]
    pool = LanePool([lane(0, cls=DyingLane, dies=5)], fallback=lambda: local)
    result = run(pool.evaluate(REF_A, "# c", EvalOptions()))
    assert result.verdict == "correct" and result.placement.lane == "local/gpu7"
    assert pool.fell_back and pool.describe()["fell_back_to_local"]
    assert "whose lanes are gone" in (result.placement.note or "")


def test_no_lane_at_all_says_so():
    pool = LanePool([lane(0, cls=DyingLane, dies=5)])
    result = run(pool.evaluate(REF_A, "# c", EvalOptions()))
    assert result.fault == "harness" and "no evaluation lane" in result.summary


class GatedEvaluator(TrackingEvaluator):
    """Evaluates only once `gate` is set: the lane stays busy for as long as the test needs, not for a set time."""

    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        self.running += 1
        try:
            await self.gate.wait()
        finally:
            self.running -= 1
        return await super().evaluate(reference_source, candidate_source, options, progress)


def test_cpu_only_jobs_do_not_wait_for_a_busy_lane():
    slow = GatedEvaluator()
    pool = LanePool([LocalLane(slow, device_index=0, device_model="GPU-X", host="h")])

    async def main():
        verify = asyncio.ensure_future(pool.evaluate(REF_A, "# c", EvalOptions()))
        deadline = asyncio.get_running_loop().time() + 60
        while not slow.running:  # the lane is busy with the verify
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        out = await pool.run_job("egg_mcp.analysis.reference:analyze_job", {}, timeout_s=5, uses_gpu=False)
        busy = not verify.done()  # answered while the lane's verify still runs
        slow.gate.set()
        await verify
        return out, busy

    out, busy = run(main())
    assert isinstance(out, JobOutcome) and out.placement is not None and busy


def test_job_specs_round_trip_through_execute():
    ev = FakeEvaluator(time_ms=2.0)
    spec = job_specs.evaluate_spec(REF_A, "# c", EvalOptions(dtype="bfloat16"))
    reply = run(job_specs.execute(ev, spec, remote=True))
    assert reply["kind"] == "evaluate"
    back = job_specs.decode(spec, reply)
    assert isinstance(back, EvalResult) and back.timing == TimingStats(median_ms=2.0)
    assert ev.options[0].dtype == "bfloat16" and ev.options[0].tolerance.atol == 1e-2
    with pytest.raises(ValueError, match="unknown job kind"):
        run(job_specs.execute(ev, {"kind": "shell"}))


def test_a_remote_wrapped_job_carries_its_log_back(tmp_path):
    class Wrapped(FakeEvaluator):
        async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
            log_path = wrapper_argv[wrapper_argv.index("--log-file") + 1]
            with open(log_path, "w") as f:
                f.write("ncu,csv\n")
            return JobOutcome(ok=True, result={"log_at": log_path})

    server_path = tmp_path / "ncu.csv"
    spec = job_specs.run_job_spec("egg_mcp.profiling.target:run_forward", {}, timeout_s=5, uses_gpu=True,
                             wrapper_argv=["ncu", "--log-file", str(server_path), "--"])
    reply = run(job_specs.execute(Wrapped(), spec, remote=True))
    assert reply["result"]["result"]["log_at"] != str(server_path)  # the node wrote its own file
    assert not server_path.exists()
    job_specs.decode(spec, reply)
    assert server_path.read_text() == "ncu,csv\n"


def test_task_status_says_where_each_job_ran_and_shows_the_lanes(tmp_path):
    from egg_mcp.config import ServerConfig
    from egg_mcp.problems.builtin import builtin_source
    from egg_mcp.workflow.service import EggService
    from egg_mcp.workspace.store import Workspace
    from tests.test_service_concurrency import SEED

    pool = LanePool([lane(0, "GPU-X"), lane(1, "GPU-X")])
    service = EggService(ServerConfig(workspace=tmp_path / "ws"), Workspace(tmp_path / "ws"), pool, None)

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        await asyncio.gather(*(service.verify(task.task_id, SEED + f"\n# variant {i}\n") for i in range(3)))
        return service.status(task.task_id)

    status = run(scenario())
    ran_on = [c.ran_on for c in status.candidates_in_stage]
    assert len(ran_on) == 3 and all(r and "(GPU-X) via local lane local/gpu" in r for r in ran_on)
    assert status.baselines_ran_on and "GPU-X" in status.baselines_ran_on
    assert status.cluster["gpus_by_model"] == {"GPU-X": 2} and status.cluster["queue_depth"] == 0


def test_doctor_lists_the_lanes_and_names_the_extra_without_ray(tmp_path, monkeypatch):
    from egg_mcp import doctor
    from egg_mcp.cluster import lanes as lanes_mod
    from egg_mcp.cluster import ray_lanes
    from egg_mcp.config import ServerConfig

    monkeypatch.setattr(lanes_mod, "visible_gpus", lambda: [("0", "NVIDIA H200"), ("1", "NVIDIA H200")])
    lines = doctor.lane_lines(ServerConfig(workspace=tmp_path))
    assert lines == [(doctor.OK, "lanes", "2 local lane(s), one per GPU: gpu0 NVIDIA H200, gpu1 NVIDIA H200")]

    def no_ray(import_it=True):
        raise ray_lanes.ClusterError('--ray needs Ray: pip install "egg-mcp[ray]"')

    monkeypatch.setattr(ray_lanes, "require_ray", no_ray)
    lines = doctor.lane_lines(ServerConfig(workspace=tmp_path, ray_address="auto"))
    assert lines[-1][0] == doctor.FAIL and 'egg-mcp[ray]' in lines[-1][2]


def test_serve_with_ray_but_without_it_installed_names_the_extra(tmp_path, monkeypatch, capsys):
    from egg_mcp import cli
    from egg_mcp.cluster import ray_lanes

    def no_ray(import_it=True):
        raise ray_lanes.ClusterError('--ray needs Ray, which is not installed here: pip install "egg-mcp[ray]"')

    monkeypatch.setattr(ray_lanes, "require_ray", no_ray)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--ray", "auto", "--workspace", str(tmp_path / "ws")])
    assert exit_.value.code == 2 and 'pip install "egg-mcp[ray]"' in capsys.readouterr().err


def test_the_cluster_view_is_cached_and_a_gone_cluster_is_reported():
    calls = []

    def view():
        calls.append(1)
        raise ConnectionError("GCS unreachable")

    pool = LanePool([lane(0)], describe_cluster=view)
    first, second = pool.describe(), pool.describe()
    assert first["cluster"] == {"error": "ConnectionError: GCS unreachable"} == second["cluster"] and len(calls) == 1


class ExpectingEvaluator(FakeEvaluator):
    """Records what the pool told it about the jobs queued behind each one it got."""

    def __init__(self):
        super().__init__(time_ms=1.0, gpu=True)
        self.told: list[int] = []

    def expect_jobs(self, n: int) -> None:
        self.told.append(n)

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        await asyncio.sleep(0.05)
        return JobOutcome(ok=True, result={})


def test_a_lane_s_engine_is_told_how_many_spare_served_jobs_wait_behind_each_job():
    """The pool hands a lane one job at a time, so its engine cannot see the queue that would make it
    start spares in parallel (engine_pool's burst): each dispatch says how many such jobs still wait."""
    ev = ExpectingEvaluator()
    pool = LanePool([LocalLane(ev, device_index=0, device_model="GPU-X", host="h")])

    async def main():
        device_jobs = [pool.run_job("egg_mcp.tiling.measure:trial_job", {"i": i}, timeout_s=5, uses_gpu=True)
                       for i in range(4)]
        verify = [pool.evaluate(REF_A, "# c", EvalOptions())]  # a task's judge: no spare worker, not counted
        cpu_only = [pool.run_job("egg_mcp.analysis.reference:analyze_job", {}, timeout_s=5, uses_gpu=False)]
        return await asyncio.gather(*device_jobs, *verify, *cpu_only)

    run(main())
    # FIFO: the first device job found the lane idle and nothing queued yet; the second had two device
    # jobs behind it (the verify behind them takes no spare); the CPU-only job took no lane
    assert ev.told == [0, 2, 1, 0, 0]
    assert job_specs.spare_served(job_specs.baselines_spec(REF_A, EvalOptions()))
    assert not job_specs.spare_served(job_specs.run_job_spec("egg_mcp.x:y", {}, timeout_s=1, uses_gpu=True,
                                                             wrapper_argv=["ncu"]))


def test_an_engine_told_of_queued_jobs_starts_spares_for_them(tmp_path):
    from egg_mcp.evaluation.engine import WorkerEvaluator

    ev = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, spare_workers=1, burst_spares=3,
                         protect_server_memory=False)
    scheduled: list[str | None] = []
    ev.pool._track = lambda coro, mode=None: (scheduled.append(mode), coro.close())  # pyright: ignore[reportAttributeAccessIssue]  # no process is started
    assert ev.pool._spare_target("interp") == 1
    ev.expect_jobs(2)
    assert ev.pool._spare_target("interp") == 3 and scheduled == ["interp"] * 3
    ev.expect_jobs(9)
    assert ev.pool._spare_target("interp") == 4  # burst_spares caps it
    ev.expect_jobs(0)
    assert ev.pool._spare_target("interp") == 1
