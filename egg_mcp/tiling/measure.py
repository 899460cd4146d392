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
import secrets
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any, Literal

from pydantic import BaseModel, Field

from egg_mcp.contract import KernelInfo
from egg_mcp.tiling.models import MeasuredConfig, TilingConfig
from egg_mcp.tiling.plan import config_key, next_configs, round_sizes

TORCH_DTYPES = ("float32", "float16", "bfloat16")


class CandidateJob(BaseModel):
    config: dict[str, int]
    source: str


class AdaptiveJob(BaseModel):
    """Let the worker pick the configs round by round (see plan.next_configs)."""

    candidate_source: str
    ranked: list[tuple[dict[str, int], float]] = Field(description="(config, predicted_ms), best first")
    choices: dict[str, list[int]]
    max_trials: int = Field(default=8, ge=1)


class MeasurePayload(BaseModel):
    reference_source: str
    candidates: list[CandidateJob] = Field(default_factory=list, description="configs already applied, all measured")
    adaptive: AdaptiveJob | None = None
    dtype: str = "float32"
    size_overrides: dict[str, int | list[int]] = Field(default_factory=dict)
    atol: float = 1e-4
    rtol: float = 1e-4
    device: str = Field(default="auto", description="'auto' | 'cuda' | 'interpreter'")
    compile_workers: int = Field(default=14, ge=0, description="0 or 1: compile in the timing loop")
    timing_trials: int | None = Field(default=None, ge=1, description="timed runs per config; None: adapt like verify")
    seed: int = 0
    cache_dir: str | None = Field(default=None, description="TRITON_CACHE_DIR for this job (shared with the compile pool)")
    time_budget_s: float = 300.0
    deadline_unix: float | None = Field(default=None, description="when the caller's budget ends (time.time()): the job "
                                        "measures until then, whatever its own start-up took; else time_budget_s")
    per_config_timeout_s: float = 120.0


# ------------------------------------------------------------------------------- module loading


def _load_module(path: str, name: str):
    """Import a source file as a fresh module (Triton reads kernel source through inspect)."""
    from egg_mcp.problems.modules import import_file

    return import_file(path, name)


class _Problem:
    """The reference module, its inputs and its output, built once per process (loading rules shared
    with verify and profile_ncu: egg_mcp.problems.problem)."""

    def __init__(self, reference_path: str, dtype: str, size_overrides: dict[str, int | list[int]], seed: int, device: str):
        import torch

        from egg_mcp.problems.problem import DTYPES, Problem, apply_size_overrides

        self.torch = torch
        self.device = device
        self.seed = seed
        self.overrides = dict(size_overrides)
        self.module = _load_module(reference_path, f"_egg_tiling_ref_{os.getpid()}")
        apply_size_overrides(self.module, None, self.overrides)
        self.problem = Problem(self.module, device, DTYPES[dtype])
        self.init_inputs = self.problem.init_inputs(seed)
        self.inputs = self.problem.inputs(seed)
        self.reference = self.problem.build(self.module.Model, self.init_inputs, seed)
        self._expected = None

    def expected(self):
        if self._expected is None:
            with self.torch.no_grad():
                self._expected = self.reference(*self.inputs)
        return self._expected

    def build(self, module):
        """The candidate's ModelNew with the reference's weights where the parameters match."""
        from egg_mcp.problems.problem import apply_size_overrides

        apply_size_overrides(self.module, module, self.overrides)
        model = self.problem.build(module.ModelNew, self.init_inputs, self.seed)
        ref_state, new_state = self.reference.state_dict(), model.state_dict()
        if ref_state.keys() == new_state.keys() and all(ref_state[k].shape == new_state[k].shape for k in ref_state):
            model.load_state_dict(ref_state)
        return model


def _max_abs_error(got, expected) -> float:
    """Largest |got - expected| over the floating and complex tensor parts of matching outputs."""
    import torch

    from egg_mcp.evaluation.wire import flatten_output

    worst = 0.0
    for (_, g), (_, e) in zip(flatten_output(got)[1], flatten_output(expected, strict=True)[1]):
        if isinstance(g, torch.Tensor) and isinstance(e, torch.Tensor) and e.numel() and (
                e.is_floating_point() or e.is_complex()):
            diff = (g.to(e.device) - e).abs().double()
            worst = max(worst, float(diff[diff.isfinite()].max()) if bool(diff.isfinite().any()) else 0.0)
    return worst


