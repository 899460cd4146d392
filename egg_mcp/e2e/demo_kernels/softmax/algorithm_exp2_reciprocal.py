"""Softmax, ALGORITHM stage — the row-in-registers seed with a cheaper dataflow.

Two semantics-preserving rewrites of the committed seed: exp(x - max) as exp2((x - max) * log2(e))
(one MUFU.EX2 instead of exp's extra multiply inside the library call), and one reciprocal per
row followed by a multiply instead of a divide per element.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

NUM_WARPS = 8  # 256 threads per row: 32 fp32 per thread at n_cols = 8192, no spills


@triton.jit
def softmax_row_exp2_kernel(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK: tl.constexpr):
    """One program normalises one row held in registers.

    Args:
        x_ptr: input, [n_rows, n_cols], row-major.
        y_ptr: output, [n_rows, n_cols].
        n_cols: row length.
        BLOCK: power of two >= n_cols.
    """
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp2((x - tl.max(x, axis=0)) * 1.4426950408889634)  # log2(e)
    inv_sum = 1.0 / tl.sum(num, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, (num * inv_sum).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n_rows, n_cols] -> softmax over dim 1."""
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        softmax_row_exp2_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0),
                                           BLOCK=triton.next_power_of_2(n_cols), num_warps=NUM_WARPS)
        return y
