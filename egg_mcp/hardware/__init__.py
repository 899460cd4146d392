"""Hardware model: the limits and ceilings every roofline, occupancy and tiling estimate uses.

Every ceiling says where it came from (`GpuSpec.provenance`, read through `ceiling()`):
  * ``measured`` — by `egg-mcp calibrate` on this very GPU (by UUID), with the time and method,
  * ``datasheet`` — a lead from the table below (vendor figures, or achievable shares of them),
  * ``derived`` — computed from another lead (e.g. TF32 = bf16 / 2), saying from what.
An unknown GPU never borrows another GPU's table: without a calibration it has no ceilings, and
`gpu_status()` says "unknown GPU <name>: no datasheet lead; run egg-mcp calibrate". With no GPU at
all, everything says "no GPU".
The server process never imports torch for this: NVML is enough to pick the table entry, and the
evaluation workers (which already hold torch) refine it with `torch.cuda.get_device_properties`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from egg_mcp.hardware.calibration_record import Calibration

log = logging.getLogger(__name__)

KiB = 1024
MiB = 1024 * 1024


class GpuSpec(BaseModel):
    """What a kernel engineer needs to know about one GPU model."""

    name: str
    arch: str = Field(description="SM architecture, e.g. 'sm_90'")
    sm_count: int
    max_threads_per_sm: int
    max_threads_per_block: int = 1024
    max_blocks_per_sm: int
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    smem_per_sm_bytes: int
    smem_per_block_optin_bytes: int
    l2_bytes: int
    dram_bytes_per_s: float = Field(description="achievable DRAM bandwidth, bytes/s (read+write counted)")
    peak_flops: dict[str, float] = Field(
        description="dense FLOP/s by compute type: fp32 (CUDA cores), tf32, fp16, bf16, fp8 (tensor cores)"
    )
    sm_clock_mhz: int | None = None
    source: Literal["measured", "datasheet", "device"] = "datasheet"
    notes: str = ""
    uuid: str | None = None
    l2_bytes_per_s: float | None = Field(default=None, description="L2 read bandwidth, bytes/s (measured only)")
    provenance: dict[str, str] = Field(
        default_factory=dict,
        description="per ceiling ('dram', 'l2', a peak_flops key): 'measured ...', 'datasheet ...' or 'derived ...'")
    measured_at: str | None = Field(default=None, description="when the calibration these ceilings come from ran")
    model_constants: dict[str, float] = Field(
        default_factory=dict, description="the tiling model's time constants measured here by calibrate (key -> "
                                          "seconds or bytes/s; where each came from: provenance[key])")

    def ridge_point(self, compute: str = "fp32") -> float:
        """FLOP per byte above which a kernel is compute-bound on this GPU."""
        return self.peak_flops[compute] / self.dram_bytes_per_s


_HOPPER: dict[str, Any] = dict(
    arch="sm_90", max_threads_per_sm=2048, max_blocks_per_sm=32,
    smem_per_sm_bytes=228 * KiB, smem_per_block_optin_bytes=227 * KiB,
)

GPU_TABLE: dict[str, GpuSpec] = {
    # Leads for the H200: 4.3 TB/s copy (~90 % of the 4.8 TB/s datasheet), 790 TFLOP/s bf16 and ~51 TFLOP/s
    # IEEE fp32 cuBLAS GEMM rates quoted earlier in this project without a result file behind them, so they
    # are datasheet-grade leads; `egg-mcp calibrate` replaces them with this GPU's own measurements.
    "H200": GpuSpec(
        name="NVIDIA H200", sm_count=132, l2_bytes=60 * MiB, dram_bytes_per_s=4.3e12,
        peak_flops={"fp32": 51e12, "tf32": 395e12, "fp16": 790e12, "bf16": 790e12, "fp8": 1580e12},
        sm_clock_mhz=1980, source="datasheet",
        provenance={
            "dram": "datasheet lead: ~90 % of the H200's 4.8 TB/s (a copy's achievable share), not measured here",
            "fp32": "datasheet lead: ~75 % of the 67 TFLOP/s FP32 datasheet (an IEEE cuBLAS GEMM's share)",
            "bf16": "datasheet lead: ~80 % of the 989 TFLOP/s dense bf16 datasheet",
            "fp16": "datasheet lead: ~80 % of the 989 TFLOP/s dense fp16 datasheet",
            "tf32": "derived from the bf16 lead x 1/2 (TF32 tensor cores run at half the bf16 rate)",
            "fp8": "derived from the bf16 lead x 2 (fp8 tensor cores run at twice the bf16 rate)",
        },
        notes="datasheet leads (see provenance); run `egg-mcp calibrate` for measured ceilings", **_HOPPER,
    ),
    "H100": GpuSpec(
        name="NVIDIA H100", sm_count=132, l2_bytes=50 * MiB, dram_bytes_per_s=3.0e12,
        peak_flops={"fp32": 67e12, "tf32": 495e12, "fp16": 990e12, "bf16": 990e12, "fp8": 1979e12},
        sm_clock_mhz=1980, notes="SXM datasheet; bandwidth ~90% of 3.35 TB/s", **_HOPPER,
    ),
    "H20": GpuSpec(
        name="NVIDIA H20", sm_count=78, l2_bytes=60 * MiB, dram_bytes_per_s=3.6e12,
        peak_flops={"fp32": 44e12, "tf32": 74e12, "fp16": 148e12, "bf16": 148e12, "fp8": 296e12},
        notes="datasheet; bandwidth ~90% of 4.0 TB/s", **_HOPPER,
    ),
    "A100": GpuSpec(
        name="NVIDIA A100", arch="sm_80", sm_count=108, max_threads_per_sm=2048, max_blocks_per_sm=32,
        smem_per_sm_bytes=164 * KiB, smem_per_block_optin_bytes=163 * KiB, l2_bytes=40 * MiB,
        dram_bytes_per_s=1.8e12,
        peak_flops={"fp32": 19.5e12, "tf32": 156e12, "fp16": 312e12, "bf16": 312e12, "fp8": 312e12},
        notes="SXM 80GB datasheet; no fp8 tensor cores (fp8 entry = fp16 rate)",
    ),
    "L40S": GpuSpec(
        name="NVIDIA L40S", arch="sm_89", sm_count=142, max_threads_per_sm=1536, max_blocks_per_sm=24,
        smem_per_sm_bytes=100 * KiB, smem_per_block_optin_bytes=99 * KiB, l2_bytes=96 * MiB,
        dram_bytes_per_s=0.78e12,
        peak_flops={"fp32": 91.6e12, "tf32": 183e12, "fp16": 362e12, "bf16": 362e12, "fp8": 733e12},
        notes="datasheet",
    ),
    "RTX 5090": GpuSpec(
        name="NVIDIA GeForce RTX 5090", arch="sm_120", sm_count=170, max_threads_per_sm=1536,
        max_blocks_per_sm=24, smem_per_sm_bytes=100 * KiB, smem_per_block_optin_bytes=99 * KiB,
        l2_bytes=96 * MiB, dram_bytes_per_s=1.6e12,
        peak_flops={"fp32": 104.8e12, "tf32": 104.8e12, "fp16": 209.5e12, "bf16": 209.5e12, "fp8": 419e12},
        notes="datasheet (fp32-accumulate tensor rates)",
    ),
    "RTX PRO 6000": GpuSpec(
        name="NVIDIA RTX PRO 6000 Blackwell", arch="sm_120", sm_count=188, max_threads_per_sm=1536,
        max_blocks_per_sm=24, smem_per_sm_bytes=100 * KiB, smem_per_block_optin_bytes=99 * KiB,
        l2_bytes=128 * MiB, dram_bytes_per_s=1.6e12,
        peak_flops={"fp32": 125e12, "tf32": 250e12, "fp16": 500e12, "bf16": 500e12, "fp8": 1000e12},
        notes="datasheet",
    ),
}

SPLIT_PATHS = {"tf32x3": ("tf32", "TF32"), "fp16x3": ("fp16", "fp16"), "bf16x3": ("bf16", "bf16")}
"""fp32 emulated by three tensor-core products of a hi/lo split (3xTF32, compensated fp16 / bf16): each runs at
most at its base type's rate / 3 (split key -> (base key, its name in words))."""

