"""Hardware model: the limits and ceilings every roofline, occupancy and tiling estimate uses.

Numbers come from three sources, and every `GpuSpec` says which one it holds:
  * ``measured`` — ceilings measured on this project's H200 (see `benchmarks/`),
  * ``datasheet`` — vendor datasheet values (leads, not promises),
  * ``device`` — read from the GPU at run time (NVML / torch device properties).
The server process never imports torch for this: NVML is enough to pick the table entry, and the
evaluation workers (which already hold torch) refine it with `torch.cuda.get_device_properties`.
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, Field

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

    def ridge_point(self, compute: str = "fp32") -> float:
        """FLOP per byte above which a kernel is compute-bound on this GPU."""
        return self.peak_flops[compute] / self.dram_bytes_per_s

    def floor_seconds(self, flops: float, bytes_moved: float, compute: str = "fp32") -> float:
        """Roofline floor: no kernel doing this work can run faster."""
        return max(flops / self.peak_flops[compute], bytes_moved / self.dram_bytes_per_s)


_HOPPER = dict(
    arch="sm_90", max_threads_per_sm=2048, max_blocks_per_sm=32,
    smem_per_sm_bytes=228 * KiB, smem_per_block_optin_bytes=227 * KiB,
)

GPU_TABLE: dict[str, GpuSpec] = {
    # Measured on this project's H200 (2026-11): 4.3 TB/s device-to-device copy, 790 TFLOP/s bf16
    # cuBLAS GEMM, ~51 TFLOP/s IEEE fp32 GEMM; 132 SMs and 60 MiB L2 as torch reports them.
    "H200": GpuSpec(
        name="NVIDIA H200", sm_count=132, l2_bytes=60 * MiB, dram_bytes_per_s=4.3e12,
        peak_flops={"fp32": 51e12, "tf32": 395e12, "fp16": 790e12, "bf16": 790e12, "fp8": 1580e12},
        sm_clock_mhz=1980, source="measured",
        notes="ceilings measured with torch copy / matmul on the H200 lent to this project", **_HOPPER,
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

DEFAULT_GPU = "H200"


def spec_for(name: str | None) -> GpuSpec:
    """Table entry whose key appears in `name` (an NVML / torch device name); H200 when unknown."""
    if name:
        upper = name.upper()
        for key in sorted(GPU_TABLE, key=len, reverse=True):
            if key.upper() in upper:
                return GPU_TABLE[key].model_copy()
        log.warning("no table entry for GPU %r; using %s limits", name, DEFAULT_GPU)
    return GPU_TABLE[DEFAULT_GPU].model_copy()


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


def detect_gpu(index: int = 0) -> GpuSpec | None:
    """The spec of GPU `index` on this machine, or None when there is none.

    Refined from torch device properties when torch is already imported with CUDA (workers);
    the server process only uses NVML, which costs milliseconds instead of seconds.
    """
    import sys

    names = nvml_gpu_names()
    if index >= len(names):
        return None
    spec = spec_for(names[index])
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
