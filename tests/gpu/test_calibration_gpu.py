"""`egg-mcp calibrate` on a real GPU: every probe runs through the engine, fast, and lands near its peak.

Run: python -m pytest tests/gpu/test_calibration_gpu.py -q -m gpu
"""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from egg_mcp import hardware  # noqa: E402
from egg_mcp.calibration import store  # noqa: E402
from egg_mcp.calibration.run import calibrate, describe  # noqa: E402
from egg_mcp.evaluation.engine import WorkerEvaluator  # noqa: E402

EXPECTED = {"dram_copy", "dram_read", "l2_read", "fp32_fma", "mm_fp32_ieee", "mm_tf32", "mm_bf16", "mm_fp16"}


def test_calibration_through_the_engine(tmp_path):
    async def go():
        ev = WorkerEvaluator(scratch_dir=tmp_path / "scratch", spare_workers=0)
        try:
            return await calibrate(ev, tmp_path)
        finally:
            await ev.aclose()

    cal = asyncio.run(go())
    print("\n".join(describe(cal)))
    keys = {c.key for c in cal.ceilings}
    assert EXPECTED <= keys, f"missing {EXPECTED - keys}; skipped {cal.skipped}"
    if torch.cuda.get_device_capability() >= (8, 9):
        assert "mm_fp8" in keys, cal.skipped
    assert "mm_tf32x3" in keys, cal.skipped
    assert cal.wall_s < 45, f"calibration took {cal.wall_s:.1f} s in the worker"
    for c in cal.ceilings:
        assert c.value > 0 and c.method
        if c.ratio_to_peak is not None:  # a ceiling above its peak means a wrong count or a wrong peak
            assert 0.2 < c.ratio_to_peak < 1.1, (c.key, c.ratio_to_peak, c.method, c.peak_source)
    assert cal.get("l2_read").value > cal.get("dram_read").value  # L2 probe really hits L2
    assert cal.get("mm_bf16").value > cal.get("mm_tf32").value > cal.get("mm_fp32_ieee").value
    assert cal.device.uuid and store.load(tmp_path, cal.device.uuid) is not None
    spec = hardware.gpu_for(cal.device.name, cal.device.uuid, tmp_path)
    assert spec is not None and hardware.ceiling(spec, "dram").source == "measured"
    hardware._CALIBRATED.clear()
