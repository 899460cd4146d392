"""The measured path of the tiling search on a CUDA GPU (skipped without one).

    python -m pytest tests/gpu/test_tiling_gpu.py -q -m gpu
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from egg_mcp.contract import (  # noqa: E402
    ErrorReport,
    EvalOptions,
    EvalResult,
    JobOutcome,
    TimingStats,
    default_tolerance,
)
from egg_mcp.hardware import GPU_TABLE  # noqa: E402
from egg_mcp.tiling.dims import normalize_dims  # noqa: E402
from egg_mcp.tiling.model import estimate  # noqa: E402
from egg_mcp.tiling.rewrite import apply_config  # noqa: E402
from egg_mcp.tiling.search import propose_tiling  # noqa: E402
from egg_mcp.tiling.space import extract_space  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "benchmarks" / "tiling_kernels"


def run_worker(payload: dict, timeout_s: float = 300) -> dict:
    """measure_configs in a fresh process, as the engine runs it (the test process keeps CUDA untouched)."""
    with tempfile.TemporaryDirectory() as tmp:
        p_in, p_out = Path(tmp, "in.json"), Path(tmp, "out.json")
        p_in.write_text(json.dumps(payload))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
        proc = subprocess.run([sys.executable, "-m", "egg_mcp.tiling.measure", str(p_in), str(p_out)], env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        assert p_out.exists(), proc.stderr[-3000:]
        return json.loads(p_out.read_text())


class SubprocessEvaluator:
    def has_gpu(self) -> bool:
        return True

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        result = await asyncio.to_thread(run_worker, payload, timeout_s)
        if "error" in result:
            return JobOutcome(ok=False, error=ErrorReport(kind="job", message=result["error"]))
        return JobOutcome(ok=True, result=result)

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        """A stand-in for verify's re-run of the winner: the measuring worker on that one source."""
        result = await asyncio.to_thread(run_worker, {
            "reference_source": reference_source, "device": "cuda", "dtype": options.dtype,
            "atol": options.tolerance.atol, "rtol": options.tolerance.rtol,
            "size_overrides": dict(options.size_overrides),
            "candidates": [{"config": {}, "source": candidate_source}]})
        (r,) = result["results"]
        timing = TimingStats(median_ms=r["median_ms"], cv=r["timing_cv"], n_runs=r["timing_runs"] or 0) \
            if r["correct"] else None
        return EvalResult(verdict="correct" if r["correct"] else "incorrect", summary=r.get("error") or "ok",
                          correctness_trials=1, correctness_trials_passed=int(bool(r["correct"])), timing=timing)


def test_measure_configs_times_checks_and_reports_resources():
    source = (KERNELS / "softmax.py").read_text()
    configs = [{"BLOCK_M": m, "BLOCK_N": n, "NUM_WARPS": w} for m, n, w in
               [(1, 4096, 8), (1, 1024, 4), (2, 4096, 16), (4, 512, 4), (1, 256, 2), (8, 4096, 4)]]
    result = run_worker({"reference_source": source, "device": "cuda", "compile_workers": 4,
                         "size_overrides": {"batch_size": 1024, "dim": 4096},
                         "candidates": [{"config": c, "source": apply_config(source, c)} for c in configs]})
    assert "error" not in result, result
    assert result["compile_mode"] in ("fork", "spawn")
    for r in result["results"]:
        assert r["correct"], r
        assert r["median_ms"] > 0
        kernel = r["kernels"][0]
        assert kernel["registers"] > 0 and kernel["shared_mem_bytes"] is not None and kernel["spills"] is not None


def test_out_of_shared_memory_is_reported_and_predicted():
    source = (KERNELS / "gemm_bias_relu.py").read_text()
    config = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "NUM_WARPS": 8, "NUM_STAGES": 4}
    overrides = {"batch_size": 512, "in_features": 512, "out_features": 512}
    result = run_worker({"reference_source": source, "device": "cuda", "dtype": "bfloat16", "atol": 1e-2,
                         "rtol": 1e-2, "size_overrides": overrides,
                         "candidates": [{"config": config, "source": apply_config(source, config)}]})
    (r,) = result["results"]
    assert r["error_kind"] == "out_of_resources" and "shared" in r["error"]
    dims = normalize_dims("gemm", {"M": 512, "N": 512, "K": 512})
    est = estimate(config, extract_space(source, kind="gemm", dims=dims), gpu=GPU_TABLE["H200"], dims=dims,
                   kind="gemm", dtype="bfloat16")
    assert "smem" in est.rules


