"""Worker target: which kernels a candidate launches, with what (each launch's own sizes and options).

The cost model needs each kernel's own dimensions: a K=768 projection GEMM is not the task's K=2304
one, and an attention kernel has no N x K at all. Reading them from the source would mean evaluating
the candidate's forward; running it is the only honest way, and it must happen in a worker (never the
server). The probe runs `ModelNew.forward` once on the **meta device** (shapes, no data, no kernel
execution): every Triton launch is intercepted before anything compiles, and its grid, int arguments,
tensor argument shapes, constexprs and num_warps / num_stages are recorded. Cheap at any size, and
it needs no GPU. A forward that needs data (``.item()``, a data-dependent branch) fails on meta: the
probe then says why and the caller falls back to the task's dimensions.

    Evaluator.run_job("egg_mcp.tiling.launches:probe_launches", payload, uses_gpu=False)
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import traceback
from typing import Any

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "warmup")
MAX_LAUNCHES = 64


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value
    value = getattr(value, "value", value)  # tl.constexpr
    return value if isinstance(value, (int, float, bool, str)) else None


def _record(fn_obj: Any, args: tuple, kwargs: dict, grid: Any, extra: dict | None, autotuned: bool) -> dict:
    import torch

    base = getattr(fn_obj, "fn", fn_obj)
    while hasattr(base, "fn") and not inspect.isfunction(base):
        base = base.fn
    name = getattr(base, "__name__", type(fn_obj).__name__)
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in LAUNCH_OPTIONS}
    kwargs.update(extra or {})
    try:
        bound = inspect.signature(base).bind_partial(*args, **{k: v for k, v in kwargs.items()
                                                               if k in inspect.signature(base).parameters})
        values = dict(bound.arguments)
    except (TypeError, ValueError):
        values = dict(kwargs)
    ints, tensors, constexprs = {}, {}, {}
    annotations = {p.name: p.annotation for p in inspect.signature(base).parameters.values()}
    for key, value in values.items():
        if isinstance(value, torch.Tensor):
            tensors[key] = list(value.shape)
            continue
        value = _jsonable(value)
        if value is None:
            continue
        if "constexpr" in str(annotations.get(key, "")):
            constexprs[key] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            ints[key] = value
    programs = None
    try:
        g: Any = grid(values) if callable(grid) else grid
        g = tuple(int(x) for x in (g if isinstance(g, (tuple, list)) else (g,)))
        programs = list(g)
    except Exception:  # noqa: BLE001 - a grid we cannot evaluate is only missing information
        pass
    return {"kernel": name, "grid": programs, "ints": ints, "tensors": tensors, "constexprs": constexprs,
            "num_warps": _jsonable(options.get("num_warps")), "num_stages": _jsonable(options.get("num_stages")),
            "autotuned": autotuned}


def _intercept(records: list[dict]):
    """Patch every Triton launch path to record instead of compile / run; returns an undo function."""
    from triton.runtime import autotuner, jit

    patched: list[tuple[Any, str, Any]] = []

    def launch(self, *args, grid=None, warmup=False, **kwargs):
        if len(records) < MAX_LAUNCHES:
            records.append(_record(self, args, dict(kwargs), grid, None, autotuned=False))
        return None

    def tuned(self, *args, **kwargs):
        grid = kwargs.pop("grid", None)
        kwargs.pop("warmup", None)
        config = self.configs[0] if getattr(self, "configs", None) else None
        extra = dict(getattr(config, "kwargs", {}) or {})
        if config is not None:
            extra.update(num_warps=config.num_warps, num_stages=config.num_stages)
        if len(records) < MAX_LAUNCHES:
            records.append(_record(self.fn, args, {**kwargs, **extra}, grid, None, autotuned=True))
        return None

    targets = [(jit.JITFunction, "run", launch), (autotuner.Autotuner, "run", tuned)]
    try:
        from triton.runtime import interpreter

        targets.append((interpreter.InterpretedFunction, "run", launch))
    except ImportError:
        pass
    for cls, attr, fn in targets:
        patched.append((cls, attr, cls.__dict__.get(attr)))
        setattr(cls, attr, fn)

    def undo():
        for cls, attr, old in patched:
            if old is None:
                delattr(cls, attr)
            else:
                setattr(cls, attr, old)

    return undo


def probe_launches(payload: dict) -> dict:
    """payload: reference_source, candidate_source, dtype, size_overrides. Returns {"launches": [...]} or
    {"launches": [], "error": why}."""
    import torch

    from egg_mcp.problems.modules import import_file
    from egg_mcp.problems.problem import DTYPES, Problem, apply_size_overrides

    workdir = tempfile.mkdtemp(prefix="egg_launches_")
    records: list[dict] = []
    try:
        paths = []
        for name in ("reference", "candidate"):
            path = os.path.join(workdir, f"{name}.py")
            with open(path, "w") as f:
                f.write(payload[f"{name}_source"])
            paths.append(path)
        reference = import_file(paths[0], f"_egg_probe_ref_{os.getpid()}")
        candidate = import_file(paths[1], f"_egg_probe_cand_{os.getpid()}")
        overrides = dict(payload.get("size_overrides") or {})
        apply_size_overrides(reference, candidate, overrides)
        dtype = DTYPES[payload.get("dtype", "float32")]
        problem = Problem(reference, "meta", dtype)
        init_inputs = problem.init_inputs(0)
        inputs = problem.inputs(0)
        with torch.device("meta"):
            model = candidate.ModelNew(*init_inputs)
        model = model.to(device="meta", dtype=dtype) if dtype != torch.float32 else model.to("meta")
        undo = _intercept(records)
        try:
            with torch.no_grad():
                model(*inputs)
        finally:
            undo()
        return {"launches": records}
    except Exception as exc:  # noqa: BLE001 - the caller falls back to the task's dims and says why
        tail = traceback.format_exc().strip().splitlines()[-1]
        return {"launches": records, "error": f"{type(exc).__name__}: {exc}"[:400] or tail}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
