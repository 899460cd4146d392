"""Occupancy calculator against hand-computed Hopper cases (CUDA occupancy calculator rules)."""

import pytest

from egg_mcp.hardware import GPU_TABLE
from egg_mcp.profiling.occupancy import occupancy, waves

H200 = GPU_TABLE["H200"]  # 64 warps, 32 blocks, 64K registers, 228 KiB shared memory per SM


def test_full_occupancy_when_nothing_binds_but_warps():
    occ = occupancy(H200, num_warps=4, registers_per_thread=32, shared_mem_bytes=0)
    assert occ.blocks_per_sm == 16 and occ.occupancy_pct == 100.0
    assert occ.limiter == "warps"
    assert occ.limits["registers"] == 16  # 32 regs x 32 threads = 1024/warp -> 64 warps


def test_registers_limit():
    # 255 regs -> 256 x 32 = 8192 per warp -> 8 warps per SM -> 1 block of 8 warps
    occ = occupancy(H200, num_warps=8, registers_per_thread=255, shared_mem_bytes=0)
    assert occ.limits["registers"] == 1
    assert occ.limiter == "registers"
    assert occ.occupancy_pct == pytest.approx(12.5)
    # 168 regs round to 168 (multiple of 8): 5376 per warp -> 12 warps -> 3 blocks of 4 warps
    assert occupancy(H200, num_warps=4, registers_per_thread=168, shared_mem_bytes=None).blocks_per_sm == 3


def test_shared_memory_limit_includes_reserved_kib():
    # 3 stages of (128x64 + 64x128) fp16 tiles = 96 KiB; +1 KiB reserved -> 2 blocks in 228 KiB
    occ = occupancy(H200, num_warps=4, registers_per_thread=128, shared_mem_bytes=96 * 1024)
    assert occ.limits["shared_memory"] == 2
    assert occ.limiter == "shared_memory"
    # 113.5 KiB + 1 KiB reserved does not fit twice in 228 KiB
    assert occupancy(H200, num_warps=4, registers_per_thread=32, shared_mem_bytes=int(113.5 * 1024)).blocks_per_sm == 1


def test_block_cap_binds_for_tiny_blocks():
    occ = occupancy(H200, num_warps=1, registers_per_thread=16, shared_mem_bytes=0)
    assert occ.blocks_per_sm == 32 and occ.limiter == "blocks"
    assert occ.occupancy_pct == 50.0


def test_too_much_shared_memory_is_explained():
    occ = occupancy(H200, num_warps=4, registers_per_thread=32, shared_mem_bytes=300 * 1024)
    assert occ.blocks_per_sm == 0
    assert "exceeds" in occ.note


def test_bad_num_warps_is_rejected():
    with pytest.raises(ValueError, match="num_warps"):
        occupancy(H200, num_warps=0, registers_per_thread=32, shared_mem_bytes=0)


def test_waves():
    assert waves(264, 2, 132) == 1.0
    assert waves(300, 1, 132) == pytest.approx(300 / 132)
    assert waves(10, 0, 132) is None
