"""The SM clock and throttle reasons of the GPU a timing ran on, read through NVML beside each reading (timing.py)."""

from __future__ import annotations

from typing import Any

import torch

THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}


class NvmlProbe:
    """SM clock and throttle reasons of the GPU torch runs on (None fields when NVML is missing)."""

    def __init__(self, device_index: int = 0):
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            handle = None
            uuid = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
            if uuid is not None:
                try:
                    handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
                except Exception:
                    handle = None
            self.handle = handle or pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self.driver = pynvml.nvmlSystemGetDriverVersion()
            if isinstance(self.driver, bytes):
                self.driver = self.driver.decode()
        except Exception:
            self.handle = None
            self.driver = None

    def read(self) -> dict[str, Any]:
        if self.handle is None:
            return {}
        nv = self.nvml
        out: dict[str, Any] = {}
        try:
            out["sm_clock_mhz"] = int(nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM))
        except Exception:
            pass
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        try:
            bits = int(reasons_fn(self.handle)) if reasons_fn else 0
            out["throttle_reasons"] = [name for bit, name in THROTTLE_BITS.items() if bits & bit]
        except Exception:
            pass
        return out
