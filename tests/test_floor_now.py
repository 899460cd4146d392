"""The task's floor is re-derived at use (analysis.roofline.current_floor) from the stored FLOPs, bytes and
precision errors with the current GPU spec: a task started while the calibration ran in the background states
the calibrated floor in verify, the views, the briefs and generate_seeds alike, each saying where its ceilings
come from (CPU, fake evaluator)."""

from __future__ import annotations

import asyncio

import pytest

from egg_mcp.analysis.analysis_types import ReferenceAnalysis
from egg_mcp.analysis.reference import analyze_job
from egg_mcp.analysis.roofline import current_floor, fmt_ms
from egg_mcp.contract import STRICT_FP32
from egg_mcp.hardware import apply_calibration, spec_for
from egg_mcp.hardware.calibration_record import Calibration
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.profiling import classify as C
from egg_mcp.stages import Stage
from tests.test_regression_guard import _service, src

WHEN = "2026-12-01T06:00:00Z"
CAL = Calibration.model_validate({
    "device": {"name": "NVIDIA H200", "uuid": "GPU-x"}, "measured_at": WHEN,
    "ceilings": [{"key": "dram_copy", "value": 3.0e12, "unit": "bytes/s", "best_ms": 1.0, "median_ms": 1.0,
                  "amount": 3e9, "method": "copy kernel"}]})


def test_the_floor_is_priced_with_the_current_spec_and_says_which():
    stored = ReferenceAnalysis.model_validate(analyze_job({"reference_source": builtin_source("softmax"),
                                                          "gpu_name": "NVIDIA H200"}))
    assert stored.floor is not None and stored.floor.bound == "memory"
    lead = current_floor(stored, spec_for("NVIDIA H200"), STRICT_FP32)
    assert lead is not None and lead.floor_ms == pytest.approx(stored.floor.floor_ms)
    assert "datasheet lead" in lead.ceilings
    now = current_floor(stored, apply_calibration(spec_for("NVIDIA H200"), CAL), STRICT_FP32)
    assert now is not None and now.floor_ms == pytest.approx(stored.floor.floor_ms * 4.3 / 3.0)
    assert f"measured by egg-mcp calibrate here at {WHEN}" in now.ceilings and "measured" in now.spec_source
    assert current_floor(stored, None, STRICT_FP32) == stored.floor  # no spec now: the stored floor
    resized = stored.model_copy(update={"floor": None, "floor_unavailable": "no analysis at the size_overrides (x)"})
    assert current_floor(resized, spec_for("NVIDIA H200"), STRICT_FP32) is None  # it would not hold there


def test_a_task_started_before_the_calibration_states_the_calibrated_floor_everywhere(tmp_path):
    service, fake = _service(tmp_path, {"a": ("correct", 1.0, 0.0)})

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        service.gpu = apply_calibration(service.gpu, CAL)  # what the server does when the calibration finishes
        await service.verify(task.task_id, src("a"))
        return task, await service.generate_seeds(task.task_id)

    task, seeds = asyncio.run(scenario())
    stored = task.analysis["floor"]
    assert "datasheet" in stored["spec_source"]
    calibrated = stored["memory_ms"] * 4.3 / 3.0
    opts = fake.options[-1]
    assert opts.roofline_floor_ms == pytest.approx(calibrated)
    assert f"measured on this GPU at {WHEN}" in opts.roofline_floor_basis
    said = f"measured by egg-mcp calibrate here at {WHEN}"
    context = service.context(task.task_id)
    assert context.floor_ms == pytest.approx(calibrated)
    summary = context.analysis_summary or ""
    assert fmt_ms(calibrated) in summary and said in summary
    brief = service.brief_for(Stage.SEEDS, "code", task.task_id)
    assert f"Floor {fmt_ms(calibrated)} (on the fp32 path; ceilings: DRAM 3 TB/s ({said})" in brief
    assert f"**Floor.** {fmt_ms(calibrated)}" in seeds.brief and "measured on this GPU" in seeds.brief


def test_profile_roofline_numbers_say_where_their_ceilings_come_from():
    gpu = spec_for("NVIDIA H200")
    roof = C.roofline(gpu, flops=1e9, min_bytes=1e9, measured_ms=1.0, compute_type="fp32")
    assert roof is not None and "(ceilings: DRAM 4.3 TB/s (datasheet lead); fp32 51 TFLOP/s (datasheet lead))" \
        in roof.summary
    measured = apply_calibration(gpu, CAL)
    roof = C.roofline(measured, flops=1e9, min_bytes=1e9, measured_ms=1.0, compute_type="fp32")
    assert roof is not None and f"DRAM 3 TB/s (measured by egg-mcp calibrate here at {WHEN})" in roof.summary


