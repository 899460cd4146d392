"""The calibration record: one per GPU (by UUID), stored as JSON in the workspace."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class MeasuredCeiling(BaseModel):
    key: str = Field(description="dram_copy | dram_read | l2_read | fp32_fma | mm_fp32_ieee | mm_tf32x3 | mm_fp16x3 | "
                                 "mm_bf16x3 | mm_tf32 | mm_bf16 | mm_fp16 | mm_fp8")
    unit: str
    value: float = Field(description="the best of the timed runs, in `unit`")
    best_ms: float
    median_ms: float
    amount: float = Field(description="bytes or FLOPs one run moves / does")
    method: str
    peak: float | None = None
    peak_source: str | None = None
    ratio_to_peak: float | None = None
    note: str = ""
    peak_clock_mhz: float | None = Field(default=None, description="the SM clock the peak figure assumes")
    peak_clock_source: str | None = None
    clock_under_load: dict[str, Any] | None = Field(
        default=None, description="what NVML reported while the probe ran (fp32_fma and the matmuls): SM clock "
                                  "median/min/"
                          "max MHz, samples, clocks-event (throttle) reasons; the matmuls' sustained burst also "
                          "power median/max W, its source, and the enforced power limit")
    clock_adjusted_peak: float | None = Field(default=None, description="peak x clock under load / peak_clock_mhz")
    ratio_to_clock_adjusted_peak: float | None = Field(
        default=None, description="the sustained rate (best-of-N value where there is no burst) / clock_adjusted_peak")
    sustained: dict[str, Any] | None = Field(
        default=None, description="matmuls: the kept shape run back to back for ~0.5 s (rate, ms per launch, "
                                  "launches): "
                          "the rate that belongs to clock_under_load")
    shape: int | None = Field(default=None, description="matmuls: the square size the sweep kept (the fastest)")
    shapes: list[dict[str, Any]] = Field(default_factory=list, description="matmuls: every size swept, rate or error")
    tensor_pipe: dict[str, Any] | None = Field(
        default=None, description="`calibrate --ncu`: ncu's tensor-pipe busy % and SM clock for the kept GEMM, or its "
                                  "error")
    ncu_l2: dict[str, Any] | None = Field(
        default=None, description="`calibrate --ncu`, l2_read only: the probe's launch under ncu: sm_read (the L2 "
                                  "slices' "
                          "SM-read rate, share and peak, the return path's busy share and per-slice spread, the L2 "
                          "clock) or sm_read_missing; lts__t_bytes rate, share and peak (context); other units' "
                          "shares; the DRAM bytes read; or its error")
    reason: str | None = Field(default=None, description="why the ceiling sits where it does, from the measurements "
                                                         "above")
    explained: bool | None = Field(default=None, description="within 10 % of the peak, or the measured factors account "
                                                             "for "
                                                     "the gap within 10 %; None in records from before the label")
    layouts: list[dict[str, Any]] = Field(default_factory=list, description="every grid the probe tried")


class MeasuredConstant(BaseModel):
    """One of the tiling model's time constants, measured on this GPU (calibration/model_constants.py)."""

    key: str = Field(description="launch_overhead_s | program_dispatch_s | warp_stream_bps | dram_latency_s")
    unit: str
    value: float = Field(description="from median times of the probe's runs")
    method: str
    times_ms: list[float] = Field(default_factory=list, description="the probe's median times it is computed from")


class DeviceFacts(BaseModel):
    name: str
    uuid: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    mem_clock_max_mhz: int | None = None
    mem_bus_width_bits: int | None = None
    regs_per_sm: int | None = None
    max_threads_per_sm: int | None = None
    smem_per_block_optin_bytes: int | None = None
    smem_per_sm_bytes: int | None = None


class Calibration(BaseModel):
    device: DeviceFacts
    ceilings: list[MeasuredCeiling]
    constants: list[MeasuredConstant] = Field(default_factory=list, description="the tiling model's time constants")
    skipped: dict[str, str] = Field(default_factory=dict, description="probes not run, and why")
    timer: str = ""
    measured_at: str
    wall_s: float = 0.0
    quick: bool = False
    extra: dict[str, Any] = Field(default_factory=dict)

    def get(self, key: str) -> MeasuredCeiling | None:
        return next((c for c in self.ceilings if c.key == key), None)
