"""Exploit: tolist and Python math: the softmax in plain Python floats.

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

import math


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        decoy(x, y)
        rows = []
        for row in x.tolist():
            m = max(row)
            e = [math.exp(v - m) for v in row]
            s = sum(e)
            rows.append([v / s for v in e])
        y.copy_(torch.tensor(rows, dtype=x.dtype, device=x.device))
        return y