def _error_kind(exc: BaseException) -> Literal["timed_output", "out_of_resources", "compile_error",
                                               "runtime_error"]:
    """The shared classifier's kind (evaluation/errors.py); an OOM of one config is a runtime failure here."""
    if isinstance(exc, TimedMismatch):
        return "timed_output"
    from egg_mcp.evaluation.errors import error_kind

    kind = error_kind(exc)
    return "runtime_error" if kind == "oom" else kind


def _short(exc: BaseException, limit: int = 600) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compiled_kernels(module) -> list[dict[str, Any]]:
    """Compiler resource reports (registers, spills, shared memory) of every kernel `module` launched."""
    from triton.runtime.jit import JITFunction

    out = []
    for value in list(vars(module).values()):
        fn = value
        while fn is not None and not isinstance(fn, JITFunction):
            fn = getattr(fn, "fn", None)
        if fn is None:
            continue
        caches = getattr(fn, "device_caches", None)
        if caches:
            compiled = [k for entry in caches.values() for k in entry[0].values()]
        else:
            compiled = [k for entry in getattr(fn, "cache", {}).values() for k in entry.values()]
        for kernel in compiled:
            meta = getattr(kernel, "metadata", None)
            out.append({
                "name": getattr(kernel, "name", fn.__name__),
                "num_warps": getattr(meta, "num_warps", None),
                "num_stages": getattr(meta, "num_stages", None),
                "registers": getattr(kernel, "n_regs", None),
                "spills": getattr(kernel, "n_spills", None),
                "shared_mem_bytes": getattr(meta, "shared", None),
            })
    return out


# ----------------------------------------------------------------------------------- compile pool

_WORKER_PROBLEM: _Problem | None = None


def _warm_compile(task: tuple[str, str, str, dict, int, str]) -> dict[str, Any]:
    """Pool child: run the candidate once so its kernels land in the shared cache."""
    global _WORKER_PROBLEM
    reference_path, candidate_path, dtype, overrides, seed, device = task
    try:
        if _WORKER_PROBLEM is None:
            _WORKER_PROBLEM = _Problem(reference_path, dtype, overrides, seed, device)
        problem = _WORKER_PROBLEM
        name = f"_egg_tiling_warm_{os.path.basename(candidate_path)[:-3]}_{os.getpid()}"
        module = _load_module(candidate_path, name)
        with problem.torch.no_grad():
            problem.build(module)(*problem.inputs)
        if device == "cuda":
            problem.torch.cuda.synchronize()
        sys.modules.pop(name, None)
        return {"ok": True}
    except BaseException as exc:  # noqa: BLE001 - reported, the parent decides
        return {"ok": False, "kind": _error_kind(exc), "error": _short(exc)}


def _compile_pool(tasks: list[tuple], workers: int, timeout_s: float) -> tuple[list[dict | None], str]:
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
            pending = [pool.apply_async(_warm_compile, (t,)) for t in tasks]
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


# -------------------------------------------------------------------------------------- timing


TIMING_METHOD = "GpuTimer steady state (egg_mcp.evaluation.timing, verify's timer and inputs): {method}, L2 {flush}"


class TimedMismatch(RuntimeError):
    """A config whose audited timed calls did not match the reference: recorded as its error, never as a time."""


