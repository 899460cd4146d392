"""What every tiling trial shares (the measuring job and its compile pool): the reference problem
built once per process, candidate modules loaded fresh, the error kind and text of a failed
config, and the compiler's resource report of the kernels a module launched.
"""

from __future__ import annotations

import os
from typing import Any, Literal


class TimedMismatch(RuntimeError):
    """A config whose audited timed calls did not match the reference: recorded as its error, never as a time."""


def load_module(path: str, name: str):
    """Import a source file as a fresh module (Triton reads kernel source through inspect)."""
    from egg_mcp.problems.modules import import_file

    return import_file(path, name)


class TrialProblem:
    """The reference module, its inputs and its output, built once per process (loading rules shared
    with verify and profile_ncu: egg_mcp.problems.problem)."""

    def __init__(self, reference_path: str, dtype: str, size_overrides: dict[str, int | list[int]], seed: int,
                 device: str):
        import torch

        from egg_mcp.problems.problem import DTYPES, Problem, apply_size_overrides

        self.torch = torch
        self.device = device
        self.seed = seed
        self.overrides = dict(size_overrides)
        self.module = load_module(reference_path, f"_egg_tiling_ref_{os.getpid()}")
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


def max_abs_error(got, expected) -> float:
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


def trial_error_kind(exc: BaseException) -> Literal["timed_output", "out_of_resources", "compile_error",
                                                   "runtime_error"]:
    """The shared classifier's kind (evaluation/errors.py); an OOM of one config is a runtime failure here."""
    if isinstance(exc, TimedMismatch):
        return "timed_output"
    from egg_mcp.evaluation.errors import error_kind

    kind = error_kind(exc)
    return "runtime_error" if kind == "oom" else kind


def short_error(exc: BaseException, limit: int = 600) -> str:
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
