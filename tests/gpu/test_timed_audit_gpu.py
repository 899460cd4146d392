"""Timed calls are checked calls, on a real GPU: candidates that behave differently while timed are caught.

Run: python -m pytest tests/gpu/test_timed_audit_gpu.py -q -m gpu
Each cheat is correct on every checked call and changes behaviour only in the timing loop: by CUDA-graph capture,
by a burst of back-to-back calls (no launch, or the same launch that skips its work). Small sizes take the
graph-replay path (< 200 us per call), large ones the per-call event path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from egg_mcp.contract import EvalOptions  # noqa: E402
from egg_mcp.evaluation.engine import WorkerEvaluator  # noqa: E402
from egg_mcp.problems.builtin import builtin_source  # noqa: E402

CORRECT = (Path(__file__).parent.parent / "adversarial" / "correct_row_softmax.py").read_text()
HEAD = CORRECT.split("class ModelNew")[0]
SMALL: dict[str, int | list[int]] = {"batch_size": 256, "dim": 1000}   # a few us per call: CUDA-graph replay
LARGE: dict[str, int | list[int]] = {"batch_size": 32768, "dim": 8192}  # ~0.5 ms per call: per-call CUDA events

CHEATS = {
    # returns the output of the last eager call when captured into a graph (no launch while captured)
    "graph_capture_stale": HEAD + '''
class ModelNew(nn.Module):
    def forward(self, x):
        if torch.cuda.is_current_stream_capturing() and getattr(self, "last", None) is not None:
            return self.last
        self.last = triton_softmax(x.contiguous())
        return self.last
''',
    # a burst of back-to-back calls (under 1 ms apart on the host): the previous output, no launch
    "burst_no_launch": HEAD + '''
import time


class ModelNew(nn.Module):
    def forward(self, x):
        now = time.perf_counter()
        burst = now - getattr(self, "t", 0.0) < 1e-3
        self.t = now
        if burst and getattr(self, "last", None) is not None and not torch.cuda.is_current_stream_capturing():
            return self.last
        self.last = triton_softmax(x.contiguous())
        return self.last
''',
    # the same kernel with the same grid, told to skip its rows during a burst: only the outputs can tell
    "burst_same_launch_no_work": '''
import time
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, n_live, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if row < n_live:
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        tl.store(y_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        now = time.perf_counter()
        burst = now - getattr(self, "t", 0.0) < 1e-3 or torch.cuda.is_current_stream_capturing()
        self.t = now
        y = self.y if burst and getattr(self, "y", None) is not None else torch.empty_like(x)
        self.y = y
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], 0 if burst else x.shape[0],
                                      BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
''',
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    async def run_all():
        ev = WorkerEvaluator(scratch_dir=tmp_path_factory.mktemp("timed"), spare_workers=1)
        await ev.start_pool()
        out = {}
        try:
            ref = builtin_source("softmax")
            for size_name, sizes in (("small", SMALL), ("large", LARGE)):
                opts = EvalOptions(size_overrides=sizes, isolated_timing=True)
                out[("honest", size_name)] = await ev.evaluate(ref, CORRECT, opts)
                for name, src in CHEATS.items():
                    out[(name, size_name)] = await ev.evaluate(ref, src, opts)
        finally:
            await ev.aclose()
        return out

    return asyncio.run(run_all())


@pytest.mark.parametrize("size", ["small", "large"])
def test_honest_candidate_is_correct_and_its_timed_calls_were_audited(results, size):
    result = results[("honest", size)]
    assert result.verdict == "correct", (result.summary, result.integrity)
    assert not [f for f in result.integrity if f.severity == "violation"]
    assert (result.judge or {}).get("timed_calls_audited", 0) >= 2, result.judge


CASES = [(name, size) for name in sorted(CHEATS) for size in ("small", "large")
         if not (name == "graph_capture_stale" and size == "large")]  # large calls take the event path: no capture,
# so that candidate does its work on every call (it is `correct`, at an honest time)


@pytest.mark.parametrize("name,size", CASES)
def test_cheat_that_behaves_differently_while_timed_is_a_violation(results, name, size):
    result = results[(name, size)]
    checks = {f.check for f in result.integrity if f.severity == "violation"}
    assert result.verdict == "integrity_violation", (name, size, result.verdict, result.summary)
    assert checks & {"timed_output", "timed_work", "below_physical_limit", "no_triton_kernel"}, result.integrity
    assert result.timing is None or result.verdict != "correct"
