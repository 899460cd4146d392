"""The tiling model's time constants come from `calibrate` on the GPU at hand (calibration/model_constants.py),
never silently from the H200 they were fitted on: the model prices with the measured ones, scales its cycle
latencies by the GPU's clock, and a proposal says whose constants it used. Offline (CPU) but the last test, which
runs the probes' kernels in the Triton interpreter with a fake clock."""

import textwrap

import pytest

from egg_mcp.hardware import GPU_TABLE, apply_calibration
from egg_mcp.hardware.calibration_record import Calibration
from egg_mcp.tiling import costs
from egg_mcp.tiling.costs import MEASURED_KEYS, time_scale, time_scale_note
from egg_mcp.tiling.model import estimate_all
from egg_mcp.tiling.space import enumerate_configs, extract_space
from tests.interpreter_snippet import run_snippet

H200 = GPU_TABLE["H200"]
WHEN = "2026-12-03T12:00:00+00:00"
MEASURED = {"launch_overhead_s": 2.0e-6, "program_dispatch_s": 60e-9, "warp_stream_bps": 5.0e9,
            "dram_latency_s": 0.7e-6}

ROW_SUM = textwrap.dedent('''
    import torch, triton, triton.language as tl

    @triton.jit
    def row_sum(x_ptr, out_ptr, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            acc += tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :])
        tl.store(out_ptr + rows, tl.sum(acc, axis=1))

    class ModelNew(torch.nn.Module):
        def forward(self, x):
            out = torch.empty(x.shape[0], device=x.device)
            row_sum[(x.shape[0] // 4,)](x, out, x.shape[1], BLOCK_M=4, BLOCK_N=1024, num_warps=4)
            return out
''')


def _calibrated(constants: dict[str, float], ceilings: tuple = ()) -> Calibration:
    return Calibration.model_validate({
        "device": {"name": "NVIDIA H200", "uuid": "GPU-test", "sm_clock_max_mhz": 1980}, "ceilings": list(ceilings),
        "constants": [{"key": k, "unit": "s", "value": v, "method": f"probe of {k}"} for k, v in constants.items()],
        "measured_at": WHEN})


def test_measured_constants_replace_the_h200_fit_and_the_proposal_note_says_which():
    spec = apply_calibration(H200, _calibrated(MEASURED))
    scale = time_scale(spec)
    assert {k: getattr(scale, k) for k in MEASURED_KEYS} == MEASURED and scale.borrowed == ()
    assert spec.provenance["warp_stream_bps"] == f"measured on this GPU at {WHEN}: probe of warp_stream_bps"
    note = time_scale_note(spec)
    assert "measured on this GPU by calibrate" in note and "5.00 GB/s per streaming warp" in note, note

    partial = time_scale(apply_calibration(H200, _calibrated({"warp_stream_bps": 5.0e9})))
    assert partial.warp_stream_bps == 5.0e9 and partial.dram_latency_s == costs.DRAM_LATENCY_S
    assert set(partial.borrowed) == set(MEASURED_KEYS) - {"warp_stream_bps"}
    plain = time_scale_note(H200)  # no calibration: the fit, said to be the H200's, with what to do
    assert "fitted on one H200, not measured on this NVIDIA H200" in plain and "run egg-mcp calibrate" in plain, plain
    old = Calibration.model_validate({"device": {"name": "NVIDIA H200"}, "ceilings": [], "measured_at": WHEN})
    assert old.constants == []  # records from before the constants still load


