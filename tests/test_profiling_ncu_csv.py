"""Parser tests against ncu's documented CSV layouts (raw page: header of metric names, units row,
one quoted row per launch; details page: one row per metric or rule)."""

import pytest

from egg_mcp.profiling.ncu_csv import (
    counter_access_problem,
    invalid_metrics,
    no_kernels_profiled,
    parse_details_page,
    parse_ncu_output,
    parse_number,
    parse_raw_page,
    render_raw_csv,
    short_kernel_name,
    to_base_unit,
)

# A log as `ncu --csv --page raw` writes it without --log-file: ==PROF== lines and program output
# interleaved with the CSV, auto-scaled units, thousands separators, n/a, commas inside quotes.
RAW_MIXED = '''==PROF== Connected to process 51234 (/usr/bin/python3.11)
warming up...
==PROF== Profiling "copy_kernel" - 0: 0%....50%....100% - 9 passes
==PROF== Profiling "copy_kernel" - 1: 0%....50%....100% - 9 passes
==PROF== Profiling "gemm_kernel" - 2: 0%....50%....100% - 9 passes
result ok, checksum 1,234
==PROF== Disconnected from process 51234
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","gpu__time_duration.sum","launch__grid_size","launch__registers_per_thread","sm__throughput.avg.pct_of_peak_sustained_elapsed","l1tex__t_sector_hit_rate.pct"
"","","","","","","","","","","","Mbyte","usecond","","register/thread","%","%"
"0","51234","python3.11","127.0.0.1","copy_kernel","1","7","(128, 1, 1)","(45344, 1, 1)","0","9.0","268.44","65.34","45,344","16","12.50","n/a"
"1","51234","python3.11","127.0.0.1","copy_kernel","1","7","(128, 1, 1)","(45344, 1, 1)","0","9.0","268.44","64.66","45,344","16","13.50","n/a"
"2","51234","python3.11","127.0.0.1","gemm_kernel","1","7","(256, 1, 1)","(1,024, 1, 1)","0","9.0","1,134.02","1,204.00","1,024","168","81.03","2.3"
'''


def test_parse_number_handles_ncu_formats():
    assert parse_number("45,344") == 45344.0
    assert parse_number("1,234,567.25") == 1234567.25
    assert parse_number('"12.5"') == 12.5
    assert parse_number("27.595.520") == 27595520.0  # European thousands
    assert parse_number("0,5") == 0.5  # European decimal comma
    assert parse_number("1.5e+03") == 1500.0
    for missing in ("n/a", "", "N/A", None, "(128, 1, 1)", "-"):
        assert parse_number(missing) is None


def test_to_base_unit_undoes_si_scaling():
    assert to_base_unit(268.44, "Mbyte") == pytest.approx((268.44e6, "byte"))
    assert to_base_unit(65.34, "usecond") == pytest.approx((65340.0, "nsecond"))
    assert to_base_unit(1.2, "msecond") == pytest.approx((1.2e6, "nsecond"))
    assert to_base_unit(3.5, "Tbyte/second") == pytest.approx((3.5e12, "byte/second"))
    assert to_base_unit(2.0, "byte/usecond") == pytest.approx((2e6, "byte/second"))
    assert to_base_unit(48.0, "Kbyte/block") == pytest.approx((48e3, "byte/block"))
    assert to_base_unit(12.5, "%") == (12.5, "%")
    assert to_base_unit(None, "Mbyte") == (None, "byte")


def test_raw_page_with_units_row_and_program_output():
    launches = parse_raw_page(RAW_MIXED)
    assert [launch.id for launch in launches] == [0, 1, 2]
    copy0, _, gemm = launches
    assert copy0.kernel_name == "copy_kernel"
    assert copy0.grid_size == "(45344, 1, 1)"
    assert copy0.value("dram__bytes_read.sum") == pytest.approx(268.44e6)
    assert copy0.metrics["dram__bytes_read.sum"].unit == "byte"
    assert copy0.value("gpu__time_duration.sum") == pytest.approx(65340.0)
    assert copy0.value("launch__grid_size") == 45344
    assert copy0.value("l1tex__t_sector_hit_rate.pct") is None
    assert copy0.metrics["l1tex__t_sector_hit_rate.pct"].raw == "n/a"
    assert gemm.value("dram__bytes_read.sum") == pytest.approx(1134.02e6)
    assert gemm.value("gpu__time_duration.sum") == pytest.approx(1.204e6)
    assert gemm.value("launch__registers_per_thread") == 168
    # launch-description columns are not metrics
    assert "Block Size" not in copy0.metrics and "CC" not in copy0.metrics


