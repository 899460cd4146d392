"""One roofline verdict (issue 18): verify's review flag, profile_ncu and the briefs say the same thing
about a time, against the floor of the fastest admissible compute path (CPU)."""

from __future__ import annotations

import torch
import torch.nn as nn

from egg_mcp.analysis.reference import analyze_model
from egg_mcp.analysis.verdict import roofline_verdict
from egg_mcp.contract import STRICT_FP32
from egg_mcp.evaluation.review import review_findings
from egg_mcp.expertise.briefs import BriefFacts, render_brief
from egg_mcp.hardware import spec_for
from egg_mcp.profiling import classify as C
from egg_mcp.profiling.profile_report import Metric
from egg_mcp.stages import Stage

H200 = spec_for("H200")


def _gemm_analysis():
    with torch.device("meta"):
        model = nn.Linear(2304, 2304)
        x = torch.randn(8192, 2304)
    return analyze_model(model, [x], gpu=H200, dtype="float32", tolerance=STRICT_FP32)


def test_a_time_between_the_3xtf32_and_ieee_floors_is_neither_below_the_floor_nor_at_the_roof():
    a = _gemm_analysis()
    assert a.floor.compute_type == "fp16x3"  # the fastest admissible split path (fp16 / 3 above TF32 / 3)
    ieee_floor = a.floors_ms["fp32"]
    measured = 0.8 * ieee_floor  # faster than IEEE fp32 allows: the old verdict flagged "below the physical floor"
    assert measured > a.floor.floor_ms / 0.9  # ... but slower than the split path's floor by more than the margin
    # verify's review flag
    assert review_findings(measured, reference_ms=None, floor_ms=a.floor.floor_ms, floor_path="fp16x3") == []
    # profile_ncu
    roof = C.roofline(H200, flops=a.flops, min_bytes=a.min_bytes, measured_ms=measured,
                      compute_type=a.floor.compute_type, floor_ms=a.floor.floor_ms)
    assert not roof.near_floor and "below the floor" not in roof.summary and "at the roof" not in roof.summary
    assert "fp16x3" in roof.summary and roof.floor_ms == a.floor.floor_ms
    # the briefs
    facts = BriefFacts.from_analysis(a, best_ms=measured, task_id="t", stage=Stage.TILING)
    text = render_brief(Stage.TILING, "profile", facts)
    verdict = roofline_verdict(measured, a.floor.floor_ms, "fp16x3")
    assert verdict.status == "headroom" and verdict.text in text and verdict.text in roof.summary


def test_at_the_roof_and_below_the_floor_use_the_same_margins_everywhere():
    at = roofline_verdict(1.05, 1.0, "tf32x3")
    below = roofline_verdict(0.9, 1.0, "tf32x3")
    assert at.status == "at_roof" and "stop" in at.text
    assert below.status == "below_floor" and "tf32x3" in below.text
    assert [f.check for f in review_findings(0.9, reference_ms=None, floor_ms=1.0)] == ["beyond_floor"]
    assert review_findings(0.98, reference_ms=None, floor_ms=1.0) == []  # within timing noise of the floor
    roof = C.roofline(H200, flops=1e12, min_bytes=1e6, measured_ms=1.05, compute_type="tf32x3", floor_ms=1.0)
    assert roof.near_floor and at.text in roof.summary


def test_idle_tensor_pipe_with_an_admissible_tensor_path_is_not_told_only_traffic_helps():
    metrics = [Metric(name="gpu__time_duration.sum", value=3e6, unit="ns", source="ncu"),
               Metric(name="sm__throughput.avg.pct_of_peak_sustained_elapsed", value=40, unit="%", source="ncu"),
               Metric(name="gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", value=85, unit="%",
                      source="ncu"),
               Metric(name="dram__throughput.avg.pct_of_peak_sustained_elapsed", value=70, unit="%", source="ncu")]
    old = C.classify_kernel("gemm", metrics, stage=Stage.ALGORITHM, gpu=H200)
    new = C.classify_kernel("gemm", metrics, stage=Stage.ALGORITHM, gpu=H200, admissible_path="tf32x3")
    assert new.classification.bound == old.classification.bound == "memory-bound"
    assert any("only less traffic" in m for m in old.next_moves)
    assert not any("only less traffic" in m for m in new.next_moves)
    assert any('input_precision="tf32x3"' in m for m in new.next_moves)
