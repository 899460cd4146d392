"""Verdict precedence for out-of-bounds writes (issue 12, H200 finding): a kernel whose rows write one
element past their end corrupts its neighbour, so the correctness trials come out wrong before the
guarded forward ran. The out-of-bounds write is the root cause: the verdict is `memory_error`, with the
mismatch kept in the result. (On the GPU the rows run in parallel; here the programs handle the rows in
reverse order, so each row's extra element lands after the next row was written, as on a GPU race.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.problems.builtin import builtin_source

CORRECT = (Path(__file__).parent / "adversarial" / "correct_row_softmax.py").read_text()
REVERSED = CORRECT.replace("row = tl.program_id(0)", "row = tl.num_programs(0) - 1 - tl.program_id(0)")
STORE = "tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=mask)"
# rows in reverse order and one element past each row's end: wrong outputs AND a write past the tensor
WRONG_AND_PAST_THE_END = REVERSED.replace(STORE, STORE.replace("mask=mask", "mask=cols <= n_cols"))
# wrong outputs, every write in bounds: stays `incorrect`
WRONG_IN_BOUNDS = CORRECT.replace(STORE, STORE.replace("num / tl.sum(num, axis=0)", "num"))
QUICK: dict[str, int | list[int]] = {"batch_size": 8, "dim": 100}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    assert REVERSED != CORRECT and WRONG_AND_PAST_THE_END != REVERSED and WRONG_IN_BOUNDS != CORRECT

    async def main():
        ev = WorkerEvaluator(scratch_dir=tmp_path_factory.mktemp("scratch"), force_interpreter=True,
                             spare_workers=0)
        try:
            opts = EvalOptions(size_overrides=QUICK, correctness_trials=2)
            ref = builtin_source("softmax")
            return await asyncio.gather(ev.evaluate(ref, WRONG_AND_PAST_THE_END, opts),
                                        ev.evaluate(ref, WRONG_IN_BOUNDS, opts))
        finally:
            await ev.aclose()

    return asyncio.run(main())


def test_a_write_past_the_end_wins_over_the_wrong_outputs_it_caused(results):
    result = results[0]
    assert result.verdict == "memory_error", result.summary
    assert result.mismatch is not None, "the mismatch must be kept beside the memory error"
    assert "[8, 100]" in result.summary and "past the end" in result.error.message, result.summary
    assert "also wrong" in result.summary
    assert "memory_guard" in result.phase_s


def test_wrong_outputs_without_an_out_of_bounds_write_stay_incorrect(results):
    result = results[1]
    assert result.verdict == "incorrect", result.summary
    assert result.mismatch is not None and "memory_guard" in result.phase_s
