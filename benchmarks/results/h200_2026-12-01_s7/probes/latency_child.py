"""One fresh process, as a GPU runner is after its warm-up: where do a verify's compile and trial seconds go?
(run by latency_probe.py with a private, empty TRITON_CACHE_DIR). Prints one RESULT json line."""
import json, os, socket, statistics, sys, threading, time

T = {}
t0 = time.perf_counter()
def mark(name):
    global t0
    t = time.perf_counter(); T[name] = round(t - t0, 4); t0 = t

import torch; mark("import_torch")
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize(); mark("cuda_init")
import triton, triton.language as tl; mark("import_triton")
from egg_mcp.evaluation import wire
from egg_mcp.evaluation.compare import compare_tensor
from egg_mcp.evaluation.runner_warmup import warm_up
T["warm_up"] = warm_up(); mark("warm_up_wall")

COMPILES = []
def listener(*, src, metadata, metadata_group, times, cache_hit):
    COMPILES.append({"name": getattr(getattr(src, "fn", None), "__name__", str(src)[:40]), "hit": cache_hit,
                     "ir_init_s": times.ir_initialization / 1e6,
                     "stages_s": {k: v / 1e6 for k, v in times.lowering_stages},
                     "store_s": times.store_results / 1e6})
try:
    triton.knobs.compilation.listener = listener
except Exception as exc:
    T["listener"] = repr(exc)
LAUNCHERS = []
try:
    import triton.backends.nvidia.driver as drv
    _orig = drv.CudaLauncher.__init__
    def timed(self, *a, **k):
        s = time.perf_counter(); _orig(self, *a, **k); LAUNCHERS.append(round(time.perf_counter() - s, 4))
    drv.CudaLauncher.__init__ = timed
except Exception as exc:
    T["launcher_patch"] = repr(exc)

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

M, K, N = 2048, 4096, 4096
A = torch.randn(M, K, device="cuda") * 0.125; B = torch.randn(K, N, device="cuda") * 0.125
C = torch.empty(M, N, device="cuda")

def launch(bm, bn, bk, prec, warps, stages):
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    gemm_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0),
                      C.stride(1), BM=bm, BN=bn, BK=bk, PREC=prec, num_warps=warps, num_stages=stages)

TILES = []
for cfg in [(128, 128, 32, "ieee", 4, 3), (128, 128, 16, "ieee", 4, 3), (64, 64, 32, "ieee", 4, 3),
            (64, 64, 16, "ieee", 4, 2), (32, 64, 32, "ieee", 4, 2), (32, 32, 32, "ieee", 4, 2),
            (128, 128, 32, "tf32x3", 4, 3)]:
    n_comp, n_launch = len(COMPILES), len(LAUNCHERS)
    s = time.perf_counter(); launch(*cfg); torch.cuda.synchronize(); first = time.perf_counter() - s
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(5)]
    for a, b in ev:
        a.record(); launch(*cfg); b.record()
    torch.cuda.synchronize()
    TILES.append({"cfg": cfg, "first_launch_s": round(first, 4), "compiles": COMPILES[n_comp:],
                  "launcher_s": LAUNCHERS[n_launch:],
                  "median_ms": round(statistics.median(a.elapsed_time(b) for a, b in ev), 4)})

# ---- one correctness trial, piece by piece (the 128x128x32 IEEE kernel, fp32 2048x4096 @ 4096x4096)
def gen(seed):
    torch.manual_seed(seed)
    with torch.device("cuda"):
        return [torch.randn(M, K) * 0.125, torch.randn(K, N) * 0.125]

def sync():
    torch.cuda.synchronize()

a_sock, b_sock = socket.socketpair()
PIECES = {}
def clock(name, fn):
    s = time.perf_counter(); r = fn(); sync(); PIECES.setdefault(name, []).append(time.perf_counter() - s); return r

for rep in range(6):
    inputs = clock("runner_inputs", lambda: gen(rep))
    pristine = clock("runner_clone_inputs", lambda: [x.clone() for x in inputs])
    def fwd():
        out = torch.empty(M, N, device="cuda")
        grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
        x, y = inputs
        gemm_kernel[grid](x, y, out, M, N, K, x.stride(0), x.stride(1), y.stride(0), y.stride(1), out.stride(0),
                          out.stride(1), BM=128, BN=128, BK=32, PREC="ieee", num_warps=4, num_stages=3)
        return out
    out = clock("runner_forward", fwd)
    clock("runner_input_equal", lambda: [torch.equal(x, p) for x, p in zip(inputs, pristine)])
    specs, blobs = clock("runner_encode", lambda: wire.encode_values([out]))
    got = {}
    def reader():
        got["msg"] = wire.recv(b_sock, max_blob_bytes=1 << 30)
    th = threading.Thread(target=reader); th.start()
    clock("wire_send_recv", lambda: (wire.send(a_sock, {"type": "outputs", "values": specs}, blobs), th.join()))
    msg, rblobs = got["msg"]
    values = clock("judge_decode", lambda: wire.decode_values(msg["values"], rblobs))
    g = clock("judge_to_cuda", lambda: values[0].to("cuda"))
    expected = clock("judge_expected", lambda: torch.matmul(*gen(rep)))
    clock("judge_compare", lambda: compare_tensor(g, expected, 1e-4, 1e-4, 0))
pieces = {k: round(statistics.median(v[1:]), 4) for k, v in PIECES.items()}
pieces["sum"] = round(sum(pieces.values()), 4)
print("RESULT " + json.dumps({"t": T, "tiles": TILES, "trial_pieces_s": pieces,
                              "torch": torch.__version__, "triton": triton.__version__}))
