"""Small Triton kernels, each built to be one kind of bottleneck, as KernelBench problem pairs.

Used by the fixture capture (benchmarks/profiling_capture_fixtures.py), the wall-time benchmark
(benchmarks/profiling_bench.py) and the GPU tests (tests/gpu/test_profiling_gpu.py). Sizes are
chosen for the H200 so each forward takes 0.003-1 ms and compiles in about a second.
"""

from __future__ import annotations

_COPY_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2.0


N = 64 * 1024 * 1024


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

_COPY_NEW = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """x_ptr, y_ptr: [n] contiguous; one program per BLOCK elements (streaming, memory-bound)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096, num_warps=8)
        return y
'''

_GEMM_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


M = 4096
N = 4096
K = 4096


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''

_GEMM_NEW = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """a: [M, K], b: [K, N], c: [M, N] fp16 with fp32 accumulation; grouped program order for L2 reuse."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * num_n)
    first_m = group * GROUP_M
    size_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * num_n)) % size_m
    pid_n = (pid % (GROUP_M * num_n)) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * sak
        b_ptrs += BLOCK_K * sbk
    c_ptrs = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        _, N = b.shape
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = (triton.cdiv(M, 128) * triton.cdiv(N, 256),)
        matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1), BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8,
                            num_warps=8, num_stages=3)
        return c
'''

_SPILL_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x - x.mean(dim=1, keepdim=True)


ROWS = 2048
COLS = 8192


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
'''

_SPILL_NEW = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def center_rows_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """x_ptr, y_ptr: [rows, n_cols]; one program per row with the whole row live across the
    reduction: BLOCK=8192 on num_warps=1 is 256 fp32 values per thread, beyond the 255-register cap,
    so the compiler spills (built to spill)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    tl.store(y_ptr + row * stride + cols, x - mean, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        center_rows_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols), num_warps=1)
        return y
'''

_STRIDED_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.t().contiguous()


SIZE = 4096


def get_inputs():
    return [torch.randn(SIZE, SIZE)]


def get_init_inputs():
    return []
'''

_STRIDED_NEW = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def transpose_rows_kernel(x_ptr, y_ptr, n, stride_x, BLOCK: tl.constexpr):
    """y[i, :] = x[:, i]; x, y: [n, n]. The load walks a column (stride n), so each thread's 4 bytes
    land in a different 32-byte sector (built to be uncoalesced); the store is contiguous."""
    i = tl.program_id(0)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = j < n
    v = tl.load(x_ptr + j * stride_x + i, mask=mask)
    tl.store(y_ptr + i * n + j, v, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        n = x.shape[0]
        y = torch.empty_like(x)
        transpose_rows_kernel[(n, triton.cdiv(n, 1024))](x, y, n, x.stride(0), BLOCK=1024, num_warps=4)
        return y
'''

_TINY_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + 1.0


N = 4096


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

_TINY_NEW = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_one_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """x_ptr, y_ptr: [n]; 4096 elements in 4 programs: a few microseconds, launch-bound by design."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        add_one_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024, num_warps=4)
        return y
'''

_N_COPY = 64 * 1024 * 1024
_GEMM = 4096

KINDS: dict[str, dict] = {
    "memory_bound": {
        "description": "streaming scale y = 2x over 64 Mi fp32 (256 MiB in, 256 MiB out)",
        "reference": _COPY_REF, "candidate": _COPY_NEW, "dtype": "float32", "stage": "MEMORY",
        "flops": float(_N_COPY), "min_bytes": float(2 * _N_COPY * 4),
        "expect": {"bound": "memory-bound"},
    },
    "compute_bound": {
        "description": "fp16 GEMM 4096^3 with tl.dot (128x256x64 tiles, 8 warps, 3 stages)",
        "reference": _GEMM_REF, "candidate": _GEMM_NEW, "dtype": "float16", "stage": "TILING",
        "flops": float(2 * _GEMM**3), "min_bytes": float(3 * _GEMM * _GEMM * 2),
        "expect": {"bound": "compute-bound"},
    },
    "spilling": {
        "description": "row centering with a whole 8192-wide row per program on num_warps=1: 256 live fp32 per thread",
        "reference": _SPILL_REF, "candidate": _SPILL_NEW, "dtype": "float32", "stage": "TILING",
        "flops": float(2 * 2048 * 8192), "min_bytes": float(2 * 2048 * 8192 * 4),
        "expect": {"spills": True},
    },
    "uncoalesced": {
        "description": "transpose 4096^2 fp32 reading columns: one 4-byte element per 32-byte sector",
        "reference": _STRIDED_REF, "candidate": _STRIDED_NEW, "dtype": "float32", "stage": "MEMORY",
        "flops": 0.0, "min_bytes": float(2 * 4096 * 4096 * 4),
        "expect": {"uncoalesced": True},
    },
    "launch_bound": {
        "description": "x + 1 on 4096 fp32: a few microseconds per launch",
        "reference": _TINY_REF, "candidate": _TINY_NEW, "dtype": "float32", "stage": "ALGORITHM",
        "flops": 4096.0, "min_bytes": float(2 * 4096 * 4),
        "expect": {"bound": "launch-bound"},
    },
}


def check_expectation(kind: str, report) -> list[str]:
    """What in `report` (a ProfileReport) contradicts what kernel `kind` was built to be; empty if nothing."""
    expect = KINDS[kind]["expect"]
    if not report.kernels:
        return ["no kernel in the report"]
    k = max(report.kernels, key=lambda k: k.time_share or 0)
    problems = []
    if "bound" in expect and k.classification.bound != expect["bound"]:
        problems.append(f"classified {k.classification.bound}, built to be {expect['bound']}: {k.classification.headline}")
    if expect.get("spills"):
        spills = k.metric("triton.n_spills")
        local = [e for e in k.evidence if e.metric.startswith("l1tex__t_bytes_pipe_lsu_mem_local")]
        if not ((spills and spills.value) or local):
            problems.append("no spill seen (neither Triton n_spills nor local-memory traffic)")
        if not any("spill" in m for m in k.next_moves):
            problems.append(f"no spill move in {report.stage}: {k.next_moves}")
    if expect.get("uncoalesced"):
        if not any(e.metric in ("computed.global_load_bytes_per_sector", "computed.global_load_sectors_per_request")
                   for e in k.evidence):
            problems.append("no uncoalesced-load evidence (bytes per sector)")
        if not any("uncoalesced" in m for m in k.next_moves):
            problems.append(f"no coalescing move in {report.stage}: {k.next_moves}")
    return problems
