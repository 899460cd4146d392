"""Small trusted job targets: health checks for the worker machinery (and the tests of it)."""

from __future__ import annotations

import os
import time
from typing import Any


def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Return the payload with the worker's pid and wall-clock start/end (FIFO and isolation checks)."""
    start = time.time()
    sleep_s = float(payload.get("sleep_s", 0.0))
    if sleep_s:
        time.sleep(sleep_s)
    return {"payload": payload, "pid": os.getpid(), "start": start, "end": time.time(), "cwd": os.getcwd()}


def environment(payload: dict[str, Any]) -> dict[str, Any]:
    """What a worker sees: interpreter flag, cache dirs, CUDA availability."""
    import torch

    return {
        "triton_interpret": os.environ.get("TRITON_INTERPRET"),
        "triton_cache_dir": os.environ.get("TRITON_CACHE_DIR"),
        "cuda": torch.cuda.is_available(),
        "cwd": os.getcwd(),
    }


def fail(payload: dict[str, Any]) -> dict[str, Any]:
    """Raise, so callers can see how a failing job is reported."""
    raise RuntimeError(payload.get("message", "requested failure"))
