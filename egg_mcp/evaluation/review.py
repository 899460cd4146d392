"""Review flags on a correct candidate's time: numbers too good to believe without a look (pure).

Verify raises them (severity 'review': recorded, never blocking): more than SPEEDUP_REVIEW_FACTOR
faster than the reference timed the same way, or faster than the roofline floor of this GPU (beyond timing noise,
`analysis.verdict.BELOW_FLOOR_FRACTION`).
"""

from __future__ import annotations

from egg_mcp.analysis.verdict import roofline_verdict
from egg_mcp.contract import IntegrityFinding

SPEEDUP_REVIEW_FACTOR = 10.0


def review_findings(median_ms: float, *, reference_ms: float | None, floor_ms: float | None,
                    floor_path: str | None = None, floor_basis: str | None = None) -> list[IntegrityFinding]:
    """`floor_ms` is the floor of the fastest admissible compute path (`floor_path`, from the precision
    ladder): the flag uses the one roofline verdict (`analysis.verdict`) profile_ncu and the briefs use."""
    out = []
    if reference_ms and median_ms > 0 and reference_ms / median_ms > SPEEDUP_REVIEW_FACTOR:
        out.append(IntegrityFinding(
            check="implausible_speedup", severity="review",
            detail=f"{reference_ms / median_ms:.1f}x faster than the reference ({reference_ms:.4f} ms vs "
                   f"{median_ms:.4f} ms): check the result by hand"))
    verdict = roofline_verdict(median_ms, floor_ms, floor_path)
    if verdict.status == "below_floor":
        detail = verdict.text + (f"; the floor is {floor_basis}" if floor_basis else "")
        out.append(IntegrityFinding(check="beyond_floor", severity="review", detail=detail))
    return out
