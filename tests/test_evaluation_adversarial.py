"""Every exploit in tests/adversarial/ is caught, and the correct candidates there pass.

Each file states its expected outcome in its docstring: `expect: <verdict> [<integrity check>]`.
All candidates are evaluated once, concurrently, on the CPU interpreter at the problem's QUICK_SIZES.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.problems.builtin import builtin_source

ADVERSARIAL = Path(__file__).parent / "adversarial"
CASES = sorted(p.stem for p in ADVERSARIAL.glob("*.py") if not p.stem.startswith("gpu_"))
QUICK: dict[str, int | list[int]] = {"batch_size": 8, "dim": 100}

# ~35 s on 2 cores for the module (one worker process per candidate, two at a time).
pytestmark = pytest.mark.slow


def expectation(name: str) -> tuple[str, str | None]:
    match = re.search(r"^expect: (\w+)(?: (\w+))?$", (ADVERSARIAL / f"{name}.py").read_text(), re.M)
    assert match, f"{name}.py has no 'expect:' line"
    return match.group(1), match.group(2)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    async def run_all():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path_factory.mktemp("adv"), force_interpreter=True,
                                    spare_workers=0)
        try:
            options = EvalOptions(size_overrides=QUICK, correctness_trials=3)
            reference = builtin_source("softmax")
            outs = await asyncio.gather(*[
                evaluator.evaluate(reference, (ADVERSARIAL / f"{name}.py").read_text(), options) for name in CASES
            ])
            return dict(zip(CASES, outs))
        finally:
            await evaluator.aclose()

    return asyncio.run(run_all())


@pytest.mark.parametrize("name", CASES)
def test_adversarial_candidate_gets_expected_verdict(results, name):
    verdict, check = expectation(name)
    result = results[name]
    assert result.verdict == verdict, (name, result.summary, result.error)
    if check is not None:
        assert check in {f.check for f in result.integrity if f.severity == "violation"}, result.integrity
    if verdict == "correct":
        assert result.integrity == []
        assert result.kernels and result.kernels[0].launches_per_forward >= 1
        assert result.timing is None and result.timing_unavailable_reason


def test_unwritten_output_is_reported_as_never_written(results):
    mismatch = results["recycled_memory"].mismatch
    assert mismatch is not None and "NaN" in mismatch.hint and mismatch.nonfinite_count


def test_torch_ops_are_listed_for_torch_compute(results):
    assert any("softmax" in op for op in results["decoy_kernel_torch_compute"].torch_ops)


def test_wrong_after_n_calls_fails_in_the_recheck(results):
    result = results["wrong_after_n_calls"]
    assert result.correctness_trials_passed >= 3
    assert "re-checked" in result.summary
