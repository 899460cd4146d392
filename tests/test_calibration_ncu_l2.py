"""Issue 14: the L2 ceiling beside ncu's peak for the unit that carries it (`calibrate --ncu`; CPU, ncu's CSV
canned, and the real H200 launch recorded at 5ca66b1).

The L2 probe's launch is profiled in the same ncu job as the GEMMs, after them. ncu's rate of the L2 slices'
SM-read sectors and its share of ncu's sustained peak give that path's peak; the l2_read row is compared with it
and explained as a GEMM row is (the rate's share of the peak against the busy share of the slices' return path
in the same launch), or left "unexplained" with the numbers. An ncu without those metrics falls back to
lts__t_bytes (which also counts lookups an SM read cannot use) and the probe's first pass from DRAM.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from egg_mcp.calibration import explain as ex
from egg_mcp.calibration import ncu_gemm
from egg_mcp.calibration.run import describe
from egg_mcp.profiling.ncu_csv import render_raw_csv

MiB = 1 << 20
L2_AMOUNT = 16.0 * 20 * MiB  # the H200 probe: a 20 MiB buffer read 16 times
DRAM_READ = {"key": "dram_read", "unit": "bytes/s", "value": 4.57e12, "peak": 4.81e12}


def _gemm_launch(i: int, name: str = "nvjet_sm90_tst_320x128") -> dict:
    return {"ID": str(i), "Kernel Name": name, ncu_gemm.PIPE_ELAPSED: "93.3", ncu_gemm.PIPE_ACTIVE: "96.9",
            ncu_gemm.CLOCK: "1611000000", ncu_gemm.DURATION: "1377440", ncu_gemm.L2_RATE: "1.2e12",
            ncu_gemm.L2_PCT: "11.0", ncu_gemm.DRAM_READ: "402653184"}


SM_READ_METRICS = (ncu_gemm.SM_READ_RATE, ncu_gemm.SM_READ_PCT, ncu_gemm.RETURN_BUSY, ncu_gemm.RETURN_BUSY_MIN,
                   ncu_gemm.RETURN_BUSY_MAX, ncu_gemm.L2_CLOCK, ncu_gemm.XBAR2L1_PCT, ncu_gemm.DRAM_PCT)
S8_SM_READ = {ncu_gemm.SM_READ_RATE: "255575189155.11", ncu_gemm.SM_READ_PCT: "79.58", ncu_gemm.RETURN_BUSY: "79.63",
              ncu_gemm.RETURN_BUSY_MIN: "78.82", ncu_gemm.RETURN_BUSY_MAX: "80.51", ncu_gemm.L2_CLOCK: "1708267654.48",
              ncu_gemm.XBAR2L1_PCT: "24.33", ncu_gemm.DRAM_PCT: "8.59"}
"""The H200 values of the probe's launch under ncu --set full at 5ca66b1 (tests/data/calibration_h200/l2_full.csv, from
benchmarks/results/archive/h200_2026-12-01_5ca66b1-3a5ca05/l2_full/)."""
S8_PEAK = 32 * 255575189155.11 / 0.7958


def _l2_launch(i: int, rate="8100000000000", pct="74.0", name="_l2_reread", drop=(), sm=None) -> dict:
    launch = {"ID": str(i), "Kernel Name": name, ncu_gemm.PIPE_ELAPSED: "0", ncu_gemm.PIPE_ACTIVE: "0",
              ncu_gemm.CLOCK: "1980000000", ncu_gemm.DURATION: "42100", ncu_gemm.L2_RATE: rate,
              ncu_gemm.L2_PCT: pct, ncu_gemm.DRAM_READ: str(20 * MiB), **(sm or {})}
    return {k: v for k, v in launch.items() if k not in drop}


def _l2_row(value=7.98e12) -> dict:
    return {"key": "l2_read", "unit": "bytes/s", "value": value, "best_ms": L2_AMOUNT / value * 1e3,
            "median_ms": L2_AMOUNT / value * 1e3, "amount": L2_AMOUNT, "peak": None, "ratio_to_peak": None,
            "method": "Triton kernel re-reading a 20 MiB buffer (1/3 of L2) 16 times with .cg loads, best of 10"}


# ------------------------------------------------------------------------------------- attribution


def test_the_l2_launch_is_attributed_last_and_gives_ncus_peak_for_lts_bytes():
    text = render_raw_csv([_gemm_launch(0), _gemm_launch(1), _l2_launch(2)])
    got = ncu_gemm.attribute(text, ["mm_bf16", "mm_fp16", "l2_read"])
    l2 = got["l2_read"]
    assert l2["bytes_per_s"] == 8.1e12 and l2["pct_of_peak"] == 74.0
    assert l2["peak"] == pytest.approx(8.1e12 / 0.74) and l2["dram_read_bytes"] == 20 * MiB
    assert l2["kernel"] == "_l2_reread" and l2["kernel_ms"] == pytest.approx(0.0421)
    assert ncu_gemm.L2_RATE in l2["method"] and ncu_gemm.L2_PCT in l2["method"]
    # the GEMMs keep their pipe readings, unaffected by the L2 metrics on their rows
    assert got["mm_bf16"]["busy_pct"] == 93.3 and got["mm_fp16"]["pipe"] == "tensor" and "peak" not in got["mm_fp16"]


def test_a_missing_l2_metric_is_an_error_on_that_row_only():
    text = render_raw_csv([_gemm_launch(0), _l2_launch(1, drop=(ncu_gemm.L2_PCT,))])
    got = ncu_gemm.attribute(text, ["mm_bf16", "l2_read"])
    assert ncu_gemm.L2_PCT in got["l2_read"]["error"] and "no ncu L2 peak" in got["l2_read"]["error"]
    assert got["mm_bf16"]["busy_pct"] == 93.3 and "error" not in got["mm_bf16"]
    zero = ncu_gemm.attribute(render_raw_csv([_l2_launch(0, pct="0")]), ["l2_read"])["l2_read"]
    assert "no peak derivable" in zero["error"]  # no division by a zero share


def test_launch_count_mismatch_and_a_foreign_kernel_are_not_guessed():
    extra = render_raw_csv([_gemm_launch(0), _gemm_launch(1), _l2_launch(2)])  # a GEMM that launched twice
    got = ncu_gemm.attribute(extra, ["mm_bf16", "l2_read"])
    assert all("3 kernels for 2 launches" in r["error"] and "not attributed" in r["error"] for r in got.values())
    swapped = render_raw_csv([_l2_launch(0), _gemm_launch(1)])  # out of order: the L2 slot holds a GEMM
    got = ncu_gemm.attribute(swapped, ["mm_bf16", "l2_read"])
    assert "not _l2_reread" in got["l2_read"]["error"] and "nvjet" in got["l2_read"]["error"]


# ------------------------------------------------------------------------------------ explanation


def test_l2_row_within_10_percent_of_ncus_peak_is_explained():
    row = _l2_row(7.98e12)
    reading = ncu_gemm.l2_reading(_parsed(_l2_launch(0, rate="8.2e12", pct="95.0")))
    ex.add_l2_reading(row, reading, DRAM_READ)
    assert row["peak"] == pytest.approx(8.2e12 / 0.95) and row["ratio_to_peak"] == pytest.approx(7.98 / (8.2 / 0.95))
    assert row["peak_source"].startswith("ncu's peak for lts__t_bytes") and "not a datasheet" in row["peak_source"]
    assert row["explained"] is True and row["reason"].startswith("within 10 % of ncu's peak for lts__t_bytes (92%)")


def test_the_first_pass_from_dram_explains_a_gap_it_accounts_for_and_nothing_more():
    # ncu's peak 9.2 TB/s: 20 MiB from DRAM at 4.57 TB/s plus 300 MiB at 9.2 TB/s predict 94 %, measured 87 %
    row = _l2_row(7.98e12)
    ex.add_l2_reading(row, {"bytes_per_s": 8.1e12, "pct_of_peak": 8.1 / 9.2 * 100, "peak": 9.2e12,
                            "dram_read_bytes": 20 * MiB}, DRAM_READ)
    predicted = L2_AMOUNT / (20 * MiB / 4.57e12 + (L2_AMOUNT - 20 * MiB) / 9.2e12) / 9.2e12
    assert predicted == pytest.approx(0.940, abs=0.002)
    assert row["explained"] is True and "the gap is the first pass" in row["reason"]
    assert "predict 94% of ncu's peak for lts__t_bytes, measured 87%" in row["reason"]
    # ncu's peak 10.9 TB/s: the first pass predicts 92 %, measured 73 %: unexplained, with the numbers
    far = _l2_row(7.98e12)
    ex.add_l2_reading(far, {"bytes_per_s": 8.1e12, "pct_of_peak": 74.0, "peak": 8.1e12 / 0.74,
                            "dram_read_bytes": 20 * MiB}, DRAM_READ)
    assert far["explained"] is False and far["reason"].startswith("unexplained: the first pass from DRAM (20 MiB")
    assert "measured 73%" in far["reason"] and "ncu read lts__t_bytes at 74 % of that peak" in far["reason"]
    # no DRAM row: the factor cannot be weighed, and the row says so
    bare = _l2_row(7.98e12)
    ex.add_l2_reading(bare, {"bytes_per_s": 8.1e12, "pct_of_peak": 74.0, "peak": 8.1e12 / 0.74,
                             "dram_read_bytes": 20 * MiB}, None)
    assert bare["explained"] is False and "no DRAM reading" in bare["reason"]
    # far above ncu's peak is not "within 10 %": the byte counts disagree
    above = _l2_row(13e12)
    ex.add_l2_reading(above, {"bytes_per_s": 8.1e12, "pct_of_peak": 74.0, "peak": 8.1e12 / 0.74}, DRAM_READ)
    assert above["explained"] is False and "above it" in above["reason"]


def test_a_failed_l2_reading_leaves_the_row_without_a_peak_and_says_why():
    row = _l2_row()
    ex.add_l2_reading(row, {"error": "ncu not found (set EGG_MCP_NCU or install Nsight Compute)"}, DRAM_READ)
    assert row["peak"] is None and row["explained"] is False
    assert row["reason"] == ("no peak figure for this unit: ncu's L2 reading failed: ncu not found (set EGG_MCP_NCU "
                             "or install Nsight Compute)")
    plain = _l2_row()
    ex.relabel([plain])  # no --ncu: the row points at the flag that reads the peak
    assert plain["explained"] is False and "--ncu" in plain["reason"] and "SM-read path" in plain["reason"]


S8_CSV = Path(__file__).resolve().parent / "data" / "calibration_h200" / "l2_full.csv"
S7_ROW = 7845300986209.484  # calibrate_ncu_42095a3.json: the l2_read row, 415236096 bytes per launch


def test_the_recorded_h200_launch_explains_the_row_by_the_sm_read_path():
    """The real ncu CSV (`--set full`, the probe's launch) through the product's own parser: the SM-read path's
    peak 10.28 TB/s at the 1.71 GHz L2 clock; the s7 row 7.85 TB/s is 76.3 % of it with the return path 79.6 %
    busy in the same launch: explained, with the numbers."""
    from egg_mcp.profiling.ncu_csv import parse_ncu_output

    launches = parse_ncu_output(S8_CSV.read_text(errors="replace")).launches
    assert len(launches) == 1
    reading = ncu_gemm.l2_reading(launches[0])
    sm = reading["sm_read"]
    assert sm["peak"] == pytest.approx(S8_PEAK) and sm["bytes_per_s"] == pytest.approx(8.178e12, rel=1e-3)
    assert (sm["busy_pct"], sm["busy_min_pct"], sm["busy_max_pct"]) == (79.63, 78.82, 80.51)
    assert sm["l2_clock_mhz"] == pytest.approx(1708.27, abs=0.01) and reading["dram_read_bytes"] == 20976896
    assert "peak" not in reading  # --set full has no lts__t_bytes: the SM-read path alone gives the peak
    row = _l2_row(S7_ROW)
    row["amount"] = 415236096.0
    ex.add_l2_reading(row, reading, DRAM_READ)
    assert row["peak"] == pytest.approx(S8_PEAK) and row["ratio_to_peak"] == pytest.approx(0.7634, abs=1e-4)
    assert row["peak_source"] == ex.L2_PEAK_SOURCE and "not a datasheet" in row["peak_source"]
    assert row["explained"] is True
    assert row["reason"].startswith("76.3 % of ncu's peak for the L2 slices' SM-read path (10.28 TB/s at its 1708 MHz "
                                    "L2 clock); ncu's launch itself moved 8.18 TB/s = 79.6 % of it")
    assert "return path (lts2xbar) was 79.6 % busy (per slice 78.8-80.5 %) in the same launch" in row["reason"]
    assert "the busiest unit of the launch (of those read: SM-side crossbar port (xbar2l1tex) 24.3 %" in row["reason"]
    assert "the rest is the path's idle time under this load" in row["reason"]
    assert "l2_fabric/l2_sweep.json" in row["reason"] and "20 MiB per ncu" in row["reason"]


def _sm_reading(busy: float | None = 79.63, others=None, **sm) -> dict:
    return {"sm_read": {"bytes_per_s": 8.18e12, "pct_of_peak": 79.58, "peak": S8_PEAK, "busy_pct": busy,
                        "busy_min_pct": 78.8, "busy_max_pct": 80.5, "l2_clock_mhz": 1708.0, **sm},
            "other_units": others if others is not None else {"SM-side crossbar port (xbar2l1tex)": 24.3},
            "dram_read_bytes": 20 * MiB, "kernel_ms": 0.0508, "kernel": "_l2_reread"}


def test_a_busy_share_far_from_the_rate_share_leaves_the_row_unexplained():
    row = _l2_row(S7_ROW)
    ex.add_l2_reading(row, _sm_reading(busy=40.0), DRAM_READ)  # 76 % of the peak with the path 40 % busy
    assert row["explained"] is False and row["reason"].startswith("unexplained: 76.3 % of ncu's peak")
    assert "was 40.0 % busy" in row["reason"] and "not within 10 % of the busy share" in row["reason"]
    slow = _l2_row(5.0e12)  # 49 % of the peak with the path 79.6 % busy
    ex.add_l2_reading(slow, _sm_reading(), DRAM_READ)
    assert slow["explained"] is False and "48.7 % of ncu's peak" in slow["reason"]
    near = _l2_row(9.6e12)  # 93 %: within 10 % of the path's peak, no factor needed
    ex.add_l2_reading(near, _sm_reading(), DRAM_READ)
    assert near["explained"] is True and near["reason"] == ("within 10 % of ncu's peak for the L2 slices' SM-read path "
                                                            "(93%)")


def test_the_busiest_unit_is_claimed_only_when_the_numbers_read_say_so():
    row = _l2_row(S7_ROW)
    ex.add_l2_reading(row, _sm_reading(others={"DRAM read": 91.0}), DRAM_READ)
    assert "not the busiest unit read: DRAM read 91.0 %" in row["reason"] and "the busiest unit of" not in row["reason"]
    bare = _l2_row(S7_ROW)
    ex.add_l2_reading(bare, _sm_reading(others={}), DRAM_READ)
    assert "no other unit's share read in the launch" in bare["reason"]


def test_an_sm_read_peak_without_a_busy_share_falls_back_to_the_first_pass_model():
    row = _l2_row(S7_ROW)
    ex.add_l2_reading(row, _sm_reading(busy=None), DRAM_READ)
    assert row["peak"] == pytest.approx(S8_PEAK) and row["explained"] is False
    assert "predict" in row["reason"] and "of ncu's peak for the L2 slices' SM-read path" in row["reason"]
    assert "no busy share of the slices' return path" in row["reason"]


def _parsed(launch: dict):
    """One launch as ncu_csv parses it from the raw CSV."""
    from egg_mcp.profiling.ncu_csv import parse_ncu_output

    return parse_ncu_output(render_raw_csv([launch])).launches[0]


# ------------------------------------------------------------------------- the one ncu job, end to end


class _FakeEngine:
    """The calibration job returns `record`; the ncu-wrapped job writes ncu's CSV for what its payload asks
    (GEMMs in order, then the L2 probe), or an ==ERROR== for a metric this 'ncu' lacks."""

    def __init__(self, record: dict, lacks: tuple[str, ...] = ()):
        self.record, self.lacks, self.ncu_calls = record, lacks, []

    def has_gpu(self):
        return True

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        if wrapper_argv is None:
            return SimpleNamespace(ok=True, result=self.record, error=None, timed_out=False, exit_code=0,
                                   stderr_tail="")
        asked = wrapper_argv[wrapper_argv.index("--metrics") + 1].split(",")
        self.ncu_calls.append((target, payload, asked))
        log = wrapper_argv[wrapper_argv.index("--log-file") + 1]
        bad = [m for m in self.lacks if m in asked]
        with open(log, "w") as f:
            if bad:
                f.write(f"==ERROR== Failed to find metric {bad[0]}\n")
            else:
                launches = [_gemm_launch(i) for i, _ in enumerate(payload["gemms"])]
                if "l2" in payload:
                    launches.append(_l2_launch(len(launches), sm=S8_SM_READ))
                f.write(render_raw_csv([{k: v for k, v in ln.items() if k in ("ID", "Kernel Name", *asked)}
                                        for ln in launches]))
        return SimpleNamespace(ok=True, result={}, error=None, timed_out=False, exit_code=0, stderr_tail="")


def _record() -> dict:
    row = lambda key, unit, value, **kw: {"key": key, "unit": unit, "value": value, "best_ms": 1.0,  # noqa: E731
                                          "median_ms": 1.0, "amount": value * 1e-3, "method": f"probe {key}", **kw}
    bf16 = row("mm_bf16", "FLOP/s", 796.7e12, peak=989.4e12, ratio_to_peak=0.805, shape=8192, peak_clock_mhz=1830)
    ceilings = [row("dram_read", "bytes/s", 4.57e12, peak=4.81e12, ratio_to_peak=0.95), _l2_row(7.98e12), bf16]
    ex.relabel(ceilings)
    return {"device": {"name": "NVIDIA H200", "uuid": None}, "ceilings": ceilings, "quick": False,
            "measured_at": "2026-12-01T13:15:00+00:00"}


def test_calibrate_ncu_profiles_the_l2_probe_in_the_same_job_and_explains_it_by_its_path(monkeypatch):
    from egg_mcp.calibration.run import calibrate
    from egg_mcp.profiling import ncu_command

    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: "/opt/ncu")
    engine = _FakeEngine(_record())
    cal = asyncio.run(calibrate(engine, None, ncu=True))  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert len(engine.ncu_calls) == 1  # one ncu job for the GEMMs and the L2 probe
    target, payload, asked = engine.ncu_calls[0]
    assert target == ncu_gemm.TARGET and payload == {"gemms": [["mm_bf16", 8192]], "l2": {"quick": False}}
    assert {ncu_gemm.L2_RATE, ncu_gemm.L2_PCT, ncu_gemm.DRAM_READ, *SM_READ_METRICS} <= set(asked)
    l2 = cal.get("l2_read")
    assert l2.peak == pytest.approx(S8_PEAK) and l2.ratio_to_peak == pytest.approx(7.98e12 / S8_PEAK)
    assert l2.peak_source == ex.L2_PEAK_SOURCE and l2.ncu_l2["sm_read"]["busy_pct"] == 79.63
    assert l2.ncu_l2["pct_of_peak"] == 74.0 and l2.ncu_l2["peak"] == pytest.approx(8.1e12 / 0.74)  # context kept
    assert l2.reason is not None
    assert l2.explained is True and "77.6 % of ncu's peak for the L2 slices' SM-read path" in l2.reason
    assert cal.get("mm_bf16").tensor_pipe["busy_pct"] == 93.3  # the GEMM rows read as before
    lines = describe(cal)
    text = "\n".join(lines)
    head = next(ln for ln in lines if ln.startswith("l2_read"))
    assert "7.98 TB/s" in head and "10.28 TB/s" in head and "78%" in head
    assert "peak: ncu's peak for the L2 slices' SM-read path" in text
    assert ("ncu: L2 SM-read path 8.18 TB/s = 79.6 % of its sustained peak (10.28 TB/s at L2 clock 1708 MHz), "
            "return path (lts2xbar) 79.6 % busy (per slice 78.8-80.5 %)") in text
    assert "lts__t_bytes 8.10 TB/s = 74.0 % of its sustained peak (10.95 TB/s)" in text
    assert "20 MiB read from DRAM" in text and "kernel _l2_reread" in text


def test_an_ncu_without_the_sm_read_metrics_falls_back_to_lts_bytes_and_says_so(monkeypatch):
    """An ncu that rejects one metric per run: asked again without each, the GEMMs read, the L2 row compared
    with lts__t_bytes (today's behaviour) with a note that names what this ncu lacked."""
    from egg_mcp.calibration.run import calibrate
    from egg_mcp.profiling import ncu_command

    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: "/opt/ncu")
    lacks = (ncu_gemm.SM_READ_RATE, ncu_gemm.SM_READ_PCT, ncu_gemm.RETURN_BUSY)
    engine = _FakeEngine(_record(), lacks=lacks)
    cal = asyncio.run(calibrate(engine, None, ncu=True))  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert len(engine.ncu_calls) == 4 and not set(lacks) & set(engine.ncu_calls[-1][2])
    l2 = cal.get("l2_read")
    assert l2.ncu_l2 is not None
    assert "sm_read" not in l2.ncu_l2 and ncu_gemm.SM_READ_RATE in l2.ncu_l2["sm_read_missing"]
    assert l2.peak == pytest.approx(8.1e12 / 0.74) and l2.peak_source == ex.L2_TBYTES_PEAK_SOURCE
    assert l2.reason is not None
    assert l2.explained is False and "measured 73%" in l2.reason and "compared with lts__t_bytes" in l2.reason
    assert cal.get("mm_bf16").tensor_pipe["busy_pct"] == 93.3
    assert "no SM-read path reading" in "\n".join(describe(cal))


def test_an_ncu_without_the_l2_metrics_leaves_the_gemm_rows_read(monkeypatch):
    from egg_mcp.profiling import ncu_command

    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: "/opt/ncu")
    engine = _FakeEngine({}, lacks=(ncu_gemm.L2_PCT,))
    got = asyncio.run(ncu_gemm.read_tensor_pipe(engine, [("mm_bf16", 8192)], l2={"quick": True}))
    assert len(engine.ncu_calls) == 2 and ncu_gemm.L2_PCT not in engine.ncu_calls[1][2]  # asked again without it
    assert engine.ncu_calls[0][1]["l2"] == {"quick": True}
    assert got["mm_bf16"]["busy_pct"] == 93.3
    # no lts__t_bytes
    assert got["l2_read"]["sm_read"]["peak"] == pytest.approx(S8_PEAK) and "peak" not in got["l2_read"]
    neither = _FakeEngine({}, lacks=(ncu_gemm.L2_PCT, ncu_gemm.SM_READ_PCT))
    got = asyncio.run(ncu_gemm.read_tensor_pipe(neither, [("mm_bf16", 8192)], l2={"quick": True}))
    assert ncu_gemm.L2_PCT in got["l2_read"]["error"] and ncu_gemm.SM_READ_PCT in got["l2_read"]["error"]
    assert got["mm_bf16"]["busy_pct"] == 93.3
    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: None)
    none = asyncio.run(ncu_gemm.read_tensor_pipe(engine, [("mm_bf16", 8192)], l2={"quick": True}))
    assert set(none) == {"mm_bf16", "l2_read"} and all("ncu not found" in r["error"] for r in none.values())


