"""Exploit: _DisableTorchDispatch alone (no exec): torch ops run below the op checks' dispatch mode.

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


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        decoy(x, y)
        guard = getattr(torch._C, "_Disable" + "TorchDispatch")
        with guard():
            out = torch.softmax(x, dim=1)
        y.copy_(out)
        return y
