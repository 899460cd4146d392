"""Worker process entry point: `python -m egg_mcp.evaluation.worker --job-fd N --result-fd M --mode MODE`.

Why a separate process: candidate code is LLM-written; it may crash, hang, corrupt the CUDA
context or print without end. The parent (engine.py) starts this module in its own session with
stdin closed and stdout/stderr on pipes it drains and truncates, so nothing here can reach the
server process.

Protocol (all JSON lines on the result fd, never stdout, which the candidate owns):
  {"type": "ready"}                                   after the preloads (torch, triton, CUDA)
  {"type": "started", "nonce": ...}                   the job was read (before any job code ran)
  {"type": "phase", "nonce": ..., "phase": ..., ...}  progress; "run" switches to the run timeout
  {"type": "result", "nonce": ..., "ok": bool, "result" | "error": ...}
The job itself arrives as one line on the job fd: the path of a JSON file that is read and
deleted before the target is imported. The worker is used for one job only, then `os._exit`s
(skipping atexit handlers and CUDA teardown that candidate code could have poisoned).

For verify the worker is the trusted *judge* (judge.py): candidate code runs in a child *runner*
process (runner.py) that holds no copy of this result fd. The worker makes itself non-dumpable
(its memory, environment and fds are closed to same-user processes through /proc) and a child
subreaper (a candidate's setsid grandchildren stay its descendants), and kills every descendant
before it exits. `--prestart-runner` starts the runner during the preload.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import traceback

from egg_mcp.config import extra_job_targets, take_sandbox_required, watched_server_pid
from egg_mcp.evaluation.channel import ResultChannel, set_channel

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
TARGET_PATTERN = re.compile(rf"^egg_mcp(\.{_NAME})+:{_NAME}$")
_MODULE_PATH = re.compile(rf"{_NAME}(\.{_NAME})*")


def target_allowed(target: str) -> bool:
    """Whether a worker may run `target`: `egg_mcp.<module>:<function>`, or `<prefix>.<module>:<function>` for a
    module prefix config.extra_job_targets() names (the test suite's tests.doubles; none by default)."""
    if TARGET_PATTERN.match(target):
        return True
    return any(re.match(rf"^{re.escape(prefix)}(\.{_NAME})+:{_NAME}$", target)
               for prefix in extra_job_targets() if _MODULE_PATH.fullmatch(prefix))


_channel: ResultChannel | None = None


def channel() -> ResultChannel | None:
    """The running job's result channel (job code reads it through channel.py, which main sets)."""
    return _channel


def _preload(mode: str, judge: bool = False) -> None:
    """Pay the import and CUDA-init cost before the job arrives (this is what a pool buys). A judge on the GPU
    imports Triton only for its own comparison kernels (compare_fused); the candidate's Triton runs in its runner."""
    if mode == "plain":
        return
    import torch  # noqa: F401

    if not judge:
        import triton  # noqa: F401

    import egg_mcp.evaluation.harness  # noqa: F401

    if judge:
        import egg_mcp.evaluation.judge  # noqa: F401

    if mode == "gpu" and torch.cuda.is_available():
        torch.cuda.init()
        torch.empty(1, device="cuda")
        if judge:  # the large-output check's kernels, built and self-checked before the first trial needs them
            from egg_mcp.evaluation import compare_fused

            compare_fused.warm_up()


def _read_job_path(fd: int) -> str:
    chunks = []
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
        if b"\n" in chunk:
            break
    os.close(fd)
    return b"".join(chunks).decode().strip()


def resolve_target(target: str):
    """Import "egg_mcp.pkg.module:function" (or one under an extra prefix config allows: target_allowed); anything
    else is refused."""
    if not target_allowed(target):
        raise ValueError(f"refused job target {target!r}: only 'egg_mcp.<module>:<function>' may run in a worker")
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def _watch_server(server_pid: int, interval_s: float = 1.0) -> None:
    """Runs in a daemon thread: when the server process is gone (killed, crashed), end this worker's
    whole process group (the worker, and ncu when it wraps us) so no candidate code outlives the
    server that was supposed to supervise it."""
    import signal
    import time

    while True:
        time.sleep(interval_s)
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            try:
                from egg_mcp.evaluation import confinement

                confinement.kill_descendants()  # the runner and its setsid children left our group
                os.killpg(os.getpgrp(), signal.SIGKILL)
            finally:
                os._exit(137)
        except PermissionError:
            pass


JUDGE_TARGETS = frozenset({"egg_mcp.evaluation.harness:evaluate_job", "egg_mcp.evaluation.harness:baselines_job",
                           "egg_mcp.evaluation.memcheck:memcheck_job"})
"""Jobs whose process is the trusted judge: it starts its own confined runner (namespaces need mounts,
which a Landlock-confined process may not do: a confined memcheck judge left its runner without /proc,
and CUDA without it), so the judge itself stays unconfined and never imports candidate code."""


def _confine_job(target: str, *, wrapped: bool, tool: str | None = None) -> dict | None:
    """Every other job that may run user or candidate code in this process (profiling target, tiling
    trials, the compare job, reference analysis, calibration) confines this process to its private
    dir first, so no job can read or write the workspace, the exports or the user's files. A job wrapped
    by a tool (ncu) is confined too, with what the tool's injection library needs (tool_confine.py).
    Returns what was applied; raises OSError when a step the kernel offers failed (the job then fails:
    never silently unconfined)."""
    if target in JUDGE_TARGETS:
        return None
    from pathlib import Path

    from egg_mcp.evaluation import bounds

    if wrapped:
        from egg_mcp.evaluation import tool_confine

        applied = tool_confine.confine_wrapped(Path.cwd(), tool)
    else:
        from egg_mcp.evaluation import confinement

        applied = confinement.confine(Path.cwd())
    # a one-job process: the file-size bound and no core file (its memory is the problem's, unknown here)
    return {**applied, "rlimits": bounds.apply_job_rlimits()} if isinstance(applied, dict) else applied


def exit_process(exit_code: int) -> None:
    """End a worker or judge host: kill whatever its job left behind, flush, and leave without running
    atexit handlers or finalizers a job may have registered."""
    try:
        from egg_mcp.evaluation import confinement

        confinement.kill_descendants()
    except Exception:
        pass
    runners = sys.modules.get("egg_mcp.evaluation.runner_process")
    if runners is not None:  # a judge: its runners' private dirs are outside its own dir (/tmp)
        try:
            runners.remove_private_dirs()
        except Exception:
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(exit_code)


def main(argv: list[str] | None = None) -> None:
    global _channel
    watched = watched_server_pid()
    if watched.isdigit():
        import threading

        threading.Thread(target=_watch_server, args=(int(watched),), name="egg-server-watchdog",
                         daemon=True).start()
    if __name__ == "__main__":  # let harness code reach this module's channel by its real name
        sys.modules.setdefault("egg_mcp.evaluation.worker", sys.modules["__main__"])
    parser = argparse.ArgumentParser()
    parser.add_argument("--job-fd", type=int, required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--mode", choices=["gpu", "interp", "plain"], default="plain")
    parser.add_argument("--prestart-runner", action="store_true")
    parser.add_argument("--wrapped", action="store_true",
                        help="started under a tool (ncu, compute-sanitizer) whose injection needs IPC outside our dir")
    parser.add_argument("--tool", default=None, help="the wrapping tool's executable (its install tree is readable)")
    args = parser.parse_args(argv)
    from egg_mcp.evaluation import confinement

    confinement.protect_memory()
    confinement.become_subreaper()
    _channel = ResultChannel(args.result_fd)
    set_channel(_channel)
    if args.prestart_runner:
        try:
            from egg_mcp.evaluation import runner_process

            runner_process.prestart(args.mode)  # imports torch in parallel with our own preload
        except Exception:
            traceback.print_exc()
    try:
        _preload(args.mode, judge=args.prestart_runner)
    except Exception:
        traceback.print_exc()
    _channel.send({"type": "ready"})
    path = _read_job_path(args.job_fd)
    exit_code = 0
    try:
        with open(path) as f:
            job = json.load(f)
        os.unlink(path)
        _channel.nonce = job["nonce"]
        _channel.send({"type": "started", "pid": os.getpid()})
        func = resolve_target(job["target"])
        sandbox = _confine_job(job["target"], wrapped=args.wrapped, tool=args.tool)
        if sandbox is not None:  # said by trusted code before the job imports anything it was given
            _channel.send({"type": "confined", "sandbox": sandbox})
            from egg_mcp.sandbox.floor import CONFINE_LAYERS, BelowFloor, below_floor, required_from_env

            required = required_from_env(take_sandbox_required())
            refused = below_floor(sandbox, [n for n in required if n in CONFINE_LAYERS])
            if refused is not None:  # weaker than the server's floor: the job's code never runs
                raise BelowFloor(refused)
        result = func(job["payload"])
        _channel.send({"type": "result", "ok": True, "result": result})
    except BaseException as exc:  # noqa: BLE001 - report everything, SystemExit included
        exit_code = 1
        try:
            _channel.send(
                {
                    "type": "result",
                    "ok": False,
                    "error": {
                        "kind": type(exc).__name__,
                        "message": str(exc)[:4000],
                        "traceback": traceback.format_exc()[-8000:],
                    },
                }
            )
        except Exception:
            pass
    finally:
        exit_process(exit_code)


if __name__ == "__main__":
    main()