for _spec in GPU_TABLE.values():
    for _split, (_base, _words) in SPLIT_PATHS.items():
        if _base in _spec.peak_flops and _split not in _spec.peak_flops:
            _spec.peak_flops[_split] = _spec.peak_flops[_base] / 3
            _spec.provenance.setdefault(_split, f"derived from the {_words} lead / 3 (three {_words} products per "
                                                "fp32 product)")
    _spec.provenance.setdefault("dram", f"datasheet: {_spec.notes or 'vendor datasheet'}")
    for _key in _spec.peak_flops:
        _spec.provenance.setdefault(_key, f"datasheet: {_spec.notes or 'vendor datasheet'}")

NO_GPU = "no GPU"


def unknown_gpu_message(name: str) -> str:
    return f"unknown GPU {name}: no datasheet lead; run egg-mcp calibrate"


def spec_for(name: str | None) -> GpuSpec | None:
    """Table entry whose key appears in `name` (an NVML / torch device name), as datasheet leads.

    None when `name` is None (no GPU) or no entry matches: an unknown GPU never gets another GPU's
    numbers (`gpu_for` adds a calibration of it when there is one)."""
    if name:
        upper = name.upper()
        for key in sorted(GPU_TABLE, key=len, reverse=True):
            if key.upper() in upper:
                return GPU_TABLE[key].model_copy(deep=True)
        log.warning("%s", unknown_gpu_message(name))
    return None


