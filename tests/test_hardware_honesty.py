"""Every ceiling says where it came from; an unknown GPU or no GPU never borrows the H200's numbers."""

import asyncio
import json

import pytest

from egg_mcp import hardware
from egg_mcp.analysis.analysis_types import ReferenceAnalysis
from egg_mcp.analysis.reference import analyze_job
from egg_mcp.calibration.peaks import device_peaks
from egg_mcp.calibration.run import CalibrationError, calibrate, describe, ensure_calibrated
from egg_mcp.contract import STRICT_FP32, JobOutcome
from egg_mcp.doctor import hardware_lines
from egg_mcp.expertise.seeds import build_seed_brief, installed_triton
from egg_mcp.hardware import calibration_store as store
from egg_mcp.hardware.calibration_record import Calibration
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.profiling.report_build import build_fallback_report, resolve_gpu


@pytest.fixture(autouse=True)
def _forget_calibrated_specs():
    yield
    hardware._CALIBRATED.clear()  # gpu_for registers calibrated specs process-wide


UUID = "GPU-1234abcd-0000-1111-2222-333344445555"


def _calibration(name="NVIDIA H200", uuid=UUID) -> dict:
    ceil = lambda key, unit, value: {"key": key, "unit": unit, "value": value, "best_ms": 1.0, "median_ms": 1.1,  # noqa: E731
                                     "amount": value * 1e-3, "method": f"probe {key}"}
    return {
        "device": {"name": name, "uuid": uuid, "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 60 << 20,
                   "driver": "570.1", "torch": "2.x", "triton": "3.x", "sm_clock_max_mhz": 1980},
        "ceilings": [ceil("dram_copy", "bytes/s", 4.1e12), ceil("mm_fp32_ieee", "FLOP/s", 49e12),
                     ceil("mm_tf32x3", "FLOP/s", 160e12), ceil("mm_bf16", "FLOP/s", 700e12)],
        "constants": [{"key": "warp_stream_bps", "unit": "bytes/s per warp", "value": 3.8e9, "method": "probe"}],
        "measured_at": "2026-12-01T05:30:00+00:00",
    }


def test_h200_table_is_datasheet_leads_not_measured():
    spec = hardware.spec_for("NVIDIA H200")
    assert spec.source == "datasheet"
    dram = hardware.ceiling(spec, "dram")
    assert dram.source == "datasheet" and dram.value == 4.3e12 and "not measured" in dram.detail
    assert hardware.ceiling(spec, "tf32").source == "derived" and "bf16" in hardware.ceiling(spec, "tf32").detail
    assert hardware.ceiling(spec, "fp8").source == "derived"
    assert hardware.ceiling(spec, "tf32x3").detail.startswith("derived from the TF32")


def test_unknown_gpu_gets_no_borrowed_numbers():
    assert hardware.spec_for("NVIDIA Zeta 9000") is None
    assert hardware.gpu_for("NVIDIA Zeta 9000", "GPU-x", None) is None
    assert hardware.gpu_status(["NVIDIA Zeta 9000"]) == \
        "unknown GPU NVIDIA Zeta 9000: no datasheet lead; run egg-mcp calibrate"
    assert hardware.spec_for(None) is None and hardware.gpu_status([]) == "no GPU"
    spec, warnings = resolve_gpu(None, {"name": "NVIDIA Zeta 9000"})
    assert spec is None and "unknown GPU NVIDIA Zeta 9000" in warnings[0]
    lines = hardware_lines(["NVIDIA Zeta 9000"], ["GPU-x"], None)
    assert lines[0][2] == hardware.unknown_gpu_message("NVIDIA Zeta 9000")


def test_calibration_makes_ceilings_measured_with_when_and_how(tmp_path):
    store.save(tmp_path, Calibration.model_validate(_calibration()))
    assert (tmp_path / "calibration" / f"{UUID}.json").is_file()
    spec = hardware.gpu_for("NVIDIA H200", UUID, tmp_path)
    assert spec.source == "measured" and spec.dram_bytes_per_s == 4.1e12 and spec.peak_flops["tf32x3"] == 160e12
    dram = hardware.ceiling(spec, "dram")
    assert dram.source == "measured" and "2026-12-01T05:30" in dram.detail and "probe dram_copy" in dram.detail
    assert hardware.ceiling(spec, "fp8").source == "derived"  # not measured: keeps its datasheet provenance
    assert hardware.lookup("NVIDIA H200").source == "measured"
    doctor = [d for _, _, d in hardware_lines(["NVIDIA H200"], [UUID], tmp_path)]
    assert "calibrated 2026-12-01" in doctor[0] and any(d.startswith("4.1 TB/s (measured") for d in doctor)


def test_unknown_but_calibrated_gpu_has_only_measured_ceilings(tmp_path):
    store.save(tmp_path, Calibration.model_validate(_calibration("NVIDIA Zeta 9000", "GPU-zeta")))
    spec = hardware.gpu_for("NVIDIA Zeta 9000", "GPU-zeta", tmp_path)
    assert spec.name == "NVIDIA Zeta 9000" and spec.sm_count == 132 and spec.dram_bytes_per_s == 4.1e12
    assert hardware.ceiling(spec, "fp8").source == "none" and "not measured" in hardware.ceiling(spec, "fp8").detail


def test_unreadable_calibration_is_ignored_not_guessed(tmp_path):
    path = store.path_for(tmp_path, UUID)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert store.load(tmp_path, UUID) is None
    assert hardware.gpu_for("NVIDIA H200", UUID, tmp_path).source == "datasheet"


