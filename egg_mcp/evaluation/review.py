"""Review flags on a correct candidate's time: numbers too good to believe without a look (pure).

Verify raises them (severity 'review': recorded, never blocking): more than SPEEDUP_REVIEW_FACTOR
faster than the reference timed the same way, or faster than the roofline floor of this GPU.
"""

from __future__ import annotations

from egg_mcp.evaluation.api import IntegrityFinding

SPEEDUP_REVIEW_FACTOR = 10.0


def review_findings(median_ms: float, *, reference_ms: float | None, floor_ms: float | None) -> list[IntegrityFinding]:
    out = []
    if reference_ms and median_ms > 0 and reference_ms / median_ms > SPEEDUP_REVIEW_FACTOR:
        out.append(IntegrityFinding(
            check="implausible_speedup", severity="review",
            detail=f"{reference_ms / median_ms:.1f}x faster than the reference ({reference_ms:.4f} ms vs "
                   f"{median_ms:.4f} ms): check the result by hand"))
    if floor_ms and median_ms < floor_ms:
        out.append(IntegrityFinding(
            check="beyond_floor", severity="review",
            detail=f"{median_ms:.4f} ms is below the physical floor {floor_ms:.4f} ms (roofline from FLOPs and "
                   "bytes) of this GPU"))
    return out
