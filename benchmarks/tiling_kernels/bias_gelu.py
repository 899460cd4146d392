"""Benchmark case: an elementwise op with a broadcast operand, y = gelu(x + bias[None, :]) (erf GELU),
tiled BLOCK_M x BLOCK_N over [n_rows, n_cols]. Reference and candidate in one file."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x + self.bias)


batch_size = 8192
hidden = 8192


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden]


BLOCK_M = 4
BLOCK_N = 1024
NUM_WARPS = 4
TUNING_SPACE = {
    "BLOCK_M": [1, 2, 4, 8, 16, 32],
    "BLOCK_N": [64, 128, 256, 512, 1024, 2048],
    "NUM_WARPS": [1, 2, 4, 8],
}
AUTOTUNE_KERNEL = "bias_gelu_kernel"
AUTOTUNE_KEY = ["n_rows", "n_cols"]


@triton.jit
def bias_gelu_kernel(x_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """x, y: [n_rows, n_cols]; b: [n_cols]; program (i, j) computes one BLOCK_M x BLOCK_N tile."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_ok[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    v = x + b[None, :]
    y = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(hidden))
        self.kernel = bias_gelu_kernel
        self.meta = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        meta = self.meta if self.meta is not None else dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=NUM_WARPS)
        grid = lambda META: (triton.cdiv(n_rows, META["BLOCK_M"]), triton.cdiv(n_cols, META["BLOCK_N"]))  # noqa: E731
        self.kernel[grid](x, self.bias, y, n_rows, n_cols, x.stride(0), y.stride(0), **meta)
        return y
