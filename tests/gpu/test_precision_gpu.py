"""The precision ladder's CPU emulation against the real tensor cores (issue 18).

For the GEMM shapes of a GEMM-with-epilogue task (K=768, 2304) and an attention block (K=64, 1024), a
Triton tl.dot kernel runs each path (ieee, tf32x3, tf32) on the GPU; its max error against the fp64
product must agree with the emulated error within 0.4-2.5x, and the admission at fp32 1e-4 (what
the seed brief says) must be the same: ieee and tf32x3 pass, tf32 fails. The emulation truncates the TF32
operands (what mma.tf32 does with the raw fp32 registers Triton hands it); each line also prints the
round-to-nearest emulation beside it, so a run shows which model the tensor cores follow.

Run: python -m pytest tests/gpu/test_precision_gpu.py -q -m gpu -s   (well under a minute on an H200)
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from egg_mcp.analysis.precision import SAFETY, _operands, _path_product  # noqa: E402


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, PREC: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _gpu_error(m, n, k, prec, kind):
    g = torch.Generator(device="cuda").manual_seed(0)
    if kind == "pv":
        a = torch.softmax(torch.randn(m, k, device="cuda", generator=g), dim=-1)
        b = torch.randn(k, n, device="cuda", generator=g)
    else:
        a = torch.randn(m, k, device="cuda", generator=g)
        b = (torch.rand(k, n, device="cuda", generator=g) * 2 - 1) / k ** 0.5
    c = torch.empty(m, n, device="cuda")
    _mm[(triton.cdiv(m, 64), triton.cdiv(n, 64))](a, b, c, m, n, k, PREC=prec, BM=64, BN=64, BK=32)  # pyright: ignore[reportArgumentType]  # ints for tl.constexpr (Triton's typing)
    ref = a.double() @ b.double()
    err = (c.double() - ref).abs()
    return float(err.max()), float((err - 1e-4 * ref.abs()).clamp_min(0).max())


def _emulated(m, n, k, path, kind, rounding=None):
    """The analysis worker's emulation (precision._operands / _path_product) on the same shape and kind."""
    a, b = _operands(m, n, k, kind, torch.Generator().manual_seed(0))
    ref = a.double() @ b.double()
    err = (_path_product(a, b, path, rounding).double() - ref).abs()
    return float(err.max()), float((err - 1e-4 * ref.abs()).clamp_min(0).max())


@pytest.mark.parametrize("m,n,k,kind", [(512, 512, 768, "gemm"), (512, 512, 2304, "gemm"),
                                        (512, 512, 64, "qk"), (512, 64, 1024, "pv")])
def test_emulated_error_and_admission_match_the_tensor_cores(m, n, k, kind):
    for prec, path in (("ieee", "fp32"), ("tf32x3", "tf32x3"), ("tf32", "tf32")):
        gpu_abs, gpu_need = _gpu_error(m, n, k, prec, kind)
        emu_abs, emu_need = _emulated(m, n, k, path, kind)
        rn_abs, _ = _emulated(m, n, k, path, kind, "rn")
        print(f"K={k} {kind} {path}: GPU max abs err {gpu_abs:.3g}, emulated {emu_abs:.3g} (truncating TF32, the "
              f"ladder's) / {rn_abs:.3g} (round-to-nearest); GPU/trunc {gpu_abs / emu_abs:.2f}, GPU/rn "
              f"{gpu_abs / rn_abs:.2f}")
        # the admission at fp32 1e-4 (what the seed brief says) is the same on the GPU as emulated
        assert (gpu_need <= 1e-4 / SAFETY) == (emu_need <= 1e-4 / SAFETY), (path, gpu_abs, emu_abs)
        if path == "tf32":  # the rounding model itself (the emulation samples 32x32 outputs, the GPU 512x512: its
            # max runs ~1.4x higher). Round-to-nearest read 4.05x / 3.5x at K=768 / 2304 on the H200;
            # truncation, the ladder's model, is expected at ~0.75-1.65x.
            assert 0.4 <= gpu_abs / emu_abs <= 2.5, (path, gpu_abs, emu_abs, "round-to-nearest", rn_abs)
