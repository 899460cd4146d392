"""The calibration probe kernels compute what their byte / FLOP counts claim (Triton CPU interpreter)."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.interpreter_snippet import run_snippet

PROBE = textwrap.dedent("""
    import torch, triton
    from egg_mcp.calibration import probes as p
    x = torch.rand(10_000)
    out = torch.empty(4)
    iters = triton.cdiv(x.numel(), 256 * 4)
    p._read_reduce[(4,)](x, out, x.numel(), BLOCK=256, ITERS=iters)
    assert torch.allclose(out.sum(), x.sum(), rtol=1e-4), (out.sum(), x.sum())
    buf = torch.ones(8 * 256)
    out = torch.empty(4)
    p._l2_reread[(4,)](buf, out, 8, PASSES=3, BLOCK=256)
    assert torch.equal(out, torch.full((4,), 3 * 2 * 256.0)), out  # 2 blocks per program, 3 passes
    from egg_mcp.calibration import fma as f
    out = torch.empty(2 * 64)
    f.fma_chains[(2,)](out, 0.75, 0.125, ITERS=5, BLOCK=64)
    x0 = torch.arange(128, dtype=torch.float32) * 1e-9
    total = 0
    for k in range(8):  # 8 chains, each a <- a * b + c with the runtime b, c
        a = x0 + 0.1 * (k + 1)
        for _ in range(5):
            a = a * 0.75 + 0.125
        total = total + a
    assert torch.allclose(out, total, rtol=1e-5), (out[:4], total[:4])
    # the probe itself, on the CPU interpreter with a fake clock: it times every layout, keeps the
    # fastest FLOP rate, and counts FLOPs as 2 x chains x iters x programs x block
    layouts = (f.Layout(per_sm=2, warps=1, block=32, iters=3), f.Layout(per_sm=4, warps=1, block=32, iters=2))
    times = iter([(1.0, 1.5), (0.5, 0.6)])
    probe = f.fma_probe(lambda fn: next(times), sm_count=3, quick=False, device="cpu", layouts=layouts)
    rates = [r["rate"] for r in probe["layouts"]]
    assert rates == [2 * 8 * 3 * 6 * 32 / 1e-3, 2 * 8 * 2 * 12 * 32 / 0.5e-3], rates
    assert probe["best"]["rate"] == max(rates) and probe["best"]["best_ms"] == 0.5
    probe["best"]["launch"]()  # the kept launch still runs
    a, bm = torch.randn(64, 32), torch.randn(32, 64)
    cm = torch.empty(64, 64)
    p._gemm_tf32x3[(triton.cdiv(64, 32) * triton.cdiv(64, 32),)](a, bm, cm, 64, 64, 32, BM=32, BN=32, BK=16, GROUP=2)
    assert torch.allclose(cm, a @ bm, atol=1e-4), (cm - a @ bm).abs().max()
    print("ok")
