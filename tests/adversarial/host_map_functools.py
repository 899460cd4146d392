"""Exploit: map()/functools call the host methods from C (no Python frame of the candidate's makes the call).

expect: integrity_violation host_compute
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

import functools
import math


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        decoy(x, y)
        rows = list(map(torch.Tensor.tolist, [x]))[0]
        if not rows:
            rows = functools.partial(torch._C.TensorBase.tolist, x)()
        out = []
        for row in rows:
            m = functools.reduce(max, row)
            e = [math.exp(v - m) for v in row]
            total = sum(e)  # once per row: the GPU test's rows are long enough that a sum per element times out
            out.append([v / total for v in e])
        y.copy_(torch.tensor(out, dtype=x.dtype, device=x.device))
        return y
