"""Large outputs through the judge's shared region on a real GPU (evaluation/exchange.py): GPU memory the runner maps
from the judge's descriptor (gpu_share.py), so the outputs never leave the GPU; an honest 256 MiB ReLU is `correct`, a
wrong one `incorrect`, through the engine.

    python3 -m pytest tests/gpu/test_exchange_gpu.py -q -m gpu -s
"""

from __future__ import annotations

import asyncio

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator

pytestmark = pytest.mark.gpu

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8192, 8192)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0){scale}, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        return y
'''


def test_large_outputs_travel_through_the_pinned_shared_region(tmp_path):
    async def main():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path / "scratch", spare_workers=0)
        try:
            options = EvalOptions(correctness_trials=3)
            honest = await evaluator.evaluate(REFERENCE, CANDIDATE.format(scale=""), options)
            wrong = await evaluator.evaluate(REFERENCE, CANDIDATE.format(scale=" * 1.001 + 0.01"), options)
            return honest, wrong
        finally:
            await evaluator.aclose()

    honest, wrong = asyncio.run(main())
    assert honest.verdict == "correct", (honest.summary, honest.error)
    region = honest.judge["output_exchange"]
    assert region["bytes"] >= 8192 * 8192 * 4 and region["where"] == "device", region  # outputs never left the GPU
    print("honest:", honest.phase_s, region)
    assert wrong.verdict == "incorrect", (wrong.summary, wrong.error)
