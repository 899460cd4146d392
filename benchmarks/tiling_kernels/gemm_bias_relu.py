"""Benchmark case: y = relu(x @ W^T + b) — a GEMM with a fused bias + ReLU epilogue.

Reference (`Model`) and candidate (`ModelNew`) in one file: the tiling benchmark passes this text as
both. The candidate's tunables are the module constants below; `TUNING_SPACE` is the space the
benchmark searches and measures exhaustively. `AUTOTUNE_*` lets the benchmark wrap the same kernel
in `triton.autotune` for the wall-time comparison.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


batch_size = 4096
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 4
NUM_STAGES = 3
TUNING_SPACE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [3, 4, 5],
}
AUTOTUNE_KERNEL = "linear_bias_relu_kernel"
AUTOTUNE_KEY = ["M", "N", "K"]


@triton.jit
def linear_bias_relu_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """x: [M, K], w: [N, K] (nn.Linear weight), b: [N], y: [M, N]; one program per BLOCK_M x BLOCK_N
    output tile, tiles grouped GROUP_M rows at a time for L2 reuse of w."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_m
    pid_n = (pid % group) // group_m
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(x_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    bias = tl.load(b_ptr + offs_n).to(tl.float32)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y_ptrs = y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.kernel = linear_bias_relu_kernel
        self.meta = None  # the benchmark's autotune run sets {} and an autotuned kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w, b = self.linear.weight, self.linear.bias
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        meta = self.meta if self.meta is not None else dict(
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
            num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),)  # noqa: E731
        self.kernel[grid](x, w, b, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                          y.stride(0), y.stride(1), **meta)
        return y
