"""The runner's command loop: one judge command in, one answer out (data only), until `exit`.

Kept apart from candidate_side.py (what each command does) so the protocol is readable on one screen:
`trial` and `time` answer with outputs as bytes (time: the audited timed calls'), the other commands with a header, a
candidate's failure with
`failed`, a runner-side bug with `runner_error`. `launchers` is the one command never answered: the judge
sends it to a waiting spare (launchers.py) and reads no reply.
"""

from __future__ import annotations

import contextlib
import os
import socket
import traceback
from typing import Any

from egg_mcp.evaluation import launchers, wire
from egg_mcp.evaluation.bounds import over_bound_note
from egg_mcp.evaluation.candidate_side import CandidateFailed
from egg_mcp.evaluation.errors import error_kind
from egg_mcp.evaluation.failures import _failure
from egg_mcp.evaluation.gpu_cache import release_cached


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


def serve(sock: socket.socket, side: Any) -> None:
    """Answer the judge's commands until `exit` (or until the judge goes away)."""
    handlers = {"confine": side.confine, "load": side.load, "calls": side.calls, "report": side.report,
                "guard": side.guard}
    while True:
        fds: list[int] = []  # descriptors come only from the judge, only with `exchange` (exchange.py)
        try:
            cmd, _ = wire.recv(sock, max_blob_bytes=0, fds=fds)
        except wire.WireError:
            return
        kind = cmd.get("type")
        if kind == "exit":
            return
        if kind != "exchange":
            _close(fds)
        if kind == "launchers":
            if not side.loaded and not side.interpreter:  # only while no candidate (or reference) code exists here
                side.launcher_reports.append(launchers.prebuild(cmd.get("signatures")))
            continue
        try:
            if kind in ("trial", "time"):  # answered with values as bytes
                header, blobs = side.trial(cmd) if kind == "trial" else side.time(cmd)
                wire.send(sock, header, blobs)
                del header, blobs
                release_cached()  # the judge needs the GPU memory this step peaked at (gpu_cache.py)
                continue
            if kind == "exchange":
                wire.send(sock, side.take_exchange(cmd, fds))
                continue
            handler = handlers.get(str(kind))
            if handler is None:
                raise ValueError(f"unknown runner command {kind!r}")
            wire.send(sock, handler(cmd))
            release_cached()
        except CandidateFailed as failed:
            wire.send(sock, {"type": "failed", **failed.message, "findings": side.new_findings()})
        except BaseException as exc:  # noqa: BLE001 - a runner-side bug: reported as such, not as the candidate's
            if over_bound_note(exc) is not None:  # a bound the candidate's use ran into, wherever it surfaced
                wire.send(sock, {"type": "failed", **_failure("runtime_error", exc, side.candidate_path,
                                                              "The candidate's runner"),
                                                              "findings": side.new_findings()})
                continue
            if error_kind(exc) == "oom":  # the GPU (or host) filled up in harness code: the run did not fit, say so
                wire.send(sock, {"type": "failed", **_failure(
                    "oom", exc, side.candidate_path, f"The runner ran out of memory in the harness's {kind!r} step "
                    "(the candidate's buffers and the harness's input sets and output copies together did not fit)"),
                    "findings": side.new_findings()})
                continue
            wire.send(sock, {"type": "runner_error", "kind": type(exc).__name__, "message": str(exc)[:2000],
                             "traceback": traceback.format_exc()[-6000:]})