def test_propose_tiling_measures_and_recommends_a_correct_config():
    source = (KERNELS / "gemm_bias_relu.py").read_text()
    overrides: dict[str, int | list[int]] = {"batch_size": 2048, "in_features": 1024, "out_features": 2048}
    options = EvalOptions(dtype="bfloat16", tolerance=default_tolerance("bfloat16"), size_overrides=overrides)
    calls = []

    async def progress(done, total, message):
        calls.append((done, total))

    proposal = asyncio.run(propose_tiling(
        SubprocessEvaluator(), reference_source=source, candidate_source=source, options=options,
        gpu=GPU_TABLE["H200"], dims={"M": 2048, "N": 2048, "K": 1024}, kind="gemm", max_trials=6,
        time_budget_s=240, progress=progress))
    assert proposal.measured and proposal.trials_used == 6, proposal.note  # the current config among them
    assert proposal.ranked[0].correct and proposal.ranked[0].measured_ms > 0
    assert all(r.measured_ms is not None for r in proposal.ranked if r.correct)
    assert proposal.ranked[0].measured_ms == min(r.measured_ms for r in proposal.ranked
                                                 if r.correct and r.measured_ms is not None)
    if proposal.recommended is None:  # the current config was fastest within noise: nothing to change
        assert proposal.recommended_reason.startswith("keep the current config"), proposal.recommended_reason
    else:  # a winner beats the current config beyond noise, and its source has its values
        assert "faster than the current config" in proposal.recommended_reason, proposal.recommended_reason
        assert proposal.recommended_source is not None
        reread = {p.name: p.current for p in extract_space(proposal.recommended_source).params}
        assert all(reread[k] == v for k, v in proposal.recommended.values.items())
    assert calls[0][0] == 0 and calls[-1][0] == 6


def test_multi_kernel_candidate_is_probed_priced_per_kernel_and_correlated():
    """KernelBench 43 (attention + projections, tf32x3) at batch 4: the launch probe gives each kernel its own
    dims, the measured trials are correct at fp32 1e-4, and the reply carries the rank correlation."""
    from egg_mcp.tiling.launches import probe_launches

    kb = REPO / "benchmarks" / "problems" / "kernelbench"
    reference = (kb / "43_MinGPTCausalAttention.py").read_text()
    source = (kb / "mingpt_attention_triton.py").read_text()
    overrides: dict[str, int | list[int]] = {"batch_size": 4}
    launches = probe_launches({"reference_source": reference, "candidate_source": source, "dtype": "float32",
                               "size_overrides": overrides})["launches"]
    assert [r["kernel"] for r in launches] == ["linear_kernel", "attn_kernel", "linear_kernel"]
    options = EvalOptions(dtype="float32", tolerance=default_tolerance("float32"), size_overrides=overrides)
    proposal = asyncio.run(propose_tiling(
        SubprocessEvaluator(), reference_source=reference, candidate_source=source, options=options,
        gpu=GPU_TABLE["H200"], dims={"M": 2048, "N": 2304, "K": 768}, kind="gemm", max_trials=5, time_budget_s=200,
        launches=launches))
    assert [k.kind for k in proposal.kernels] == ["gemm", "attention", "gemm"]
    assert proposal.kernels[0].dims == {"M": 2048, "N": 2304, "K": 768}
    assert proposal.measured and sum(1 for r in proposal.ranked if r.correct) >= 3, proposal.note
    assert proposal.rank_correlation is not None and "rank correlation" in proposal.note
    print(f"KB43 batch 4: rho {proposal.rank_correlation:.2f} over {proposal.rank_correlation_n} configs")
