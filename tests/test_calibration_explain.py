"""Issue 14: every compute ceiling says why it sits where it does, from measurements (CPU, GPU parts faked).

Covers the NVML sampler (clock, power, clocks-event reasons under a sustained burst), the clock-adjusted
datasheet peak and the reason labels, the shape sweep, the optional ncu tensor-pipe reading, and the
report, with no GPU, no NVML, no ncu and an unknown GPU name each giving an honest row.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from egg_mcp.calibration import explain as ex
from egg_mcp.calibration import matmul, ncu_gemm, sampler
from egg_mcp.calibration.peaks import device_peaks
from egg_mcp.calibration.run import describe
from egg_mcp.hardware.calibration_record import Calibration

H200 = {"name": "NVIDIA H200", "sm_count": 132, "sm_clock_max_mhz": 1980, "compute_capability": "9.0"}
BF16_FLOPS = 2.0 * 8192 ** 3


def _load(mhz, reasons=(), power=None, limit=None):
    out = {"median_mhz": mhz, "min_mhz": mhz - 15, "max_mhz": mhz + 15, "samples": 80,
           "throttle_reasons": list(reasons)}
    if power is not None:
        out.update(power_median_w=power, power_max_w=power + 5, power_source="NVML instantaneous power")
    if limit is not None:
        out["power_limit_w"] = limit
    return out


def _bf16_row(value):
    return matmul.entry("mm_bf16", "flops", BF16_FLOPS, BF16_FLOPS / value * 1e3, BF16_FLOPS / value * 1e3,
                        "torch.matmul bf16", device_peaks(H200))


# ------------------------------------------------------------------------------------------ peaks


def test_datasheet_peaks_name_the_clock_they_assume():
    peaks = device_peaks(H200)
    assert peaks["mm_bf16"]["clock_mhz"] == 1830 and "1830 MHz" in peaks["mm_bf16"]["clock_source"]
    # the whitepaper's figure is exactly 132 SMs x 4096 FLOP/clk x 1830 MHz
    assert peaks["mm_bf16"]["value"] == pytest.approx(132 * 4096 * 1830e6, rel=1e-4)
    assert peaks["mm_tf32x3"]["clock_mhz"] == 1830 and peaks["mm_fp8"]["clock_mhz"] == 1830
    assert peaks["fp32_fma"]["clock_mhz"] == 1980  # the ncu-style FMA peak is at the max SM clock
    l40s = device_peaks({"name": "NVIDIA L40S"})
    assert l40s["mm_bf16"]["value"] and "clock_mhz" not in l40s["mm_bf16"]  # no stated clock: none invented
    assert not any(k.startswith("mm_") for k in device_peaks({"name": "NVIDIA Mystery GPU"}))


# ---------------------------------------------------------------------------------------- sampler


def test_load_sampler_summarises_clock_power_and_reasons_after_the_ramp():
    """The fake GPU ramps by time, as a real one does (1980 MHz for the first settle_s, then steady readings), and
    the test waits for readings rather than for a fixed time: a sampler thread that starts late on a loaded machine
    changes how many readings there are, never what they say (a fixed sleep and a ramp by call order failed about
    one run in three on a loaded 2-core machine)."""
    settle_s = 0.01
    count = iter(range(10**9))

    def read():
        i = next(count)
        if time.monotonic() - s.started < settle_s:
            return {"sm_clock_mhz": 1980}
        return {"sm_clock_mhz": 1590 + 15 * (i % 3), "power_w": 690.0 + i % 2, "power_source": "NVML instantaneous "
                "power",
                "power_limit_w": 700.0, "throttle_reasons": ["sw_power_cap"] if i % 2 else []}

    s = sampler.LoadSampler(read, interval_s=0.002, settle_s=settle_s)
    with s:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and sum(t >= settle_s for t, _ in s.readings) < 12:
            time.sleep(0.005)
    got = s.summary()
    assert got["samples"] >= 10 and got["min_mhz"] == 1590 and got["max_mhz"] == 1620  # the 1980 ramp dropped
    assert got["median_mhz"] in (1590, 1605, 1620) and got["throttle_reasons"] == ["sw_power_cap"]
    assert got["power_limit_w"] == 700.0 and 690 <= got["power_median_w"] <= 691 and got["power_max_w"] == 691
    with sampler.LoadSampler(lambda: {}, interval_s=0.002) as s:  # no NVML: no clock, no summary
        time.sleep(0.02)
    assert s.summary() is None


def test_sustained_burst_times_the_launches_under_the_sampler():
    launches, events = [], []

    def stop():
        events.append("stop")
        time.sleep(0.05)  # the GPU draining while the sampler keeps reading
        return 40.0

    got = sampler.sustained_burst(lambda: launches.append(1), 0.002, lambda: {"sm_clock_mhz": 1755},
                                  lambda: events.append("start"), stop, busy_s=0.02, interval_s=0.002)
    assert len(launches) == 10 and events == ["start", "stop"]
    assert got["launches"] == 10 and got["ms_per_launch"] == 4.0 and got["load"]["median_mhz"] == 1755
    capped = sampler.sustained_burst(lambda: None, 1e-6, lambda: {}, lambda: None, lambda: 1.0, busy_s=1.0,
                                     max_launches=50)
    assert capped["launches"] == 50 and capped["load"] is None  # under the launch queue; no NVML: no load


def test_nvml_reader_prefers_instant_power_and_decodes_clock_event_reasons():
    class FakeNvml:
        NVML_CLOCK_SM = 1

        def __init__(self, instant_ok=True):
            self.instant_ok = instant_ok

        def nvmlDeviceGetClockInfo(self, h, which):
            return 1605

        def nvmlDeviceGetFieldValues(self, h, ids):
            assert ids == [sampler.NVML_FI_DEV_POWER_INSTANT]
            if not self.instant_ok:
                raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
            return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=688_000))]

        def nvmlDeviceGetPowerUsage(self, h):
            return 650_000

        def nvmlDeviceGetEnforcedPowerLimit(self, h):
            return 700_000

        def nvmlDeviceGetCurrentClocksEventReasons(self, h):
            return 0x4 | 0x1

    got = sampler.nvml_reader(FakeNvml(), "h")()
    assert got == {"sm_clock_mhz": 1605, "power_w": 688.0, "power_source": "NVML instantaneous power",
                   "power_limit_w": 700.0, "throttle_reasons": ["gpu_idle", "sw_power_cap"]}
    old = sampler.nvml_reader(FakeNvml(instant_ok=False), "h")()
    assert old["power_w"] == 650.0 and "average" in old["power_source"]
    assert sampler.nvml_reader(None, None)() == {}


# ---------------------------------------------------------------------------------------- explain


def test_power_limited_clock_explains_a_tensor_ceiling():
    row = _bf16_row(806e12)  # the H200's bf16: 81 % of 989.4
    got = ex.explain(row, 1830, _load(1500, ["sw_power_cap"], 695, 700), sustained_rate=800e12)
    assert got["clock_adjusted_peak"] == pytest.approx(989.4e12 * 1500 / 1830)
    assert got["ratio_to_clock_adjusted_peak"] == pytest.approx(800e12 / (989.4e12 * 1500 / 1830))
    assert got["explained"] is True and got["reason"].startswith("power-limited clock 1.50 GHz")
    assert "sw_power_cap" in got["reason"] and "695 of 700 W" in got["reason"]
    # power at the limit with no reason bit set is still the power limit
    assert ex.explain(row, 1830, _load(1500, (), 698, 700), 800e12)["reason"].startswith("power-limited")
    thermal = ex.explain(row, 1830, _load(1500, ["hw_thermal_slowdown"], 500, 700), 800e12)
    assert thermal["reason"].startswith("thermally limited clock") and thermal["explained"]


def test_a_full_clock_does_not_explain_the_gap_and_ncu_can():
    row = _bf16_row(806e12)
    full = ex.explain(row, 1830, _load(1980, [], 600, 700), sustained_rate=806e12)
    assert full["explained"] is False and full["reason"].startswith("unexplained")
    assert "not below the 1830 MHz" in full["reason"] and "--ncu" in full["reason"]
    # ncu: the tensor pipe 75 % busy at 1980 MHz predicts 1980/1830 x 0.75 = 81 % of the peak: explained
    pipe = {"busy_pct": 75.0, "busy_active_pct": 78.0, "clock_mhz": 1980.0}
    got = ex.explain(row, 1830, _load(1980, [], 600, 700), 806e12, pipe)
    assert got["explained"] is True and "tensor pipe 75% busy" in got["reason"]
    assert "the rest is the kernel, not the chip" in got["reason"]
    # a reading that does not account for the gap stays unexplained
    assert ex.explain(row, 1830, _load(1980), 806e12, {"busy_pct": 98.0})["explained"] is False
    failed = ex.explain(row, 1830, _load(1980), 806e12, {"error": "ncu not found"})
    assert failed["explained"] is False and "ncu not found" in failed["reason"]


def test_missing_parts_leave_the_ceiling_unexplained_and_say_which():
    row = _bf16_row(806e12)
    assert ex.explain(row, 1830, None)["reason"] == "unexplained: the SM clock under load is unknown (no NVML reading)"
    assert "names no clock" in ex.explain(row, None, _load(1500))["reason"]
    no_peak = {**row, "peak": None, "ratio_to_peak": None}
    assert ex.explain(no_peak, None, _load(1500))["explained"] is False
    within = ex.explain(_bf16_row(950e12), 1830, None)
    assert within["explained"] is True and within["reason"].startswith("within 10 %")


def test_dram_copy_is_explained_by_the_read_and_every_row_gets_a_label():
    peak = 4.8e12
    copy = {"key": "dram_copy", "unit": "bytes/s", "value": 4.26e12, "peak": peak}
    read = {"key": "dram_read", "unit": "bytes/s", "value": 4.56e12, "peak": peak}
    l2 = {"key": "l2_read", "unit": "bytes/s", "value": 7.9e12, "peak": None}
    fma = {"key": "fp32_fma", "unit": "FLOP/s", "value": 64.4e12, "peak": 66.9e12, "peak_clock_mhz": 1980,
           "clock_under_load": _load(1980)}
    rows = [copy, read, l2, fma]
    ex.relabel(rows)
    assert copy["explained"] is True and "pure read reaches 95%" in copy["reason"]
    assert read["explained"] is True and l2["explained"] is False and "no peak" in l2["reason"]
    assert fma["explained"] is True and fma["reason"].startswith("within 10 %")
    slow_read = {**read, "value": 3.0e12}
    assert ex.explain_copy(copy, slow_read)["explained"] is False


# ----------------------------------------------------------------------------------- sweep + burst


def test_compute_ceiling_keeps_the_fastest_shape_and_explains_it():
    made, bursts = [], []

    def make(size):
        if size == 16384:
            raise RuntimeError("CUDA out of memory")
        made.append(size)
        return (lambda: None), 2.0 * size ** 3, f"gemm {size}"

    times = {4096: 0.20, 8192: 1.30}  # 8192 is the faster rate (845 vs 687 TFLOP/s)
    measure = lambda fn: (times[made[-1]], times[made[-1]] * 1.01)  # noqa: E731

    def burst(fn, seconds):
        bursts.append(seconds)
        return {"launches": 380, "ms_per_launch": 1.37, "load": _load(1560, ["sw_power_cap"], 699, 700)}

    row = matmul.compute_ceiling("mm_bf16", (4096, 8192, 16384), make, measure, burst, device_peaks(H200), 10)
    assert row["shape"] == 8192 and row["value"] == pytest.approx(BF16_FLOPS / 1.30e-3)
    assert [r["size"] for r in row["shapes"]] == [4096, 8192, 16384] and "out of memory" in row["shapes"][2]["error"]
    assert bursts == [pytest.approx(1.30e-3)]  # the kept shape, with its own time per launch
    assert row["sustained"]["rate"] == pytest.approx(BF16_FLOPS / 1.37e-3)
    assert row["clock_adjusted_peak"] == pytest.approx(989.4e12 * 1560 / 1830)
    assert row["peak_clock_mhz"] == 1830 and row["explained"] is True and "power-limited" in row["reason"]
    assert "shape sweep" in row["method"] and "16384: RuntimeError" in row["method"]
    with pytest.raises(ValueError, match="every shape failed"):
        matmul.compute_ceiling("mm_bf16", (16384,), make, measure, burst, device_peaks(H200), 10)


# -------------------------------------------------------------------------------------------- ncu


def _ncu_csv(n):
    from egg_mcp.profiling.ncu_csv import render_raw_csv

    return render_raw_csv([{"ID": str(i), "Kernel Name": f"nvjet_hsh_256x128_{i}", ncu_gemm.PIPE_ELAPSED: "74.5",
                            ncu_gemm.PIPE_ACTIVE: "77.0", ncu_gemm.CLOCK: "1980000000", ncu_gemm.DURATION: "1400000"}
                           for i in range(n)])


def test_ncu_readings_map_to_the_gemms_in_order_or_not_at_all():
    keys = ["mm_tf32", "mm_bf16", "mm_fp16", "mm_fp8"]
    got = ncu_gemm.attribute(_ncu_csv(4), keys)
    assert got["mm_bf16"]["busy_pct"] == 74.5 and got["mm_bf16"]["busy_active_pct"] == 77.0
    assert got["mm_fp8"]["clock_mhz"] == 1980.0 and got["mm_fp8"]["kernel_ms"] == 1.4
    assert got["mm_tf32"]["kernel"] == "nvjet_hsh_256x128_0"
    wrong = ncu_gemm.attribute(_ncu_csv(5), keys)  # a GEMM that launched two kernels: nothing guessed
    assert all("5 kernels for 4 launches" in r["error"] for r in wrong.values())
    argv = ncu_gemm.ncu_prefix("/x/ncu", "/tmp/log.csv")
    assert argv[-1] == "--" and "--clock-control" in argv and argv[argv.index("--clock-control") + 1] == "none"


def test_read_tensor_pipe_through_an_ncu_wrapped_job(monkeypatch):
    from egg_mcp.profiling import ncu_command

    class FakeEvaluator:
        def __init__(self):
            self.calls = []

        async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
            self.calls.append((target, payload, uses_gpu, wrapper_argv))
            log = wrapper_argv[wrapper_argv.index("--log-file") + 1]
            with open(log, "w") as f:
                f.write(_ncu_csv(len(payload["gemms"])))
            return SimpleNamespace(ok=True, error=None, timed_out=False, exit_code=0, stderr_tail="")

    gemms = [("mm_bf16", 8192), ("mm_fp8", 16384)]
    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: None)
    none = asyncio.run(ncu_gemm.read_tensor_pipe(FakeEvaluator(), gemms))
    assert all("ncu not found" in r["error"] for r in none.values())
    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: "/opt/ncu")
    ev = FakeEvaluator()
    got = asyncio.run(ncu_gemm.read_tensor_pipe(ev, gemms))
    target, payload, uses_gpu, argv = ev.calls[0]
    assert target == ncu_gemm.TARGET and payload == {"gemms": [["mm_bf16", 8192], ["mm_fp8", 16384]]} and uses_gpu
    assert argv[0] == "/opt/ncu" and got["mm_fp8"]["busy_pct"] == 74.5


# ----------------------------------------------------------------------------------------- report


def test_report_row_shows_measured_datasheet_clock_adjusted_and_reason():
    row = _bf16_row(806e12)
    row.update(shape=8192, sustained={"rate": 800e12, "ms_per_launch": 1.37, "launches": 380},
               clock_under_load=_load(1500, ["sw_power_cap"], 695, 700),
               tensor_pipe={"busy_pct": 96.0, "busy_active_pct": 97.0, "clock_mhz": 1980.0, "kernel": "nvjet_x"})
    row.update(ex.explain(row, 1830, row["clock_under_load"], 800e12))
    old_fma = {"key": "fp32_fma", "unit": "FLOP/s", "value": 64.4e12, "best_ms": 0.55, "median_ms": 0.56,
               "amount": 35.4e9, "method": "Triton tl.fma kernel", "peak": 66.9e12, "ratio_to_peak": 0.96}
    record = {"device": {"name": "NVIDIA H200"}, "ceilings": [row, old_fma], "measured_at": "2026-12-01T12:00:00+00:00",
              "skipped": {"mm_tf32x3": "Triton tf32x3 GEMM failed: X"}}
    lines = describe(Calibration.model_validate(record))
    text = "\n".join(lines)
    head = next(ln for ln in lines if ln.startswith("mm_bf16"))
    assert "806.0 TFLOP/s" in head and "989.4 TFLOP/s" in head and "811.0 TFLOP/s" in head
    assert "power-limited clock 1.50 GHz" in head
    assert "at 1830 MHz: H100 whitepaper" in text and "power 695 W median" in text and "of 700 W limit" in text
    assert "sw_power_cap" in text and "sustained 800.0 TFLOP/s over 380" in text
    assert "ncu: tensor pipe 96.0 % busy" in text and "nvjet_x" in text
    fma_head = next(ln for ln in lines if ln.startswith("fp32_fma"))
    assert fma_head.rstrip().endswith("-")  # a record from before the labels: no reason invented
    assert Calibration.model_validate(record).ceilings[1].explained is None


def test_unknown_gpu_rows_say_there_is_no_peak():
    row = matmul.entry("mm_bf16", "flops", BF16_FLOPS, 1.4, 1.41, "torch.matmul bf16",
                       device_peaks({"name": "NVIDIA Mystery GPU", "sm_count": 100, "sm_clock_max_mhz": 2000}))
    ex.relabel([row])
    assert row["peak"] is None and row["explained"] is False and "no datasheet" in row["reason"]


def test_matmul_probes_wiring_on_the_cpu():
    """The worker-side plan with torch on the CPU (tiny sizes, timings and burst faked): every cuBLAS type
    the device supports gets a swept, explained row; fp8 and the Triton GEMM are skipped below their archs."""
    import torch

    times = iter([0.5, 0.4, 0.2] * 10)
    skipped: dict = {}
    rows = matmul.matmul_probes(None, 10, (7, 5), device_peaks(H200), skipped, quick=True, read=lambda: {},
                                device="cpu", sizes=(16, 32), fixed=16, measure=lambda fn: (next(times), 1.0),
                                burst=lambda fn, s: {"launches": 5, "ms_per_launch": 0.5,
                                                     "load": _load(1500, ["sw_power_cap"], 699, 700)})
    assert [r["key"] for r in rows] == ["mm_fp32_ieee", "mm_tf32", "mm_bf16", "mm_fp16"], skipped
    assert set(skipped) == {"mm_fp8"} and "sm_75" in skipped["mm_fp8"]
    bf16 = rows[2]
    assert bf16["shape"] == 32 and [r["size"] for r in bf16["shapes"]] == [16, 32]  # 8x the FLOPs in less time
    assert "torch.bfloat16 32^3" in bf16["method"] and bf16["reason"] and bf16["explained"] is False
    assert rows[0]["shapes"] == [{k: v for k, v in rows[0]["shapes"][0].items()}] and rows[0]["shape"] == 16
    assert torch.backends.cuda.matmul.allow_tf32 is False  # the TF32 row restored the flag


def test_ncu_without_the_elapsed_rollup_is_asked_again_and_zero_busy_is_no_reading(monkeypatch):
    from egg_mcp.profiling import ncu_command
    from egg_mcp.profiling.ncu_csv import render_raw_csv

    class OldNcu:
        def __init__(self):
            self.metrics = []

        async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
            asked = wrapper_argv[wrapper_argv.index("--metrics") + 1].split(",")
            self.metrics.append(asked)
            log = wrapper_argv[wrapper_argv.index("--log-file") + 1]
            with open(log, "w") as f:
                if ncu_gemm.PIPE_ELAPSED in asked:
                    f.write(f"==ERROR== Failed to find metric {ncu_gemm.PIPE_ELAPSED}\n")
                else:
                    f.write(render_raw_csv([{"ID": "0", "Kernel Name": "sm90_xmma_gemm_e4m3", ncu_gemm.PIPE_ACTIVE: "0",
                                             ncu_gemm.CLOCK: "1755000000"},
                                            {"ID": "1", "Kernel Name": "nvjet_bf16", ncu_gemm.PIPE_ACTIVE: "88.5",
                                             ncu_gemm.CLOCK: "1755000000"}]))
            return SimpleNamespace(ok=True, error=None, timed_out=False, exit_code=0, stderr_tail="")

    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: "/opt/ncu")
    ev = OldNcu()
    got = asyncio.run(ncu_gemm.read_tensor_pipe(ev, [("mm_fp8", 8192), ("mm_bf16", 8192)]))
    assert len(ev.metrics) == 2 and ncu_gemm.PIPE_ELAPSED not in ev.metrics[1]
    assert got["mm_bf16"]["busy_pct"] == 88.5 and ncu_gemm.PIPE_ACTIVE in got["mm_bf16"]["method"]
    assert "0 % busy" in got["mm_fp8"]["error"]
    row = _bf16_row(806e12)
    zero = ex.explain(row, 1830, _load(1980), 806e12, got["mm_fp8"])  # no division by a zero prediction
    assert zero["explained"] is False and "0 % busy" in zero["reason"]


def test_one_ncu_launch_at_its_own_clock_explains_what_the_nvml_window_cannot():
    # the H200 bf16 row of benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/calibrate_ncu_3753365.json:
    # NVML's window said 1.53 GHz and the sustained rate 681 TFLOP/s (69 % of the datasheet vs 78 % predicted:
    # unexplained that way); the profiled launch itself: 1.2e12 FLOP... in 1.37744 ms at ncu's 1607.7 MHz with the
    # pipe 93.27 % busy
    row = {**_bf16_row(798.7e12), "amount": 2 * 8192 ** 3}
    pipe = {"busy_pct": 93.27, "busy_active_pct": 96.84, "clock_mhz": 1607.67, "kernel_ms": 1.37744}
    share = ex.ncu_launch_share(row, row["peak"], 1830, pipe)
    assert share["per_clock"] == pytest.approx(0.918, abs=0.002) and share["busy"] == pytest.approx(0.9327)
    got = ex.explain(row, 1830, _load(1530, ["sw_power_cap"], 717, 700), 681.2e12, pipe)
    assert got["explained"] is True and "1.61 GHz" in got["reason"] and "92% of the peak per clock" in got["reason"]
    assert "power-limited clock" in got["reason"]
    # a pipe reading that does not match the launch's per-clock rate does not explain it this way
    half_busy = {**pipe, "busy_pct": 50.0}
    assert "per clock" not in ex.explain(row, 1830, _load(1530, ["sw_power_cap"], 717, 700), 681.2e12,
                                         half_busy)["reason"]
    # a reading without its duration or clock: no launch share, the window's test decides
    assert ex.ncu_launch_share(row, row["peak"], 1830, {"busy_pct": 93.0}) is None


def test_the_ieee_fp32_gemm_is_read_on_the_fma_pipe_and_explained_like_the_tensor_rows():
    from egg_mcp.profiling.ncu_csv import render_raw_csv

    text = render_raw_csv([{"ID": "0", "Kernel Name": "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n",
                            ncu_gemm.PIPE_ELAPSED: "0",
                            ncu_gemm.FMA_ELAPSED: "77.9", ncu_gemm.FMA_ACTIVE: "80.1", ncu_gemm.CLOCK: "1980000000",
                            ncu_gemm.DURATION: "21500000"}])
    got = ncu_gemm.attribute(text, ["mm_fp32_ieee"])["mm_fp32_ieee"]
    assert got["pipe"] == "FMA" and got["busy_pct"] == 77.9 and "sm__pipe_fma" in got["method"]
    assert "mm_fp32_ieee" in ex.PIPE_KEYS
    # 2 x 8192^3 FLOP in 21.5 ms = 51.1 TFLOP/s at 1980 MHz = 76 % of the 66.9 TFLOP/s FMA peak, pipe 78 % busy
    row = {"key": "mm_fp32_ieee", "value": 51.1e12, "peak": 66.9e12, "amount": 2 * 8192 ** 3}
    out = ex.explain(row, 1980, _load(1980, [], 687, 700), 51.1e12, got)
    assert out["explained"] is True and "FMA pipe 78% busy" in out["reason"]


def test_the_tf32x3_row_is_read_on_the_tensor_pipe_and_a_low_busy_share_explains_it():
    """The plain Triton 3xTF32 GEMM reached 20 % of TF32/3 on the H200: with ncu's pipe reading for the same
    launch the row is explained by the kernel's idle tensor pipe, or stays unexplained when they disagree."""
    from egg_mcp.profiling.ncu_csv import render_raw_csv

    assert "mm_tf32x3" in ex.PIPE_KEYS
    text = render_raw_csv([{"ID": "0", "Kernel Name": "_gemm_tf32x3", ncu_gemm.PIPE_ELAPSED: "21.0",
                            ncu_gemm.PIPE_ACTIVE: "22.0", ncu_gemm.CLOCK: "1980000000",
                            ncu_gemm.DURATION: "31000000"}])
    got = ncu_gemm.attribute(text, ["mm_tf32x3"])["mm_tf32x3"]
    assert got["pipe"] == "tensor" and got["busy_pct"] == 21.0
    # 2 x 8192^3 in 31 ms = 35.5 TFLOP/s; TF32/3 at 1830 MHz = 164.9, at 1980 MHz 178.4: 19.9 % per clock
    row = {"key": "mm_tf32x3", "value": 35.5e12, "peak": 164.9e12, "amount": 2 * 8192 ** 3}
    out = ex.explain(row, 1830, _load(1980, [], 392, 700), 35.4e12, got)
    assert out["explained"] is True and "tensor pipe 21% busy" in out["reason"] and "idle 79%" in out["reason"]
    busy_but_slow = {**got, "busy_pct": 60.0}
    assert ex.explain(row, 1830, _load(1980, [], 392, 700), 35.4e12, busy_but_slow)["explained"] is False
