"""Classifier tests on synthetic metric sets shaped like each kind of kernel on an H200."""

import pytest

from egg_mcp.hardware import GPU_TABLE
from egg_mcp.profiling import classify as C
from egg_mcp.profiling.metrics import stall_metric
from egg_mcp.profiling.occupancy import occupancy
from egg_mcp.profiling.profile_report import Metric
from egg_mcp.stages import Stage

H200 = GPU_TABLE["H200"]


def ncu(**values) -> list[Metric]:
    """Metrics by short alias, as ncu would report them."""
    alias = {
        "duration_ns": "gpu__time_duration.sum",
        "sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "mem": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "read": "dram__bytes_read.sum",
        "write": "dram__bytes_write.sum",
        "achieved": "sm__warps_active.avg.pct_of_peak_sustained_active",
        "theoretical": "sm__maximum_warps_per_active_cycle_pct",
        "lim_regs": "launch__occupancy_limit_registers",
        "lim_smem": "launch__occupancy_limit_shared_mem",
        "lim_blocks": "launch__occupancy_limit_blocks",
        "lim_warps": "launch__occupancy_limit_warps",
        "regs": "launch__registers_per_thread",
        "smem_dyn": "launch__shared_mem_per_block_dynamic",
        "grid": "launch__grid_size",
        "waves": "launch__waves_per_multiprocessor",
        "local_ld": "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
        "local_st": "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
        "sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
        "requested": "smsp__sass_data_bytes_mem_global_op_ld.sum",
        "gmma": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "l2_hit": "lts__t_sector_hit_rate.pct",
    }
    out = []
    for key, value in values.items():
        name = alias.get(key) or (stall_metric(key[len("stall_"):]) if key.startswith("stall_") else key)
        out.append(Metric(name=name, value=value, source="ncu"))
    return out


def test_memory_bound_copy_with_floor_distance():
    # 256 MiB read + 256 MiB write in 0.18 ms on a 4.3 TB/s part: ~69% of DRAM peak
    nbytes = 256 * 2**20
    roof = C.roofline(H200, flops=0, min_bytes=2 * nbytes, measured_ms=0.18, compute_type="fp32")
    k = C.classify_kernel("copy", ncu(duration_ns=180_000, sm=15, mem=82, dram=82, read=nbytes, write=nbytes,
                                      grid=65536),
                          stage=Stage.MEMORY, gpu=H200, task_roofline=roof)
    assert k.classification.bound == "memory-bound"
    assert not k.classification.near_floor
    assert "69% of the floor 125 us (DRAM-bound with fp32 dots)" in k.classification.headline
    assert any("vectorised" in m for m in k.next_moves)
    assert roof.bound_by == "memory" and roof.floor_ms == pytest.approx(2 * nbytes / 4.3e12 * 1e3)


def test_compute_bound_gemm_without_tensor_cores_is_told_to_use_tl_dot():
    k = C.classify_kernel("gemm", ncu(duration_ns=2_000_000, sm=88, mem=35, gmma=3, grid=1024, regs=128),
                          stage=Stage.TILING, gpu=H200)
    assert k.classification.bound == "compute-bound"
    assert any("tl.dot" in m for m in k.next_moves)
    k_ok = C.classify_kernel("gemm", ncu(duration_ns=2_000_000, sm=88, mem=35, gmma=85, grid=1024),
                             stage=Stage.TILING, gpu=H200)
    assert k_ok.classification.bound == "compute-bound"
    assert not any("tl.dot" in m for m in k_ok.next_moves)


def test_spilling_kernel_gets_tiling_move():
    k = C.classify_kernel("spill", ncu(duration_ns=900_000, sm=30, mem=45, regs=255, local_ld=5e8, local_st=2.5e8,
                                       theoretical=12.5, achieved=11, lim_regs=1, lim_warps=64, lim_blocks=32,
                                       grid=4096),
                          stage=Stage.TILING, gpu=H200)
    assert any(e.metric.startswith("l1tex__t_bytes_pipe_lsu_mem_local") for e in k.evidence)
    assert k.next_moves[0].startswith("registers 255 with spills: smaller BLOCK_N")
    memory_stage = C.classify_kernel("spill", ncu(duration_ns=900_000, sm=30, mem=45, regs=255, local_ld=5e8),
                                     stage=Stage.MEMORY, gpu=H200)
    assert any("local-memory traffic" in m for m in memory_stage.next_moves)


