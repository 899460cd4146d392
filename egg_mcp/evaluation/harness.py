"""Worker job targets for evaluation (run inside a worker process, never in the server).

`evaluate_job` is the trusted judge (judge.py): it never imports the candidate; a separate,
sandboxed runner process (runner.py) does, and sends its outputs back as data. `baselines_job`
times the (trusted) reference only.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import torch

from egg_mcp.contract import BaselineResult, EvalOptions
from egg_mcp.evaluation.channel import phase as _phase
from egg_mcp.evaluation.failures import env_info
from egg_mcp.problems.modules import import_source
from egg_mcp.problems.problem import DTYPES, Problem, apply_size_overrides

# ------------------------------------------------------------------------------- loading

def load_module(source: str, path: Path, name: str):
    return import_source(source, path, name)


def evaluate_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker target for WorkerEvaluator.evaluate: the trusted judge (judge.py), which runs the
    candidate in a separate sandboxed runner process (runner.py)."""
    from egg_mcp.evaluation.judge import evaluate

    return evaluate(payload)


# ------------------------------------------------------------------------------- baselines

def baselines_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker target for WorkerEvaluator.baselines: the reference as eager and torch.compile."""
    from egg_mcp.evaluation.timing import GpuTimer

    opts = EvalOptions.model_validate(payload["options"])
    torch.set_grad_enabled(False)
    env = env_info(False)
    seeds = list(payload["seeds"])
    workdir = Path(os.getcwd()) / "src"
    workdir.mkdir(exist_ok=True)
    _phase("load", message="loading the reference")
    reference = load_module(payload["reference_source"], workdir / "reference.py", "egg_reference")
    apply_size_overrides(reference, None, opts.size_overrides)
    problem = Problem(reference, "cuda", DTYPES[opts.dtype])
    init_seed = int(payload["init_seed"])
    model = problem.build(reference.Model, problem.init_inputs(init_seed), init_seed)
    cache: dict[int, list] = {}

    def make_inputs(k: int) -> list:
        if k not in cache:
            cache[k] = problem.inputs(seeds.pop() if seeds else secrets.randbits(62))
        return cache[k]

    _phase("run", message="timing eager PyTorch")
    timer = GpuTimer(torch.cuda.current_device())
    eager, _ = timer.measure(lambda xs: model(*xs), make_inputs, n_runs=opts.timing_trials)
    result = BaselineResult(eager=eager, env=env)
    _phase("compile", message="torch.compile of the reference")
    try:
        compiled_model = torch.compile(model)
        compiled_model(*make_inputs(0))
        torch.cuda.synchronize()
        _phase("timing", message="timing torch.compile")
        result.compiled, _ = timer.measure(lambda xs: compiled_model(*xs), make_inputs, n_runs=opts.timing_trials)
    except Exception as exc:  # noqa: BLE001
        result.compile_error = f"{type(exc).__name__}: {str(exc)[:1500]}"
    return result.model_dump()