def test_cycle_latencies_scale_with_the_sm_clock_and_the_l2_ratio_needs_both_bandwidths_measured():
    slow = H200.model_copy(update={"sm_clock_mhz": 990})
    assert time_scale(slow).gemm_tile_fixed_s == pytest.approx(2 * costs.GEMM_TILE_FIXED_S)
    assert time_scale(slow).reduction_step_s == pytest.approx(2 * costs.REDUCTION_STEP_S)
    assert time_scale(H200).program_fixed_s == pytest.approx(costs.PROGRAM_FIXED_S)
    assert time_scale(H200).l2_over_dram == costs.L2_OVER_DRAM  # datasheet leads: the fitted ratio

    def row(key, value):
        return {"key": key, "unit": "bytes/s", "value": value, "best_ms": 1.0, "median_ms": 1.0, "amount": 1.0,
                "method": key}
    both = apply_calibration(H200, _calibrated({}, (row("dram_copy", 4e12), row("l2_read", 8e12))))
    assert time_scale(both).l2_over_dram == pytest.approx(2.0)
    one = apply_calibration(H200, _calibrated({}, (row("l2_read", 8e12),)))
    assert time_scale(one).l2_over_dram == costs.L2_OVER_DRAM


def test_the_model_prices_a_looping_row_program_with_the_measured_streaming_rate():
    """One program per SM looping over a 1 MiB row at 2 warps is warp-limited: twice the measured per-warp rate
    makes its time nearly half."""
    dims = {"n_rows": 132, "n_cols": 262144}
    space = extract_space(ROW_SUM, kind="reduction", dims=dims)
    configs, _, _ = enumerate_configs(space)
    few_warps = [c for c in configs if c == {"BLOCK_M": 1, "BLOCK_N": 128, "num_warps": 2}]
    assert few_warps, configs[:5]

    def predicted(constants):
        gpu = apply_calibration(H200, _calibrated(constants))
        return estimate_all(few_warps, space, gpu=gpu, dims=dims, kind="reduction", dtype="float32")[0]

    slow, fast = predicted({"warp_stream_bps": 2e9}), predicted({"warp_stream_bps": 4e9})
    assert any("warp-limited" in n for n in slow.notes), slow.notes
    assert fast.predicted_ms and slow.predicted_ms
    assert 0.5 < fast.predicted_ms / slow.predicted_ms < 0.65, (fast.predicted_ms, slow.predicted_ms)


PROBES = textwrap.dedent("""
    import torch
    from egg_mcp.calibration import model_constants as mc
    from egg_mcp.calibration.probe_kernels import _chase, _row_stream
    x = torch.arange(2 * 1024, dtype=torch.float32)
    out = torch.empty(2)
    _row_stream[(2,)](x, out, 1024, BLOCK=256)
    assert torch.equal(out, x.view(2, 1024).sum(1)), out
    chain = torch.tensor([3, 0, 1, 2], dtype=torch.int32)  # 0 -> 3 -> 2 -> 1 -> 0 ...
    end = torch.empty(1, dtype=torch.int32)
    _chase[(1,)](chain, end, 2)  # the first load, then two more: 3, 2, 1
    assert end.item() == 1, end
    times = iter([0.010, 0.034, 0.02, 0.1, 0.05, 0.04, 0.1, 0.5])
    clock = lambda fn: (fn(), next(times))[1]
    rows = [mc.launch_overhead(clock, "cpu"), mc.program_dispatch(clock, 2, "cpu", per_sm=(2, 6)),
            mc.warp_stream(clock, 2, True, "cpu", warps=(1, 2, 4), row_len=1024),
            mc.dram_latency(clock, 0, True, "cpu", n=4096, steps=16)]
    got = {r["key"]: r["value"] for r in rows}
    assert abs(got["launch_overhead_s"] - 0.024e-3 / 8) < 1e-12, got
    assert abs(got["program_dispatch_s"] - 0.08e-3 / 8 * 2) < 1e-12, got  # (t(12) - t(4)) / 8 programs x 2 SMs
    rates = sorted(4096 / (t * 1e-3) / w for t, w in ((0.05, 1), (0.04, 2), (0.1, 4)))
    assert abs(got["warp_stream_bps"] - rates[1]) < 1e-3, got
    assert abs(got["dram_latency_s"] - 0.5e-3 / 16) < 1e-12, got
    print("ok")
""")


def test_the_constant_probes_kernels_compute_and_their_arithmetic_in_the_interpreter(tmp_path):
    run_snippet(PROBES, tmp_path)
