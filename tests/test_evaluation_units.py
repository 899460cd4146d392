"""Pure pieces of the worker side: timing statistics and the monkeypatch snapshot."""

from __future__ import annotations

import time
from typing import Any

import pytest

from egg_mcp.evaluation.integrity import ALLOWED_OPS, AttributeSnapshot, OpRecorder


def test_summarize_statistics():
    pytest.importorskip("torch")
    from egg_mcp.evaluation.timing import summarize

    times = [1.0] * 18 + [0.5, 10.0]  # one fast and one preempted run
    stats = summarize(times)
    assert stats["median_ms"] == 1.0 and stats["min_ms"] == 0.5
    assert stats["mean_ms"] == pytest.approx(sum(times) / 20)
    assert stats["iqr_ms"] == 0.0
    assert stats["cv"] == 0.0  # CV is over the central 90 %: the two outliers are dropped


def test_summarize_cv_of_spread_runs():
    from egg_mcp.evaluation.timing import summarize

    stats = summarize([1.0, 1.1] * 50)
    assert stats["cv"] == pytest.approx(0.05 / 1.05, rel=1e-6)


def test_snapshot_sees_a_replaced_function_and_not_an_untouched_one():
    snapshot = AttributeSnapshot()
    assert snapshot.changed() == []
    original = time.perf_counter
    time.perf_counter = lambda: 0.0
    try:
        assert "time.perf_counter" in snapshot.changed()
    finally:
        time.perf_counter = original
    assert snapshot.changed() == []


def test_op_recorder_separates_glue_from_compute():
    import torch

    recorder = OpRecorder()
    with recorder:
        recorder.recording = True
        x = torch.empty(4, 4).fill_(1.0)
        y = x.t().contiguous().view(16)
        assert recorder.compute_ops() == {}
        torch.softmax(y, dim=0)
        torch.mm(x, x)
    assert set(recorder.compute_ops()) == {"_softmax", "mm"}
    assert "mm" not in ALLOWED_OPS


# -- isolated timing: grouping CUPTI rows into calls ------------------------------------------------
FLUSH = "reduce_kernel<long sum>"


def test_split_calls_groups_kernels_between_flushes_and_keeps_the_candidates_own_memset():
    from egg_mcp.evaluation.timing import split_calls

    rows = [("warmup_kernel", 0, 7000),  # before the first flush: dropped
            ("Memset (Device)", 1, 1000), (FLUSH, 2, 30000),  # flush = its memset + the reduction
            ("layernorm_kernel", 3, 32000),
            ("Memset (Device)", 4, 1000), (FLUSH, 5, 30000),
            ("Memset (Device)", 6, 2000), ("layernorm_kernel", 7, 31000), ("epilogue", 8, 3000),  # own memset
            ("Memset (Device)", 9, 1000), (FLUSH, 10, 30000)]
    calls = split_calls(rows, FLUSH, {"Memset (Device)"})
    assert calls == [{"layernorm_kernel": 0.032},
                     {"Memset (Device)": 0.002, "layernorm_kernel": 0.031, "epilogue": 0.003}]


def test_split_calls_reports_a_call_without_kernels_as_empty():
    from egg_mcp.evaluation.timing import split_calls

    rows = [(FLUSH, 0, 1), ("k", 1, 5000), (FLUSH, 2, 1), (FLUSH, 3, 1)]
    assert split_calls(rows, FLUSH, set()) == [{"k": 0.005}, {}]


def test_isolated_timing_is_opt_in_and_carried_in_the_result():
    from egg_mcp.contract import EvalOptions, EvalResult

    assert EvalOptions().isolated_timing is False
    result = EvalResult.model_validate({
        "verdict": "correct", "summary": "ok",
        "timing": {"median_ms": 0.0346, "isolated": {"median_ms": 0.0321, "cv": 0.01, "calls": 40,
                                                    "per_kernel_ms": {"layernorm_kernel": 0.0321}}}})
    assert result.timing.isolated.per_kernel_ms == {"layernorm_kernel": 0.0321}


def test_correct_summary_names_the_isolated_reading_and_a_large_write_back_share():
    from types import SimpleNamespace

    from egg_mcp.contract import IsolatedTiming, TimingStats
    from egg_mcp.evaluation.judge_verdicts import Verdicts

    ev: Any = SimpleNamespace(findings=[])  # a stand-in judge: only what the summary reads
    t = TimingStats(median_ms=0.0344, cv=0.002, method="cuda_graph",
                    isolated=IsolatedTiming(median_ms=0.0318, cv=0.01, calls=40))
    text = Verdicts._correct_summary(ev, {}, 5, t, None)
    assert "0.0318 ms per call from a clean L2" in text and "costs 8% more" in text
    t.isolated.median_ms = 0.0340  # within 5 %: no write-back remark
    assert "more" not in Verdicts._correct_summary(ev, {}, 5, t, None)


def test_correct_summary_says_why_a_short_call_was_timed_by_events():
    """A two-kernel softmax (0.1 ms) timed by events counts the host's launch gap between its kernels: the
    summary names the failed graph capture, so the user knows the number is not a graph replay's."""
    from types import SimpleNamespace

    from egg_mcp.contract import TimingStats
    from egg_mcp.evaluation.judge_verdicts import Verdicts

    ev: Any = SimpleNamespace(findings=[])  # a stand-in judge: only what the summary reads
    t = TimingStats(median_ms=0.142, cv=0.23, method="cuda_events", estimate_ms=0.11,
                    graph_fallback="RuntimeError: operation not permitted when stream is capturing")
    text = Verdicts._correct_summary(ev, {}, 5, t, None)
    assert "CUDA graph capture failed (RuntimeError: operation not permitted" in text
    t.graph_fallback = None
    assert "graph capture" not in Verdicts._correct_summary(ev, {}, 5, t, None)
