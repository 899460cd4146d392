"""The calibration probe kernels compute what their byte / FLOP counts claim (Triton CPU interpreter)."""

import os
import subprocess
import sys
import textwrap

PROBE = textwrap.dedent("""
    import torch, triton
    from egg_mcp.calibration import probes as p
    x = torch.rand(10_000)
    out = torch.empty(4)
    iters = triton.cdiv(x.numel(), 256 * 4)
    p._read_reduce[(4,)](x, out, x.numel(), BLOCK=256, ITERS=iters)
    assert torch.allclose(out.sum(), x.sum(), rtol=1e-4), (out.sum(), x.sum())
    buf = torch.ones(8 * 256)
    out = torch.empty(4)
    p._l2_reread[(4,)](buf, out, 8, PASSES=3, BLOCK=256)
    assert torch.equal(out, torch.full((4,), 3 * 2 * 256.0)), out  # 2 blocks per program, 3 passes
    fma = torch.empty(2 * 64)
    p._fma_chain[(2,)](fma, ITERS=5, BLOCK=64)
    x0 = (torch.arange(128, dtype=torch.float32) * 1e-9)
    b, c = x0 * 0.5 + 0.999, x0 * 0.25 + 1e-3
    total = 0
    for k in range(8):
        a = x0 + 0.1 * (k + 1)
        for _ in range(5):
            a = a * b + c
        total = total + a
    assert torch.allclose(fma, total, rtol=1e-5), (fma[:4], total[:4])
    a, bm = torch.randn(64, 32), torch.randn(32, 64)
    cm = torch.empty(64, 64)
    p._gemm_tf32x3[(triton.cdiv(64, 32) * triton.cdiv(64, 32),)](a, bm, cm, 64, 64, 32, BM=32, BN=32, BK=16, GROUP=2)
    assert torch.allclose(cm, a @ bm, atol=1e-4), (cm - a @ bm).abs().max()
    print("ok")
""")


def test_probe_kernels_in_the_interpreter(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_CACHE_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]