CALIBRATION_KEYS = {
    "dram_copy": "dram", "l2_read": "l2", "fp32_fma": "fp32_fma", "mm_fp32_ieee": "fp32", "mm_tf32x3": "tf32x3",
    "mm_fp16x3": "fp16x3", "mm_bf16x3": "bf16x3", "mm_tf32": "tf32", "mm_bf16": "bf16", "mm_fp16": "fp16",
    "mm_fp8": "fp8",
}
"""Calibration ceiling key -> GpuSpec ceiling key ('dram' and 'l2' are bandwidths, the rest peak_flops)."""


def apply_calibration(spec: GpuSpec | None, calibration: Calibration) -> GpuSpec:
    """`spec` with every ceiling the calibration measured replaced by the measurement (provenance says
    so, with when and how); an unknown GPU (spec None) gets a spec from the calibration's device facts
    holding only what was measured."""
    d = calibration.device
    if spec is None:
        cap = (d.compute_capability or "0.0").replace(".", "")
        spec = GpuSpec(
            name=d.name, arch=f"sm_{cap}", sm_count=d.sm_count or 1, max_threads_per_sm=d.max_threads_per_sm or 2048,
            max_blocks_per_sm=32, regs_per_sm=d.regs_per_sm or 65536, smem_per_sm_bytes=d.smem_per_sm_bytes or 0,
            smem_per_block_optin_bytes=d.smem_per_block_optin_bytes or 0, l2_bytes=d.l2_bytes or 0,
            dram_bytes_per_s=0.0, peak_flops={}, source="measured",
            notes="unknown to the datasheet table: only measured ceilings")
    else:
        spec = spec.model_copy(deep=True)
    for c in calibration.ceilings:
        key = CALIBRATION_KEYS.get(c.key)
        if key is None:
            continue
        if key == "dram":
            spec.dram_bytes_per_s = c.value
        elif key == "l2":
            spec.l2_bytes_per_s = c.value
        else:
            spec.peak_flops[key] = c.value
        spec.provenance[key] = f"measured on this GPU at {calibration.measured_at}: {c.method}"
    for m in calibration.constants:
        spec.model_constants[m.key] = m.value
        spec.provenance[m.key] = f"measured on this GPU at {calibration.measured_at}: {m.method}"
    _upper_bounds(spec)
    spec.source = "measured"
    spec.uuid = d.uuid
    spec.measured_at = calibration.measured_at
    if d.sm_clock_max_mhz:
        spec.sm_clock_mhz = d.sm_clock_max_mhz
    return spec


