"""Pure pieces of the worker side: timing statistics and the monkeypatch snapshot."""

from __future__ import annotations

import time

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
