"""The worker machinery: run_job, refusal, timeouts, FIFO GPU queue, the spare pool, log capture."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.evaluation.engine_results import LogCapture


def run(coro_fn, tmp_path, **kwargs):
    async def main():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, **kwargs)
        try:
            return await coro_fn(evaluator)
        finally:
            await evaluator.aclose()

    return asyncio.run(main())


def test_run_job_returns_the_function_result_from_another_process(tmp_path):
    import os

    outcome = run(lambda ev: ev.run_job("tests.doubles.jobs:echo", {"a": 1}, timeout_s=30, uses_gpu=False),
                  tmp_path, spare_workers=0)
    assert outcome.ok and outcome.result["payload"] == {"a": 1}
    assert outcome.result["pid"] != os.getpid()
    assert outcome.result["cwd"].startswith(str(tmp_path))


@pytest.mark.parametrize("target", ["os:system", "tests.doubles.jobs", "subprocess:run", "egg_mcp..x:y",
                                    "tests.doubles_x.jobs:echo"])
def test_run_job_refuses_targets_outside_the_package(tmp_path, target):
    with pytest.raises(ValueError, match="refused"):
        run(lambda ev: ev.run_job(target, {}, timeout_s=5, uses_gpu=False), tmp_path, spare_workers=0)


def test_test_doubles_run_only_where_the_environment_allows_them(monkeypatch):
    from egg_mcp.config import EXTRA_JOB_TARGETS_VAR
    from egg_mcp.evaluation.worker import target_allowed

    monkeypatch.delenv(EXTRA_JOB_TARGETS_VAR, raising=False)
    assert target_allowed("egg_mcp.profiling.target:profile") and not target_allowed("tests.doubles.jobs:echo")
    monkeypatch.setenv(EXTRA_JOB_TARGETS_VAR, "tests.doubles")
    assert target_allowed("tests.doubles.jobs:echo")
    assert not any(map(target_allowed, ["tests.doubles_x.jobs:echo", "tests.doubles:echo", "tests.jobs:echo",
                                        "tests.doubles.jobs", "os:system"]))
    monkeypatch.setenv(EXTRA_JOB_TARGETS_VAR, ".*,tests.*")  # not module paths: they allow nothing
    assert not target_allowed("tests.doubles.jobs:echo")


def test_failing_job_reports_the_exception(tmp_path):
    outcome = run(lambda ev: ev.run_job("tests.doubles.jobs:fail", {"message": "nope"}, timeout_s=30,
                                        uses_gpu=False), tmp_path, spare_workers=0)
    assert not outcome.ok and outcome.error.kind == "RuntimeError" and outcome.error.message == "nope"


def test_job_timeout_kills_the_worker_within_a_margin(tmp_path):
    start = time.monotonic()
    outcome = run(lambda ev: ev.run_job("tests.doubles.jobs:echo", {"sleep_s": 60}, timeout_s=1.0,
                                        uses_gpu=False), tmp_path, spare_workers=0)
    assert outcome.timed_out and not outcome.ok and outcome.error.kind == "timeout"
    assert time.monotonic() - start < 15


def test_gpu_jobs_run_one_at_a_time_in_submission_order(tmp_path):
    async def submit(ev):
        jobs = [ev.run_job("tests.doubles.jobs:echo", {"i": i, "sleep_s": 0.3}, timeout_s=60, uses_gpu=True)
                for i in range(4)]
        return await asyncio.gather(*jobs)

    outcomes = run(submit, tmp_path, spare_workers=1)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    spans = sorted((o.result["start"], o.result["end"], o.result["payload"]["i"]) for o in outcomes)
    assert [i for _, _, i in spans] == [0, 1, 2, 3]
    for (_, end, _), (start, _, _) in zip(spans, spans[1:]):
        assert start >= end  # no overlap
    assert len({o.result["pid"] for o in outcomes}) == 4  # every worker used once


def test_other_calls_are_answered_while_gpu_jobs_queue(tmp_path):
    async def scenario(ev):
        # GPU jobs far longer than any worker's start on a loaded host (no race on how fast a process starts):
        # the plain call is answered while both still hold or wait for the GPU; then they are cancelled
        gpu = [asyncio.create_task(ev.run_job("tests.doubles.jobs:echo", {"sleep_s": 300.0}, timeout_s=600,
                                              uses_gpu=True)) for _ in range(2)]
        await asyncio.sleep(0.2)
        plain = await ev.run_job("tests.doubles.jobs:echo", {}, timeout_s=30, uses_gpu=False)
        queued = all(not t.done() for t in gpu)
        for task in gpu:
            task.cancel()
        await asyncio.gather(*gpu, return_exceptions=True)
        return plain, queued

    plain, queued = run(scenario, tmp_path, spare_workers=0)
    assert plain.ok
    assert queued  # did not wait for the queued GPU jobs


def test_spare_workers_are_prestarted_and_used_once(tmp_path):
    async def scenario(ev):
        await ev.start_pool()
        await asyncio.sleep(0)
        first = await ev.run_job("tests.doubles.jobs:environment", {}, timeout_s=60, uses_gpu=True)
        second = await ev.run_job("tests.doubles.jobs:environment", {}, timeout_s=60, uses_gpu=True)
        return first, second

    first, second = run(scenario, tmp_path, spare_workers=1)
    assert first.ok and second.ok
    assert first.result["triton_interpret"] == "1"
    assert first.result["cwd"] != second.result["cwd"]
    assert first.result["triton_cache_dir"] != second.result["triton_cache_dir"]


def test_queued_jobs_warm_several_spares_in_parallel_and_the_surplus_is_trimmed(tmp_path):
    """One spare refills in ~7 s on the H200 while a verify takes ~2 s: a queue must not wait on one
    process start per job. Spares start while jobs wait; an idle pool shrinks back afterwards."""
    in_flight, peak, spawned = 0, 0, 0

    async def scenario(ev):
        nonlocal in_flight, peak, spawned
        real_spawn = ev.pool._spawn

        async def counting_spawn(*args, **kwargs):
            nonlocal in_flight, peak, spawned
            in_flight += 1
            spawned += 1
            peak = max(peak, in_flight)
            try:
                return await real_spawn(*args, **kwargs)
            finally:
                in_flight -= 1

        ev.pool._spawn = counting_spawn
        jobs = [ev.run_job("tests.doubles.jobs:echo", {"i": i, "sleep_s": 0.2}, timeout_s=120, uses_gpu=True)
                for i in range(5)]
        outcomes = await asyncio.gather(*jobs)
        await ev.wait_pool_ready()
        ev.pool.schedule_refill("interp")  # idle now: the burst's surplus goes
        await ev.wait_pool_ready()
        return outcomes, len(ev.pool.spares.get("interp", []))

    outcomes, idle_spares = run(scenario, tmp_path, spare_workers=1, burst_spares=3)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    assert [o.result["payload"]["i"] for o in sorted(outcomes, key=lambda o: o.result["start"])] == list(range(5))
    assert len({o.result["pid"] for o in outcomes}) == 5  # still one job per worker
    assert peak >= 3, peak  # spares started side by side while the queue waited
    assert spawned <= 5 + 1 + 3  # every job used a spare or a fresh process, never both
    assert idle_spares == 1


def test_wrapper_argv_prefixes_the_worker_command(tmp_path):
    wrapper = [sys.executable, "-c", "import os, sys; os.execvp(sys.argv[1], sys.argv[1:])"]
    outcome = run(lambda ev: ev.run_job("tests.doubles.jobs:echo", {"w": 1}, timeout_s=30, uses_gpu=False,
                                        wrapper_argv=wrapper), tmp_path, spare_workers=1)
    assert outcome.ok and outcome.result["payload"] == {"w": 1}


def test_log_capture_keeps_head_and_tail():
    capture = LogCapture(limit=10)
    for chunk in (b"abc", b"defgh", b"x" * 1000, b"12345"):
        capture.add(chunk)
    text = capture.text()
    assert text.startswith("abcde\n") and text.endswith("\n12345")
    assert f"[{1013 - 10} bytes omitted]" in text


def test_has_gpu_is_false_when_forced_to_the_interpreter(tmp_path):
    assert WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True).has_gpu() is False
    with pytest.raises(ValueError, match="no usable CUDA GPU"):
        WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True).evaluation_mode("cuda")


def test_a_surplus_spare_being_disposed_does_not_stand_in_for_a_replacement(tmp_path):
    """A burst's surplus spare is disposed by its refill; while it dies (up to seconds), a job that takes
    the last ready spare must still start a replacement, or the pool ends the burst with none."""
    from types import SimpleNamespace

    class FakeWorker:
        def __init__(self):
            self.proc = SimpleNamespace(returncode=None)

        def alive(self):
            return True

    async def scenario():
        ev = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, spare_workers=1, burst_spares=3,
                             protect_server_memory=False)
        dying, release = asyncio.Event(), asyncio.Event()

        async def fake_spawn(mode, wrapper_argv=None):
            return FakeWorker()

        async def slow_dispose(worker):
            dying.set()
            await release.wait()

        ev.pool._spawn, ev.pool.dispose = fake_spawn, slow_dispose  # pyright: ignore[reportAttributeAccessIssue]  # fakes
        ev.pool.spares["interp"] = [FakeWorker()]  # pyright: ignore[reportArgumentType]  # the standing spare, ready
        ev.pool._track(ev.pool._refill("interp"), "interp")  # a burst's spare arrives after the burst ended: surplus
        await asyncio.wait_for(dying.wait(), 5)
        _, pooled = await ev.pool.take("interp", None)  # a job takes the ready spare meanwhile
        starting = [t for t in ev.pool._refills if getattr(t, "egg_mode", None) == "interp"]
        if starting:  # the replacement it started
            await asyncio.wait(starting, timeout=30)
        release.set()
        if ev.pool._refills:  # the surplus's disposal, now released
            await asyncio.wait(list(ev.pool._refills), timeout=30)
        spares = len(ev.pool.spares.get("interp", []))
        await ev.aclose()
        return pooled, spares

    pooled, spares = asyncio.run(scenario())
    assert pooled and spares == 1
