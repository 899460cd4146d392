"""Occupancy from a kernel's resources and the device limits (no counters needed).

The fallback path has Triton's compiled metadata (registers, shared memory, num_warps) but no ncu,
so it computes what the CUDA occupancy calculator would: blocks per SM limited by registers,
shared memory, the warp cap and the block cap, and which of them binds.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

from egg_mcp.hardware import GpuSpec

# Allocation granularities of sm_80/sm_90 (CUDA occupancy calculator): registers are allocated
# per warp in units of 256 (8 per thread); shared memory in 128-byte units, plus 1 KiB reserved
# by the system per block.
REG_ALLOC_UNIT_PER_WARP = 256
SMEM_ALLOC_UNIT = 128
SMEM_RESERVED_PER_BLOCK = 1024

Limiter = Literal["registers", "shared_memory", "warps", "blocks", "none"]


class OccupancyEstimate(BaseModel):
    blocks_per_sm: int
    active_warps_per_sm: int
    max_warps_per_sm: int
    occupancy_pct: float
    limiter: Limiter
    limits: dict[str, int]
    """blocks per SM allowed by each resource (registers, shared_memory, warps, blocks)"""
    note: str = ""


def _round_up(x: int, unit: int) -> int:
    return int(math.ceil(x / unit) * unit)


def occupancy(
    gpu: GpuSpec, *, num_warps: int, registers_per_thread: int | None, shared_mem_bytes: int | None
) -> OccupancyEstimate:
    """Theoretical occupancy of one launch configuration on `gpu`.

    Args:
        num_warps: warps per block (Triton's num_warps).
        registers_per_thread: from the compiled kernel (n_regs); None if unknown (not a limit then).
        shared_mem_bytes: dynamic + static shared memory per block; None or 0 if none.
    """
    if num_warps < 1:
        raise ValueError(f"num_warps must be >= 1, got {num_warps}")
    max_warps = gpu.max_threads_per_sm // 32
    limits: dict[str, int] = {
        "warps": max_warps // num_warps,
        "blocks": gpu.max_blocks_per_sm,
    }
    note = ""
    if registers_per_thread:
        regs = min(registers_per_thread, gpu.max_regs_per_thread)
        regs_per_warp = _round_up(regs * 32, REG_ALLOC_UNIT_PER_WARP)
        warps_by_regs = gpu.regs_per_sm // regs_per_warp
        limits["registers"] = warps_by_regs // num_warps
    if shared_mem_bytes:
        if shared_mem_bytes > gpu.smem_per_block_optin_bytes:
            note = (f"{shared_mem_bytes} B of shared memory per block exceeds the {gpu.smem_per_block_optin_bytes} B "
                    "limit: the launch fails")
        per_block = _round_up(shared_mem_bytes, SMEM_ALLOC_UNIT) + SMEM_RESERVED_PER_BLOCK
        limits["shared_memory"] = gpu.smem_per_sm_bytes // per_block
    blocks = min(limits.values())
    # on a tie the hardware caps (warps, blocks) are named: the resource is not what holds occupancy back
    binding = [k for k in ("warps", "blocks", "registers", "shared_memory") if limits.get(k) == blocks]
    limiter: Limiter = binding[0] if binding else "none"  # type: ignore[assignment]
    if blocks == 0 and not note:
        note = f"no block fits on an SM (limited by {limiter})"
    active = blocks * num_warps
    return OccupancyEstimate(
        blocks_per_sm=blocks,
        active_warps_per_sm=active,
        max_warps_per_sm=max_warps,
        occupancy_pct=100.0 * active / max_warps,
        limiter=limiter,
        limits=limits,
        note=note,
    )


def waves(grid_blocks: int, blocks_per_sm: int, sm_count: int) -> float | None:
    """Waves per SM: grid / (SMs x resident blocks per SM)."""
    if blocks_per_sm <= 0 or sm_count <= 0:
        return None
    return grid_blocks / (blocks_per_sm * sm_count)
