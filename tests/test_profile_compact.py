"""profile_ncu compact by default (issue 18): <= ~3 KB per reply with the stage's metrics, bottleneck,
evidence and next moves; the raw metric table behind a resource (CPU, captured H200 ncu files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from egg_mcp.profiling.compact import MAX_BYTES, compact_report, raw_table
from egg_mcp.profiling.metrics import metrics_for_stage
from egg_mcp.profiling.profile_report import Classification, Evidence, KernelProfile, Metric, ProfileReport
from egg_mcp.profiling.report_build import build_ncu_report, resolve_gpu

DATA = Path(__file__).parent / "data" / "ncu"
KINDS = ["compute_bound", "memory_bound", "launch_bound", "spilling", "uncoalesced"]


def _wide_report(n_kernels=5, n_metrics=300) -> ProfileReport:
    """Like the ~95 KB reply of issue 18: hundreds of raw metrics per kernel (device attributes, nvlink...)."""
    stage_metrics = metrics_for_stage("MEMORY")
    kernels = []
    for i in range(n_kernels):
        metrics = [Metric(name=n, label=n, value=50.0 + i, unit="%", source="ncu") for n in stage_metrics]
        metrics += [Metric(name=f"device__attribute_{j}_nvlink_numa_something_long", label=f"attr {j}",
                           value=float(j), unit="", source="ncu") for j in range(n_metrics)]
        kernels.append(KernelProfile(
            name=f"kernel_{i}_with_a_rather_long_triton_name", duration_ms=1.0 + i, time_share=0.2, metrics=metrics,
            classification=Classification(bound="memory-bound", headline="memory-bound: SM 15% / memory 82% " * 3),
            evidence=[Evidence(metric=stage_metrics[0], value=82.0, unit="%", source="ncu", why="why " * 40)] * 4,
            next_moves=["a long next move " * 12] * 5))
    return ProfileReport(source="ncu", stage="MEMORY", gpu="NVIDIA H200", kernels=kernels, summary="s " * 300,
                         warnings=["w " * 200] * 4)


def test_wide_report_compacts_below_the_budget_and_keeps_the_stage_metrics():
    full = _wide_report()
    assert len(full.model_dump_json()) > 30 * MAX_BYTES
    out = compact_report(full, "egg://tasks/t/reports/r/raw")
    size = len(out.model_dump_json())
    assert size <= MAX_BYTES, size
    k = out.kernels[0]
    assert k.bound == "memory-bound" and k.next_moves and k.evidence
    assert set(k.metrics) <= set(metrics_for_stage("MEMORY")) and k.metrics
    assert not any("device__attribute" in m for m in k.metrics)
    assert out.kernels_left_out == len(full.kernels) - len(out.kernels) and "raw" in out.full_report


@pytest.mark.parametrize("kind", [k for k in KINDS if (DATA / f"{k}.csv").exists()])
def test_real_h200_profiles_compact_below_the_budget(kind):
    manifest = json.loads((DATA / "manifest.json").read_text())
    entry = manifest["kinds"][kind]
    result_path = DATA / f"{kind}.result.json"
    result = json.loads(result_path.read_text()).get("result") if result_path.exists() else None
    gpu, _ = resolve_gpu(None, (result or {}).get("device") or {"name": "NVIDIA H200"})
    report = build_ncu_report((DATA / f"{kind}.csv").read_text(), stage=entry["stage"], gpu=gpu,
                              target_result=result, flops=entry["flops"], min_bytes=entry["min_bytes"])
    out = compact_report(report, "pointer")
    assert len(out.model_dump_json()) <= MAX_BYTES
    assert out.kernels and out.kernels[0].bound == report.kernels[0].classification.bound
    assert out.kernels[0].metrics and out.kernels[0].duration_ms is not None
    # the raw table holds every metric the full report had
    table = json.loads(raw_table(report.model_dump(mode="json")))["kernels"]
    assert sum(len(v) for v in table.values()) == sum(len(k.metrics) for k in report.kernels)


def test_the_whole_reply_fits_not_only_the_report_in_it():
    # the H200 guidance run: an attention profile's reply was 3.3 KB around a report that fit 3 KB
    from pydantic import BaseModel

    from egg_mcp.profiling.compact import CompactProfile, fit_reply

    class Reply(BaseModel):
        task_id: str
        report: CompactProfile
        brief: str

    def wrap(c):
        return Reply(task_id="t" * 40, report=c, brief="Profile brief (2817 chars): resource ... " * 8)

    full = _wide_report()
    assert len(wrap(compact_report(full, "pointer")).model_dump_json()) > MAX_BYTES  # the old way overflows
    out = fit_reply(full, "pointer", wrap)
    assert len(wrap(out).model_dump_json()) <= MAX_BYTES and out.kernels