def test_a_problem_without_dots_gets_no_dot_rule_or_dot_path_in_its_words():
    """Issue 30 item 5: a softmax brief said "fp32 dots" (the verdict's path) and its debug brief a TF32/ieee
    dot rule; a problem without matmul/conv gets neither, one with dots keeps both."""
    from egg_mcp.analysis.verdict import roofline_verdict
    from egg_mcp.expertise.briefs import BriefFacts, render_brief

    words = roofline_verdict(1.5, 1.0, "fp32", bound="memory", has_dots=False).text
    assert "dots" in words and "fp32 dots" not in words and "DRAM-bound, no dots" in words
    assert "fp32 dots" in roofline_verdict(1.5, 1.0, "fp32", bound="memory").text  # unknown: as before
    def facts(has_dots: bool) -> BriefFacts:
        return BriefFacts(dtype="float32", floor_ms=0.06, best_ms=0.09, compute_path="fp32", has_dots=has_dots)

    for stage in (Stage.SEEDS, Stage.MEMORY):
        text = render_brief(stage, "debug", facts(False))
        assert "fp32 dots" not in text and "ieee" not in text and "tf32" not in text.lower()
    dots = render_brief(Stage.SEEDS, "debug", facts(True))
    assert "fp32 dots" in dots and 'input_precision="tf32x3"' in dots
    roof = C.roofline(spec_for("NVIDIA H200"), flops=1e9, min_bytes=1e9, measured_ms=1.0, has_dots=False)
    assert roof is not None and "fp32 dots" not in roof.summary


def test_the_bytes_quoted_for_eager_are_not_below_what_its_time_implies():
    """Issue 30 item 5: a brief said "eager moves 12.9 GB" where eager's 6.1 ms at 4.3 TB/s meant 26 GB."""
    from egg_mcp.expertise.briefs import BriefFacts, render_brief

    def facts(eager_ms: float) -> BriefFacts:
        return BriefFacts(dtype="float32", min_bytes=int(4e9), unfused_bytes=int(12.9e9), gpu_name="NVIDIA H200",
                          eager_ms=eager_ms)

    text = render_brief(Stage.ALGORITHM, "code", facts(6.1))
    assert "eager moves ~26.2 GB: its measured 6.1 ms at the DRAM rate 4.3 TB/s" in text
    assert "at least 12.9 GB" in text and "eager moves 12.9 GB" not in text
    fast = render_brief(Stage.ALGORITHM, "code", facts(1.0))  # 4.3 GB < the count
    assert "eager moves at least 12.9 GB by its ops' count" in fast


def test_profile_ncu_places_the_task_on_the_same_floor_as_verify():
    """Without counters or a run (the fallback report), the roofline is the task's floor now, tensor-core FLOPs
    apart, on the GPU the report is placed on, with where its ceilings come from."""
    from egg_mcp.profiling.report_build import build_fallback_report

    stored = ReferenceAnalysis.model_validate(analyze_job({"reference_source": builtin_source("gemm_bias_relu"),
                                                          "gpu_name": "NVIDIA H200"}))
    gpu = apply_calibration(spec_for("NVIDIA H200"), CAL)
    now = current_floor(stored, gpu, STRICT_FP32)
    assert now is not None
    report = build_fallback_report(None, stage="SEEDS", gpu=gpu, reason="no ncu", flops=stored.flops,
                                   min_bytes=stored.min_bytes, has_dots=True,
                                   floor_for=lambda g: current_floor(stored, g, STRICT_FP32))
    roof = report.roofline
    assert roof is not None and roof.floor_ms == pytest.approx(now.floor_ms) and roof.compute_type == now.compute_type
    assert f"measured by egg-mcp calibrate here at {WHEN}" in roof.summary and roof.ceilings_source == now.spec_source


def test_a_kernels_distance_to_the_floor_says_where_the_ceilings_come_from():
    from egg_mcp.profiling.profile_report import Metric

    gpu = spec_for("NVIDIA H200")
    roof = C.roofline(gpu, flops=1e6, min_bytes=2 * 64 * 2**20, measured_ms=0.04, compute_type="fp32")
    metrics = [Metric(name="gpu__time_duration.sum", label="duration", value=40_000.0, unit="ns", source="ncu")]
    k = C.classify_kernel("copy", metrics, stage="SEEDS", gpu=gpu, task_roofline=roof)
    assert "of the floor" in k.classification.headline
    assert "(ceilings: DRAM 4.3 TB/s (datasheet lead)" in k.classification.headline