def _upper_bounds(spec: GpuSpec) -> None:
    """Floors need an upper bound of each path's rate, and two calibration rows are not one: cuBLAS's IEEE
    SGEMM (mm_fp32_ieee, 76 % of the FMA peak on the H200) runs below what an IEEE Triton kernel can approach
    (the FMA peak, fp32_fma), and the calibration's 3xTF32 GEMM is a plain Triton kernel (a lower bound)
    while 3xTF32 can run at the TF32 ceiling / 3. Found on the H200
    (benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/guidance_c708d43.json): a 3xTF32 kernel
    called "below the floor" of the fp32 path it beat. The same holds for the fp16x3 and bf16x3 Triton GEMMs
    (their base type's ceiling / 3); a split path the calibration did not time itself while its base type was
    measured takes base / 3 even when that is below the datasheet-derived lead (the lead's base was not this GPU)."""
    flops = spec.peak_flops
    measured = {k for k, v in spec.provenance.items() if v.startswith("measured")}
    bounds: list[tuple[str, str | None, float | None, str]] = [
        ("fp32", "fp32_fma", flops.get("fp32_fma"), "the FMA peak")]
    for split, (base, words) in SPLIT_PATHS.items():
        bounds.append((split, base, flops[base] / 3 if flops.get(base) else None,
                       f"the {words} ceiling / 3 (three {words} products per fp32 product)"))
    for key, base, bound, why in bounds:
        was = flops.get(key)
        lead = key not in measured and base in measured  # a datasheet-derived lead while its base was measured
        if not bound or not (bound > (was or 0.0) or (lead and key in SPLIT_PATHS)):
            continue
        flops[key] = bound
        where = "measured on this GPU" if base in measured else "of the datasheet lead"
        spec.provenance[key] = (f"derived from {why} {where} ({bound / 1e12:.3g} TFLOP/s)"
                                + (f", above the {was / 1e12:.3g} TFLOP/s a library/plain kernel reached: "
                                   f"{spec.provenance.get(key, '')}" if was and key in measured else ""))


class Ceiling(BaseModel):
    """One ceiling with where it came from: what every report quotes."""

    key: str
    value: float | None = Field(default=None, description="bytes/s or FLOP/s; None when there is no number")
    unit: str
    source: Literal["measured", "datasheet", "derived", "none"]
    detail: str

    def label(self) -> str:
        if self.value is None:
            return self.detail
        shown = f"{self.value / 1e12:.3g} TB/s" if self.unit == "bytes/s" else f"{self.value / 1e12:.3g} TFLOP/s"
        return f"{shown} ({self.detail})"


def ceiling(spec: GpuSpec | None, key: str, *, missing: str = NO_GPU) -> Ceiling:
    """The one way to read a ceiling: 'dram', 'l2' or a compute type ('fp32', 'tf32', 'tf32x3', 'bf16', ...),
    its value and provenance. `missing` says why there is no spec (NO_GPU or `unknown_gpu_message`)."""
    unit = "bytes/s" if key in ("dram", "l2") else "FLOP/s"
    if spec is None:
        return Ceiling(key=key, unit=unit, source="none", detail=missing)
    value = {"dram": spec.dram_bytes_per_s or None, "l2": spec.l2_bytes_per_s}.get(key, spec.peak_flops.get(key))
    detail = spec.provenance.get(key)
    if value is None or detail is None and spec.source == "measured":
        why = "not measured" if spec.source == "measured" else "no datasheet figure"
        return Ceiling(key=key, unit=unit, source="none", detail=f"{spec.name}: {key} {why}; run egg-mcp calibrate")
    detail = detail or f"datasheet: {spec.notes or 'vendor datasheet'}"
    source = detail.split(" ", 1)[0].rstrip(":")
    return Ceiling(key=key, value=value, unit=unit, detail=detail,
                   source=source if source in ("measured", "datasheet", "derived") else "datasheet")


