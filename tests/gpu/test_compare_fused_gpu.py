"""On a real GPU the fused check (compare_fused) counts the same bad elements and finds the same largest share as the
torch rule (compare_chunks.tolerance), with real FMA-capable code generation: across the boundary, with NaN and inf,
in fp32 and fp16, on a tensor larger than one compare chunk.

    python3 -m pytest tests/gpu/test_compare_fused_gpu.py -q -m gpu
"""

from __future__ import annotations

import pytest
import torch

from egg_mcp.analysis import error_share
from egg_mcp.evaluation import compare_chunks, compare_fused

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_self_check_passes_on_this_gpu():
    """What a judge runs at its start before it trusts the pass (compare_fused.usable)."""
    assert compare_fused.self_check("cuda") is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("atol,rtol", [(1e-4, 1e-4), (0.0, 1e-3), (1e-2, 0.0)])
def test_fused_check_equals_the_torch_rule_on_the_gpu(atol, rtol):
    gen = torch.Generator(device="cuda").manual_seed(1)
    n = compare_chunks.CHUNK_ELEMENTS + 12345
    e = torch.randn(n, device="cuda", generator=gen)
    limit = atol + rtol * e.abs()
    for g in (e + limit, e + torch.randn(n, device="cuda", generator=gen) * 1e-4, (e + limit).half()):
        g[:4] = torch.tensor([float("nan"), float("inf"), 1.0, 3e38], device="cuda").to(g.dtype)
        e[:4] = torch.tensor([float("nan"), float("inf"), float("inf"), -3e38], device="cuda")
        rule = compare_chunks.tolerance(g.float(), e, atol, rtol)
        want = (int(rule.bad.sum()), float(error_share.share(rule.abs_err, rule.limit).amax()))
        assert compare_fused.applies(g, e)
        assert compare_fused.check(g, e, atol, rtol) == want
        rule = compare_chunks.tolerance(g[4:].float(), e[4:], atol, rtol)  # the largest finite share too
        want = (int(rule.bad.sum()), float(error_share.share(rule.abs_err, rule.limit).amax()))
        assert compare_fused.check(g[4:], e[4:], atol, rtol) == want
        del rule
    assert compare_fused.max_abs_finite(e) == compare_chunks.max_abs_finite(e, torch.float32)
