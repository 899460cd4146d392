"""MCP progress for long tool calls: the job's own reports, and a heartbeat in between.

Many clients give a tool call 60 s unless progress notifications keep arriving (the MCP spec lets a
progress notification reset the client's timeout). A verify at large sizes, a baseline measurement, an
ncu profile or a tiling search can each run longer than that between two reports of their own, so every
call that can take more than a few seconds reports at least every HEARTBEAT_S seconds: the last thing the
job said and how long the call has run. The progress value is the call's elapsed seconds (it must
increase with every notification, which a job's phase counters do not: a phase's `done` restarts at 0);
a phase's own `done/total` goes into the message. A client that sent no progress token gets nothing
(the SDK drops the notification).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
"""A long call sends a progress notification at least this often."""


class CallProgress:
    """One tool call's progress reporter: `report` is the ProgressFn handed to the workflow."""

    def __init__(self, ctx: Any, tool: str, clock=time.monotonic):
        self.ctx, self.tool, self.clock = ctx, tool, clock
        self.started = clock()
        self.message = "started"
        self.sent = 0.0
        self.count = 0

    async def report(self, done: float, total: float | None = None, message: str | None = None) -> None:
        part = f"{done:g}/{total:g}" if total else None
        self.message = f"{message} ({part})" if message and part else message or part or self.message
        await self.send()

    async def send(self) -> None:
        elapsed = self.clock() - self.started
        progress = max(round(elapsed, 3), round(self.sent + 0.001, 3))  # strictly increasing
        self.sent = progress
        try:
            await self.ctx.report_progress(progress, None, f"{self.tool}: {self.message} ({elapsed:.0f} s)")
            self.count += 1
        except Exception:  # a client that went away must not fail the job
            log.debug("progress report failed", exc_info=True)

    async def heartbeat(self, every_s: float) -> None:
        while True:
            await anyio.sleep(every_s)
            await self.send()


@asynccontextmanager
async def long_call(ctx: Any, tool: str, every_s: float | None = None) -> AsyncIterator[Any]:
    """The ProgressFn for a long call (None without a context), with a heartbeat while the body runs."""
    if ctx is None:
        yield None
        return
    progress = CallProgress(ctx, tool)
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(progress.heartbeat, every_s or HEARTBEAT_S)
        try:
            yield progress.report
        except Exception as exc:  # re-raised as itself below, not wrapped in the task group's ExceptionGroup
            failure = exc
        finally:
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure
