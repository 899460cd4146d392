"""Mismatch reports and their hints (pure functions, run in-process on small CPU tensors)."""

from __future__ import annotations

import pytest
import torch

from egg_mcp.evaluation.compare import compare_tensor, structure_mismatch

ATOL = RTOL = 1e-4


@pytest.fixture
def expected():
    torch.manual_seed(0)
    return torch.randn(8, 100)


def test_identical_tensors_match(expected):
    assert compare_tensor(expected.clone(), expected, ATOL, RTOL) is None


def test_errors_within_tolerance_match(expected):
    assert compare_tensor(expected + 1e-6, expected, ATOL, RTOL) is None


def test_all_nan_output_is_reported_as_never_written(expected):
    report = compare_tensor(torch.full_like(expected, float("nan")), expected, ATOL, RTOL)
    assert report.fraction_mismatched == 1.0 and report.nonfinite_count == expected.numel()
    assert "never written" in report.hint


def test_nan_never_passes_even_where_values_are_close(expected):
    got = expected.clone()
    got[3, 7] = float("nan")
    report = compare_tensor(got, expected, ATOL, RTOL)
    assert report is not None and report.nonfinite_count == 1 and report.first_bad_indices == [[3, 7]]


def test_last_partial_tile_hint(expected):
    got = expected.clone()
    got[:, 64:] = 0.0  # a 64-wide tile loop that skips the tail 64..99
    report = compare_tensor(got, expected, ATOL, RTOL)
    assert "last partial tile along dim 1" in report.hint and "64" in report.hint


def test_rows_past_the_grid_hint(expected):
    got = expected.clone()
    got[6:] = float("nan")  # grid covers 6 of 8 rows
    report = compare_tensor(got, expected, ATOL, RTOL)
    assert "never written" in report.hint and "dim 0" in report.hint


def test_row_ends_hint(expected):
    got = expected.clone()
    got[:, 0] += 1.0
    got[:, -1] += 1.0
    report = compare_tensor(got, expected, ATOL, RTOL)
    assert "ends" in report.hint and "dim 1" in report.hint


def test_constant_factor_hint(expected):
    report = compare_tensor(expected * 2.5, expected, ATOL, RTOL)
    assert "constant factor" in report.hint and "2.5" in report.hint
    assert report.max_abs_error == pytest.approx(float((expected * 1.5).abs().max()), rel=1e-5)


def test_constant_offset_hint(expected):
    report = compare_tensor(expected + 0.5, expected, ATOL, RTOL)
    assert "constant offset" in report.hint


def test_error_statistics_are_exact(expected):
    got = expected.clone()
    got[0, :10] += 0.25
    report = compare_tensor(got, expected, ATOL, RTOL)
    assert report.fraction_mismatched == pytest.approx(10 / 800)
    assert report.max_abs_error == pytest.approx(0.25, rel=1e-5)
    assert report.first_bad_indices[:2] == [[0, 0], [0, 1]]


def test_shape_dtype_and_layout_mismatches(expected):
    assert "same element count" in compare_tensor(expected.reshape(100, 8), expected, ATOL, RTOL).hint
    assert "dtype" in compare_tensor(expected.double(), expected, ATOL, RTOL).hint
    transposed = expected.t().contiguous().t()
    assert "layout" in compare_tensor(transposed, expected, ATOL, RTOL).hint


def test_structure_mismatch_counts_outputs(expected):
    assert "2 output" in structure_mismatch((expected, expected), expected).hint
    assert structure_mismatch(expected, expected) is None


def test_nan_and_inf_counts_stand_beside_a_tiny_max_error(expected):
    """Issue 15: 'max abs error 4.77e-07' beside 16 NaN elements read as a rounding problem."""
    got = expected + 4.77e-5  # small errors everywhere, within nothing the hint calls NaN
    got[0, :16] = float("nan")
    got[1, 0] = float("inf")
    report = compare_tensor(got, expected, ATOL, RTOL)
    assert report.hint.startswith("16 NaN and 1 Inf of 800 output elements (max abs error counts finite elements only)")
    assert report.nonfinite_count == 17
