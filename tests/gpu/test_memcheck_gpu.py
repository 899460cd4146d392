"""compute-sanitizer memcheck and guarded allocations on the GPU (issue 12 item 3). Run on the H200:

    python3 -m pytest -q -m gpu tests/gpu/test_memcheck_gpu.py
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.evaluation.memcheck import find_compute_sanitizer
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.sandbox import probe

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CORRECT = (Path(__file__).parent.parent / "adversarial" / "correct_row_softmax.py").read_text()
PAST_THE_END = CORRECT.replace(
    "tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=mask)",
    "tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=cols <= n_cols)")
SIZES: dict[str, int | list[int]] = {"batch_size": 4096, "dim": 1000}


def _run(coro_fn, tmp_path):
    async def main():
        ev = WorkerEvaluator(scratch_dir=tmp_path, spare_workers=0)
        try:
            return await coro_fn(ev)
        finally:
            await ev.aclose()

    return asyncio.run(main())


@pytest.mark.skipif(find_compute_sanitizer() is None, reason="compute-sanitizer not installed")
def test_memcheck_names_the_kernel_and_address_of_a_write_past_the_end_and_passes_a_clean_kernel(tmp_path):
    opts = EvalOptions(size_overrides=SIZES)

    async def both(ev):
        t0 = time.monotonic()
        bad = await ev.memcheck(builtin_source("softmax"), PAST_THE_END, opts)
        t1 = time.monotonic()
        good = await ev.memcheck(builtin_source("softmax"), CORRECT, opts)
        return bad, good, t1 - t0, time.monotonic() - t1

    bad, good, bad_s, good_s = _run(both, tmp_path)
    print(f"memcheck cost on this GPU: {bad_s:.1f} s (error), {good_s:.1f} s (clean); tool wall {good.wall_s} s; "
          f"report from {bad.report_source}; runner sandbox {(bad.sandbox or {}).get('level')}, "
          f"wrapped by {(bad.sandbox or {}).get('wrapped_by')}; runner exit {bad.runner_exit}; bounds {good.bounds}; "
          f"runner peak under the tool {good.runner_peak}")
    assert bad.verdict == "memory_error", f"{bad.summary}\n--- tool output tail ---\n{bad.tool_output_tail}"
    assert bad.sandbox and bad.sandbox.get("wrapped_by") == "compute-sanitizer", bad.sandbox
    if probe().landlock_abi is not None:
        assert bad.sandbox["level"] in ("landlock", "landlock+ns") and bad.sandbox["fs_confined"], bad.sandbox
    assert bad.errors and bad.errors[0].kernel.startswith("softmax_kernel") and bad.errors[0].address
    assert good.verdict == "clean", f"{good.summary}\n--- tool output tail ---\n{good.tool_output_tail}"
    assert (good.sandbox or {}).get("rlimits", {}).get("file_bytes"), good.sandbox  # verify's bounds, under the tool


def test_verify_guards_catch_a_write_past_the_end_on_the_gpu(tmp_path):
    result = _run(lambda ev: ev.evaluate(builtin_source("softmax"), PAST_THE_END,
                                         EvalOptions(size_overrides=SIZES)), tmp_path)
    assert result.verdict == "memory_error", result.summary
    assert "[4096, 1000]" in result.summary
    print(f"verify on the GPU: {result.summary} (mismatch kept: {result.mismatch is not None})")
