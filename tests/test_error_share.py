"""Every correct verify says its error as a share of the tolerance (max and p99), and says why when it cannot."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from egg_mcp.contract import ErrorShare, EvalResult
from egg_mcp.evaluation.compare import compare_outputs
from egg_mcp.surface import summaries


def test_compare_records_max_and_p99_share_per_float_leaf():
    expected = (torch.zeros(1000), torch.arange(4))
    err = torch.full((1000,), 1e-6)
    err[7] = 5e-5  # one element at half the tolerance, the rest at 1 %
    shares: dict = {}
    assert compare_outputs((expected[0] + err, torch.arange(4)), expected, 1e-4, 0.0, shares=shares) is None
    assert set(shares) == {"output[0]"}  # the integer leaf is compared exactly: no share
    worst, p99 = shares["output[0]"]
    assert worst == pytest.approx(0.5) and p99 == pytest.approx(0.01)


def _reply(share):
    result = EvalResult(verdict="correct", summary="ok", error_share=share)
    return SimpleNamespace(result=result, candidate_id="c1", task_id="t1", stage="seeds", verdict="correct",
                           cached=False, summary="ok", sandbox=None, time_ms=None, debug_brief=None, next_step="commit",
                           report=None, report_id=None, best_in_stage=False, speedup_vs_committed=None,
                           speedup_vs_compile=None, speedup_vs_eager=None)


def test_the_verify_text_gives_the_share_or_says_why_there_is_none():
    text = summaries.verify(_reply(ErrorShare(max_share=0.5, p99_share=0.01, path="output[0]", trials=6)))
    assert "error: max 50.0% of the tolerance (p99 1.0%) at output[0], over 6 compared calls" in text
    assert "no floating-point output was compared" in summaries.verify(_reply(None))


def test_verify_and_the_precision_ladder_use_one_error_share():
    """The same error gives the same (max, p99) share in verify's comparison and in the ladder's measurement at
    the output (analysis.error_share, one definition); a zero limit gives inf where the error is not zero, never
    nan (a nan max would read as "no error")."""
    from egg_mcp.analysis import error_share
    from egg_mcp.analysis.precision_output import _path_error

    g = torch.Generator().manual_seed(0)
    truth = torch.randn(5000, generator=g, dtype=torch.float64)
    got = truth + torch.randn(5000, generator=g, dtype=torch.float64) * 1e-5
    shares: dict = {}
    assert compare_outputs(got, truth, 1e-4, 1e-4, shares=shares) is None
    ladder = _path_error("fp32", got, truth, 1e-4, 1e-4, [])
    worst, p99 = shares["output"]
    assert ladder.max_share_measured == pytest.approx(worst, rel=1e-2)  # the ladder rounds up to 3 digits
    assert ladder.p99_share == pytest.approx(p99, rel=1e-2)
    err, limit = torch.tensor([0.0, 1.0, 0.5]), torch.tensor([0.0, 0.0, 1.0])
    assert error_share.max_and_p99(err, limit)[0] == float("inf")
    assert error_share.share(err, limit).tolist() == [0.0, float("inf"), 0.5]
    assert error_share.max_and_p99(torch.zeros(0), torch.zeros(0)) == (0.0, 0.0)
