"""A persistent trusted judge: `python -m egg_mcp.evaluation.judge_host --job-fd N --result-fd M --mode MODE`.

Why: a one-shot verify worker pays a Python start, the torch import, CUDA initialisation and the
reference's load and timing for every verify, in itself and in its runner. This process is the same
trusted judge (judge.py) but serves successive verify jobs of ONE reference (the engine routes them
by task key, engine_judges.py): it keeps the loaded reference, its model and its timing
(`HeldReference`), and pre-starts the next runner while it is idle (with `--ahead`, where runners are Landlock-confined:
already while the current job runs, so back-to-back verifies find it ready). Every job still gets a FRESH
runner: a process that was started and confined before any candidate code existed and imports
exactly one candidate; it dies with every descendant before the result is sent.

Protocol: as worker.py, except that the job fd carries one job-file path per line for as long as the
engine keeps it open, and after each result the host sends {"type": "idle"} once its next runner is
on its way. The host exits (the engine recycles it) on EOF, after `--max-jobs`, after `--idle-s`
without a job, after any harness fault (an exception here, or a result whose fault is 'harness'),
and when a job names another reference than the one it holds.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import sys
import threading
import traceback
from typing import Any

from egg_mcp.config import watched_server_pid
from egg_mcp.evaluation.judge_held import MAX_HELD_BYTES, HeldReference, model_bytes, reference_key


def evaluate_held(payload: dict[str, Any], held: HeldReference | None,
                  ahead=None) -> tuple[dict[str, Any], HeldReference | None]:
    """One verify in this judge: uses and returns what it holds for the task (judge_held.py); `ahead`
    (or None) is called with the runner's sandbox report once it confined itself (to start the next one)."""
    import torch

    from egg_mcp.evaluation.judge import Judge

    torch.set_grad_enabled(False)
    judge = Judge(payload, held)
    judge.on_runner_confined = ahead
    result = judge.run()
    if held is None and getattr(judge, "ref_model", None) is not None and result.get("fault") == "candidate":
        if model_bytes(judge.ref_model) <= MAX_HELD_BYTES:
            held = HeldReference(key=reference_key(payload), problem=judge.problem, ref_model=judge.ref_model,
                                 init_seed=judge.init_seed, dirname=judge.reference_dir)
        else:
            judge.judge_info["reference"] = "loaded (too large to hold)"
    if judge.exchange is not None:  # a host region stays with the held reference for its next job; GPU memory goes
        if judge.exchange.on_device:
            judge.exchange.close()
        elif held is not None and held.exchange in (None, judge.exchange):
            held.exchange = judge.exchange
        elif held is not None:
            held.exchange.close()
            held.exchange = judge.exchange
        else:
            judge.exchange.close()
    if held is not None and getattr(judge, "measured_reference_timing", None) is not None:
        held.keep_timing(judge.measured_reference_timing, judge.opts.timing_trials)
    return result, held


AHEAD_DEPTH = 3
"""Runners kept started during a GPU job (with --ahead): back to back, each gets three jobs' time to start
(a GPU runner's start, torch import + CUDA + runner_warmup.py, took 5-7 s on the H200; a verify 3.3-4.3 s,
benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/verify_latency.json). Verifies faster than ~2 s
each drain the pool (verify_latency_light.json there: one 4 s wait in six), and starts overlapping a
candidate's compile slow it.
The interpreter path keeps one (a CPU-only host has few cores to start two at once)."""


def torch_cuda_ready() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()


def _runs_apart(sandbox: Any) -> bool:
    """Whether a runner may start while another runs a candidate: only when each is Landlock-confined (it
    can write only its own dir, and cannot ptrace a process outside its domain)."""
    return isinstance(sandbox, dict) and "landlock" in str(sandbox.get("level", ""))


def _next_job_path(stream, idle_s: float) -> str | None:
    """The next job line, or None on EOF or idle timeout."""
    if not select.select([stream], [], [], idle_s)[0]:
        return None
    line = stream.readline()
    return line.decode().strip() or None


OWN_DIRS = frozenset({"jobs", "tmp"})
"""The engine's job-file dir and the judge's TMPDIR (emptied, not removed)."""


def _clean_dir(keep: set[str], root: str = ".") -> None:
    """Remove everything in the judge's cwd but its own held files: a runner's private dir (its
    Triton cache, HOME, TMP) never outlives its job."""
    for entry in os.scandir(root):
        if root == "." and entry.name == "tmp":
            _clean_dir(set(), "tmp")
            continue
        if root == "." and (entry.name in keep or entry.name in OWN_DIRS):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job-fd", type=int, required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--mode", choices=["gpu", "interp"], required=True)
    parser.add_argument("--max-jobs", type=int, default=20)
    parser.add_argument("--idle-s", type=float, default=600.0)
    parser.add_argument("--ahead", action="store_true",
                        help="start the next runner while a job runs (only where runners are Landlock-confined)")
    return parser.parse_args(argv)