def test_parse_ncu_output_collects_errors_and_warnings():
    text = RAW_MIXED + "==WARNING== Found outstanding GPU clock reset, trying to revert...\n"
    log = parse_ncu_output(text)
    assert len(log.launches) == 3
    assert log.warnings == ["==WARNING== Found outstanding GPU clock reset, trying to revert..."]
    assert log.errors == []


def test_base_units_log_and_second_header_are_tolerated():
    text = render_raw_csv(
        [{"ID": 0, "Kernel Name": "k", "gpu__time_duration.sum": "1,500"}], units={"gpu__time_duration.sum": "nsecond"}
    )
    doubled = text + text.replace('"0","4242"', '"1","4242"')
    launches = parse_raw_page(doubled)
    assert [launch.id for launch in launches] == [0, 1]
    assert launches[1].value("gpu__time_duration.sum") == 1500.0


def test_rows_of_wrong_width_are_program_output_not_data():
    text = RAW_MIXED + '"a quoted line the program printed"\n'
    assert len(parse_raw_page(text)) == 3


def test_no_header_gives_no_launches():
    assert parse_raw_page("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM\n") == []
    assert parse_ncu_output("").launches == []


DETAILS = '''==PROF== Connected to process 1
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"
"0","1","python3","h","strided_kernel","1","7","(128, 1, 1)","(4096, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Duration","usecond","41.22","","","","",""
"0","1","python3","h","strided_kernel","1","7","(128, 1, 1)","(4096, 1, 1)","0","9.0","GPU Speed Of Light Throughput","Memory Throughput","%","91.5","","","","",""
"0","1","python3","h","strided_kernel","1","7","(128, 1, 1)","(4096, 1, 1)","0","9.0","Memory Workload Analysis","","","","UncoalescedGlobalAccess","OPT","This kernel has uncoalesced global accesses resulting in a total of 4,194,304 excessive sectors (88% of the total).","global","87.5"
'''


def test_details_page_metrics_and_rule_hints():
    launches, rules = parse_details_page(DETAILS)
    assert len(launches) == 1
    assert launches[0].value("Duration") == pytest.approx(41220.0)
    assert launches[0].value("Memory Throughput") == 91.5
    assert len(rules) == 1
    assert rules[0].rule == "UncoalescedGlobalAccess"
    assert rules[0].estimated_speedup_pct == 87.5
    assert "4,194,304 excessive sectors" in rules[0].description
    log = parse_ncu_output(DETAILS)
    assert log.rules == rules and len(log.launches) == 1


def test_counter_permission_and_other_problems():
    perm = ("==PROF== Connected to process 9\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
            "access NVIDIA GPU Performance Counters on the target device 0.\n")
    said = counter_access_problem(perm)
    assert said is not None and "NVreg_RestrictProfilingToAdminUsers" in said
    said = counter_access_problem("==ERROR== LibraryNotLoaded: libcuda.so")
    assert said is not None and "LibraryNotLoaded" in said
    assert counter_access_problem(RAW_MIXED) is None
    assert no_kernels_profiled("==WARNING== No kernels were profiled.\n")


def test_invalid_metrics_are_named_from_error_lines():
    requested = ["sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__pipe_tensor_op_gmma_cycles_active.avg.pct",
                 "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"]
    text = "==ERROR== Failed to find metric sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active\n"
    assert invalid_metrics(text, requested) == [requested[2]]  # not its prefix
    assert invalid_metrics("sm__throughput.avg.pct_of_peak_sustained_elapsed printed by the program\n", requested) == []


def test_short_kernel_name():
    assert short_kernel_name("void at::native::vectorized_elementwise_kernel<4, float>(int, float*)") == \
        "at::native::vectorized_elementwise_kernel"
    assert short_kernel_name("matmul_kernel") == "matmul_kernel"
    assert short_kernel_name("softmax_row_kernel(float*, float*, int)") == "softmax_row_kernel"
