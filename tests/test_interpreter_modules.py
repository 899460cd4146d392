"""A candidate that builds torch modules (nn.Linear) verifies in the CPU interpreter like any other.

nn.Linear's construction reaches torch/_compile.py, whose first call imports torch._dynamo lazily. Imported from
inside candidate code, under the host audit's profiler, that import ran past the 120 s import limit (`timeout`) or
was called a dispatch escape (`integrity_violation`); the runner now imports it before any candidate code.
"""

from __future__ import annotations

import asyncio
import textwrap

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator

REFERENCE = textwrap.dedent('''
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = nn.Linear(n, n)

        def forward(self, x):
            return self.lin(x)

    n = 16

    def get_inputs():
        return [torch.randn(8, n)]

    def get_init_inputs():
        return [n]
''')

CANDIDATE = textwrap.dedent('''
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl

    @triton.jit
    def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N: tl.constexpr, BM: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.arange(0, N)
        x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=rm[:, None] < M, other=0.0)
        w = tl.load(w_ptr + rn[None, :] * N + rn[:, None])
        y = tl.dot(x, w, input_precision="ieee") + tl.load(b_ptr + rn)[None, :]
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=rm[:, None] < M)

    class ModelNew(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.lin = nn.Linear(n, n)

        def forward(self, x):
            x = x.contiguous()
            y = torch.empty_like(x)
            linear_kernel[(triton.cdiv(x.shape[0], 16),)](x, self.lin.weight, self.lin.bias, y, x.shape[0],
                                                          N=x.shape[1], BM=16)
            return y
''')


def test_a_candidate_building_nn_linear_verifies_in_the_interpreter(tmp_path):
    async def run():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, spare_workers=0)
        try:
            return await evaluator.evaluate(REFERENCE, CANDIDATE, EvalOptions(correctness_trials=2,
                                                                              run_timeout_s=60.0))
        finally:
            await evaluator.aclose()

    result = asyncio.run(run())
    assert result.verdict == "correct", result.summary
    assert result.phase_s.get("import_candidate", 0.0) < 30.0, result.phase_s