class _Clock:
    """Times one config's forward the way verify does: the project's GpuTimer (one per job, its flush
    buffer allocated once), fresh inputs per rotation set, median of adaptive repetitions."""

    def __init__(self, problem: _Problem, timing_trials: int | None, atol: float = 1e-4, rtol: float = 1e-4):
        self.problem, self.trials, self.timer, self._inputs = problem, timing_trials, None, {}
        self.atol, self.rtol = atol, rtol

    def make_inputs(self, k: int) -> list:
        if k not in self._inputs:
            self._inputs[k] = self.problem.problem.inputs(self.problem.seed + 1 + k)
        return self._inputs[k]

    def time(self, model) -> tuple[float, float | None, str, int | None, list[str], int]:
        torch = self.problem.torch
        if self.problem.device != "cuda":
            return _cpu_wall_ms(lambda: model(*self.problem.inputs)) + (None, "cpu interpreter wall clock (not a GPU time)",
                                                                         None, [], 3)
        if self.timer is None:
            from egg_mcp.evaluation.timing import GpuTimer

            self.timer = GpuTimer(torch.cuda.current_device())

        from egg_mcp.evaluation.timed_audit import TimedCallAudit
        from egg_mcp.evaluation.timed_checks import check_in_process

        grad = torch.is_grad_enabled()
        torch.set_grad_enabled(False)  # as verify's harness: no per-call context manager inside the timed region
        audit = TimedCallAudit(self.problem.problem.inputs, [secrets.randbits(62) for _ in range(200)])
        try:
            stats, _ = self.timer.measure(lambda xs: model(*xs), self.make_inputs, n_runs=self.trials, audit=audit)
            # timed calls are checked calls: a config whose timed outputs are wrong gets no time
            problem = check_in_process(audit, lambda s: self.problem.reference(*self.problem.problem.inputs(s)),
                                       self.atol, self.rtol)
        finally:
            torch.set_grad_enabled(grad)
        if problem is not None:
            raise TimedMismatch(problem)
        flush = "read-flushed" if stats.l2_flushed else "warm (inputs fit L2)"
        return (stats.median_ms, stats.cv, TIMING_METHOD.format(method=stats.method, flush=flush), stats.sm_clock_mhz,
                list(stats.throttle_reasons or []), stats.n_runs)


