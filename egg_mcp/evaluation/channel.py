"""The worker's result channel: JSON lines on the result pipe, each carrying the job's nonce.

A leaf module (json and os only) so job code in the worker (harness.py, judge.py) reports phases
through it without importing worker.py, which imports them: no worker <-> harness/judge cycle.
"""

from __future__ import annotations

import json
import os


class ResultChannel:
    """Writes JSON lines to the result pipe; every job message carries the job's nonce."""

    def __init__(self, fd: int):
        self.fd = fd
        self.nonce: str | None = None

    def send(self, message: dict) -> None:
        if self.nonce is not None:
            message = {**message, "nonce": self.nonce}
        data = (json.dumps(message, default=str) + "\n").encode()
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]

    def phase(self, name: str, **extra) -> None:
        self.send({"type": "phase", "phase": name, **extra})


_current: ResultChannel | None = None


def set_channel(ch: ResultChannel | None) -> None:
    """Called once by the worker's main when it opens the result pipe."""
    global _current
    _current = ch


def channel() -> ResultChannel | None:
    """The running job's result channel, or None outside a worker (e.g. a job run in a test)."""
    return _current


def phase(name: str, **extra) -> None:
    """Report a job phase (engine's phase accounting) when a channel is open; a no-op otherwise."""
    ch = _current
    if ch is not None:
        ch.phase(name, **extra)
