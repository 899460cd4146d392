"""The compile pool of the measuring job: every config's kernels compiled in parallel processes into
one shared TRITON_CACHE_DIR before the timing loop (see `measure`'s module docstring for why and how
the pool forks or spawns).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from egg_mcp.tiling.trial_problem import (
    TrialProblem,
    load_module,
    short_error,
    trial_error_kind,
)

_WORKER_PROBLEM: TrialProblem | None = None


def warm_compile(task: tuple[str, str, str, dict, int, str]) -> dict[str, Any]:
    """Pool child: run the candidate once so its kernels land in the shared cache."""
    global _WORKER_PROBLEM
    reference_path, candidate_path, dtype, overrides, seed, device = task
    try:
        if _WORKER_PROBLEM is None:
            _WORKER_PROBLEM = TrialProblem(reference_path, dtype, overrides, seed, device)
        problem = _WORKER_PROBLEM
        name = f"_egg_tiling_warm_{os.path.basename(candidate_path)[:-3]}_{os.getpid()}"
        module = load_module(candidate_path, name)
        with problem.torch.no_grad():
            problem.build(module)(*problem.inputs)
        if device == "cuda":
            problem.torch.cuda.synchronize()
        sys.modules.pop(name, None)
        return {"ok": True}
    except BaseException as exc:  # noqa: BLE001 - reported, the parent decides
        return {"ok": False, "kind": trial_error_kind(exc), "error": short_error(exc)}


def compile_in_pool(tasks: list[tuple], workers: int, timeout_s: float) -> tuple[list[dict | None], str]:
    if workers <= 1 or len(tasks) <= 1:
        return [None] * len(tasks), "serial"
    import multiprocessing as mp

    torch = sys.modules.get("torch")
    cuda_started = torch is not None and torch.cuda.is_initialized()
    method = "spawn" if cuda_started or "fork" not in mp.get_all_start_methods() else "fork"
    if method == "spawn" and len(tasks) < 6:
        return [None] * len(tasks), "serial (too few configs to pay for spawning)"
    try:
        context = mp.get_context(method)
        with context.Pool(min(workers, len(tasks))) as pool:
            pending = [pool.apply_async(warm_compile, (t,)) for t in tasks]
            deadline = time.monotonic() + timeout_s
            results: list[dict | None] = []
            for item in pending:
                try:
                    results.append(item.get(timeout=max(0.1, deadline - time.monotonic())))
                except Exception:  # noqa: BLE001 - a slow or dead child: compile it in the loop instead
                    results.append(None)
            pool.terminate()
        return results, method
    except (AssertionError, OSError, ValueError) as exc:  # e.g. daemonic worker processes cannot have children
        return [None] * len(tasks), f"serial ({type(exc).__name__}: {exc})"
