"""One fresh process: where does a first Triton compile's time go? (run by compile_probe.py)"""
import json, os, sys, time
T = {}
t0 = time.perf_counter()
def mark(name):
    global t0
    t = time.perf_counter(); T[name] = round(t - t0, 4); t0 = t
steps = sys.argv[1].split(",")
import torch; mark("import_torch")
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize(); mark("cuda_init")
import triton, triton.language as tl; mark("import_triton")

@triton.jit
def add_kernel(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < n) + 1.0, mask=o < n)

@triton.jit
def scale_kernel(x, y, z, n, m, s, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(z + o, tl.load(x + o, mask=o < n) * s + tl.load(y + o, mask=o < n), mask=o < m)

@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision=PREC)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

x = torch.randn(4096, device="cuda"); y = torch.empty_like(x); z = torch.empty_like(x)
for step in steps:
    if step == "utils":
        triton.runtime.driver.active.utils; torch.cuda.synchronize(); mark("driver_utils")
    elif step == "add":
        add_kernel[(4,)](x, y, 4096, BLOCK=1024); torch.cuda.synchronize(); mark("add_kernel")
    elif step == "scale":
        scale_kernel[(4,)](x, y, z, 4096, 4096, 2.0, BLOCK=1024); torch.cuda.synchronize(); mark("scale_kernel")
    elif step.startswith("gemm"):
        prec = step.split(":")[1] if ":" in step else "ieee"
        M, K, N = 2048, 4096, 4096
        A = torch.randn(M, K, device="cuda"); B = torch.randn(K, N, device="cuda"); C = torch.empty(M, N, device="cuda")
        torch.cuda.synchronize(); mark("gemm_alloc")
        grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
        gemm_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                          BM=128, BN=128, BK=32, PREC=prec, num_warps=4, num_stages=3)
        torch.cuda.synchronize(); mark("gemm_first_" + prec)
        gemm_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                          BM=128, BN=128, BK=32, PREC=prec, num_warps=4, num_stages=3)
        torch.cuda.synchronize(); mark("gemm_second_" + prec)
cache = os.environ.get("TRITON_CACHE_DIR", "")
files = []
for root, _, names in os.walk(cache):
    for n in names:
        p = os.path.join(root, n); files.append((os.path.relpath(p, cache), os.path.getsize(p)))
print("RESULT " + json.dumps({"steps": steps, "t": T, "files": files}))
