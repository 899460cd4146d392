import torch, triton, triton.language as tl, json
@triton.jit
def mm(a, b, c, M, N, K, P: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM); rn = pn * BN + tl.arange(0, BN); rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :])
        y = tl.load(b + (k0 + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(x, y, acc, input_precision=P)
    tl.store(c + rm[:, None] * N + rn[None, :], acc)
def rn_tf32(t):
    i = t.view(torch.int32).to(torch.int64)
    i = (i + 0x1000) & ~0x1FFF
    return (i & 0xFFFFFFFF).to(torch.int64).apply_(lambda v: v) if False else ((i + 2**31) % 2**32 - 2**31).to(torch.int32).view(torch.float32)
def tr_tf32(t):
    return (t.view(torch.int32) & ~0x1FFF).view(torch.float32)
out = {}
torch.manual_seed(0)
for (M, N, K) in [(512, 512, 768), (512, 512, 4096)]:
    a = torch.randn(M, K, device="cuda"); b = torch.randn(K, N, device="cuda")
    ref = (a.double() @ b.double())
    scale = ref.abs().max().item()
    row = {}
    for P in ["tf32", "tf32x3", "ieee"]:
        c = torch.empty(M, N, device="cuda")
        mm[(M // 64, N // 64)](a, b, c, M, N, K, P=P, BM=64, BN=64, BK=32)
        row[P] = ((c.double() - ref).abs().max().item(), (c.double() - ref).abs().max().item() / scale)
    torch.backends.cuda.matmul.allow_tf32 = True
    row["cublas_tf32"] = ((a @ b).double().sub(ref).abs().max().item(),)
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, f in [("emu_rn", rn_tf32), ("emu_trunc", tr_tf32)]:
        e = (f(a).double() @ f(b).double())
        row[name] = ((e - ref).abs().max().item(),)
    # emulate 3xtf32 with trunc
    ah, bh = tr_tf32(a), tr_tf32(b); al, bl = tr_tf32(a - ah), tr_tf32(b - bh)
    e3 = ah.double() @ bh.double() + ah.double() @ bl.double() + al.double() @ bh.double()
    row["emu_tf32x3_trunc"] = ((e3 - ref).abs().max().item(),)
    ah, bh = rn_tf32(a), rn_tf32(b); al, bl = rn_tf32(a - ah), rn_tf32(b - bh)
    e3 = ah.double() @ bh.double() + ah.double() @ bl.double() + al.double() @ bh.double()
    row["emu_tf32x3_rn"] = ((e3 - ref).abs().max().item(),)
    out[f"{M}x{N}x{K}"] = row
print("TF32", json.dumps(out, indent=1))
