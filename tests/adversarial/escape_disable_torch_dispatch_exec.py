"""Exploit: _DisableTorchDispatch + exec of a reference-like source: the reference's code, outside the op checks.

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

_SRC = """
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
"""


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        decoy(x, y)
        ns = {"torch": torch, "nn": nn}
        exec(_SRC, ns)
        with torch._C._DisableTorchDispatch():
            y.copy_(ns["Model"]()(x))
        return y
