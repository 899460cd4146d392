"""The worker-side profiling target: run the candidate's forward once inside a profiler range.

Runs in an isolated worker (never in the server), possibly under `ncu --profile-from-start off`:
it builds inputs and `ModelNew` the KernelBench way, warms up (JIT compilation and autotuning stay
outside the profiled range), then brackets exactly one forward with cudaProfilerStart/Stop. It also
reports what the fallback needs without counters: the Triton kernels launched, their compiled
metadata (registers, spills, shared memory, num_warps, num_stages), grids, and per-kernel CUDA
event timing from a few extra forwards (run before the profiled range, so ncu never sees them).
"""

from __future__ import annotations

import inspect
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from egg_mcp.config import set_triton_interpret


def _load_module(source: str, name: str, directory: Path):
    """Import `source` from a real file (`@triton.jit` reads the source through inspect)."""
    from egg_mcp.problems.modules import import_source

    return import_source(source, directory / f"{name}.py", name)


class _LaunchRecorder:
    """Records each Triton launch (name, grid, compiled kernel) by wrapping `run` of the module's
    JIT functions; a launch hook, where available, also catches kernels the module does not expose."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []
        self.hook_names: list[str] = []
        self.compiled: dict[str, Any] = {}
        self.grids: dict[str, list[int] | None] = {}
        self.event_pairs: list[tuple[str, Any, Any]] | None = None
        self._restore: list[tuple[Any, str, Any]] = []
        self._undo: list[Any] = []

    # -- JIT functions -------------------------------------------------------------------------
    @staticmethod
    def _jit_functions(module) -> dict[str, Any]:
        found: dict[str, Any] = {}
        try:
            from triton.runtime.jit import JITFunction
        except ImportError:  # pragma: no cover - triton always present in workers
            return found
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover
            InterpretedFunction = JITFunction  # noqa: N806
        for value in list(vars(module).values()):
            seen = 0
            fn = value
            while fn is not None and seen < 6:  # Autotuner / Heuristics wrap the JIT function in .fn
                if isinstance(fn, (JITFunction, InterpretedFunction)):
                    found[fn.fn.__name__] = fn
                    break
                fn = getattr(fn, "fn", None)
                seen += 1
        return found

    def wrap(self, module) -> list[str]:
        functions = self._jit_functions(module)
        for name, fn in functions.items():
            original = fn.run
            self._restore.append((fn, "run", original))
            fn.run = self._wrapped(name, fn, original)
        return sorted(functions)

    def _wrapped(self, name: str, fn, original):
        recorder = self
        signature = inspect.signature(fn.fn)

        def run(*args, grid, warmup=False, **kwargs):
            if warmup:
                return original(*args, grid=grid, warmup=warmup, **kwargs)
            start = end = None
            if recorder.event_pairs is not None:
                import torch

                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            kernel = original(*args, grid=grid, warmup=warmup, **kwargs)
            if end is not None and recorder.event_pairs is not None:  # (end is made only with event_pairs)
                end.record()
                recorder.event_pairs.append((name, start, end))
            recorder.launches.append({"name": name})
            if kernel is not None and not isinstance(kernel, (list, tuple)) and hasattr(kernel, "metadata"):
                recorder.compiled[name] = kernel
            if name not in recorder.grids:
                recorder.grids[name] = _grid_of(grid, signature, args, kwargs)
            return kernel

        return run

    # -- launch hook (names only) ----------------------------------------------------------------
    def install_hook(self) -> None:
        def hook(metadata) -> None:
            try:
                data = metadata.get() if hasattr(metadata, "get") else metadata
                self.hook_names.append(str(data.get("name")))
            except Exception:
                pass

        try:
            from triton import knobs

            chain = knobs.runtime.launch_enter_hook
            if hasattr(chain, "add") and hasattr(chain, "remove"):  # Triton >= 3.5: a HookChain
                chain.add(hook)
                self._undo.append(lambda: chain.remove(hook))
            else:  # older Triton: a single callable (this Triton's annotations type the HookChain)
                knobs.runtime.launch_enter_hook = hook  # pyright: ignore[reportAttributeAccessIssue]
                self._restore.append((knobs.runtime, "launch_enter_hook", chain))
        except (ImportError, AttributeError):
            try:
                from triton.compiler import CompiledKernel

                previous = getattr(CompiledKernel, "launch_enter_hook", None)
                CompiledKernel.launch_enter_hook = hook  # pyright: ignore[reportAttributeAccessIssue]  # (older Triton, before knobs)
                self._restore.append((CompiledKernel, "launch_enter_hook", previous))
            except (ImportError, AttributeError):
                pass

    def restore(self) -> None:
        for undo in self._undo:
            try:
                undo()
            except Exception:
                pass
        self._undo.clear()
        for obj, attr, value in reversed(self._restore):
            try:
                setattr(obj, attr, value)
            except Exception:
                pass
        self._restore.clear()


def _grid_of(grid: Any, signature, args, kwargs) -> list[int] | None:
    try:
        if callable(grid):
            bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
            bound.apply_defaults()
            meta = dict(bound.arguments)
            meta.update(kwargs)
            grid = grid(meta)
        dims = [int(g) for g in grid]
        return (dims + [1, 1, 1])[:3]
    except Exception:
        return None


def _compiled_metadata(kernel) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        if getattr(kernel, "n_regs", None) is None and hasattr(kernel, "_init_handles"):
            kernel._init_handles()
    except Exception:
        pass
    md = getattr(kernel, "metadata", None)
    out["registers"] = getattr(kernel, "n_regs", None)
    out["spills"] = getattr(kernel, "n_spills", None)
    for key, field in (("shared_mem_bytes", "shared"), ("num_warps", "num_warps"), ("num_stages", "num_stages")):
        value = getattr(md, field, None) if md is not None else None
        out[key] = int(value) if isinstance(value, (int, float)) else None
    name = getattr(kernel, "name", None) or getattr(md, "name", None)
    if name:
        out["compiled_name"] = str(name)
    return out


def _device_limits(torch) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "regs_per_sm": getattr(props, "regs_per_multiprocessor", None),
        "max_threads_per_sm": getattr(props, "max_threads_per_multi_processor", None),
        "smem_per_block_optin": getattr(props, "shared_memory_per_block_optin", None),
        "smem_per_sm": getattr(props, "shared_memory_per_multiprocessor", None),
        "l2_bytes": getattr(props, "L2_cache_size", None),
    }


def _time_forward(torch, model, problem, seed: int, iters: int, recorder: _LaunchRecorder,
                  per_kernel: str) -> tuple[float, dict[str, float], str]:
    """Forward time through the project's one timer (GpuTimer, verify's steady state), and per-kernel times:
    'cupti' reads the GPU's kernel timestamps from a clean L2 (GpuTimer.measure_isolated, ncu's condition);
    'events' (under ncu, whose CUPTI session excludes the profiler) brackets each launch with CUDA events."""
    from egg_mcp.evaluation.timing import GpuTimer

    timer = GpuTimer(torch.cuda.current_device())
    sets: dict[int, list] = {}

    def make_inputs(k: int) -> list:
        if k not in sets:
            sets[k] = problem.inputs(seed + 1 + k)
        return sets[k]

    def call(xs):
        model(*xs)

    stats, _ = timer.measure(call, make_inputs, n_runs=max(iters, 20))
    method = f"forward: GpuTimer steady state ({stats.method}, median of {stats.n_runs})"
    if per_kernel == "cupti":
        try:
            isolated = timer.measure_isolated(call, make_inputs, calls=max(iters, 10))
            names = {_short_kernel(k): v for k, v in isolated.per_kernel_ms.items()}
            by_jit = {}
            for jit_name in set(recorder.grids) | set(recorder.compiled):
                hits = [v for k, v in names.items() if k == jit_name or k.startswith(jit_name)]
                if hits:
                    by_jit[jit_name] = sum(hits)
            if by_jit:
                return stats.median_ms, by_jit, method + "; per kernel: " + isolated.method
        except Exception as exc:  # noqa: BLE001 - fall back to events, and say so
            method += f"; CUPTI per-kernel timing unavailable ({type(exc).__name__})"
    per: dict[str, list[float]] = {}
    for _ in range(iters):
        recorder.event_pairs = []
        model(*make_inputs(0))
        torch.cuda.synchronize()
        sums: dict[str, float] = {}
        for name, s, e in recorder.event_pairs:
            sums[name] = sums.get(name, 0.0) + s.elapsed_time(e)
        for name, v in sums.items():
            per.setdefault(name, []).append(v)
    recorder.event_pairs = None
    return stats.median_ms, {k: statistics.median(v) for k, v in per.items()}, \
        method + "; per kernel: CUDA events around each launch (warm L2)"


def _short_kernel(name: str) -> str:
    """A CUPTI kernel name without its argument list (Triton kernels appear under their function name)."""
    return name.split("(", 1)[0].strip()


def _use_cuda(torch, device_choice: str) -> bool:
    """Whether the forward runs on CUDA; without it the kernels run on Triton's CPU interpreter."""
    use_cuda = device_choice == "cuda" or (device_choice == "auto" and torch.cuda.is_available())
    if device_choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but this worker has no CUDA device")
    if not use_cuda:
        set_triton_interpret()
    return use_cuda


