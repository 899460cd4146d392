"""Precision ladder (issue 18): emulated per-path error on the task's own GEMM shapes, admission against
the tolerance policy, rates with provenance, and the fastest admissible path (CPU)."""

from __future__ import annotations

import pytest
import torch

from egg_mcp.analysis.analysis_types import OpInfo
from egg_mcp.analysis.precision import (
    SAFETY,
    _path_product,
    _tf32,
    _tf32_trunc,
    gemm_shapes,
    measure_path_errors,
    precision_ladder,
)
from egg_mcp.analysis.roofline import admissible_compute_type
from egg_mcp.hardware import NO_GPU, apply_calibration, spec_for
from egg_mcp.hardware.calibration_record import Calibration

H200 = spec_for("H200")
ADDMM = OpInfo(op="aten.addmm", op_class="gemm", input_shapes=[[2304], [4096, 768], [768, 2304]],
               output_shape=[4096, 2304], dtype="float32")
SDPA = OpInfo(op="aten._scaled_dot_product_efficient_attention", op_class="attention",
              input_shapes=[[8, 12, 1024, 64]] * 3, output_shape=[8, 12, 1024, 64], dtype="float32")


def test_tf32_rounding_keeps_ten_mantissa_bits():
    x = torch.tensor([1.0 + 2**-10, 1.0 + 2**-11 + 2**-12, 1.0 + 2**-12], dtype=torch.float32)
    assert _tf32(x).tolist() == [1.0 + 2**-10, 1.0 + 2**-10, 1.0]  # representable / rounds up / rounds down


def test_tf32_operands_are_truncated_as_mma_tf32_reads_them():
    x = torch.tensor([1.0 + 2**-11 + 2**-12, -(1.0 + 2**-11 + 2**-12), 1.0 + 2**-10], dtype=torch.float32)
    assert _tf32_trunc(x).tolist() == [1.0, -1.0, 1.0 + 2**-10]  # toward zero, both signs; representable kept


