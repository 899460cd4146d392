"""Small job targets for the tests of the worker machinery: `tests.doubles.jobs:<function>`.

A worker runs them only where config.EXTRA_JOB_TARGETS_VAR names `tests.doubles` (tests/conftest.py sets it, and so
do the benchmarks that run them on GPU hosts: bench_verify.py: environment, timing_probe; bench_lanes.py,
bench_lane_spares.py: echo): test doubles never ship."""

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


def timing_probe(payload: dict[str, Any]) -> dict[str, Any]:
    """Time a built-in problem's reference twice per size with the engine's timer (GPU only).

    payload: {"problem": "softmax", "sizes": [{"batch_size": .., "dim": ..}, ...], "dtype": "float32"}.
    Returns per size: both medians, the A/A ratio (should read 1.00 +- 0.01), CV, method, input sets.
    """
    import secrets
    from pathlib import Path

    import torch

    from egg_mcp.evaluation.harness import load_module
    from egg_mcp.evaluation.timing import GpuTimer
    from egg_mcp.problems.builtin import builtin_source
    from egg_mcp.problems.problem import DTYPES, Problem, apply_size_overrides

    if not torch.cuda.is_available():
        raise RuntimeError("timing_probe needs a CUDA GPU")
    torch.set_grad_enabled(False)
    timer = GpuTimer(torch.cuda.current_device())
    rows = []
    for i, sizes in enumerate(payload["sizes"]):
        module = load_module(builtin_source(payload.get("problem", "softmax")), Path(f"problem_{i}.py"),
                             f"egg_probe_{i}")
        apply_size_overrides(module, None, sizes)
        problem = Problem(module, "cuda", DTYPES[payload.get("dtype", "float32")])
        model = problem.build(module.Model, problem.init_inputs(0), 0)
        cache: dict[int, list] = {}

        def make_inputs(k: int, cache: dict[int, list] = cache) -> list:  # (bound now: deleted below)
            if k not in cache:
                cache[k] = problem.inputs(secrets.randbits(62))
            return cache[k]

        a, _ = timer.measure(lambda xs: model(*xs), make_inputs, n_runs=payload.get("n_runs"))
        b, _ = timer.measure(lambda xs: model(*xs), make_inputs, n_runs=payload.get("n_runs"))
        rows.append({"sizes": sizes, "a": a.model_dump(), "b": b.model_dump(),
                     "aa_ratio": a.median_ms / b.median_ms if b.median_ms else None})
        del cache
        torch.cuda.empty_cache()
    return {"rows": rows, "device": torch.cuda.get_device_name()}


def reach(payload: dict[str, Any]) -> dict[str, Any]:
    """Try to read, list and write the given paths from inside a job: what any job's code (a profiling
    target, a tiling trial, the compare job) could reach. Each attempt reports 'ok' or the error."""
    out: dict[str, str] = {}
    for path in payload.get("read", []):
        try:
            with open(path, "rb") as f:
                f.read(16)
            out[f"read {path}"] = "ok"
        except OSError as exc:
            out[f"read {path}"] = type(exc).__name__
    for path in payload.get("write", []):
        try:
            with open(path, "wb") as f:
                f.write(b"reached")
            out[f"write {path}"] = "ok"
        except OSError as exc:
            out[f"write {path}"] = type(exc).__name__
    for name in payload.get("env", []):  # which of these environment names the job can see
        out[f"env {name}"] = "set" if name in os.environ else "unset"
    return out
