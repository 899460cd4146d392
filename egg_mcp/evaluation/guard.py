"""Guarded allocations (runner side): catch a kernel that writes outside the tensors it was given.

During one extra forward, every contiguous tensor the candidate allocates through torch (empty,
empty_like, zeros, ones, full, new_* ... at the aten level, so `from torch import empty_like`
aliases are covered too) is a view into a larger buffer whose bytes before and after the view hold
a known pattern; the inputs are copied into such buffers as well. After the call (synchronised),
any changed guard byte is an out-of-bounds write: the report names the tensor (how it was
allocated, shape, dtype) and the byte range written, relative to the tensor's first/last byte.

Works on the CPU interpreter and on CUDA alike (the guards live next to the tensor on its device).
Allocations a candidate makes outside torch (a raw ctypes buffer) are not guarded.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

GUARD_BYTES = 1024
"""Guard size on each side (a multiple of 256, so the tensor keeps CUDA's alignment)."""
MAX_GUARDED = 4096

_aten = torch.ops.aten
_FACTORIES = {
    _aten.empty.memory_format, _aten.empty_like.default, _aten.new_empty.default, _aten.zeros.default,
    _aten.zeros_like.default, _aten.new_zeros.default, _aten.ones.default, _aten.ones_like.default,
    _aten.new_ones.default, _aten.full.default, _aten.full_like.default, _aten.new_full.default,
    _aten.empty_strided.default, _aten.new_empty_strided.default,
}
_empty = torch.empty
_arange = torch.arange


def _pattern(n: int, device) -> torch.Tensor:
    """A non-zero, non-constant byte pattern (a zero or a repeated byte written past the end shows)."""
    return ((_arange(n, dtype=torch.int32, device=device) * 131 + 17) % 251 + 1).to(torch.uint8)


class _Guarded:
    def __init__(self, buffer: torch.Tensor, nbytes: int, label: str, shape: list[int], dtype: torch.dtype):
        self.buffer, self.nbytes, self.label, self.shape, self.dtype = buffer, nbytes, label, shape, dtype


def guarded_empty(shape: list[int], dtype: torch.dtype, device, label: str, registry: list) -> torch.Tensor:
    """A contiguous tensor of `shape` inside a guarded buffer (recorded in `registry`)."""
    itemsize = _empty((), dtype=dtype).element_size()
    numel = 1
    for d in shape:
        numel *= int(d)
    nbytes = numel * itemsize
    buffer = _empty(GUARD_BYTES * 2 + nbytes, dtype=torch.uint8, device=device)
    buffer[:GUARD_BYTES] = _pattern(GUARD_BYTES, device)
    buffer[GUARD_BYTES + nbytes:] = _pattern(GUARD_BYTES, device)
    registry.append(_Guarded(buffer, nbytes, label, list(shape), dtype))
    return buffer[GUARD_BYTES:GUARD_BYTES + nbytes].view(dtype).view(shape)


class GuardedAllocations(TorchDispatchMode):
    """Inside: torch factory ops return guarded views (contiguous results only)."""

    def __init__(self):
        super().__init__()
        self.registry: list[_Guarded] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (func in _FACTORIES and isinstance(out, torch.Tensor) and out.is_contiguous()
                and len(self.registry) < MAX_GUARDED and out.dtype != torch.bool and not out.is_sparse):
            name = func.overloadpacket.__name__
            guarded = guarded_empty(list(out.shape), out.dtype, out.device, f"torch.{name}", self.registry)
            guarded.copy_(out)  # zeros/ones/full: the values asked for; empty: the harness's NaN poison
            return guarded
        return out

    def violations(self) -> list[dict[str, Any]]:
        """Every guard that changed: which tensor, which bytes (offsets relative to the tensor)."""
        return check(self.registry)


def check(registry: list) -> list[dict[str, Any]]:
    found = []
    for g in registry:
        expected = _pattern(GUARD_BYTES, g.buffer.device)
        for side, region, base in (("before", g.buffer[:GUARD_BYTES], -GUARD_BYTES),
                                   ("after", g.buffer[GUARD_BYTES + g.nbytes:], 0)):
            changed = (region != expected).nonzero().flatten()
            if changed.numel():
                first, last = int(changed[0]) + base, int(changed[-1]) + base + 1
                found.append({
                    "tensor": g.label, "shape": g.shape, "dtype": str(g.dtype).removeprefix("torch."),
                    "side": side, "bytes_changed": int(changed.numel()),
                    "range": [first, last],
                    "detail": (f"{int(changed.numel())} byte(s) written "
                               + (f"{first}..{last} bytes past the end" if side == "after"
                                  else f"{-first}..{-last} bytes before the start")),
                })
    return found


def guard_inputs(inputs: list, registry: list) -> list:
    """Copies of the tensor inputs inside guarded buffers (the same values)."""
    out = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.is_contiguous() and x.dtype != torch.bool:
            g = guarded_empty(list(x.shape), x.dtype, x.device, f"input {i}", registry)
            g.copy_(x)
            out.append(g)
        else:
            out.append(x)
    return out
