"""The evaluation engine on a real GPU (H200): faults, GPU-only exploits, timing quality.

Run: python -m pytest tests/gpu/test_engine_gpu.py -q -m gpu
Every evaluation runs in its own worker process; the module shares one evaluator with a warm pool.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from egg_mcp.contract import EvalOptions  # noqa: E402
from egg_mcp.evaluation.engine import WorkerEvaluator  # noqa: E402
from egg_mcp.problems.builtin import builtin_source  # noqa: E402

ADVERSARIAL = Path(__file__).parent.parent / "adversarial"
CORRECT = (ADVERSARIAL / "correct_row_softmax.py").read_text()
MID: dict[str, int | list[int]] = {"batch_size": 1024, "dim": 1000}
KERNEL_END = "    return y\n"


def with_kernel(body: str) -> str:
    """The correct candidate plus an extra kernel and a ModelNew that uses it (replaces the original)."""
    head = CORRECT.split("class ModelNew")[0]
    return head + body


FAULTS = {
    "illegal_address": with_kernel('''
@triton.jit
def oob_kernel(y_ptr):
    tl.store(y_ptr + 1_000_000_000_000, 1.0)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        oob_kernel[(1,)](y)
        return y
'''),
    "device_assert": with_kernel('''
@triton.jit(debug=True)
def assert_kernel(x_ptr, n):
    i = tl.program_id(0)
    v = tl.load(x_ptr + i)
    tl.device_assert(v > 1e30, "value too small")


class ModelNew(nn.Module):
    def forward(self, x):
        assert_kernel[(x.shape[0],)](x, x.numel())
        return triton_softmax(x)
'''),
    "endless_kernel": with_kernel('''
@triton.jit
def spin_kernel(x_ptr, y_ptr):
    v = tl.load(x_ptr)
    v = tl.abs(v) + 1.0
    while v > 0.0:
        v = v * 1.0000001 + 1.0
    tl.store(y_ptr, v)


class ModelNew(nn.Module):
    def forward(self, x):
        y = triton_softmax(x)
        spin_kernel[(1,)](x, y)
        return y
'''),
    "gpu_oom": with_kernel('''
class ModelNew(nn.Module):
    def forward(self, x):
        hog = torch.empty(1 << 40, dtype=torch.uint8, device=x.device)
        return triton_softmax(x)
'''),
}
RUN_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def evaluator_results(tmp_path_factory):
    async def run_all():
        ev = WorkerEvaluator(scratch_dir=tmp_path_factory.mktemp("gpu"), spare_workers=2)
        await ev.start_pool()
        out = {}
        try:
            opts = EvalOptions(size_overrides=MID, run_timeout_s=RUN_TIMEOUT_S)
            ref = builtin_source("softmax")
            for name, src in FAULTS.items():
                start = time.monotonic()
                out[name] = (await ev.evaluate(ref, src, opts), time.monotonic() - start)
                out[name + "_next"] = (await ev.evaluate(ref, CORRECT, opts.model_copy(update={"timing": False})), 0)
            for path in sorted(ADVERSARIAL.glob("*.py")):
                out["adv_" + path.stem] = (await ev.evaluate(ref, path.read_text(), opts), 0)
            out["full_size"] = (await ev.evaluate(ref, CORRECT, EvalOptions(timing_trials=100, isolated_timing=True)),
                                0)
            probe = await ev.run_job(
                "tests.doubles.jobs:timing_probe",
                {"problem": "softmax", "sizes": [{"batch_size": 64, "dim": 256}, {"batch_size": 1024, "dim": 1024},
                                                  {"batch_size": 4096, "dim": 8192},
                                                  {"batch_size": 32768, "dim": 8192}]},
                timeout_s=240, uses_gpu=True)
            out["probe"] = (probe, 0)
            baselines = await ev.baselines(ref, EvalOptions(size_overrides=MID))
            out["baselines"] = (baselines, 0)
        finally:
            await ev.aclose()
        return out

    return asyncio.run(run_all())


@pytest.mark.parametrize("fault,verdict", [("illegal_address", "runtime_error"), ("device_assert", "runtime_error"),
                                           ("endless_kernel", "timeout"), ("gpu_oom", "oom")])
def test_gpu_fault_gets_named_verdict_and_next_evaluation_is_correct(evaluator_results, fault, verdict):
    result, wall = evaluator_results[fault]
    assert result.verdict == verdict, (result.summary, result.error, result.stderr_tail[-2000:])
    if fault == "endless_kernel":
        assert wall < RUN_TIMEOUT_S + 60
    after, _ = evaluator_results[fault + "_next"]
    assert after.verdict == "correct", after.summary


def test_adversarial_candidates_on_gpu(evaluator_results):
    wrong = {}
    for key, (result, _) in evaluator_results.items():
        if not key.startswith("adv_"):
            continue
        text = (ADVERSARIAL / f"{key[4:]}.py").read_text()
        # `gpu-expect:` where timing on a GPU sees the exploit first (the audit of the timed calls)
        verdict, check = (re.search(r"^gpu-expect: (\w+)(?: (\w+))?$", text, re.M)
                          or re.search(r"^expect: (\w+)(?: (\w+))?$", text, re.M)).groups()
        checks = {f.check for f in result.integrity if f.severity == "violation"}
        if result.verdict != verdict or (check and check not in checks):
            wrong[key] = (result.verdict, sorted(checks), result.summary)
    assert not wrong, wrong


def test_correct_candidate_at_full_size_is_timed(evaluator_results):
    result, _ = evaluator_results["full_size"]
    assert result.verdict == "correct", result.summary
    assert result.timing is not None and result.timing.median_ms > 0
    assert result.reference_timing is not None and result.speedup
    assert result.env.device and result.env.driver and not result.env.interpreter
    assert result.kernels[0].num_warps and result.kernels[0].registers is not None


def test_isolated_timing_reads_each_call_from_cupti(evaluator_results):
    """The ncu-comparable reading: one kernel group per call, the candidate's kernel named, and close to the
    steady-state time (they differ by the L2 write-back of the previous output, a few per cent)."""
    result, _ = evaluator_results["full_size"]
    t = result.timing
    assert t.isolated is not None, t.isolated_error
    assert t.isolated.calls == 40
    assert set(t.isolated.per_kernel_ms) == {k.name for k in result.kernels}, (t.isolated, result.kernels)
    assert 0.8 <= t.isolated.median_ms / t.median_ms <= 1.2, (t.isolated.median_ms, t.median_ms)
    assert "timing_isolated" in result.phase_s


AA_TINY_BOUND = 0.03
"""A/A bound below 50 us. Measured on the H200 at 1.9 us (softmax 64x256, CUDA-graph replay): 1.0005, 1.0109,
0.9997, 1.0005 (benchmarks/results/archive/h200_2026-11-30/bench_verify_h200*.json, cv_by_kernel_length[0]) and
1.0117, 1.0168 (benchmarks/results/archive/h200_2026-12-01_0390956-d1d352b/gpu_tests*.log): ~30 ns of a 2 us
kernel, the replay's launch granularity. 0.03 is about twice the worst of those; at 5.5 and 24 us every run stayed
within 0.004."""
AA_TINY_CV = 0.015


def test_timing_aa_ratio_and_cv(evaluator_results, record_property):
    """Issue 12's bound, A/A 1.00 +- 0.01 and CV <= 0.5 %, holds at >= 50 us; below that the timer cannot
    deliver it for a ~2 us kernel, so those rows are reported and held to the looser measured bound."""
    probe, _ = evaluator_results["probe"]
    assert probe.ok, probe.error
    rows = probe.result["rows"]
    report = [(row["sizes"], round(row["a"]["median_ms"] * 1e3, 2), round(row["aa_ratio"], 4),
               round(row["a"]["cv"], 5)) for row in rows]
    print("A/A per size (sizes, median us, A/A, CV):", *report, sep="\n  ")
    record_property("aa_rows", report)
    assert any(row["a"]["median_ms"] >= 0.05 for row in rows), report  # the bound is exercised
    for row in rows:
        a = row["a"]
        if a["median_ms"] >= 0.05:
            assert 0.99 <= row["aa_ratio"] <= 1.01, row
            assert a["cv"] <= 0.005, row
        else:
            assert abs(row["aa_ratio"] - 1.0) <= AA_TINY_BOUND, row
            assert a["cv"] <= AA_TINY_CV, row


def test_later_runners_find_the_candidates_launcher_stubs_built(evaluator_results):
    """A persistent judge hands the type lists of its candidates' kernels to its waiting spares, which build
    the launcher stubs before any candidate code exists there (launchers.py): on a Triton with per-signature
    stubs (3.6) a later verify's runner reports them built; on one without, "not needed"."""
    reports = [(key, (r.judge or {}).get("runner_reported_launchers")) for key, (r, _) in evaluator_results.items()
               if key.endswith("_next") and getattr(r, "judge", None)]
    print("launcher reports:", *reports, sep="\n  ")
    nv = pytest.importorskip("triton.backends.nvidia.driver")
    said = [rep for _, rep in reports if rep]
    if not hasattr(nv, "make_launcher"):
        assert all(rep["launchers"].startswith("not needed") for rep in said), reports
        return
    assert any(rep["launchers"] == "ok" and (rep["built"] or 0) >= 1 for rep in said), reports


def test_baselines_eager_and_compiled(evaluator_results):
    baselines, _ = evaluator_results["baselines"]
    assert baselines.eager is not None and baselines.eager.median_ms > 0
    assert baselines.compiled is not None or baselines.compile_error