def test_truncating_tf32_emulation_is_the_conservative_one():
    """On the H200 the tensor-core TF32 error at K=768 was 2.1e-3 where round-to-nearest emulation said 5.3e-4:
    the ladder emulates truncation (larger error), and 3xTF32's hi part is rounded to nearest as Triton does."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 768, generator=gen), (torch.rand(768, 32, generator=gen) * 2 - 1) / 768 ** 0.5
    ref = a.double() @ b.double()
    err = {r: float((_path_product(a, b, "tf32", r).double() - ref).abs().max()) for r in ("trunc", "rn")}
    assert err["trunc"] > 1.8 * err["rn"] and err["trunc"] > 1e-3
    assert float((_path_product(a, b, "tf32x3").double() - ref).abs().max()) < 5e-6
    assert float((_path_product(a, b, "tf32").double() - ref).abs().max()) == err["trunc"]  # the ladder's default


def test_gemm_shapes_are_the_references_own_k_including_both_attention_products():
    shapes = gemm_shapes([ADDMM, SDPA])
    assert (4096, 2304, 768, "gemm") in shapes
    assert (1024, 1024, 64, "qk") in shapes and (1024, 64, 1024, "pv") in shapes


def test_strict_fp32_admits_3xtf32_not_tf32_and_names_it_fastest():
    errors = {e.path: e for e in measure_path_errors([ADDMM], "float32")}
    assert errors["tf32x3"].max_abs < 1e-5 < 1e-4 < errors["tf32"].max_abs * SAFETY
    assert errors["tf32"].k == [768]
    ladder = precision_ladder(list(errors.values()), "float32", 1e-4, 1e-4, H200)
    ok = {r.path for r in ladder.admissible()}
    # the compensated fp16 split (fp16x3) keeps ~3xTF32's error here and runs at fp16 / 3, above TF32 / 3
    assert {"fp32", "tf32x3", "fp16x3"} <= ok and not ok & {"tf32", "bf16", "fp16", "fp8"}
    assert ladder.fastest == "fp16x3"
    rung = next(r for r in ladder.rungs if r.path == "tf32x3")
    assert rung.rate.value == H200.peak_flops["tf32x3"] and rung.rate.source == "derived"
    assert "tf32x3: PASSES" in "\n".join(ladder.lines()) and "emulation" in ladder.method


def test_loose_policy_admits_tensor_core_paths_and_fp8_never_at_1e_2():
    errors = measure_path_errors([ADDMM, SDPA], "float32")
    ladder = precision_ladder(errors, "float32", 1e-2, 1e-2, H200)
    ok = {r.path for r in ladder.admissible()}
    assert {"fp32", "tf32x3", "tf32"} <= ok and "fp8" not in ok
    assert H200.peak_flops[ladder.fastest] >= H200.peak_flops["tf32"]


def test_rates_say_measured_here_after_calibration_and_no_gpu_without_one():
    errors = measure_path_errors([ADDMM], "float32")
    cal = Calibration.model_validate({
        "device": {"name": "NVIDIA H200", "uuid": "GPU-x"}, "measured_at": "2026-12-01T06:00:00Z",
        "ceilings": [{"key": "mm_tf32x3", "value": 200e12, "unit": "FLOP/s", "best_ms": 1.0, "median_ms": 1.0,
                      "amount": 2e11, "method": "triton tf32x3 GEMM"}]})
    ladder = precision_ladder(errors, "float32", 1e-4, 1e-4, apply_calibration(H200, cal))
    rung = next(r for r in ladder.rungs if r.path == "tf32x3")
    assert rung.rate.source == "measured" and "measured here" in rung.line()
    none = precision_ladder(errors, "float32", 1e-4, 1e-4, None)
    assert none.fastest == "fp16x3" and all(r.rate.detail == NO_GPU for r in none.rungs) and none.note


def test_without_measured_errors_only_the_policy_rule_applies():
    assert admissible_compute_type("float32", None, [], H200) == "fp32"
    errors = measure_path_errors([ADDMM], "float32")
    assert admissible_compute_type("float32", None, errors, H200) == "fp16x3"


def test_a_path_this_gpu_does_not_price_falls_back_to_an_admissible_one_it_does(monkeypatch):
    """A GPU spec without the ladder's fastest path must not fall back to the policy rule's path when the
    ladder refused that one (here: the policy says tf32 at this loose tolerance, the output check refused it)."""
    import egg_mcp.analysis.precision as precision
    from egg_mcp.analysis.precision import PrecisionLadder, Rung
    from egg_mcp.analysis.roofline import TF32_MIN_TOLERANCE, compute_type_for
    from egg_mcp.contract import default_tolerance
    from egg_mcp.hardware import Ceiling

    loose = default_tolerance("float32").model_copy(update={"atol": TF32_MIN_TOLERANCE, "rtol": TF32_MIN_TOLERANCE})
    assert compute_type_for("float32", loose) == "tf32"

    def rung(path, ok):
        return Rung(path=path, how="", rate=Ceiling(key=path, value=1e12, unit="FLOP/s", source="datasheet",
                                                    detail=""), admissible=ok, why="")

    ladder = PrecisionLadder(rungs=[rung("fp32", True), rung("tf32x3", True), rung("tf32", False)], fastest="tf32x3")
    monkeypatch.setattr(precision, "precision_ladder", lambda *a, **k: ladder)
    no_x3 = H200.model_copy(update={"peak_flops": {k: v for k, v in H200.peak_flops.items() if k != "tf32x3"}})
    assert admissible_compute_type("float32", loose, ["measured"], no_x3) == "fp32"
    assert admissible_compute_type("float32", loose, ["measured"], H200) == "tf32x3"


def test_half_task_ladder_starts_at_its_own_dtype():
    errors = measure_path_errors([ADDMM], "bfloat16")
    ladder = precision_ladder(errors, "bfloat16", 1e-2, 1e-2, H200)
    assert [r.path for r in ladder.rungs] == ["bf16", "fp8"] and ladder.fastest == "bf16"


def test_after_calibration_floors_use_upper_bounds_of_each_path():
    # the H200 calibration (benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/calibrate_3753365.json):
    # the plain Triton 3xTF32 GEMM (35.5) and cuBLAS's SGEMM (51.1) are not what the paths can reach: the guidance
    # run flagged a 3xTF32 kernel "below the floor" of the fp32 path it had beaten
    def row(key, value):
        return {"key": key, "value": value, "unit": "FLOP/s", "best_ms": 1.0, "median_ms": 1.0, "amount": 1e12,
                "method": f"{key} probe"}

    cal = Calibration.model_validate({
        "device": {"name": "NVIDIA H200", "uuid": "GPU-x"}, "measured_at": "2026-12-01T12:44:00Z",
        "ceilings": [row("fp32_fma", 64.4e12), row("mm_fp32_ieee", 51.1e12), row("mm_tf32", 414.2e12),
                     row("mm_tf32x3", 35.5e12)]})
    spec = apply_calibration(H200, cal)
    assert spec.peak_flops["fp32"] == 64.4e12 and "FMA peak" in spec.provenance["fp32"]
    assert spec.peak_flops["tf32x3"] == pytest.approx(414.2e12 / 3)
    assert "51.1 TFLOP/s" in spec.provenance["fp32"] and "35.5 TFLOP/s" in spec.provenance["tf32x3"]
    ladder = precision_ladder(measure_path_errors([ADDMM], "float32"), "float32", 1e-4, 1e-4, spec)
    assert ladder.fastest == "fp16x3"  # fp16 not measured: its datasheet lead / 3 (263) is above TF32 / 3
    rung = next(r for r in ladder.rungs if r.path == "tf32x3")
    assert rung.rate.source == "derived" and rung.rate.value == pytest.approx(138.07e12, rel=1e-3)
