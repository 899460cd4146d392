"""Exploit: ctypes with a gcc-built shared library (compiled at import time into the runner's private directory).

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
import os
import subprocess
import tempfile

_SRC = r"""
#include <math.h>
void softmax(const float *x, float *y, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        float m = x[r * cols];
        for (int c = 1; c < cols; c++) m = fmaxf(m, x[r * cols + c]);
        float s = 0;
        for (int c = 0; c < cols; c++) { y[r * cols + c] = expf(x[r * cols + c] - m); s += y[r * cols + c]; }
        for (int c = 0; c < cols; c++) y[r * cols + c] /= s;
    }
}
"""
_dir = tempfile.mkdtemp(dir=os.getcwd())
with open(os.path.join(_dir, "s.c"), "w") as f:
    f.write(_SRC)
try:  # the runner's sandbox may refuse to run gcc: the attempt is what gets reported
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", os.path.join(_dir, "s.so"), os.path.join(_dir, "s.c"),
                    "-lm"], check=True)
    _lib = ctypes.CDLL(os.path.join(_dir, "s.so"))
except Exception:
    _lib = None


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        decoy(x, y)
        h = x.detach().to("cpu").contiguous()
        out = torch.empty_like(h)
        if _lib is None:
            return torch.softmax(x, dim=1)
        _lib.softmax(ctypes.c_void_p(h.data_ptr()), ctypes.c_void_p(out.data_ptr()), h.shape[0], h.shape[1])
        y.copy_(out)
        return y
