"""What the GPU's clock and power did while a probe ran: NVML read by a background thread.

A best-of-10 timing of a ~1 ms GEMM is over before NVML's clock reading moves, and a reading taken
before or after sees an idle GPU. So each compute ceiling is also run as a sustained burst (~0.5 s of
back-to-back launches, timed end to end with CUDA events) while a thread reads NVML every ~5 ms: the
burst's rate and the clock, power and clocks-event (throttle) reasons of the same window belong
together. Pure Python around injected callables (`read`, `launch`, the burst's start/stop), so every
branch is tested on the CPU with fakes; `nvml_reader` builds `read` from the timer's NVML handle.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any, Callable

CLOCK_EVENT_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""NVML's clocks-event (formerly throttle) reason bits (nvml.h, nvmlClocksEventReason*)."""
POWER_REASONS = {"sw_power_cap", "hw_power_brake_slowdown"}
THERMAL_REASONS = {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"}
NVML_FI_DEV_POWER_INSTANT = 186
"""nvml.h field id of the instantaneous board power (mW); nvmlDeviceGetPowerUsage averages over ~1 s on
Ampere-and-later parts other than GA100, too slow for a 0.5 s burst."""


def nvml_reader(nvml: Any, handle: Any) -> Callable[[], dict[str, Any]]:
    """A `read()` giving sm_clock_mhz, power_w (+ power_source), power_limit_w, temp_c and the clocks-event reasons.
    Each part that NVML refuses is left out (never guessed); no handle: every read is {}."""
    if nvml is None or handle is None:
        return lambda: {}
    reasons_fn = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                  or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    limit_w: list[float | None] = []

    def power() -> tuple[float, str] | None:
        try:
            values = nvml.nvmlDeviceGetFieldValues(handle, [NVML_FI_DEV_POWER_INSTANT])
            v = values[0]
            if int(getattr(v, "nvmlReturn", 1)) == 0:
                return float(v.value.uiVal) / 1e3, "NVML instantaneous power"
        except Exception:  # noqa: BLE001 - older driver or binding: fall back to the averaged reading
            pass
        try:
            return float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1e3, "NVML power usage (~1 s average)"
        except Exception:  # noqa: BLE001
            return None

    def read() -> dict[str, Any]:
        out: dict[str, Any] = {}
        try:
            out["sm_clock_mhz"] = int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001
            pass
        got = power()
        if got:
            out["power_w"], out["power_source"] = got
        if not limit_w:
            try:
                limit_w.append(float(nvml.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1e3)
            except Exception:  # noqa: BLE001
                limit_w.append(None)
        if limit_w[0]:
            out["power_limit_w"] = limit_w[0]
        try:
            out["temp_c"] = int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        except Exception:  # noqa: BLE001
            pass
        if reasons_fn is not None:
            try:
                bits = int(reasons_fn(handle))
                out["throttle_reasons"] = [name for bit, name in CLOCK_EVENT_BITS.items() if bits & bit]
            except Exception:  # noqa: BLE001
                pass
        return out

    return read


class LoadSampler:
    """Context manager: a daemon thread calls `read()` every `interval_s` until exit; `summary()` then
    condenses the readings taken after the first `settle_s` (the clock ramps when the work starts)."""

    def __init__(self, read: Callable[[], dict[str, Any]], interval_s: float = 0.005, settle_s: float = 0.05):
        self.read, self.interval_s, self.settle_s = read, interval_s, settle_s
        self.readings: list[tuple[float, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = self.stopped = 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                got = self.read()
            except Exception:  # noqa: BLE001 - a failing read is a missing sample, not a failed probe
                got = {}
            self.readings.append((time.monotonic() - self.started, got))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> LoadSampler:
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="egg-calibration-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped = time.monotonic() - self.started
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def summary(self) -> dict[str, Any] | None:
        """median/min/max SM clock (MHz), median/max power (W), power limit, the union of reasons, the
        sample count and window; None when no reading carried a clock (no NVML)."""
        kept = [r for t, r in self.readings if t >= min(self.settle_s, self.stopped / 2)]
        clocks = [r["sm_clock_mhz"] for r in kept if r.get("sm_clock_mhz")]
        if not clocks:
            return None
        out: dict[str, Any] = {"median_mhz": statistics.median(clocks), "min_mhz": min(clocks),
                               "max_mhz": max(clocks), "samples": len(clocks),
                               "window_s": round(self.stopped, 4),
                               "throttle_reasons": sorted({x for r in kept for x in r.get("throttle_reasons") or ()})}
        powers = [r["power_w"] for r in kept if r.get("power_w") is not None]
        if powers:
            out.update(power_median_w=statistics.median(powers), power_max_w=max(powers),
                       power_source=next(r["power_source"] for r in kept if r.get("power_source")))
        temps = [r["temp_c"] for r in kept if r.get("temp_c") is not None]
        if temps:
            out.update(temp_first_c=temps[0], temp_last_c=temps[-1], temp_max_c=max(temps))
        limits = [r["power_limit_w"] for r in kept if r.get("power_limit_w")]
        if limits:
            out["power_limit_w"] = limits[-1]
        return out


def sustained_burst(launch: Callable[[], Any], seconds_per_launch: float, read: Callable[[], dict[str, Any]],
                    start: Callable[[], Any], stop: Callable[[], float], *, busy_s: float = 0.5,
                    max_launches: int = 600, interval_s: float = 0.005) -> dict[str, Any]:
    """Run ~`busy_s` of back-to-back launches between `start()` and `stop() -> elapsed ms` (stop waits for
    the GPU) with a LoadSampler around them. Returns {"launches", "ms_per_launch", "load": summary|None}.

    `max_launches` stays under the CUDA launch queue's depth (~1024): a full queue blocks the launching
    thread inside the launch call, GIL held, and the sampler would starve."""
    n = max(3, min(max_launches, int(busy_s / max(seconds_per_launch, 1e-6))))
    with LoadSampler(read, interval_s=interval_s, settle_s=min(0.1, busy_s / 5)) as sampler:
        start()
        for _ in range(n):
            launch()
        elapsed_ms = float(stop())
    return {"launches": n, "ms_per_launch": elapsed_ms / n, "load": sampler.summary()}
