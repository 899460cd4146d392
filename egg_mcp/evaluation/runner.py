"""The untrusted runner: `python -m egg_mcp.evaluation.runner --fd N --private DIR --mode MODE --judge PID`.

The only process that imports candidate code. The judge (judge.py) starts it with an allow-listed
environment (no token, no EGG_MCP_*), a private working directory, no file descriptor but its own
channel (stdout/stderr are the worker's log pipes), in its own process group (and in its own
user+PID namespaces where the host allows: egg_mcp.sandbox.spawn_prefix), and kills it and every
descendant as soon as it has what it needs.

This entry module stays light: it ties its life to the judge and confines itself (no_new_privs,
capabilities dropped, Landlock) BEFORE importing torch, whose threads would otherwise stay outside
the Landlock domain on kernels without TSYNC; only then does it import the heavy part
(candidate_side.py) and answer the judge's commands with DATA (output bytes, findings, timings).
Everything it sends may have been written by the candidate, and the judge treats it that way.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from egg_mcp.evaluation import confinement, wire


def no_tells() -> None:
    """Before any candidate code: nothing the candidate reads as its process's plain facts names the judge,
    the sandbox or egg-mcp (a kernel that computes only when it sees them passes here and fails for the
    user). The environment came without markers (the judge and the launcher said them in argv); the
    private dir is an ordinary temp dir; here argv (python's and ours) becomes a plain `python -c`'s, and
    PYTHONPATH keeps only the dependencies' dirs (this process found egg_mcp already; no child needs it).
    What stays visible to code that looks further (sys.modules, the stack, /proc/self/cmdline, the parent
    process) is for the server's static check (environment_probe findings) to flag."""
    import egg_mcp
    from egg_mcp.config import drop_own_environment

    sys.argv[:] = ["-c"]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv[:] = [sys.orig_argv[0] if sys.orig_argv else "python", "-c", ""]
    ours = os.path.realpath(os.path.dirname(os.path.dirname(egg_mcp.__file__)))
    drop_own_environment(ours)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--private", required=True)
    parser.add_argument("--mode", choices=["gpu", "interp"], required=True)
    parser.add_argument("--judge", type=int, required=True)
    parser.add_argument("--tool", default=None, help="the tool wrapping this runner (compute-sanitizer): confine "
                        "with what its injection needs, and exit normally so the tool can finish its report")
    parser.add_argument("--allowlisted", action="store_true", help="the judge built this environment with the "
                        "sandbox's allow-list (said here, not in the environment the candidate reads)")
    parser.add_argument("--namespaces", default=None, help="appended by the namespace launcher: the namespaces "
                        "and private mounts in force")
    parser.add_argument("--protect", default="", help="os.pathsep-joined paths no tool or toolchain grant may expose "
                        "(the workspace, the allowed folders; every home directory is protected anyway)")
    args = parser.parse_args(argv)
    confinement.die_with_parent()
    if args.judge and os.getppid() != args.judge:  # the judge died before we could tie our life to it
        os._exit(3)
    import torch._dynamo  # noqa: F401  (lazily imported from candidate code: tests/test_interpreter_modules.py)
    if args.mode == "gpu":
        # CUDA must initialise before Landlock: on the H200 host (Linux 6.18, driver 580) a runner confined first
        # fails cudaGetDeviceCount with error 304, while one confined after CUDA init runs Triton kernels
        # (benchmarks/results/archive/h200_2026-12-01_0390956-d1d352b/gpu_tests.log). No candidate code ran yet.
        import torch

        torch.cuda.init()
        torch.empty(1, device="cuda")
    try:
        told = {"env_allowlist": True if args.allowlisted else None, "namespaces": args.namespaces,
                "protect": [p for p in args.protect.split(os.pathsep) if p]}
        if args.tool:
            from egg_mcp.evaluation.tool_confine import confine_wrapped

            sandbox = confine_wrapped(Path(args.private), args.tool, **told)
        else:
            sandbox = confinement.confine(Path(args.private), **told)
        sandbox["capabilities_dropped"] = confinement.drop_capabilities() and sandbox.get(
            "capabilities_dropped", True)
    except OSError as exc:  # a step the kernel offers failed: never go on to import the candidate
        print(f"egg-mcp runner: confinement failed: {exc}", file=sys.stderr, flush=True)
        os._exit(4)
    import torch
    import triton  # noqa: F401  (before the candidate)

    no_tells()

    from egg_mcp.evaluation.candidate_side import CandidateSide
    from egg_mcp.evaluation.runner_loop import serve

    warm: dict = {}
    if args.mode == "gpu" and not args.tool:  # under a tool, its report would show our kernel too
        from egg_mcp.evaluation.runner_warmup import warm_up

        warm = warm_up()
    sock = socket.socket(fileno=args.fd)
    side = CandidateSide(Path(args.private), interpreter=args.mode == "interp")
    side.sandbox = sandbox
    side.namespaces = args.namespaces  # whether RLIMIT_NPROC counts only this runner's tasks (bounds.py)
    code = 0
    try:
        wire.send(sock, {"type": "ready", "pid": os.getpid(), **warm})
        serve(sock, side)
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        if args.tool and args.mode == "gpu":
            # Under compute-sanitizer: finish the GPU work and leave through the normal exit path (atexit,
            # CUDA's teardown), where the tool's injection library sends what it still holds to the tool.
            # os._exit skipped that. The judge's finish() timeout bounds a candidate that hangs here.
            try:
                torch.cuda.synchronize()
            except Exception:
                code = code or 1
            sys.exit(code)
        os._exit(code)


if __name__ == "__main__":
    main()
