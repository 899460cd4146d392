"""Run the calibration probes as a job through the evaluation engine, store and describe the result."""

from __future__ import annotations

from pathlib import Path

from egg_mcp.calibration import store
from egg_mcp.calibration.models import Calibration
from egg_mcp.evaluation.api import Evaluator

TARGET = "egg_mcp.calibration.probes:run_probes"
TIMEOUT_S = 240.0


class CalibrationError(RuntimeError):
    """Calibration could not run (no GPU) or its job failed; the message says what to do."""


async def calibrate(evaluator: Evaluator, workspace_root: Path | None, *, quick: bool = False,
                    device_index: int = 0, timeout_s: float = TIMEOUT_S) -> Calibration:
    """Measure this GPU's ceilings in an isolated GPU job (serialised with every other GPU job) and
    store them under `<workspace>/calibration/<uuid>.json` when `workspace_root` is given."""
    if not evaluator.has_gpu():
        raise CalibrationError("no GPU: calibration measures a CUDA GPU; there is nothing to measure on this machine")
    outcome = await evaluator.run_job(TARGET, {"quick": quick, "device_index": device_index},
                                      timeout_s=timeout_s, uses_gpu=True)
    if not outcome.ok or outcome.result is None:
        why = outcome.error.message if outcome.error else ("timed out" if outcome.timed_out else
                                                          f"worker exited {outcome.exit_code}")
        raise CalibrationError(f"calibration job failed: {why}; stderr tail: {outcome.stderr_tail[-600:]}")
    calibration = Calibration.model_validate(outcome.result)
    if workspace_root is not None and calibration.device.uuid:
        store.save(workspace_root, calibration)
    return calibration


async def ensure_calibrated(evaluator: Evaluator, workspace_root: Path, uuid: str | None) -> Calibration | None:
    """The stored calibration of GPU `uuid`, measuring it first when there is none (first GPU use)."""
    existing = store.load(workspace_root, uuid)
    if existing is not None or not evaluator.has_gpu():
        return existing
    return await calibrate(evaluator, workspace_root)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes/s":
        return f"{value / 1e12:.2f} TB/s"
    return f"{value / 1e12:.1f} TFLOP/s"


def describe(calibration: Calibration) -> list[str]:
    """Human-readable lines: device, then each ceiling beside its peak, the ratio and the method."""
    d = calibration.device
    lines = [f"{d.name} ({d.uuid}), driver {d.driver or '?'}, CUDA {d.cuda or '?'}, torch {d.torch}, "
             f"triton {d.triton}; SM clock {d.sm_clock_mhz or '?'} MHz (max {d.sm_clock_max_mhz or '?'}), "
             f"memory clock {d.mem_clock_mhz or '?'} MHz; measured {calibration.measured_at} "
             f"in {calibration.wall_s:.1f} s",
             f"{'ceiling':<14}{'measured':>16}{'peak':>16}{'ratio':>8}  method / peak source"]
    for c in calibration.ceilings:
        ratio = f"{c.ratio_to_peak * 100:.0f} %" if c.ratio_to_peak else "-"
        lines.append(f"{c.key:<14}{_fmt(c.value, c.unit):>16}{_fmt(c.peak, c.unit):>16}{ratio:>8}  {c.method}")
        lines.append(f"{'':<54}peak: {c.peak_source or 'no datasheet or ncu figure'}"
                     + (f"; {c.note}" if c.note else ""))
        if c.clock_adjusted_peak and c.clock_under_load:
            lines.append(f"{'':<54}at the {c.clock_under_load.get('median_mhz'):.0f} MHz SM clock under load: peak "
                         f"{_fmt(c.clock_adjusted_peak, c.unit)}, ratio {c.ratio_to_clock_adjusted_peak:.0%}")
    for key, why in calibration.skipped.items():
        lines.append(f"{key:<14}{'not measured':>16}  {why}")
    return lines
