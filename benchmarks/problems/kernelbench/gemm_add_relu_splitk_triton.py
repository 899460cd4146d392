"""A client-style split-K candidate for KernelBench level2/76_Gemm_Add_ReLU: y = relu(x @ W^T + bias), two kernels.

  * `gemm_splitk_kernel`: grid (tiles_m * tiles_n, SPLIT_K); program (tile, s) accumulates its K slice (a
    contiguous run of BLOCK_K steps) into its own slice of an fp32 workspace [SPLIT_K, M, N]: no atomics, the
    result does not depend on the order the programs run in;
  * `splitk_reduce_kernel`: sums the SPLIT_K slices in a fixed order, adds the bias, applies the ReLU.
Dots run as 3xTF32 (`input_precision="tf32x3"`), as in gemm_add_relu_triton.py. Used by
benchmarks/tiling_client_kernels.py to check propose_tiling on a split-K grid.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 64
BLOCK_N = 128
BLOCK_K = 32
SPLIT_K = 2
GROUP_M = 8
NUM_WARPS = 4
NUM_STAGES = 3
REDUCE_BLOCK = 1024
TUNING_SPACE = {  # what propose_tiling searches
    "BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [16, 32, 64], "SPLIT_K": [1, 2, 4],
    "NUM_WARPS": [4, 8], "NUM_STAGES": [2, 3, 4],
}


@triton.jit
def gemm_splitk_kernel(x_ptr, w_ptr, ws_ptr, M, N, K,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
                       GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_m
    pid_n = (pid % group) // group_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    k_steps = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_steps, SPLIT_K)  # this program's K slice: steps [k_lo, k_hi)
    k_lo = pid_k * per_split
    k_hi = tl.minimum(k_lo + per_split, k_steps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi):
        kk = k * BLOCK_K + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    out = ws_ptr + pid_k * M * N + rm[:, None] * N + rn[None, :]
    tl.store(out, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def splitk_reduce_kernel(ws_ptr, b_ptr, y_ptr, M, N, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):  # fixed order: deterministic
        acc += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0.0)
    bias = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(acc + bias, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        N = self.gemm.weight.shape[0]
        ws = torch.empty((SPLIT_K, M, N), device=x.device, dtype=torch.float32)
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]) * triton.cdiv(N, META["BLOCK_N"]),  # noqa: E731
                             META["SPLIT_K"])
        gemm_splitk_kernel[grid](x, self.gemm.weight, ws, M, N, K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                 SPLIT_K=SPLIT_K, GROUP_M=GROUP_M, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        splitk_reduce_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](ws, self.bias, y, M, N, SPLIT_K=SPLIT_K,
                                                                  BLOCK=REDUCE_BLOCK)
        return y