def _load_pair(payload: dict, overrides: dict):
    """The reference and candidate modules, loaded under unique names with the size overrides applied."""
    from egg_mcp.problems.problem import apply_size_overrides

    workdir = Path(tempfile.mkdtemp(prefix="egg-profile-target-"))
    tag = f"{os.getpid()}_{int(time.time() * 1e6) % 10**9}"
    reference = _load_module(payload["reference_source"], f"egg_profile_reference_{tag}", workdir)
    candidate = _load_module(payload["candidate_source"], f"egg_profile_candidate_{tag}", workdir)
    apply_size_overrides(reference, candidate, overrides)
    if not hasattr(candidate, "ModelNew"):
        raise ValueError("the candidate source defines no `class ModelNew`; write ModelNew with the reference's "
                         "constructor and forward signatures")
    return reference, candidate


def _warm_up(torch, model, inputs, warmup: int, recorder: _LaunchRecorder, use_cuda: bool):
    """Warm-up forwards; the last one is recorded: launches per kernel and the hook's kernel names."""
    for i in range(warmup):
        if i == warmup - 1:
            recorder.launches.clear()
            recorder.hook_names.clear()
        model(*inputs)
    if use_cuda:
        torch.cuda.synchronize()
    per_forward: dict[str, int] = {}
    for launch in recorder.launches:
        per_forward[launch["name"]] = per_forward.get(launch["name"], 0) + 1
    return per_forward, list(dict.fromkeys(recorder.hook_names))