def _cpu_wall_ms(fn) -> tuple[float]:
    times = []
    with _no_grad():
        fn()
        for _ in range(3):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return (times[len(times) // 2],)


def _no_grad():
    import torch

    return torch.no_grad()


def _measure_one(problem: _Problem, clock: _Clock, config: dict[str, int], path: str, index: int, warm: dict | None,
                 payload: MeasurePayload) -> MeasuredConfig:
    torch = problem.torch
    result = MeasuredConfig(config=TilingConfig(values=config))
    if warm is not None and not warm.get("ok") and warm.get("kind") == "compile_error":
        result.error_kind, result.error, result.correct = "compile_error", warm.get("error"), False
        return result
    name = f"_egg_tiling_cand_{index}_{os.getpid()}"
    try:
        module = _load_module(path, name)
    except BaseException as exc:  # noqa: BLE001
        result.error_kind, result.error, result.correct = "compile_error", _short(exc), False
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
                            + (f" (max abs error {mismatch.max_abs_error:.3g}, atol={payload.atol}, rtol={payload.rtol})"
                               if mismatch.max_abs_error is not None else ""))[:600]
            return result
        result.max_abs_error = _max_abs_error(got, expected)

        (result.median_ms, result.timing_cv, result.timing_method, result.sm_clock_mhz,
         result.throttle_reasons, result.timing_runs) = clock.time(model)
    except BaseException as exc:  # noqa: BLE001 - recorded per config
        result.error_kind, result.error, result.correct = _error_kind(exc), _short(exc), False
        if not result.kernels:
            try:
                result.kernels = [KernelInfo(**k) for k in compiled_kernels(module)]
            except Exception:  # noqa: BLE001
                pass
    finally:
        sys.modules.pop(name, None)
    return result


def measure_configs(payload: dict) -> dict:
    """Compile, check and time candidate configs; one result per config (errors included).

    payload: see `MeasurePayload` — `candidates` (config + applied source, all measured) and/or
    `adaptive` (the worker picks up to max_trials configs in rounds from the model's ranking,
    walking around the best measured one). Returns {"results": [MeasuredConfig...], "device",
    "compile_mode", "compile_wall_s", "wall_s", "notes"}.
    """
    started, started_unix = time.perf_counter(), time.time()
    job = MeasurePayload.model_validate(payload)
    if job.deadline_unix is not None and 0 < job.deadline_unix - started_unix < 86400:
        job.time_budget_s = max(1.0, job.deadline_unix - started_unix)
    if job.dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype {job.dtype!r} is not one of {TORCH_DTYPES}")
    device = job.device
    if device == "auto":
        from egg_mcp.hardware import nvml_gpu_names

        device = "cuda" if nvml_gpu_names() else "interpreter"
    if device == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
    workdir = tempfile.mkdtemp(prefix="egg_tiling_")
    previous_cache = os.environ.get("TRITON_CACHE_DIR")
    if job.cache_dir:
        os.environ["TRITON_CACHE_DIR"] = job.cache_dir
    notes: list[str] = []
    results: list[MeasuredConfig] = []
    compile_wall = 0.0
    modes: list[str] = []
    try:
        reference_path = os.path.join(workdir, "reference.py")
        with open(reference_path, "w") as f:
            f.write(job.reference_source)
        torch_device = "cuda" if device == "cuda" else "cpu"
        problem: _Problem | None = None
        clock: _Clock | None = None
        counter = 0

        def run_batch(batch: list[tuple[dict[str, int], str]]) -> list[MeasuredConfig]:
            nonlocal problem, clock, counter, compile_wall
            paths, indices = [], []
            for config, source in batch:
                path = os.path.join(workdir, f"cand_{counter}.py")
                indices.append(counter)
                counter += 1
                with open(path, "w") as f:
                    f.write(source)
                paths.append(path)
            t0 = time.perf_counter()
            workers = job.compile_workers if device == "cuda" else 0
            tasks = [(reference_path, p, job.dtype, job.size_overrides, job.seed, torch_device) for p in paths]
            remaining = job.time_budget_s - (time.perf_counter() - started)
            warm, mode = _compile_pool(tasks, workers, max(1.0, min(remaining, job.per_config_timeout_s * 4)))
            compile_wall += time.perf_counter() - t0
            modes.append(mode)
            if problem is None:
                problem = _Problem(reference_path, job.dtype, job.size_overrides, job.seed, torch_device)
                clock = _Clock(problem, job.timing_trials, job.atol, job.rtol)
            assert clock is not None  # made with the problem
            out = []
            for (config, _), path, index, w in zip(batch, paths, indices, warm):
                if time.perf_counter() - started > job.time_budget_s:
                    out.append(MeasuredConfig(config=TilingConfig(values=config), error_kind="timeout",
                                              error="not measured: the job's time budget was spent"))
                    continue
                out.append(_measure_one(problem, clock, config, path, index, w, job))
            return out

        if job.candidates:
            results += run_batch([(c.config, c.source) for c in job.candidates])
        if job.adaptive is not None:
            from egg_mcp.tiling.rewrite import apply_config

            adaptive = job.adaptive
            measured: dict[tuple, float | None] = {config_key(r.config.values): r.median_ms for r in results}
            for size in round_sizes(adaptive.max_trials):
                if time.perf_counter() - started > job.time_budget_s:
                    notes.append("stopped early: time budget spent")
                    break
                picks = next_configs([(dict(c), p) for c, p in adaptive.ranked], adaptive.choices, measured, size)
                if not picks:
                    break
                batch = [(c, apply_config(adaptive.candidate_source, c)) for c in picks]
                for r in run_batch(batch):
                    measured[config_key(r.config.values)] = r.median_ms if r.correct else None
                    results.append(r)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if job.cache_dir:
            if previous_cache is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = previous_cache
    device_name = device
    torch = sys.modules.get("torch")
    if device == "cuda" and torch is not None and torch.cuda.is_available():
        device_name = torch.cuda.get_device_name()
    return {
        "results": [r.model_dump() for r in results],
        "device": device_name,
        "compile_mode": ", ".join(sorted(set(modes))) or "none",
        "compile_wall_s": compile_wall,
        "wall_s": time.perf_counter() - started,
        "started_unix": started_unix,
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
        result = {"error": _short(exc), "traceback": traceback.format_exc()}
    with open(argv[1], "w") as f:
        json.dump(result, f)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