def test_uncoalesced_loads_in_memory_stage():
    k = C.classify_kernel("strided", ncu(duration_ns=400_000, sm=10, mem=75, dram=40, sectors=8e6, requested=3.2e7,
                                         grid=8192, stall_long_scoreboard=20.0, stall_lg_throttle=3.0),
                          stage=Stage.MEMORY, gpu=H200)
    assert k.classification.bound == "memory-bound"
    bps = next(e for e in k.evidence if e.metric == "computed.global_load_bytes_per_sector")
    assert bps.value == pytest.approx(4.0)
    assert k.next_moves[0].startswith("loads 4.0 B/sector (32 is ideal): uncoalesced")


def test_uncoalesced_from_sectors_per_request_when_bytes_counter_is_missing():
    k = C.classify_kernel("strided", ncu(duration_ns=400_000, sm=10, mem=75, sectors=32e6,
                                         **{"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 1e6}),
                          stage=Stage.MEMORY, gpu=H200)
    assert any(e.metric == "computed.global_load_sectors_per_request" and e.value == 32 for e in k.evidence)
    assert any("32 sectors per request" in m and "uncoalesced" in m for m in k.next_moves)
    vectorised = C.classify_kernel("copy", ncu(duration_ns=400_000, sm=10, mem=75, sectors=16e6,
                                               **{"l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 1e6}),
                                   stage=Stage.MEMORY, gpu=H200)
    assert not any("uncoalesced" in m for m in vectorised.next_moves)


def test_gemm_with_busy_shared_memory_is_still_compute_bound():
    # wgmma GEMMs keep L1/shared busy too: memory SOL can exceed SM SOL while the tensor pipe is the roof
    k = C.classify_kernel("gemm", ncu(duration_ns=250_000, sm=70, mem=82, dram=30, gmma=78, grid=512),
                          stage=Stage.TILING, gpu=H200)
    assert k.classification.bound == "compute-bound"


def test_coalesced_loads_raise_no_flag():
    k = C.classify_kernel("copy", ncu(duration_ns=400_000, sm=10, mem=90, sectors=8e6, requested=8e6 * 32),
                          stage=Stage.MEMORY, gpu=H200)
    assert not any("B/sector" in m for m in k.next_moves)


def test_occupancy_limited_small_grid_in_parallel_mapping():
    k = C.classify_kernel("rows", ncu(duration_ns=300_000, sm=20, mem=25, grid=66, achieved=6, theoretical=50,
                                      lim_regs=4, lim_warps=8, lim_blocks=32, stall_long_scoreboard=30.0),
                          stage=Stage.PARALLEL_MAPPING, gpu=H200)
    assert k.classification.bound == "latency-or-occupancy-bound"
    assert k.classification.limiter == "grid smaller than the SM count"
    assert k.next_moves[0].startswith("grid 66 blocks < 132 SMs: 50% of the GPU idle")


def test_register_limited_occupancy_names_its_limiter():
    k = C.classify_kernel("k", ncu(duration_ns=300_000, sm=30, mem=35, grid=4096, achieved=18, theoretical=18.75,
                                   lim_regs=3, lim_warps=16, lim_blocks=32, lim_smem=8, regs=168),
                          stage=Stage.TILING, gpu=H200)
    assert k.classification.bound == "latency-or-occupancy-bound"
    assert k.classification.limiter == "occupancy (registers)"
    assert any(m.startswith("registers 168/thread cap occupancy") for m in k.next_moves)


def test_launch_bound_tiny_kernel():
    k = C.classify_kernel("tiny", ncu(duration_ns=2_100, sm=1, mem=2, grid=1), stage=Stage.ALGORITHM, gpu=H200)
    assert k.classification.bound == "launch-bound"
    assert "fuse" in k.next_moves[0]


def test_near_floor_says_further_work_is_wasted():
    nbytes = 512 * 2**20
    floor_ms = 1e3 * nbytes / 4.3e12
    measured = floor_ms / 0.95
    roof = C.roofline(H200, flops=0, min_bytes=nbytes, measured_ms=measured)
    k = C.classify_kernel("copy", ncu(duration_ns=measured * 1e6, sm=12, mem=93, dram=93, read=nbytes / 2,
                                      write=nbytes / 2),
                          stage=Stage.MEMORY, gpu=H200, task_roofline=roof)
    assert k.classification.near_floor
    assert len(k.next_moves) == 1
    assert "at the roof: stop here" in k.next_moves[0]
    assert "95% of the floor" in k.next_moves[0] and "DRAM-bound" in k.next_moves[0]
    assert roof.near_floor and "at the roof" in roof.summary


def test_roofline_places_gemm_above_the_ridge():
    n = 4096
    roof = C.roofline(H200, flops=2 * n**3, min_bytes=3 * n * n * 2, measured_ms=0.25, compute_type="bf16")
    assert roof.bound_by == "compute"
    assert roof.arithmetic_intensity == pytest.approx(2 * n / 6)
    assert roof.floor_ms == pytest.approx(1e3 * 2 * n**3 / 790e12)
    assert C.roofline(H200, flops=None, min_bytes=None, measured_ms=1.0) is None
    with pytest.raises(ValueError, match="unknown compute type"):
        C.roofline(H200, flops=1.0, min_bytes=1.0, measured_ms=1.0, compute_type="int4")


def test_moves_are_stage_appropriate():
    metrics = ncu(duration_ns=300_000, sm=20, mem=25, grid=66)
    mapping = C.classify_kernel("k", metrics, stage=Stage.PARALLEL_MAPPING, gpu=H200)
    memory = C.classify_kernel("k", metrics, stage=Stage.MEMORY, gpu=H200)
    assert mapping.next_moves[0].startswith("grid 66 blocks")
    # nothing MEMORY-specific: it points at the stage where the problem belongs instead
    assert len(memory.next_moves) == 1 and "nothing to change for this kernel in MEMORY" in memory.next_moves[0]


def test_fallback_readings_classify_without_counters():
    occ = occupancy(H200, num_warps=4, registers_per_thread=32, shared_mem_bytes=0)
    metrics = [
        Metric(name=C.EVENT_DURATION, value=130_000, source="event_timing"),
        Metric(name=C.TRITON_REGS, value=32, source="triton_metadata"),
        Metric(name=C.TRITON_SPILLS, value=0, source="triton_metadata"),
        Metric(name=C.GRID_BLOCKS, value=65536, source="triton_metadata"),
    ]
    roof = C.roofline(H200, flops=0, min_bytes=512e6, measured_ms=0.13)
    k = C.classify_kernel("copy", metrics, stage=Stage.MEMORY, gpu=H200, task_roofline=roof, occupancy_estimate=occ)
    assert k.classification.bound == "memory-bound"
    assert "event timing" in k.classification.headline
    assert k.occupancy_source == "computed"

    spilled = metrics[:1] + [Metric(name=C.TRITON_SPILLS, value=96, source="triton_metadata"),
                             Metric(name=C.TRITON_REGS, value=255, source="triton_metadata")]
    k2 = C.classify_kernel("spill", spilled, stage=Stage.TILING, gpu=H200)
    assert k2.next_moves[0].startswith("registers 255 with spills")
    assert any(e.source == "triton_metadata" for e in k2.evidence)


def test_summary_names_dominant_kernel_and_shares():
    a = C.classify_kernel("big", ncu(duration_ns=900_000, sm=90, mem=20), stage=Stage.TILING, gpu=H200, time_share=0.9)
    b = C.classify_kernel("small", ncu(duration_ns=100_000, sm=10, mem=80), stage=Stage.TILING, gpu=H200,
                          time_share=0.1)
    text = C.summarize([b, a], None)
    assert text.startswith("big (90% of kernel time): compute-bound")
    assert "small memory-bound 10%" in text
