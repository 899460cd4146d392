"""Parser and classifier on real ncu CSV captured on the H200 (tests/data/ncu/, written by
benchmarks/profiling_capture_fixtures.py). Skipped until those files are committed."""

import importlib.util
import json
from pathlib import Path

import pytest

from egg_mcp.analysis.roofline import compute_type_for
from egg_mcp.hardware import GPU_TABLE
from egg_mcp.profiling.metrics import ALL_METRICS
from egg_mcp.profiling.ncu_csv import parse_details_page, parse_ncu_output
from egg_mcp.profiling.report_build import build_ncu_report, resolve_gpu

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "ncu"
MANIFEST = DATA / "manifest.json"

_spec = importlib.util.spec_from_file_location("profiling_kernels", ROOT / "benchmarks" / "profiling_kernels.py")
assert _spec is not None and _spec.loader is not None
kernels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernels)

pytestmark = pytest.mark.skipif(not MANIFEST.exists(), reason="no captured ncu fixtures in tests/data/ncu yet")


def _manifest():
    return json.loads(MANIFEST.read_text())


def _captured():
    if not MANIFEST.exists():
        return []
    return [k for k in _manifest()["kinds"] if (DATA / f"{k}.csv").exists()]


def test_every_kind_was_captured():
    manifest = _manifest()
    missing = [k for k in kernels.KINDS if not (DATA / f"{k}.csv").exists()]
    assert missing == [], f"capture failed for {missing}: {[manifest['kinds'].get(k) for k in missing]}"


@pytest.mark.parametrize("kind", _captured())
def test_real_csv_parses_with_every_metric(kind):
    manifest = _manifest()
    log = parse_ncu_output((DATA / f"{kind}.csv").read_text())
    assert log.launches, f"no launch parsed; errors: {log.errors}"
    launch = log.launches[0]
    requested = set(manifest["metrics"])
    for metric in ALL_METRICS:  # every metric the profiler asks for today is in real ncu output
        if metric in requested:
            assert metric in launch.metrics, f"{metric} missing from the {kind} CSV"
    assert set(ALL_METRICS) <= requested, "re-capture: the metric table changed since these files were taken"
    assert launch.value("gpu__time_duration.sum") > 0
    assert launch.metrics["gpu__time_duration.sum"].unit == "nsecond"
    assert launch.metrics["dram__bytes_read.sum"].unit == "byte"


@pytest.mark.parametrize("kind", _captured())
def test_real_csv_classification_matches_the_kernel(kind):
    entry = _manifest()["kinds"][kind]
    result_path = DATA / f"{kind}.result.json"
    result = json.loads(result_path.read_text()).get("result") if result_path.exists() else None
    gpu, _ = resolve_gpu(None, (result or {}).get("device") or {"name": "NVIDIA H200"})
    report = build_ncu_report((DATA / f"{kind}.csv").read_text(), stage=entry["stage"], gpu=gpu,
                              target_result=result, flops=entry["flops"], min_bytes=entry["min_bytes"],
                              compute_type=compute_type_for(entry["dtype"], None))
    assert kernels.check_expectation(kind, report) == []
    assert report.gpu and GPU_TABLE["H200"].sm_count == gpu.sm_count


def test_real_details_page_has_rule_hints():
    path = DATA / "uncoalesced.details.csv"
    if not path.exists():
        pytest.skip("no details-page capture")
    launches, rules = parse_details_page(path.read_text())
    assert launches and launches[0].metrics
    assert launches[0].value("Duration") is not None
    assert all(r.rule and r.description for r in rules)
