"""Benchmark case: a reduction, y = x.sum(dim=1), BLOCK_M rows per program, BLOCK_N-column chunks
accumulated in a register tile and reduced once at the end. Reference and candidate in one file."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


batch_size = 8192
dim = 8192


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


BLOCK_M = 4
BLOCK_N = 512
NUM_WARPS = 4
TUNING_SPACE = {
    "BLOCK_M": [1, 2, 4, 8, 16, 32],
    "BLOCK_N": [128, 256, 512, 1024, 2048],
    "NUM_WARPS": [1, 2, 4, 8],
}
AUTOTUNE_KERNEL = "row_sum_kernel"
AUTOTUNE_KEY = ["n_rows", "n_cols"]


@triton.jit
def row_sum_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """x: [n_rows, n_cols], y: [n_rows]; program p sums rows [p*BLOCK_M, (p+1)*BLOCK_M)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c[None, :] < n_cols)
        acc += tl.load(x_ptr + rows[:, None] * stride_x + c[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=row_ok)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = row_sum_kernel
        self.meta = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty((n_rows,), device=x.device, dtype=x.dtype)
        meta = self.meta if self.meta is not None else dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=NUM_WARPS)
        grid = lambda META: (triton.cdiv(n_rows, META["BLOCK_M"]),)  # noqa: E731
        self.kernel[grid](x, y, n_rows, n_cols, x.stride(0), **meta)
        return y
