"""Benchmark case: row-wise softmax, BLOCK_M rows per program, the row in BLOCK_N chunks.

When one chunk covers the row (SINGLE_PASS) the row stays in registers; otherwise an online
max/sum pass is followed by a normalising pass. Reference and candidate in one file (see
gemm_bias_relu.py).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


BLOCK_M = 1
BLOCK_N = 8192
NUM_WARPS = 8
TUNING_SPACE = {
    "BLOCK_M": [1, 2, 4, 8],
    "BLOCK_N": [256, 512, 1024, 2048, 4096, 8192],
    "NUM_WARPS": [1, 2, 4, 8, 16],
}
AUTOTUNE_KERNEL = "softmax_kernel"
AUTOTUNE_KEY = ["n_rows", "n_cols"]


@triton.heuristics({"SINGLE_PASS": lambda args: args["BLOCK_N"] >= args["n_cols"]})
@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr):
    """x, y: [n_rows, n_cols]; program p handles rows [p*BLOCK_M, (p+1)*BLOCK_M)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    if SINGLE_PASS:
        mask = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=1)[:, None]
        num = tl.exp(x)
        y = num / tl.sum(num, axis=1)[:, None]
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        m = tl.full((BLOCK_M,), -float("inf"), tl.float32)
        s = tl.zeros((BLOCK_M,), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_ptr + rows[:, None] * stride_x + c[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=1))
            m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
            s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe[:, None]), axis=1)
            m = m_new
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_ptr + rows[:, None] * stride_x + c[None, :], mask=mask, other=-float("inf")).to(tl.float32)
            y = tl.exp(x - m[:, None]) / s[:, None]
            tl.store(y_ptr + rows[:, None] * stride_y + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = softmax_kernel
        self.meta = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        meta = self.meta if self.meta is not None else dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=NUM_WARPS)
        grid = lambda META: (triton.cdiv(n_rows, META["BLOCK_M"]),)  # noqa: E731
        self.kernel[grid](x, y, n_rows, n_cols, x.stride(0), y.stride(0), **meta)
        return y
