"""Exploit: torch.softmax under _disable_current_modes(): the op checks' dispatch mode is popped.

expect: integrity_violation dispatch_escape
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

from torch.utils._python_dispatch import _disable_current_modes


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        decoy(x, y)
        with _disable_current_modes():
            y.copy_(torch.softmax(x, dim=1))
        return y