# ---------------------------------------------------------------------------------- the worker side


def test_the_worker_profiles_one_launch_each_in_order_with_warm_ups_outside_the_range(monkeypatch):
    """profile_gemms (the target ncu wraps) on the CPU with CUDA faked: each GEMM, then the L2 probe, runs
    3 times before cudaProfilerStart (compiles happen there) and exactly once between Start and Stop."""
    import torch

    from egg_mcp.calibration import matmul

    events: list[str] = []
    cudart = SimpleNamespace(cudaProfilerStart=lambda: events.append("start"),
                             cudaProfilerStop=lambda: events.append("stop"))
    monkeypatch.setattr(torch.cuda, "cudart", lambda: cudart)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(matmul, "gemm_maker",
                        lambda key: (lambda size: ((lambda: events.append(f"{key}@{size}")), 0.0, key)))
    quick_seen = []

    def l2_maker(options):
        quick_seen.append(options["quick"])
        return lambda: events.append("l2")

    monkeypatch.setattr(ncu_gemm, "_l2_maker", l2_maker)
    got = ncu_gemm.profile_gemms({"gemms": [["mm_bf16", 8192], ["mm_fp8", 16384]], "l2": {"quick": True}})
    assert got == {"profiled": ["mm_bf16", "mm_fp8", "l2_read"]} and quick_seen == [True]
    profiled = [events[i + 1] for i, e in enumerate(events) if e == "start"]
    assert profiled == ["mm_bf16@8192", "mm_fp8@16384", "l2"]
    for i, e in enumerate(events):
        if e == "start":
            assert events[i + 2] == "stop" and events[i - 3:i] == [events[i + 1]] * 3  # 3 warm-ups, then one
    events.clear()
    assert ncu_gemm.profile_gemms({"gemms": [["mm_bf16", 8192]]}) == {"profiled": ["mm_bf16"]}  # no L2 asked
    assert "l2" not in events