""")


def test_probe_kernels_in_the_interpreter(tmp_path):
    run_snippet(PROBE, tmp_path)


def test_clock_sampling_and_clock_adjusted_peak():
    from egg_mcp.calibration.fma import fp32_fma_peak, sample_clock

    assert round(fp32_fma_peak(132, 128, 1980) / 1e12, 1) == 66.9  # the H200 figure the issue quotes
    assert round(fp32_fma_peak(132, 128, 1755) / 1e12, 1) == 59.3
    launches, synced = [], []
    readings = iter([{"sm_clock_mhz": 1755, "throttle_reasons": ["sw_power_cap"]}] + [{"sm_clock_mhz": 1980}] * 1000)
    got = sample_clock(lambda: launches.append(1), 0.01, lambda: next(readings), lambda: synced.append(1),
                       busy_s=0.1)
    assert len(launches) == 10 and synced == [1]  # ~busy_s of work queued, then waited for
    assert got["min_mhz"] == 1755 and got["max_mhz"] == 1980 and got["median_mhz"] == 1980
    assert got["throttle_reasons"] == ["sw_power_cap"] and got["samples"] >= 2
    assert sample_clock(lambda: None, 0.01, lambda: {}, lambda: None, busy_s=0.05) is None  # no NVML: no clock


def test_report_states_the_clock_adjusted_peak_and_old_records_still_load():
    from egg_mcp.calibration.run import describe
    from egg_mcp.hardware.calibration_record import Calibration

    fma = {"key": "fp32_fma", "unit": "FLOP/s", "value": 55.6e12, "best_ms": 0.64, "median_ms": 0.65,
           "amount": 35.4e9, "method": "Triton tl.fma kernel", "peak": 66.9e12, "ratio_to_peak": 0.83,
           "clock_under_load": {"median_mhz": 1650, "min_mhz": 1600, "max_mhz": 1700, "samples": 14},
           "clock_adjusted_peak": 55.8e12, "ratio_to_clock_adjusted_peak": 55.6 / 55.8}
    record = {"device": {"name": "NVIDIA H200"}, "ceilings": [fma], "measured_at": "2026-12-01T09:00:00+00:00"}
    lines = describe(Calibration.model_validate(record))
    assert any("1650 MHz SM clock under load" in ln and "55.8 TFLOP/s" in ln and "100%" in ln for ln in lines), lines
    for key in ("clock_under_load", "clock_adjusted_peak", "ratio_to_clock_adjusted_peak"):
        del fma[key]  # a record from before the clock was sampled: no clock line, nothing invented
    lines = describe(Calibration.model_validate(record))
    assert not any("under load" in ln for ln in lines) and any("fp32_fma" in ln for ln in lines)


SASS = textwrap.dedent("""
    import os, re, subprocess, sys, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from egg_mcp.calibration import fma as f
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    if not os.path.exists(nvdisasm):
        print("skip: no nvdisasm in this triton"); sys.exit(0)
    sig = {"out_ptr": "*fp32", "b": "fp32", "c": "fp32", "ITERS": "constexpr", "BLOCK": "constexpr"}
    for layout in f.LAYOUTS:
        src = ASTSource(fn=f.fma_chains, signature=sig, constexprs={"ITERS": layout.iters, "BLOCK": layout.block})
        # fp fusion OFF: `a * b + c` would become FMUL + FADD; tl.fma must stay one FFMA
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": layout.warps, "enable_fp_fusion": False})
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as fh:
            fh.write(k.asm["cubin"])
        sass = subprocess.run([nvdisasm, "-c", fh.name], capture_output=True, text=True, check=True).stdout
        back = re.search(r"@!?P\\d+ BRA `\\((\\.L_x_\\d+)\\)", sass)
        assert back, sass[-2000:]
        body = sass[sass.index(back.group(1) + ":"):back.start()]
        ops = re.findall(r"/\\*[0-9a-f]{4}\\*/\\s+([A-Z][A-Z0-9_.]*)", body)
        ffma = sum(op == "FFMA" for op in ops)
        per_step = 8 * (layout.block // (32 * layout.warps))  # chains x elements per thread
        assert ffma >= per_step and ffma % per_step == 0, (layout, ffma, ops)
        assert ffma / len(ops) >= 0.95, (layout, ffma, len(ops), sorted(set(ops)))
        print(layout.label(), ffma, "FFMA of", len(ops))
    print("ok")
""")


def test_fma_loop_is_an_ffma_stream_on_sm90(tmp_path):
    """The compiler neither folds the chains nor splits them into FMUL + FADD (fp fusion off, as Triton
    3.10 will default to): each loop step of every layout is >= 95 % FFMA. Compiles for sm_90 with the
    ptxas and nvdisasm Triton ships; no GPU needed."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path), TRITON_DEFAULT_FP_FUSION="1")
    run = subprocess.run([sys.executable, "-c", SASS], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and ("ok" in run.stdout or "skip" in run.stdout), run.stdout[-2000:] + run.stderr[-3000:]


def test_fma_entry_carries_layouts_clock_and_clock_adjusted_ratio(monkeypatch):
    """probes._fma_entry (the record's fp32_fma row) with the GPU parts faked: the best layout is the
    value, every layout is kept, and the sampled clock gives the peak at that clock and the ratio to it."""
    from types import SimpleNamespace

    from egg_mcp.calibration import probes
    from egg_mcp.calibration.peaks import device_peaks

    layouts = [{"layout": "A", "flops": 35.4e9, "best_ms": 0.8, "median_ms": 0.81, "rate": 35.4e9 / 0.8e-3},
               {"layout": "B", "flops": 35.4e9, "best_ms": 0.6, "median_ms": 0.61, "rate": 35.4e9 / 0.6e-3}]
    best = {**layouts[1], "launch": lambda: None}
    monkeypatch.setattr(probes, "fma_probe", lambda measure, sms, quick: {"best": best, "layouts": layouts})
    facts = {"name": "NVIDIA H200", "sm_count": 132, "sm_clock_max_mhz": 1980, "compute_capability": "9.0"}
    timer = SimpleNamespace(nvml=SimpleNamespace(read=lambda: {}))
    clock = {"median_mhz": 1755, "min_mhz": 1740, "max_mhz": 1770, "samples": 12, "launches": 300,
             "throttle_reasons": []}
    monkeypatch.setattr(probes, "sample_clock", lambda *a, **k: clock)
    entry = probes._fma_entry(timer, facts, 10, False, device_peaks(facts))
    assert entry["value"] == best["rate"] and entry["layouts"] == layouts and entry["clock_under_load"] == clock
    assert entry["ratio_to_peak"] == pytest.approx(best["rate"] / (132 * 128 * 2 * 1980e6))
    assert entry["clock_adjusted_peak"] == pytest.approx(132 * 128 * 2 * 1755e6)
    assert entry["ratio_to_clock_adjusted_peak"] == pytest.approx(best["rate"] / (132 * 128 * 2 * 1755e6))
    assert "1755 MHz" in entry["note"] and "A: 44.2" in entry["note"] and "B: 59.0" in entry["note"]
    monkeypatch.setattr(probes, "sample_clock", lambda *a, **k: None)
    entry = probes._fma_entry(timer, facts, 10, False, device_peaks(facts))
    assert entry.get("clock_adjusted_peak") is None and "clock under load unknown" in entry["note"]
