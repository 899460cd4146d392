"""The chunked tolerance check (evaluation/compare_chunks.py) finds what the whole-tensor check finds."""

from __future__ import annotations

import pytest
import torch

from egg_mcp.evaluation import compare, compare_chunks
from egg_mcp.evaluation.compare import compare_tensor


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 1000 elements and a 3000-element share sample (every third element): a 10,007-element output
    takes 11 chunks (the last one partial), and the sample's stride does not divide the chunk size."""
    monkeypatch.setattr(compare_chunks, "CHUNK_ELEMENTS", 1000)
    monkeypatch.setattr(compare, "SHARE_SAMPLE", 3000)


def _pair(dtype=torch.float32, n=10_007, scale=1.0):
    g = torch.Generator().manual_seed(0)
    e = (torch.randn(n, generator=g) * scale).to(dtype).reshape(-1, 1)
    got = (e.float() + torch.randn(n, 1, generator=g) * 1e-6 * scale).to(dtype)
    return got, e


def _whole(got, e, **kw):
    """The same comparison with chunking off."""
    old = compare_chunks.CHUNK_ELEMENTS
    compare_chunks.CHUNK_ELEMENTS = 1 << 40
    try:
        return compare_tensor(got, e, **kw)
    finally:
        compare_chunks.CHUNK_ELEMENTS = old


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_a_match_gives_the_same_error_share(small_chunks, dtype):
    got, e = _pair(dtype)
    assert compare_chunks.applies(got, e)
    shares, whole = {}, {}
    assert compare_tensor(got, e, 1e-3, 1e-3, shares=shares) is None
    assert _whole(got, e, atol=1e-3, rtol=1e-3, shares=whole) is None
    assert shares["output"] == pytest.approx(whole["output"], rel=1e-6)


def test_a_vacuous_tolerance_is_scaled_the_same_way(small_chunks):
    got, e = _pair(scale=1e-6)
    notes, whole_notes = {}, {}
    zeros = torch.zeros_like(e)
    chunked = compare_tensor(zeros, e, 1e-4, 1e-4, notes=notes)
    whole = _whole(zeros, e, atol=1e-4, rtol=1e-4, notes=whole_notes)
    assert chunked is not None and whole is not None
    assert chunked.model_dump() == whole.model_dump()
    assert notes == whole_notes and notes


@pytest.mark.parametrize("case", ["one_element", "last_partial_chunk", "nan", "inf_matches", "inf_differs"])
def test_a_mismatch_gives_the_whole_tensor_report(small_chunks, case):
    got, e = _pair()
    if case == "one_element":
        got[5000, 0] += 1.0
    elif case == "last_partial_chunk":
        got[10_006, 0] = 7.0
    elif case == "nan":
        got[123, 0] = float("nan")
    else:
        e[9000, 0] = float("inf")
        got[9000, 0] = float("inf") if case == "inf_matches" else 1.0
    chunked, whole = compare_tensor(got, e, 1e-4, 1e-4), _whole(got, e, atol=1e-4, rtol=1e-4)
    if case == "inf_matches":
        assert chunked is None and whole is None
        return
    assert chunked is not None and whole is not None
    assert chunked.model_dump() == whole.model_dump()


def test_a_mismatch_too_large_for_the_report_still_says_where(small_chunks, monkeypatch):
    got, e = _pair()
    got[4000:4010, 0] = 3.0

    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(compare, "_whole_report", out_of_memory)
    report = compare_tensor(got, e, 1e-4, 1e-4)
    assert report is not None
    assert report.fraction_mismatched == pytest.approx(10 / 10_007)
    assert report.first_bad_indices[:2] == [[4000, 0], [4001, 0]]
    assert "10 of 10007 elements" in report.hint and "too large" in report.hint


def test_small_complex_and_strided_outputs_take_the_whole_tensor_path(small_chunks):
    e = torch.randn(50, 60)
    assert not compare_chunks.applies(e, e[:10])
    assert not compare_chunks.applies(e.t(), e.t())  # not contiguous
    z = torch.randn(2000, dtype=torch.complex64)
    assert not compare_chunks.applies(z, z)
    assert compare_chunks.applies(torch.randn(2000), torch.randn(2000))