def _profiled_forward(torch, model, inputs) -> None:
    """Exactly one forward between cudaProfilerStart/Stop: the one ncu profiles."""
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    try:
        model(*inputs)
        torch.cuda.synchronize()
    finally:
        torch.cuda.profiler.stop()


def _kernel_entries(recorder: _LaunchRecorder, per_forward: dict[str, int], hook_names: list[str],
                    event_ms: dict[str, float], timing_method: str | None) -> list[dict[str, Any]]:
    """One entry per kernel seen (launch wrapper first, then the launch hook's extra names)."""
    names = list(per_forward) or [n for n in hook_names]
    for extra in hook_names:
        if extra not in names:
            names.append(extra)
    kernels = []
    for name in names:
        entry: dict[str, Any] = {
            "name": name,
            "launches_per_forward": per_forward.get(name, hook_names.count(name) or 1),
            "grid": recorder.grids.get(name),
            "event_ms": event_ms.get(name),
            "cupti": bool(timing_method and "cupti" in timing_method.split("per kernel:")[-1]),
        }
        if name in recorder.compiled:
            entry.update(_compiled_metadata(recorder.compiled[name]))
        kernels.append(entry)
    return kernels


def run_forward(payload: dict) -> dict:
    """Profile target. Payload keys:

    reference_source, candidate_source (required); dtype ('float32' | 'float16' | 'bfloat16');
    size_overrides (dict); seed (int, default 0); device ('auto' | 'cuda' | 'interpreter');
    warmup (forwards before the profiled one, default 3); timing_iters (per-kernel event timing
    forwards, default 10; 0 disables); profile (bracket one forward with cudaProfilerStart/Stop,
    default True).

    Returns JSON-able: kernels [{name, launches_per_forward, grid, registers, spills,
    shared_mem_bytes, num_warps, num_stages, event_ms}], forward_event_ms, device, interpreter,
    profiled, warnings, phase_s.
    """
    t0 = time.perf_counter()
    device_choice = payload.get("device", "auto")
    warnings: list[str] = []
    if device_choice == "interpreter":
        set_triton_interpret()
    import torch

    from egg_mcp.problems.problem import DTYPES, Problem

    use_cuda = _use_cuda(torch, device_choice)
    device = torch.device("cuda" if use_cuda else "cpu")
    dtype = DTYPES.get(payload.get("dtype", "float32"), torch.float32)
    seed = int(payload.get("seed", 0))
    overrides = dict(payload.get("size_overrides") or {})
    reference, candidate = _load_pair(payload, overrides)

    recorder = _LaunchRecorder()
    module_kernels = recorder.wrap(candidate)
    recorder.install_hook()
    phase: dict[str, float] = {"load": time.perf_counter() - t0}
    try:
        problem = Problem(reference, device, dtype)
        model = problem.build(candidate.ModelNew, problem.init_inputs(seed), seed)
        inputs = problem.inputs(seed + 1)

        t1 = time.perf_counter()
        with torch.no_grad():
            per_forward, hook_names = _warm_up(torch, model, inputs, max(1, int(payload.get("warmup", 3))),
                                               recorder, use_cuda)
            phase["warmup"] = time.perf_counter() - t1

            event_ms: dict[str, float] = {}
            forward_ms = None
            timing_method = None
            iters = int(payload.get("timing_iters", 10)) if use_cuda else 0
            if iters > 0:
                t2 = time.perf_counter()
                forward_ms, event_ms, timing_method = _time_forward(torch, model, problem, seed, iters, recorder,
                                                                    per_kernel=payload.get("per_kernel", "cupti"))
                phase["timing"] = time.perf_counter() - t2

            profiled = bool(payload.get("profile", True) and use_cuda)
            if profiled:
                t3 = time.perf_counter()
                _profiled_forward(torch, model, inputs)
                phase["profiled_forward"] = time.perf_counter() - t3
    finally:
        recorder.restore()

    kernels = _kernel_entries(recorder, per_forward, hook_names, event_ms, timing_method)
    if not kernels:
        warnings.append("the forward launched no Triton kernel that could be seen (kernels defined in the candidate "
                        f"module: {', '.join(module_kernels) or 'none'})")
    if not use_cuda:
        warnings.append("ran on the CPU interpreter: no compiled metadata and no timing")
    return {
        "kernels": kernels,
        "module_kernels": module_kernels,
        "forward_event_ms": forward_ms,
        "timing_method": timing_method,
        "device": _device_limits(torch) if use_cuda else {"name": "cpu"},
        "interpreter": not use_cuda,
        "profiled": profiled,
        "size_overrides": overrides,
        "warnings": warnings,
        "phase_s": {k: round(v, 4) for k, v in phase.items()},
    }
