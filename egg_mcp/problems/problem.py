"""A KernelBench problem inside a worker: one set of loading rules for verify, profile_ncu and
propose_tiling (runs in worker processes only, never in the server).

* size overrides set integer module-level constants of the reference (and the same names in the
  candidate, whose ModelNew may read them); an unknown name is an error that lists the valid ones;
* inputs and init inputs are created directly on the device (KernelBench's `get_inputs()` builds CPU
  tensors: seconds per call at L1 sizes on the CPU, milliseconds on the GPU); for an fp16/bf16 task
  floating tensors, also inside nested lists and tuples, are cast to it (an fp32 task keeps the
  problem's own dtypes, as KernelBench does);
* models are built under a seed, so `Model` and `ModelNew` get the same weights as in KernelBench.
"""

from __future__ import annotations

from typing import Any

import torch

from egg_mcp.problems.derived import refresh_derived

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Trusted reference, taken before any candidate code is imported into the worker.
_manual_seed = torch.manual_seed


def _size_like(current: Any, value: Any) -> Any:
    """`value` in the form of the constant it replaces (a tuple stays a tuple), or None when the kinds differ."""
    if isinstance(current, bool) or isinstance(value, bool):
        return None
    if isinstance(current, int) and isinstance(value, int):
        return int(value)
    if isinstance(current, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in current) \
            and isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return type(current)(int(v) for v in value)
    return None


def apply_size_overrides(reference, candidate, overrides: dict[str, Any]) -> None:
    """Set the reference's size constants (e.g. batch_size=64, layer_sizes=[32, 16]) and the candidate's of the
    same name: an int for an int constant, a list of ints for a list or tuple of ints (kept a tuple)."""
    unknown = [k for k, v in overrides.items() if _size_like(getattr(reference, k, None), v) is None]
    if unknown:
        sizes = sorted(k for k, v in vars(reference).items() if not k.startswith("_") and _size_like(v, v) is not None)
        raise ValueError(f"size_overrides names {unknown} are not integer constants of the reference (nor lists of "
                         f"integers given as a list); it has {sizes}")
    for key, value in overrides.items():
        setattr(reference, key, _size_like(getattr(reference, key), value))
        if candidate is not None and _size_like(getattr(candidate, key, None), value) is not None:
            setattr(candidate, key, _size_like(getattr(candidate, key), value))
    if overrides:
        # derived constants (bias_shape = (out_features,)) follow the overrides, or the overrides are blamed
        refresh_derived(reference, overrides)
        if candidate is not None:
            refresh_derived(candidate, {k: v for k, v in overrides.items() if hasattr(candidate, k)},
                            who="the candidate")


def cast_to(value: Any, device, dtype: torch.dtype) -> Any:
    """Move tensors to `device`; floating ones to a half-precision task dtype; lists and tuples recursively."""
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        if value.is_floating_point() and dtype != torch.float32:
            value = value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(cast_to(v, device, dtype) for v in value)
    return value


class Problem:
    """The loaded reference module: builds inputs on the device and models in the task dtype."""

    def __init__(self, module, device, dtype: torch.dtype):
        self.module = module
        self.device = device
        self.dtype = dtype

    def prepare(self, value):
        return cast_to(value, self.device, self.dtype)

    def inputs(self, seed: int) -> list:
        _manual_seed(seed)
        with torch.device(self.device):
            values = self.module.get_inputs()
        return [self.prepare(v) for v in values]

    def init_inputs(self, seed: int) -> list:
        _manual_seed(seed)
        with torch.device(self.device):
            values = self.module.get_init_inputs()
        return [self.prepare(v) for v in values]

    def build(self, cls, init_inputs: list, seed: int):
        """cls(*init_inputs) under `seed`, moved to the device and the task dtype."""
        _manual_seed(seed)
        model = cls(*init_inputs)
        if isinstance(model, torch.nn.Module):
            model = model.to(self.device)
            if self.dtype != torch.float32:
                model = model.to(self.dtype)
        return model
