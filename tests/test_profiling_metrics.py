"""The stage metric table: every stage covered, names well-formed, each stage's needs present."""

import re

from egg_mcp.profiling.metrics import ALL_METRICS, METRICS, STAGE_METRICS, metrics_for_stage
from egg_mcp.stages import Stage

NCU_NAME = re.compile(r"^[a-z0-9]+__[a-z0-9_]+(\.[a-z0-9_]+)*$")


def test_every_stage_has_a_metric_list_with_duration_and_sol():
    for stage in Stage:
        names = metrics_for_stage(stage)
        assert "gpu__time_duration.sum" in names
        assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in names
        assert "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed" in names
        assert len(names) == len(set(names))


def test_names_are_raw_ncu_metric_names_with_a_reason():
    assert len(ALL_METRICS) == len(set(ALL_METRICS))
    for name in ALL_METRICS:
        assert NCU_NAME.match(name), name
        assert METRICS[name].why


def test_stage_specific_metrics():
    tiling = set(metrics_for_stage(Stage.TILING))
    assert {"launch__registers_per_thread", "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
            "launch__occupancy_limit_registers", "launch__shared_mem_per_block_dynamic"} <= tiling
    memory = set(metrics_for_stage(Stage.MEMORY))
    assert {"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "smsp__sass_data_bytes_mem_global_op_ld.sum",
            "lts__t_sector_hit_rate.pct"} <= memory
    mapping = set(metrics_for_stage("PARALLEL_MAPPING"))
    assert {"launch__grid_size", "launch__waves_per_multiprocessor",
            "sm__warps_active.avg.pct_of_peak_sustained_active",
            "sm__maximum_warps_per_active_cycle_pct"} <= mapping
    # the table stays small: fewer metrics means fewer replay passes
    assert all(len(v) <= 40 for v in STAGE_METRICS.values())
    assert len(metrics_for_stage(Stage.DONE)) < len(metrics_for_stage(Stage.MEMORY))
