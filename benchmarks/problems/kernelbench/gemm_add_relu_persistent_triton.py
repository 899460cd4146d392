"""A client-style persistent candidate for KernelBench level2/76_Gemm_Add_ReLU: y = relu(x @ W^T + bias), one kernel.

The Triton tutorial's persistent matmul (09-persistent-matmul.py): min(NUM_SMS, tiles) programs, each looping
`for tile in range(pid, num_tiles, NUM_SMS)` over the output tiles in grouped (GROUP_M) order, the bias and the
ReLU fused in the epilogue. NUM_SMS is the GPU's SM count on CUDA, the module constant on the CPU interpreter.
Dots run as 3xTF32 (`input_precision="tf32x3"`), as in gemm_add_relu_triton.py. Used by
benchmarks/tiling_client_kernels.py to check propose_tiling on a persistent grid.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 32
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
NUM_SMS = 4  # programs on the CPU interpreter; on CUDA, the device's multiprocessor count
TUNING_SPACE = {  # what propose_tiling searches
    "BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [16, 32, 64],
    "NUM_WARPS": [4, 8], "NUM_STAGES": [2, 3, 4],
}


@triton.jit
def gemm_add_relu_persistent_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                    GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_steps = tl.cdiv(K, BLOCK_K)
    group = GROUP_M * num_pid_n
    rk = tl.arange(0, BLOCK_K)
    for tile in range(pid, num_tiles, NUM_SMS):
        first_m = (tile // group) * GROUP_M
        group_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group) % group_m
        pid_n = (tile % group) // group_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, k_steps):
            kk = k * BLOCK_K + rk
            a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
        acc = tl.maximum(acc + bias[None, :], 0.0)
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return NUM_SMS


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = x.contiguous()
        M, K = x.shape
        N = self.gemm.weight.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        programs = _num_sms(x.device)
        num_tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
        grid = (min(programs, num_tiles),)
        gemm_add_relu_persistent_kernel[grid](x, self.gemm.weight, self.bias, y, M, N, K, BLOCK_M=BLOCK_M,
                                              BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, NUM_SMS=programs,
                                              num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return y
