"""Run the calibration probes as a job through the evaluation engine, store and describe the result."""

from __future__ import annotations

from pathlib import Path

from egg_mcp.contract import Evaluator
from egg_mcp.hardware import calibration_store as store
from egg_mcp.hardware.calibration_record import Calibration

TARGET = "egg_mcp.calibration.probes:run_probes"
TIMEOUT_S = 240.0


class CalibrationError(RuntimeError):
    """Calibration could not run (no GPU) or its job failed; the message says what to do."""


async def calibrate(evaluator: Evaluator, workspace_root: Path | None, *, quick: bool = False,
                    device_index: int = 0, timeout_s: float = TIMEOUT_S, ncu: bool = False) -> Calibration:
    """Measure this GPU's ceilings in an isolated GPU job (serialised with every other GPU job) and
    store them under `<workspace>/calibration/<uuid>.json` when `workspace_root` is given. `ncu`: also read
    the GEMMs' pipe busy share and the L2 probe's L2 throughput with Nsight Compute, in one job (ncu_gemm.py)."""
    if not evaluator.has_gpu():
        raise CalibrationError("no GPU: calibration measures a CUDA GPU; there is nothing to measure on this machine")
    outcome = await evaluator.run_job(TARGET, {"quick": quick, "device_index": device_index},
                                      timeout_s=timeout_s, uses_gpu=True)
    if not outcome.ok or outcome.result is None:
        why = outcome.error.message if outcome.error else ("timed out" if outcome.timed_out else
                                                          f"worker exited {outcome.exit_code}")
        raise CalibrationError(f"calibration job failed: {why}; stderr tail: {outcome.stderr_tail[-600:]}")
    record = outcome.result
    if ncu:
        record = await _with_ncu_readings(evaluator, record, timeout_s)
    calibration = Calibration.model_validate(record)
    if workspace_root is not None and calibration.device.uuid:
        store.save(workspace_root, calibration)
    return calibration


async def _with_ncu_readings(evaluator: Evaluator, record: dict, timeout_s: float) -> dict:
    """The record with ncu's pipe reading on each GEMM row and ncu's L2 SM-read path reading on the l2_read row
    (one ncu job for all of them), and those rows re-explained."""
    import time

    from egg_mcp.calibration.explain import PIPE_KEYS, add_l2_reading
    from egg_mcp.calibration.matmul import add_tensor_pipe
    from egg_mcp.calibration.ncu_gemm import L2_KEY, read_tensor_pipe

    started = time.perf_counter()
    ceilings = record.get("ceilings", [])
    rows = [r for r in ceilings if r.get("key") in PIPE_KEYS and r.get("shape")]
    by_key = {r.get("key"): r for r in ceilings}
    l2 = by_key.get(L2_KEY)
    if rows or l2:
        readings = await read_tensor_pipe(evaluator, [(r["key"], r["shape"]) for r in rows], timeout_s=timeout_s,
                                          l2={"quick": bool(record.get("quick"))} if l2 else None)
        add_tensor_pipe(rows, readings)
        if l2:
            add_l2_reading(l2, readings.get(L2_KEY), by_key.get("dram_read"))
    extra = dict(record.get("extra") or {})
    extra["ncu_wall_s"] = round(time.perf_counter() - started, 2)
    return {**record, "extra": extra}


async def ensure_calibrated(evaluator: Evaluator, workspace_root: Path, uuid: str | None) -> Calibration | None:
    """The stored calibration of GPU `uuid`, measuring it first when there is none (first GPU use), or when the stored
    one predates the tiling model's time constants (no constants, and no reason they were skipped): without them the
    model would price this GPU with the H200's."""
    existing = store.load(workspace_root, uuid)
    stale = existing is not None and not existing.constants and "model_constants" not in existing.skipped
    if (existing is not None and not stale) or not evaluator.has_gpu():
        return existing
    return await calibrate(evaluator, workspace_root)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes/s":
        return f"{value / 1e12:.2f} TB/s"
    return f"{value / 1e12:.1f} TFLOP/s"


def _load_text(load: dict) -> str:
    parts = [f"{load.get('median_mhz'):.0f} MHz SM clock under load (NVML, {load.get('samples')} samples, "
             f"{load.get('min_mhz')}-{load.get('max_mhz')})"]
    if load.get("power_median_w") is not None:
        limit = f" of {load['power_limit_w']:.0f} W limit" if load.get("power_limit_w") else ""
        parts.append(f"power {load['power_median_w']:.0f} W median, {load.get('power_max_w', 0):.0f} max{limit}")
    parts.append("clocks-event reasons: " + (", ".join(load.get("throttle_reasons") or ()) or "none"))
    return "; ".join(parts)


