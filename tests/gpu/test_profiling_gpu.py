"""profile_ncu on real Triton kernels built to be each kind of bottleneck (H200; skipped without CUDA).

Each kind of benchmarks/profiling_kernels.py is profiled through profile_candidate (the engine's
workers under ncu) and the report must say what the kernel was built to be. Without ncu, the same
kernels go through the no-counter fallback.
"""

import asyncio
import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from egg_mcp.contract import EvalOptions  # noqa: E402
from egg_mcp.evaluation.engine import WorkerEvaluator  # noqa: E402
from egg_mcp.profiling import ncu_command, profile_job  # noqa: E402
from egg_mcp.stages import Stage  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("profiling_kernels", ROOT / "benchmarks" / "profiling_kernels.py")
assert _spec is not None and _spec.loader is not None
kernels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernels)


def _profile(kind: str):
    info = kernels.KINDS[kind]

    async def go():
        import tempfile

        ev = WorkerEvaluator(scratch_dir=Path(tempfile.mkdtemp(prefix="egg-prof-gpu-")), spare_workers=0)
        try:
            return await profile_job.profile_candidate(
                ev, reference_source=info["reference"], candidate_source=info["candidate"],
                options=EvalOptions(dtype=info["dtype"]), stage=Stage(info["stage"]), gpu=None, flops=info["flops"],
                min_bytes=info["min_bytes"], timeout_s=300)
        finally:
            await ev.aclose()

    return asyncio.run(go())


@pytest.mark.skipif(ncu_command.find_ncu() is None, reason="ncu not installed")
@pytest.mark.parametrize("kind", list(kernels.KINDS))
def test_ncu_classification_matches_the_kernel(kind):
    report = _profile(kind)
    print(f"\n[{kind}] {report.summary} (wall {report.wall_s:.1f} s; rejected {report.metrics_rejected})")
    assert report.source == "ncu", f"fell back: {report.fallback_reason}; warnings {report.warnings}"
    assert kernels.check_expectation(kind, report) == []


def test_fallback_sees_spills_and_timing_without_ncu(monkeypatch):
    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: None)
    report = _profile("spilling")
    assert report.source == "fallback"
    (k,) = report.kernels
    assert k.metric("triton.n_spills").value > 0
    assert k.metric("event.duration").source == "event_timing"
    assert k.occupancy is not None and k.occupancy.limiter == "registers"
    assert kernels.check_expectation("spilling", report) == []