def test_no_gpu_analysis_and_seed_brief_say_no_gpu():
    result = ReferenceAnalysis.model_validate(analyze_job({"reference_source": builtin_source("softmax"),
                                                           "gpu_missing": "no GPU"}))
    assert result.floor is None and result.floor_unavailable == "no GPU" and "floor: no GPU" in result.summary
    brief = build_seed_brief(result, k=2, tolerance=STRICT_FP32, dtype="float32", gpu=None)
    text = brief.brief_markdown
    assert "H200" not in text and "**Floor.** none: no GPU." in text
    assert installed_triton() in text and "Triton 3.6" not in text


def test_unknown_gpu_analysis_names_it():
    result = analyze_job({"reference_source": builtin_source("softmax"), "gpu_name": "NVIDIA Zeta 9000"})
    assert result["floor"] is None and "unknown GPU NVIDIA Zeta 9000" in result["summary"]


def test_floor_on_a_known_gpu_cites_its_ceilings():
    result = analyze_job({"reference_source": builtin_source("softmax"), "gpu_name": "NVIDIA H200"})
    assert result["floor"]["spec_source"].startswith("datasheet: DRAM 4.3 TB/s (datasheet lead")


def test_profile_report_without_gpu_has_no_roofline():
    report = build_fallback_report({"kernels": [{"name": "k", "num_warps": 4, "event_ms": 1.0}]}, stage="SEEDS",
                                   gpu=None, reason="no GPU", flops=1e9, min_bytes=1e6)
    assert report.gpu == "no GPU" and report.roofline is None
    spec = hardware.spec_for("H200")
    report = build_fallback_report({"kernels": [{"name": "k", "event_ms": 1.0}]}, stage="SEEDS", gpu=spec,
                                   reason="x", flops=1e9, min_bytes=1e6)
    assert "datasheet lead" in report.roofline.ceilings_source


def test_device_peaks_follow_ncu_derivations():
    peaks = device_peaks({"name": "NVIDIA H200", "sm_count": 132, "sm_clock_max_mhz": 1980, "compute_capability": "9.0",
                          "mem_clock_max_mhz": 3201, "mem_bus_width_bits": 6144})
    assert peaks["fp32_fma"]["value"] == pytest.approx(132 * 128 * 2 * 1980e6)
    assert peaks["dram_copy"]["value"] == pytest.approx(2 * 3201e6 * 6144 / 8)
    assert peaks["mm_bf16"]["source"].startswith("H200 datasheet") and "l2_read" not in peaks
    assert device_peaks({"name": "NVIDIA A100", "sm_count": 108, "sm_clock_max_mhz": 1410,
                         "compute_capability": "8.0"})["fp32_fma"]["value"] == pytest.approx(19.5e12, rel=0.01)


class _JobEvaluator:
    def __init__(self, gpu: bool, result: dict | None = None):
        self.gpu, self.result, self.calls = gpu, result, []

    def has_gpu(self):
        return self.gpu

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        self.calls.append((target, payload, uses_gpu))
        return JobOutcome(ok=self.result is not None, result=self.result)


def test_calibrate_runs_one_gpu_job_and_stores_it(tmp_path):
    ev = _JobEvaluator(True, _calibration())
    cal = asyncio.run(calibrate(ev, tmp_path))  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert ev.calls == [("egg_mcp.calibration.probes:run_probes", {"quick": False, "device_index": 0}, True)]
    assert json.loads(store.path_for(tmp_path, UUID).read_text())["device"]["uuid"] == UUID
    assert any("dram_copy" in line and "4.10 TB/s" in line for line in describe(cal))
    again = asyncio.run(ensure_calibrated(ev, tmp_path, UUID))  # pyright: ignore[reportArgumentType]  # a fake Evaluator; stored: no second job
    assert again.measured_at == cal.measured_at and len(ev.calls) == 1


def test_a_stored_calibration_without_the_tiling_constants_is_measured_again_once(tmp_path):
    old = {k: v for k, v in _calibration().items() if k != "constants"}
    store.save(tmp_path, Calibration.model_validate(old))
    ev = _JobEvaluator(True, _calibration())
    fresh = asyncio.run(ensure_calibrated(ev, tmp_path, UUID))  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert len(ev.calls) == 1 and fresh is not None and fresh.constants
    asyncio.run(ensure_calibrated(ev, tmp_path, UUID))  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert len(ev.calls) == 1  # stored with its constants now: no second job
    skipped = dict(old, skipped={"model_constants": "RuntimeError: probe failed"})
    store.save(tmp_path, Calibration.model_validate(skipped))
    kept = asyncio.run(ensure_calibrated(ev, tmp_path, UUID))  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert len(ev.calls) == 1 and kept is not None and not kept.constants  # tried and failed: not re-run each start
    assert asyncio.run(ensure_calibrated(_JobEvaluator(False), tmp_path, UUID)) is not None  # pyright: ignore[reportArgumentType]


def test_calibrate_without_gpu_says_so():
    with pytest.raises(CalibrationError, match="no GPU"):
        asyncio.run(calibrate(_JobEvaluator(False), None))  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    with pytest.raises(CalibrationError, match="job failed"):
        asyncio.run(calibrate(_JobEvaluator(True, None), None))  # pyright: ignore[reportArgumentType]  # a fake Evaluator
