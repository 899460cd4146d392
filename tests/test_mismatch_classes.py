"""Debug hints that name the class of a mismatch from its pattern: one synthetic got/expected pair per
class, and a real masked-lane softmax bug verified in the Triton interpreter."""

from __future__ import annotations

import asyncio

import pytest
import torch

from egg_mcp.evaluation.compare import compare_tensor

ATOL = RTOL = 1e-4
MASKED = "other=-float('inf')"


@pytest.fixture
def rows():
    torch.manual_seed(0)
    return torch.randn(8, 100)


def test_softmax_rows_scaled_down_by_padded_lanes(rows):
    expected = torch.softmax(rows, dim=1)
    # padded lanes (28 of them, value 0) add exp(0 - max) each to the denominator
    num = torch.exp(rows - rows.max(dim=1, keepdim=True).values)
    got = num / (num.sum(dim=1, keepdim=True) + 28 * torch.exp(-rows.max(dim=1, keepdim=True).values))
    hint = compare_tensor(got, expected, ATOL, RTOL).hint
    assert "sum to less than 1" in hint and MASKED in hint and "indexing" not in hint


def test_softmax_rows_missing_part_of_the_sum(rows):
    expected = torch.softmax(rows, dim=1)
    num = torch.exp(rows - rows.max(dim=1, keepdim=True).values)
    got = num / num[:, :64].sum(dim=1, keepdim=True)  # the sum covers the first block only
    hint = compare_tensor(got, expected, ATOL, RTOL).hint
    assert "more than 1" in hint and "stops early" in hint


def test_per_row_factor_outside_softmax(rows):
    factors = torch.linspace(0.5, 2.0, 8).unsqueeze(1)
    hint = compare_tensor(rows * factors, rows, ATOL, RTOL).hint
    assert "own factor" in hint and "padding value" in hint


def test_row_max_wrong_only_where_the_true_max_is_negative():
    torch.manual_seed(1)
    x = torch.randn(64, 5) - 0.8  # short rows: some have only negative values
    expected = x.max(dim=1).values
    got = torch.maximum(expected, torch.zeros(()))  # padded lanes of 0 win the max
    assert bool((expected < 0).any()) and bool((expected > 0).any())
    hint = compare_tensor(got, expected, ATOL, RTOL).hint
    assert "negative came out as 0" in hint and MASKED in hint


def test_constant_factor(rows):
    assert "constant factor" in compare_tensor(rows * 0.125, rows, ATOL, RTOL).hint


def test_whole_rows_wrong(rows):
    got = rows.clone()
    got[[1, 4, 6]] = torch.randn(3, 100)
    hint = compare_tensor(got, rows, ATOL, RTOL).hint
    assert "whole rows (3 of 8" in hint


def test_whole_columns_wrong(rows):
    got = rows.clone()
    got[:, [3, 50, 77]] += 1.0 + torch.rand(8, 3)
    hint = compare_tensor(got, rows, ATOL, RTOL).hint
    assert "whole columns (3 of 100" in hint


def test_last_partial_tile(rows):
    got = rows.clone()
    got[:, 64:] = 0.0
    assert "last partial tile along dim 1" in compare_tensor(got, rows, ATOL, RTOL).hint


def test_square_output_transposed():
    torch.manual_seed(2)
    e = torch.randn(32, 32)
    assert "transpose" in compare_tensor(e.t().contiguous(), e, ATOL, RTOL).hint


def test_rectangular_output_stored_transposed(rows):
    got = rows.t().contiguous().reshape(8, 100)  # the right values in the wrong order
    hint = compare_tensor(got, rows, ATOL, RTOL).hint
    assert "stored transposed" in hint and "[100, 8]" in hint


def test_precision_like_small_errors_everywhere(rows):
    got = rows * (1 + 6e-4 * torch.randn_like(rows).sign())  # relative errors of 6e-4, either way
    assert "accumulate in fp32" in compare_tensor(got, rows, ATOL, RTOL).hint


MASKED_LANE_SOFTMAX = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0),
                                      BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''


@pytest.mark.slow
def test_masked_lane_softmax_gets_the_padding_hint_end_to_end(tmp_path):
    from egg_mcp.contract import EvalOptions
    from egg_mcp.evaluation.engine import WorkerEvaluator
    from egg_mcp.problems.builtin import builtin_source

    async def main():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, spare_workers=0)
        try:
            # 100 columns in a block of 128: 28 padded lanes add exp(0 - max) to every row's sum
            options = EvalOptions(size_overrides={"batch_size": 8, "dim": 100}, correctness_trials=1)
            return await evaluator.evaluate(builtin_source("softmax"), MASKED_LANE_SOFTMAX, options)
        finally:
            await evaluator.aclose()

    result = asyncio.run(main())
    assert result.verdict == "incorrect", (result.verdict, result.summary)
    assert result.mismatch is not None
    hint = result.mismatch.hint
    assert MASKED in hint and "sum to less than 1" in hint and "indexing" not in hint, hint
