"""egg-mcp's candidate for KernelBench level3/43_MinGPTCausalAttention: three kernel launches.

  * `linear_kernel` (GEMM + bias) for the qkv projection (M=B*T, N=3C, K=C) and the output projection
    (M=B*T, N=C, K=C): the same kernel at two shapes, its own tunables (LIN_*);
  * `attn_kernel`: causal flash attention reading q, k, v straight from the qkv buffer (no transposes),
    online softmax, its own tunables (ATTN_*); head dim padded to a power of two and masked.
Dots run as 3xTF32 (`input_precision="tf32x3"`); the guidance suite makes the IEEE variant by replacing
that literal with "ieee".
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

LIN_BLOCK_M = 128
LIN_BLOCK_N = 128
LIN_BLOCK_K = 32
LIN_WARPS = 8
LIN_STAGES = 3
ATTN_BLOCK_M = 64
ATTN_BLOCK_N = 64
ATTN_WARPS = 4
ATTN_STAGES = 2
TUNING_SPACE = {  # each kernel's own knobs: LIN_* reach only linear_kernel, ATTN_* only attn_kernel
    "LIN_BLOCK_M": [64, 128], "LIN_BLOCK_N": [64, 128, 256], "LIN_BLOCK_K": [16, 32],
    "LIN_WARPS": [4, 8], "LIN_STAGES": [2, 3],
    "ATTN_BLOCK_M": [32, 64, 128], "ATTN_BLOCK_N": [32, 64], "ATTN_WARPS": [4, 8], "ATTN_STAGES": [1, 2],
}


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def attn_kernel(qkv_ptr, o_ptr, T, H, C, HEAD_DIM, sm_scale,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """qkv: [B, T, 3C] (q | k | v, heads side by side); o: [B, T, C]. One program per (query block, b*h)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    row = 3 * C
    base = qkv_ptr + b * T * row + h * HEAD_DIM
    rm = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    dmask = rd[None, :] < HEAD_DIM
    q = tl.load(base + rm[:, None] * row + rd[None, :], mask=(rm[:, None] < T) & dmask, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    hi = tl.minimum((start_m + 1) * BLOCK_M, T)  # causal: keys up to the last query of the block
    for start_n in range(0, hi, BLOCK_N):
        rn = start_n + tl.arange(0, BLOCK_N)
        kmask = (rn[:, None] < T) & dmask
        k = tl.load(base + C + rn[:, None] * row + rd[None, :], mask=kmask, other=0.0)
        v = tl.load(base + 2 * C + rn[:, None] * row + rd[None, :], mask=kmask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="tf32x3") * sm_scale
        s = tl.where((rm[:, None] >= rn[None, :]) & (rn[None, :] < T), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="tf32x3")
        m_i = m_new
    acc = acc / l_i[:, None]
    out = o_ptr + b * T * C + h * HEAD_DIM
    tl.store(out + rm[:, None] * C + rd[None, :], acc, mask=(rm[:, None] < T) & dmask)


class ModelNew(nn.Module):
    def __init__(self, n_embd, n_head, attn_pdrop, resid_pdrop, max_seqlen):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.n_embd = n_embd

    def _linear(self, x2d, layer):
        M, K = x2d.shape
        N = layer.weight.shape[0]
        y = torch.empty((M, N), device=x2d.device, dtype=x2d.dtype)
        grid = (triton.cdiv(M, LIN_BLOCK_M), triton.cdiv(N, LIN_BLOCK_N))
        linear_kernel[grid](x2d, layer.weight, layer.bias, y, M, N, K, BLOCK_M=LIN_BLOCK_M, BLOCK_N=LIN_BLOCK_N,
                            BLOCK_K=LIN_BLOCK_K, num_warps=LIN_WARPS, num_stages=LIN_STAGES)
        return y

    def forward(self, x):
        B, T, C = x.size()
        H = self.n_head
        D = C // H
        qkv = self._linear(x.contiguous().view(B * T, C), self.c_attn)
        y = torch.empty((B, T, C), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(T, ATTN_BLOCK_M), B * H)
        attn_kernel[grid](qkv, y, T, H, C, D, 1.0 / math.sqrt(D), BLOCK_M=ATTN_BLOCK_M, BLOCK_N=ATTN_BLOCK_N,
                          BLOCK_D=triton.next_power_of_2(D), num_warps=ATTN_WARPS, num_stages=ATTN_STAGES)
        return self._linear(y.view(B * T, C), self.c_proj).view(B, T, C)
