"""The `compare` tool: is candidate B faster than candidate A, and what changed between them.

Both must be verified correct. The source diff is computed here (text only); the timing runs as one
GPU job (`egg_mcp.evaluation.interleaved:run_interleaved`) through the same `Evaluator` as verify,
and `interleaved.paired_verdict` turns the paired per-round ratios into the verdict.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, Field

from egg_mcp.contract import ProgressFn
from egg_mcp.evaluation.interleaved import MIN_EFFECT, paired_verdict

TARGET = "egg_mcp.evaluation.interleaved:run_interleaved"


class CompareResult(BaseModel):
    task_id: str
    candidate_a: str
    candidate_b: str
    verdict: Literal["faster", "slower", "inconclusive"] = Field(
        description="B vs A: 'faster' when B's median time is lower beyond noise with 95 % bootstrap confidence")
    confidence: float | None = Field(default=None, description="bootstrap share of resampled medians on the verdict's "
                                                               "side")
    median_ratio: float | None = Field(default=None, description="median over rounds of t_B / t_A (< 1: B faster)")
    ci_low: float | None = None
    ci_high: float | None = None
    sign_test_p: float | None = None
    rounds: int = 0
    times_a_ms: list[float] = Field(default_factory=list)
    times_b_ms: list[float] = Field(default_factory=list)
    method: str = ""
    device: str | None = None
    summary: str
    diff: str = Field(default="", description="unified diff of A's source to B's")
    diff_lines_changed: int = 0
    timing_available: bool


def source_diff(a_id: str, a: str, b_id: str, b: str) -> tuple[str, int]:
    """Unified diff of A to B and the number of changed lines (+ and -)."""
    lines = list(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                      fromfile=f"{a_id} (A)", tofile=f"{b_id} (B)", n=2))
    changed = sum(1 for ln in lines if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    return "".join(lines), changed


async def compare_candidates(service, task_id: str, candidate_a: str, candidate_b: str, *, rounds: int = 30,
                             progress: ProgressFn | None = None) -> CompareResult:
    from egg_mcp.workflow.service import WorkflowError

    if candidate_a == candidate_b:
        raise WorkflowError("candidate_a and candidate_b are the same candidate; pass two different ids "
                            "(task_status lists this stage's candidates)")
    row, _stage, _ca, src_a = service.correct_candidate("compare", task_id, candidate_a)
    _row, _stage, _cb, src_b = service.correct_candidate("compare", task_id, candidate_b)
    diff, changed = source_diff(candidate_a, src_a, candidate_b, src_b)
    base: dict[str, Any] = dict(task_id=task_id, candidate_a=candidate_a, candidate_b=candidate_b, diff=diff,
                                diff_lines_changed=changed)
    if not service.timing_available():
        return CompareResult(**base, verdict="inconclusive", timing_available=False,
                             summary="no GPU: the diff is below; timing the two candidates against each other "
                                     "needs a GPU (run compare on a GPU machine)")
    service.require_sandbox("run candidates (compare)")
    opts = service._options(row)
    payload = {"reference_source": service._reference(row), "source_a": src_a, "source_b": src_b,
               "dtype": opts.dtype, "size_overrides": dict(opts.size_overrides), "rounds": rounds,
               "atol": opts.tolerance.atol, "rtol": opts.tolerance.rtol, "seed": 0}
    if progress is not None:
        await progress(0, None, f"timing {candidate_a} and {candidate_b} interleaved, {rounds} rounds")
    outcome = await service.evaluator.run_job(TARGET, payload, timeout_s=service.config.run_timeout_s, uses_gpu=True)
    if not outcome.ok or outcome.result is None:
        err = outcome.error.message if outcome.error else "no result"
        raise WorkflowError(f"the interleaved timing job failed: {err[:400]}")
    out = outcome.result
    check = out.get("check") or {}
    if any(v != "ok" for v in check.values()):
        bad = [k.upper() for k, v in check.items() if v != "ok"]
        while_timed = [k.upper() for k, v in check.items() if v == "mismatch_while_timed"]
        if while_timed:
            detail = (out.get("check_detail") or {}).get(while_timed[0].lower(), "")
            return CompareResult(**base, verdict="inconclusive", timing_available=True, device=out.get("device"),
                                 summary=f"no timing counted: {', '.join(while_timed)} behaved differently while "
                                         f"timed ({str(detail)[:300]}); verify it again")
        return CompareResult(**base, verdict="inconclusive", timing_available=True, device=out.get("device"),
                             summary=f"not timed: {', '.join(bad)} did not match the reference on the shared input; "
                                     "verify it again")
    stats = paired_verdict(out["ratios"])
    med = stats["median_ratio"]
    summary = (f"B/A median ratio {med:.4f} (95 % CI {stats['ci_low']:.4f}-{stats['ci_high']:.4f}) over "
               f"{stats['rounds']} interleaved rounds on {out.get('device')}: B is {stats['verdict']}"
               + (f" ({(1 - med) * 100:.1f} % less time)" if stats["verdict"] == "faster" else
                  f" ({(med - 1) * 100:.1f} % more time)" if stats["verdict"] == "slower" else
                  f" (a difference under {MIN_EFFECT:.1%} or within the noise)")
               + f"; sign test p={stats['sign_test_p']:.3g}")
    return CompareResult(**base, verdict=stats["verdict"], confidence=stats["confidence"], median_ratio=med,
                         ci_low=stats["ci_low"], ci_high=stats["ci_high"], sign_test_p=stats["sign_test_p"],
                         rounds=stats["rounds"], times_a_ms=out["times_a_ms"], times_b_ms=out["times_b_ms"],
                         method=out.get("method", ""), device=out.get("device"), summary=summary,
                         timing_available=True)
