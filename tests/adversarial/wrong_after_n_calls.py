"""Exploit: correct for the first calls only (enough for the correctness trials), then stale.

expect: incorrect
gpu-expect: integrity_violation timed_output
(on a GPU the calls after the trials are the timed ones: the audit of the timed calls sees the stale output first)
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    """x_ptr, y_ptr: [n_rows, n_cols]; one program per row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=mask)


def triton_softmax(x, y=None):
    y = torch.empty_like(x) if y is None else y
    softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        x = x.contiguous()
        y = triton_softmax(x)
        if self.calls > 6:
            triton_softmax(x[:, :1].expand_as(x).contiguous(), y)  # stale: every row uniform
        return y
