"""Benchmark case: LayerNorm over the last dimension, BLOCK_M rows per program, BLOCK_N-column chunks.

SINGLE_PASS keeps the row tile in registers; otherwise one pass accumulates sum and sum of
squares (fp32) and a second normalises. Reference and candidate in one file (see gemm_bias_relu.py).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16384
hidden = 2048


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden]


BLOCK_M = 1
BLOCK_N = 2048
NUM_WARPS = 4
TUNING_SPACE = {
    "BLOCK_M": [1, 2, 4, 8],
    "BLOCK_N": [256, 512, 1024, 2048, 4096, 8192],
    "NUM_WARPS": [1, 2, 4, 8],
}
AUTOTUNE_KERNEL = "layernorm_kernel"
AUTOTUNE_KEY = ["n_rows", "n_cols"]


@triton.heuristics({"SINGLE_PASS": lambda args: args["BLOCK_N"] >= args["n_cols"]})
@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr):
    """x, y: [n_rows, n_cols]; w, b: [n_cols]; program p normalises rows [p*BLOCK_M, (p+1)*BLOCK_M)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    if SINGLE_PASS:
        col_ok = cols < n_cols
        mask = row_ok[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        y = xc * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok[:, None] & (c[None, :] < n_cols)
            x = tl.load(x_ptr + rows[:, None] * stride_x + c[None, :], mask=mask, other=0.0).to(tl.float32)
            acc += x
            acc2 += x * x
        mean = tl.sum(acc, axis=1) / n_cols
        var = tl.sum(acc2, axis=1) / n_cols - mean * mean
        rstd = 1.0 / tl.sqrt(var + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            mask = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_ptr + rows[:, None] * stride_x + c[None, :], mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=col_ok, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + c, mask=col_ok, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None] * w[None, :] + b[None, :]
            tl.store(y_ptr + rows[:, None] * stride_y + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.kernel = layernorm_kernel
        self.meta = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        meta = self.meta if self.meta is not None else dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=NUM_WARPS)
        grid = lambda META: (triton.cdiv(n_rows, META["BLOCK_M"]),)  # noqa: E731
        self.kernel[grid](x, self.ln.weight, self.ln.bias, y, n_rows, n_cols, x.stride(0), y.stride(0),
                          self.ln.eps, **meta)
        return y
