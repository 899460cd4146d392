"""Worker target: compile tile configs in parallel, check each against the reference, time them.

Runs inside an evaluation worker (never in the server process): `Evaluator.run_job(
"egg_mcp.tiling.measure:measure_configs", payload, uses_gpu=True)`. Also a CLI for scripts:
``python -m egg_mcp.tiling.measure payload.json result.json``.

Why a compile pool: a cold Triton compile costs ~0.5 s per config one at a time on the H200, ~0.1 s
per config with 14 processes writing one shared TRITON_CACHE_DIR; the timing loop then finds every
kernel in the cache. The pool forks when CUDA is not yet initialised in this process (fast), and
spawns otherwise (each child imports torch, ~3 s, in parallel); if neither works, configs compile
one by one in the timing loop.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import traceback

from pydantic import BaseModel, Field

from egg_mcp.config import set_triton_cache_dir, set_triton_interpret, triton_cache_dir
from egg_mcp.contract import KernelInfo
from egg_mcp.tiling.compile_pool import compile_in_pool
from egg_mcp.tiling.plan import config_key, next_configs, round_sizes
from egg_mcp.tiling.tiling_types import MeasuredConfig, TilingConfig
from egg_mcp.tiling.trial_clock import TrialClock
from egg_mcp.tiling.trial_problem import (
    TrialProblem,
    compiled_kernels,
    load_module,
    max_abs_error,
    short_error,
    trial_error_kind,
)

TORCH_DTYPES = ("float32", "float16", "bfloat16")


class CandidateJob(BaseModel):
    config: dict[str, int]
    source: str


class AdaptiveJob(BaseModel):
    """Let the worker pick the configs round by round (see plan.next_configs)."""

    candidate_source: str
    ranked: list[tuple[dict[str, int], float]] = Field(description="(config, predicted_ms), best first")
    choices: dict[str, list[int]]
    max_trials: int = Field(8, ge=1)


class MeasurePayload(BaseModel):
    reference_source: str
    candidates: list[CandidateJob] = Field(default_factory=list, description="configs already applied, all measured")
    adaptive: AdaptiveJob | None = None
    dtype: str = "float32"
    size_overrides: dict[str, int | list[int]] = Field(default_factory=dict)
    atol: float = 1e-4
    rtol: float = 1e-4
    device: str = Field("auto", description="'auto' | 'cuda' | 'interpreter'")
    compile_workers: int = Field(14, ge=0, description="0 or 1: compile in the timing loop")
    timing_trials: int | None = Field(None, ge=1, description="timed runs per config; None: adapt like verify")
    seed: int = 0
    cache_dir: str | None = Field(None, description="TRITON_CACHE_DIR for this job (shared with the compile pool)")
    time_budget_s: float = 300.0
    deadline_unix: float | None = Field(None, description="when the caller's budget ends (time.time()): the job "
                                        "measures until then, whatever its own start-up took; else time_budget_s")
    per_config_timeout_s: float = 120.0


def _measure_one(problem: TrialProblem, clock: TrialClock, config: dict[str, int], path: str, index: int,
                 warm: dict | None,
                 payload: MeasurePayload) -> MeasuredConfig:
    torch = problem.torch
    result = MeasuredConfig(config=TilingConfig(values=config))
    if warm is not None and not warm.get("ok") and warm.get("kind") == "compile_error":
        result.error_kind, result.error, result.correct = "compile_error", warm.get("error"), False
        return result
    name = f"_egg_tiling_cand_{index}_{os.getpid()}"
    try:
        module = load_module(path, name)
    except BaseException as exc:  # noqa: BLE001
        result.error_kind, result.error, result.correct = "compile_error", short_error(exc), False
        return result
    try:
        model = problem.build(module)
        with torch.no_grad():
            got = model(*problem.inputs)
            if problem.device == "cuda":
                torch.cuda.synchronize()
        result.kernels = [KernelInfo(**k) for k in compiled_kernels(module)]
        expected = problem.expected()
        from egg_mcp.evaluation.compare import compare_outputs

        # the same structural walk and rules as verify (every part of the output, complex, exact integers)
        mismatch = compare_outputs(got, expected, payload.atol, payload.rtol)
        result.correct = mismatch is None
        if mismatch is not None:
            result.max_abs_error = mismatch.max_abs_error
            result.error_kind = "incorrect"
            result.error = (f"{mismatch.path}: {mismatch.hint}"
                            + (f" (max abs error {mismatch.max_abs_error:.3g}, atol={payload.atol}, "
                               f"rtol={payload.rtol})"
                               if mismatch.max_abs_error is not None else ""))[:600]
            return result
        result.max_abs_error = max_abs_error(got, expected)

        (result.median_ms, result.timing_cv, result.timing_method, result.sm_clock_mhz,
         result.throttle_reasons, result.timing_runs) = clock.time(model)
    except BaseException as exc:  # noqa: BLE001 - recorded per config
        result.error_kind, result.error, result.correct = trial_error_kind(exc), short_error(exc), False
        if not result.kernels:
            try:
                result.kernels = [KernelInfo(**k) for k in compiled_kernels(module)]
            except Exception:  # noqa: BLE001
                pass
    finally:
        sys.modules.pop(name, None)
    return result


def _job_device(device: str) -> str:
    """'cuda' when the job asked for it or NVML sees a GPU, else 'interpreter' (Triton's CPU interpreter)."""
    if device == "auto":
        from egg_mcp.hardware import nvml_gpu_names

        device = "cuda" if nvml_gpu_names() else "interpreter"
    if device == "interpreter":
        set_triton_interpret()
    return device


class _Trials:
    """The job's trials: each batch of configs written to the job's directory, compiled by the pool,
    then checked and timed one by one until the time budget is spent (the reference problem and the
    clock are built once, after the first batch's compile)."""

    def __init__(self, job: MeasurePayload, device: str, workdir: str, started: float):
        self.job, self.device, self.workdir, self.started = job, device, workdir, started
        self.torch_device = "cuda" if device == "cuda" else "cpu"
        self.reference_path = os.path.join(workdir, "reference.py")
        self.problem: TrialProblem | None = None
        self.clock: TrialClock | None = None
        self.counter = 0
        self.compile_wall = 0.0
        self.measure_wall = 0.0  # checking and timing configs (the rest of the job: problem build, module loads)
        self.skipped = 0  # configs picked but not measured: the budget was spent first
        self.modes: list[str] = []

    def write_reference(self) -> None:
        with open(self.reference_path, "w") as f:
            f.write(self.job.reference_source)

    def spent(self) -> bool:
        return time.perf_counter() - self.started > self.job.time_budget_s

    def _write(self, batch: list[tuple[dict[str, int], str]]) -> tuple[list[str], list[int]]:
        paths, indices = [], []
        for _config, source in batch:
            path = os.path.join(self.workdir, f"cand_{self.counter}.py")
            indices.append(self.counter)
            self.counter += 1
            with open(path, "w") as f:
                f.write(source)
            paths.append(path)
        return paths, indices

    def _compile(self, paths: list[str]) -> list[dict | None]:
        job = self.job
        t0 = time.perf_counter()
        workers = job.compile_workers if self.device == "cuda" else 0
        tasks = [(self.reference_path, p, job.dtype, job.size_overrides, job.seed, self.torch_device) for p in paths]
        remaining = job.time_budget_s - (time.perf_counter() - self.started)
        warm, mode = compile_in_pool(tasks, workers, max(1.0, min(remaining, job.per_config_timeout_s * 4)))
        self.compile_wall += time.perf_counter() - t0
        self.modes.append(mode)
        return warm

    def run_batch(self, batch: list[tuple[dict[str, int], str]]) -> list[MeasuredConfig]:
        job = self.job
        paths, indices = self._write(batch)
        warm = self._compile(paths)
        if self.problem is None:
            self.problem = TrialProblem(self.reference_path, job.dtype, job.size_overrides, job.seed, self.torch_device)
            self.clock = TrialClock(self.problem, job.timing_trials, job.atol, job.rtol)
        out = []
        for (config, _), path, index, w in zip(batch, paths, indices, warm):
            if self.spent():
                self.skipped += 1
                out.append(MeasuredConfig(config=TilingConfig(values=config), error_kind="not_measured",
                                          error="not measured: the job's time budget was spent"))
                continue
            assert self.clock is not None  # made with the problem
            t0 = time.perf_counter()
            out.append(_measure_one(self.problem, self.clock, config, path, index, w, job))
            self.measure_wall += time.perf_counter() - t0
        return out


def _adaptive_rounds(adaptive: AdaptiveJob, trials: _Trials, results: list[MeasuredConfig], notes: list[str]) -> str:
    """Rounds of configs picked from the model's ranking around the best measured one (plan.next_configs); returns
    what stopped them: 'max_trials' (all picked), 'budget' (the time ran out first) or 'space' (nothing left)."""
    from egg_mcp.tiling.rewrite import apply_config

    measured: dict[tuple, float | None] = {config_key(r.config.values): r.median_ms for r in results}
    for size in round_sizes(adaptive.max_trials):
        if trials.spent():
            notes.append("stopped early: time budget spent")
            return "budget"
        picks = next_configs([(dict(c), p) for c, p in adaptive.ranked], adaptive.choices, measured, size)
        if not picks:
            return "space"
        batch = [(c, apply_config(adaptive.candidate_source, c)) for c in picks]
        for r in trials.run_batch(batch):
            measured[config_key(r.config.values)] = r.median_ms if r.correct else None
            results.append(r)
    return "budget" if trials.skipped else "max_trials"


def _device_name(device: str) -> str:
    torch = sys.modules.get("torch")
    if device == "cuda" and torch is not None and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return device


def measure_configs(payload: dict) -> dict:
    """Compile, check and time candidate configs; one result per config (errors included).

    payload: see `MeasurePayload` — `candidates` (config + applied source, all measured) and/or
    `adaptive` (the worker picks up to max_trials configs in rounds from the model's ranking,
    walking around the best measured one). Returns {"results": [MeasuredConfig...], "device",
    "compile_mode", "compile_wall_s", "measure_wall_s", "wall_s", "started_unix", "time_budget_s" (the job's own
    clock), "deadline_used" (whether the caller's deadline set it), "stopped_by" ('max_trials', 'budget' or
    'space'), "notes"}; a config picked but not reached before the budget ran out has error_kind 'not_measured'.
    """
    started, started_unix = time.perf_counter(), time.time()
    job = MeasurePayload.model_validate(payload)
    deadline_used = job.deadline_unix is not None and 0 < job.deadline_unix - started_unix < 86400
    if deadline_used:
        assert job.deadline_unix is not None
        job.time_budget_s = max(1.0, job.deadline_unix - started_unix)
    if job.dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype {job.dtype!r} is not one of {TORCH_DTYPES}")
    device = _job_device(job.device)
    workdir = tempfile.mkdtemp(prefix="egg_tiling_")
    previous_cache = triton_cache_dir()
    if job.cache_dir:
        set_triton_cache_dir(job.cache_dir)
    notes: list[str] = []
    results: list[MeasuredConfig] = []
    trials = _Trials(job, device, workdir, started)
    stopped_by = "max_trials"
    try:
        trials.write_reference()
        if job.candidates:
            results += trials.run_batch([(c.config, c.source) for c in job.candidates])
        if job.adaptive is not None:
            stopped_by = _adaptive_rounds(job.adaptive, trials, results, notes)
        elif trials.skipped:
            stopped_by = "budget"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if job.cache_dir:
            set_triton_cache_dir(previous_cache)
    return {
        "results": [r.model_dump() for r in results],
        "device": _device_name(device),
        "compile_mode": ", ".join(sorted(set(trials.modes))) or "none",
        "compile_wall_s": trials.compile_wall,
        "measure_wall_s": trials.measure_wall,
        "wall_s": time.perf_counter() - started,
        "started_unix": started_unix,
        "time_budget_s": job.time_budget_s,
        "deadline_used": deadline_used,
        "stopped_by": stopped_by,
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m egg_mcp.tiling.measure PAYLOAD.json RESULT.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        payload = json.load(f)
    try:
        result = measure_configs(payload)
    except Exception as exc:  # noqa: BLE001
        result = {"error": short_error(exc), "traceback": traceback.format_exc()}
    with open(argv[1], "w") as f:
        json.dump(result, f)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
