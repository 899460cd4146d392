"""The peak each measured ceiling is compared with, for the same unit (pure; no torch).

Two kinds, each labelled: computed from the device's own clocks the way Nsight Compute derives its
peaks (FMA lanes x 2 x max SM clock; 2 x max memory clock x bus width), and vendor datasheet dense
tensor-core rates. A ceiling with neither (L2 bandwidth: no public figure) says so.
"""

from __future__ import annotations

from typing import Any

from egg_mcp.hardware import SPLIT_PATHS

FP32_LANES_PER_SM = {"8.0": 64}
"""FP32 FMA lanes per SM: 128 on sm_86 and later (Ada, Hopper, Blackwell), 64 on A100 (sm_80)."""

DATASHEET_TENSOR: dict[str, dict[str, float]] = {
    # dense (no sparsity) FLOP/s, SXM parts; H200 and H100 SXM share the GH100 compute
    "H200": {"tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "dram": 4.8e12},
    "H100": {"tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "dram": 3.35e12},
    "H20": {"tf32": 74e12, "bf16": 148e12, "fp16": 148e12, "fp8": 296e12, "dram": 4.0e12},
    "A100": {"tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "dram": 2.04e12},
    "L40S": {"tf32": 183e12, "bf16": 362e12, "fp16": 362e12, "fp8": 733e12, "dram": 0.864e12},
}


DATASHEET_CLOCK_MHZ: dict[str, int] = {"H200": 1830, "H100": 1830, "A100": 1410}
"""The SM clock each datasheet's dense tensor-core figure assumes. H100/H200 SXM: NVIDIA's H100 whitepaper
(Table 3) gives peak rates at the GPU boost clock, 1830 MHz for the tensor cores (1980 MHz is the max SM
clock NVML reports): 989.4 TFLOP/s = 132 SMs x 4096 dense bf16 FLOP/clk/SM x 1830 MHz, and TF32 / FP8 are
x1/2 / x2 of it. A100: 312 TFLOP/s = 108 SMs x 2048 x 1410 MHz boost (A100 whitepaper). H20 and L40S: their
datasheets name no clock their figure holds at (L40S's 2520 MHz boost does not reproduce 362 TFLOP/s), so
those figures get no clock adjustment."""
DATASHEET_CLOCK_SOURCE = {
    "H200": "H100 whitepaper Table 3: peak rates at the 1830 MHz tensor-core boost clock "
            "(132 SMs x 4096 FLOP/clk x 1830 MHz = 989.4 TFLOP/s bf16)",
    "H100": "H100 whitepaper Table 3: peak rates at the 1830 MHz tensor-core boost clock "
            "(132 SMs x 4096 FLOP/clk x 1830 MHz = 989.4 TFLOP/s bf16)",
    "A100": ("A100 whitepaper: peak rates at the 1410 MHz boost clock "
             "(108 SMs x 2048 FLOP/clk x 1410 MHz = 312 TFLOP/s)"),
}


def datasheet_entry(name: str | None) -> tuple[str, dict[str, float]] | None:
    if not name:
        return None
    upper = name.upper()
    for key in sorted(DATASHEET_TENSOR, key=len, reverse=True):
        if key in upper:
            return key, DATASHEET_TENSOR[key]
    return None


def device_peaks(facts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{ceiling key: {"value", "source"[, "clock_mhz", "clock_source"]}} (the SM clock the peak assumes) for the
    device described by `facts` (see probes.device_facts)."""
    peaks: dict[str, dict[str, Any]] = {}
    sms, clock = facts.get("sm_count"), facts.get("sm_clock_max_mhz")
    if sms and clock:
        lanes = FP32_LANES_PER_SM.get(str(facts.get("compute_capability")), 128)
        fma = sms * lanes * 2 * clock * 1e6
        src = f"{sms} SMs x {lanes} FP32 lanes x 2 x {clock} MHz max SM clock (how ncu derives its FMA peak)"
        at = {"clock_mhz": clock, "clock_source": "the max SM clock NVML reports (the peak's own clock)"}
        peaks["fp32_fma"] = {"value": fma, "source": src, **at}
        peaks["mm_fp32_ieee"] = {"value": fma, "source": "the FP32 FMA peak: " + src, **at}
    mem, bus = facts.get("mem_clock_max_mhz"), facts.get("mem_bus_width_bits")
    if mem and bus:
        dram = 2 * mem * 1e6 * bus / 8
        src = f"2 x {mem} MHz max memory clock x {bus}-bit bus (how ncu derives its DRAM peak)"
        peaks["dram_copy"] = {"value": dram, "source": src}
        peaks["dram_read"] = {"value": dram, "source": src}
    entry = datasheet_entry(facts.get("name"))
    if entry:
        key, sheet = entry
        at = ({"clock_mhz": DATASHEET_CLOCK_MHZ[key], "clock_source": DATASHEET_CLOCK_SOURCE[key]}
              if key in DATASHEET_CLOCK_MHZ else {})
        for ceiling, unit in (("mm_tf32", "tf32"), ("mm_bf16", "bf16"), ("mm_fp16", "fp16"), ("mm_fp8", "fp8")):
            if unit in sheet:
                peaks[ceiling] = {"value": sheet[unit], "source": f"{key} datasheet, dense {unit} tensor core", **at}
        for split, (unit, words) in SPLIT_PATHS.items():
            if unit in sheet:
                peaks[f"mm_{split}"] = {"value": sheet[unit] / 3,
                                        "source": f"{key} datasheet dense {words} / 3 (three {words} products per "
                                                  "fp32 product)", **at}
        if "dram" in sheet and "dram_copy" not in peaks:
            for ceiling in ("dram_copy", "dram_read"):
                peaks[ceiling] = {"value": sheet["dram"], "source": f"{key} datasheet memory bandwidth"}
    return peaks