_CALIBRATED: dict[str, GpuSpec] = {}
"""Calibrated specs seen by `gpu_for` in this process, by GPU name: `lookup` prefers them."""


def lookup(name: str | None) -> GpuSpec | None:
    """The best spec this process knows for GPU `name`: its calibration when one was loaded, else the
    datasheet leads, else None (unknown GPU, or no GPU)."""
    if name and name in _CALIBRATED:
        return _CALIBRATED[name].model_copy(deep=True)
    return spec_for(name)


def gpu_for(name: str | None, uuid: str | None = None, workspace_root: Path | None = None) -> GpuSpec | None:
    """Datasheet leads for `name`, overlaid with this GPU's calibration when one is stored."""
    from egg_mcp.hardware.calibration_store import load

    spec = spec_for(name)
    calibration = load(workspace_root, uuid)
    if calibration is not None:
        spec = apply_calibration(spec, calibration)
        if name:
            _CALIBRATED[name] = spec.model_copy(deep=True)
    return spec


def gpu_status(names: list[str] | None = None, workspace_root: Path | None = None) -> str:
    """'' when GPU 0 has ceilings (a table entry or a calibration), else what every report should say."""
    if names is None:
        names = nvml_gpu_names()
    if not names:
        return NO_GPU
    if spec_for(names[0]) is not None:
        return ""
    uuids = nvml_gpu_uuids()
    if uuids and gpu_for(names[0], uuids[0], workspace_root) is not None:
        return ""
    return unknown_gpu_message(names[0])


def nvml_gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs NVML sees; empty when there is no driver (CPU machines, CI)."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound / DriverNotLoaded on CPU machines
        return []
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else name)
        return names
    finally:
        pynvml.nvmlShutdown()


def nvml_gpu_uuids() -> list[str]:
    """UUIDs ('GPU-...') of the NVIDIA GPUs NVML sees, in index order; empty without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, NVMLError_LibraryNotFound / DriverNotLoaded on CPU machines
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            out.append(uuid.decode() if isinstance(uuid, bytes) else uuid)
        return out
    except Exception:
        return []
    finally:
        pynvml.nvmlShutdown()


def detect_gpu(index: int = 0, workspace_root: Path | None = None) -> GpuSpec | None:
    """The spec of GPU `index` on this machine (its calibration in `workspace_root` when stored), or
    None when there is none or it is unknown and not calibrated (`gpu_status` says which).

    Refined from torch device properties when torch is already imported with CUDA (workers);
    the server process only uses NVML, which costs milliseconds instead of seconds.
    """
    import sys

    names = nvml_gpu_names()
    if index >= len(names):
        return None
    uuids = nvml_gpu_uuids()
    spec = gpu_for(names[index], uuids[index] if index < len(uuids) else None, workspace_root)
    if spec is None:
        return None
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(index)
        spec.sm_count = props.multi_processor_count
        spec.l2_bytes = getattr(props, "L2_cache_size", spec.l2_bytes)
        spec.regs_per_sm = getattr(props, "regs_per_multiprocessor", spec.regs_per_sm)
        spec.max_threads_per_sm = getattr(props, "max_threads_per_multi_processor", spec.max_threads_per_sm)
        optin = getattr(props, "shared_memory_per_block_optin", 0)
        if optin:
            spec.smem_per_block_optin_bytes = optin
        spec.name = props.name
    return spec