def _l2_text(t: dict, amount: float) -> str:
    """ncu's L2 reading: the SM-read path (rate, share, peak, the return path's busy share per slice), then
    lts__t_bytes as context, the DRAM bytes, the clocks and the kernel."""
    if t.get("error"):
        return t["error"]
    seconds = (t.get("kernel_ms") or 0) * 1e-3
    parts = []
    sm = t.get("sm_read")
    if sm:
        from egg_mcp.calibration.explain import per_slice

        busy = (f", return path (lts2xbar) {sm['busy_pct']:.1f} % busy" if sm.get("busy_pct") is not None else
                ", no return-path busy share") + per_slice(sm)
        parts.append(f"L2 SM-read path {sm['bytes_per_s'] / 1e12:.2f} TB/s = {sm['pct_of_peak']:.1f} % of its "
                     "sustained "
                     f"peak ({sm['peak'] / 1e12:.2f} TB/s" + (f" at L2 clock {sm['l2_clock_mhz']:.0f} MHz"
                                                            if sm.get("l2_clock_mhz") else "") + f"){busy}")
    elif t.get("sm_read_missing"):
        parts.append(f"no SM-read path reading ({t['sm_read_missing']})")
    if t.get("bytes_per_s") and t.get("peak"):
        counted = (f", {t['bytes_per_s'] * seconds / amount:.2f}x the probe's bytes" if seconds and amount else "")
        parts.append(f"lts__t_bytes {t['bytes_per_s'] / 1e12:.2f} TB/s = {t['pct_of_peak']:.1f} % of its sustained "
                     "peak "
                     f"({t['peak'] / 1e12:.2f} TB/s){counted}")
    if t.get("other_units"):
        parts.append("other units " + ", ".join(f"{k} {v:.1f} %" for k, v in t["other_units"].items()))
    dram = t.get("dram_read_bytes")
    return ("; ".join(parts) + " in the profiled launch"
            + (f", {dram / 2 ** 20:.0f} MiB read from DRAM" if dram is not None else "")
            + (f", SM clock {t['clock_mhz']:.0f} MHz" if t.get("clock_mhz") else "")
            + f", kernel {t.get('kernel')}")


def describe(calibration: Calibration) -> list[str]:
    """Human-readable lines: device, then per ceiling the measured value, the peak, the clock-adjusted peak,
    the reason label, the method, the peak's source and clock, and what NVML / ncu saw while it ran."""
    d = calibration.device
    pad = " " * 14
    lines = [f"{d.name} ({d.uuid}), driver {d.driver or '?'}, CUDA {d.cuda or '?'}, torch {d.torch}, "
             f"triton {d.triton}; SM clock {d.sm_clock_mhz or '?'} MHz (max {d.sm_clock_max_mhz or '?'}), "
             f"memory clock {d.mem_clock_mhz or '?'} MHz; measured {calibration.measured_at} "
             f"in {calibration.wall_s:.1f} s",
             f"{'ceiling':<14}{'measured':>16}{'peak':>16}{'ratio':>7}{'clock-adj peak':>16}{'ratio':>7}  reason"]
    for c in calibration.ceilings:
        ratio = f"{c.ratio_to_peak:.0%}" if c.ratio_to_peak else "-"
        adj = f"{c.ratio_to_clock_adjusted_peak:.0%}" if c.ratio_to_clock_adjusted_peak else "-"
        lines.append(f"{c.key:<14}{_fmt(c.value, c.unit):>16}{_fmt(c.peak, c.unit):>16}{ratio:>7}"
                     f"{_fmt(c.clock_adjusted_peak, c.unit):>16}{adj:>7}  {c.reason or '-'}")
        lines.append(f"{pad}method: {c.method}")
        clock = (f" (at {c.peak_clock_mhz:.0f} MHz: {c.peak_clock_source})" if c.peak_clock_mhz else
                 (" (no clock stated for it)" if c.peak else ""))
        lines.append(f"{pad}peak: {c.peak_source or 'no datasheet or ncu figure'}{clock}"
                     + (f"; {c.note}" if c.note else ""))
        if c.clock_under_load:
            text = _load_text(c.clock_under_load)
            if c.sustained:
                text = (f"sustained {_fmt(c.sustained.get('rate'), c.unit)} over {c.sustained.get('launches')} "
                        f"back-to-back launches at the " + text)
            if c.clock_adjusted_peak:
                text += (f"; at the {c.clock_under_load.get('median_mhz'):.0f} MHz SM clock under load: peak "
                         f"{_fmt(c.clock_adjusted_peak, c.unit)}, ratio {c.ratio_to_clock_adjusted_peak:.0%}")
            lines.append(f"{pad}{text}")
        if c.ncu_l2:
            lines.append(f"{pad}ncu: {_l2_text(c.ncu_l2, c.amount)}")
        if c.tensor_pipe:
            t = c.tensor_pipe
            lines.append(f"{pad}ncu: " + (t["error"] if t.get("error") else
                                          f"{t.get('pipe', 'tensor')} pipe {t.get('busy_pct'):.1f} % busy (elapsed; "
                                          f"{t.get('busy_active_pct') or 0:.1f} % of active cycles) at "
                                          f"{t.get('clock_mhz') or 0:.0f} MHz, kernel {t.get('kernel')}"))
    for m in calibration.constants:
        value = f"{m.value / 1e9:.2f} GB/s" if m.unit.startswith("bytes/s") else f"{m.value * 1e9:.0f} ns"
        lines.append(f"{m.key:<20}{value:>12}  tiling model constant ({m.unit}): {m.method}")
    for key, why in calibration.skipped.items():
        lines.append(f"{key:<14}{'not measured':>16}  {why}")
    return lines
