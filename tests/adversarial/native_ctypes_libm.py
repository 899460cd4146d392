"""Exploit: ctypes only (no compiler): libm's expf through ctypes, tensor memory read through a ctypes array.

expect: integrity_violation native_code
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(x_ptr, y_ptr):
    """A one-element decoy: the real answer is computed elsewhere."""
    tl.store(y_ptr, tl.load(x_ptr))


def decoy(x, y):
    touch_kernel[(1,)](x, y)

import ctypes
import math

_libm = ctypes.CDLL("libm.so.6")
_libm.expf.restype = ctypes.c_float
_libm.expf.argtypes = [ctypes.c_float]


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        decoy(x, y)
        h = x.detach().to("cpu").contiguous()  # a no-op in the interpreter; on a GPU also a host_compute finding
        out = torch.empty_like(h)
        rows, cols = h.shape
        src = (ctypes.c_float * h.numel()).from_address(h.data_ptr())
        dst = (ctypes.c_float * out.numel()).from_address(out.data_ptr())
        for r in range(rows):
            m = max(src[r * cols:(r + 1) * cols])
            e = [_libm.expf(v - m) for v in src[r * cols:(r + 1) * cols]]
            s = math.fsum(e)
            for c in range(cols):
                dst[r * cols + c] = e[c] / s
        y.copy_(out)
        return y
