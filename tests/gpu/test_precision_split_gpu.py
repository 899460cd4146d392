"""The fp16x3 / bf16x3 split paths on the real tensor cores: the calibration's probe GEMM (`_gemm_split_x3`, the
recipe the ladder's how-text gives) against the CPU emulation (`precision._emulate`) on the same operands, and the
probe's rate beside the 3xTF32 probe's.

For KernelBench-like operands (activations N(0,1), weights U(+-1/sqrt(K))) and for operands scaled by 1e-4 (fp16's
lo parts underflow to subnormals), the GPU's max error against the fp64 product must agree with the emulated error
within 0.25-4x, and the admission at fp32 1e-4 must be the same. The probe adds each K step's three products to
its accumulator in IEEE fp32 (`acc += p`); chaining acc through the tl.dot calls instead read 10-50x the emulated
error at K=4096-8192 on the H200 (Triton 3.6): the emulation's fp32 accumulation models the former only.

Run: python -m pytest tests/gpu/test_precision_split_gpu.py -q -m gpu -s   (well under a minute on an H200)
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

from egg_mcp.analysis.precision import SAFETY, _path_product  # noqa: E402
from egg_mcp.calibration.probe_kernels import _gemm_split_x3  # noqa: E402

HALF = {"fp16x3": tl.float16, "bf16x3": tl.bfloat16}


def _operands(m: int, n: int, k: int, scale: float):
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen) * scale
    b = (torch.rand(k, n, generator=gen) * 2 - 1) / k ** 0.5 * scale
    return a, b


def _errors(out, ref):
    err = (out.double().cpu() - ref).abs()
    return float(err.max()), float((err - 1e-4 * ref.abs()).clamp_min(0).max())


@pytest.mark.parametrize("scale", [1.0, 1e-2], ids=["unit", "small"])
@pytest.mark.parametrize("k", [768, 4096])
def test_split_probe_matches_the_emulation(k, scale):
    m = n = 256
    a, b = _operands(m, n, k, scale)
    ref = a.double() @ b.double()
    ag, bg = a.cuda(), b.cuda()
    for path, half in HALF.items():
        c = torch.empty(m, n, device="cuda")
        grid = (triton.cdiv(m, 64) * triton.cdiv(n, 64),)
        _gemm_split_x3[grid](ag, bg, c, m, n, k, BM=64, BN=64, BK=32, GROUP=4,  # pyright: ignore[reportArgumentType]
                             HALF=half)  # pyright: ignore[reportArgumentType]  # (Triton types constexprs loosely)
        gpu_abs, gpu_need = _errors(c, ref)
        emu_abs, emu_need = _errors(_path_product(a, b, path), ref)
        print(f"K={k} scale={scale:g} {path}: GPU max abs err {gpu_abs:.3g}, emulated {emu_abs:.3g} "
              f"(GPU/emulated {gpu_abs / emu_abs:.2f}); relative to max |ref| {gpu_abs / float(ref.abs().max()):.2g}")
        budget = 1e-4 * scale / SAFETY  # the atol scaled with the operands' products
        assert (gpu_need <= budget) == (emu_need <= budget) or abs(gpu_abs / emu_abs - 1) < 0.5, (path, gpu_abs)
        assert 0.25 <= gpu_abs / emu_abs <= 4.0, (path, gpu_abs, emu_abs)


def test_split_probes_outrun_the_3xtf32_probe():
    """The calibration's own GEMMs at 4096^3: fp16x3 and bf16x3 (three half-precision products) should beat 3xTF32
    (three TF32 products plus Triton's split) on Hopper."""
    from egg_mcp.calibration.matmul import gemm_maker

    rates = {}
    for key in ("mm_tf32x3", "mm_fp16x3", "mm_bf16x3"):
        fn, flops, label = gemm_maker(key)(4096)
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            fn()
        end.record()
        torch.cuda.synchronize()
        rates[key] = flops * 20 / (start.elapsed_time(end) * 1e-3)
        print(f"{key}: {rates[key] / 1e12:.1f} TFLOP/s ({label})")
    if torch.cuda.get_device_capability() >= (9, 0):
        assert rates["mm_fp16x3"] > rates["mm_tf32x3"] and rates["mm_bf16x3"] > rates["mm_tf32x3"], rates