def _start(args: argparse.Namespace):
    """Watch the server, protect this process, open the result channel, start a runner, preload the imports."""
    from egg_mcp.evaluation import confinement, runner_process, worker
    from egg_mcp.evaluation.channel import ResultChannel, set_channel

    watched = watched_server_pid()
    if watched.isdigit():
        threading.Thread(target=worker._watch_server, args=(int(watched),), name="egg-server-watchdog",
                         daemon=True).start()
    confinement.protect_memory()
    confinement.become_subreaper()
    from egg_mcp.evaluation.gpu_cache import use_judge_allocator

    use_judge_allocator()  # before the judge's first CUDA allocation (the interpreter makes none)
    channel = ResultChannel(args.result_fd)
    set_channel(channel)  # the judge reports its phases through evaluation.channel (the run-timeout clock needs them)
    worker._channel = channel
    try:
        runner_process.prestart(args.mode)
    except Exception:
        traceback.print_exc()
    try:
        worker._preload(args.mode, judge=True)
    except Exception:
        traceback.print_exc()
    return channel


def _run_job(path: str, jobs: int, held: HeldReference | None, channel, ahead
             ) -> tuple[HeldReference | None, bool, bool]:
    """One job file: (what the judge holds now, recycle this judge, the job failed in the harness)."""
    from egg_mcp.evaluation import runner_process

    try:
        with open(path) as f:
            job = json.load(f)
        os.unlink(path)
        channel.nonce = job["nonce"]
        channel.send({"type": "started", "pid": os.getpid(), "job": jobs})
        if job.get("target") != "egg_mcp.evaluation.harness:evaluate_job":
            raise ValueError(f"a persistent judge runs verify jobs only, not {job.get('target')!r}")
        payload = job["payload"]
        if held is not None and held.key != reference_key(payload):
            raise ValueError("this judge holds another reference; the engine routes by reference key")
        result, held = evaluate_held(payload, held, ahead)
        result["judge"] = {**result.get("judge", {}), "pid": os.getpid(), "job": jobs, "persistent": True}
        channel.send({"type": "result", "ok": True, "result": result})
        return held, result.get("fault") == "harness", False
    except BaseException as exc:  # noqa: BLE001 - a harness fault: report it, then recycle
        channel.send({"type": "result", "ok": False, "error": {
            "kind": type(exc).__name__, "message": str(exc)[:4000],
            "traceback": traceback.format_exc()[-8000:]}})
        return held, True, True
    finally:
        channel.nonce = None
        runner_process.kill_all_but_spare()  # the runner is dead already; anything it left goes too
        runner_process.reap_orphans()


def _between_jobs(args: argparse.Namespace, held: HeldReference | None, jobs: int) -> None:
    """Clean the folder, give memory back, start the next candidate's runner."""
    from egg_mcp.evaluation import runner_process

    _clean_dir((held.files if held is not None else set()) | {r.private.name for r in runner_process.spares()})
    if held is not None:
        held.after_job()
    elif torch_cuda_ready():
        from egg_mcp.evaluation.gpu_cache import release_all

        release_all()
    if jobs < args.max_jobs:
        try:
            runner_process.prestart(args.mode)  # a fresh runner for the next candidate
        except Exception:
            traceback.print_exc()


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    from egg_mcp.evaluation import runner_process, worker

    channel = _start(args)
    held: HeldReference | None = None

    def ahead(sandbox: Any) -> None:
        if not _runs_apart(sandbox):
            return
        try:
            runner_process.prestart(args.mode, AHEAD_DEPTH if args.mode == "gpu" else 1)
        except Exception:
            traceback.print_exc()

    channel.send({"type": "ready", "pid": os.getpid()})
    jobs = 0
    exit_code = 0
    stream = os.fdopen(args.job_fd, "rb", buffering=0)
    try:
        while jobs < args.max_jobs:
            path = _next_job_path(stream, args.idle_s)
            if path is None:
                break
            jobs += 1
            held, recycle, failed = _run_job(path, jobs, held, channel, ahead if args.ahead else None)
            exit_code = 1 if failed else exit_code
            if recycle:
                break
            _between_jobs(args, held, jobs)
            channel.send({"type": "idle", "jobs": jobs})
    finally:
        worker.exit_process(exit_code)


if __name__ == "__main__":
    main()
