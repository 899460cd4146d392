"""Small checks the workflow applies to stored results and client claims (pure; issue 18 point 5).

* `reuse_blocker`: a stored verify result whose timing saw a throttled GPU said "re-verify"; returning
  it from the cache on re-submission would make that advice impossible to follow, so it is re-evaluated.
* `evidence_mismatches`: commit_stage's `decision.evidence` is the client's claim; time-like entries
  are checked against the times this server measured. A mismatch is a recorded warning, not an error:
  the client may legitimately quote another clock (a per-kernel ncu time, a quick check), and the
  measured time is what the commit stores and the guard judges, so the claim cannot mislead the
  workflow, only the reader, whom the warning tells.
"""

from __future__ import annotations

from typing import Any

EVIDENCE_REL_TOLERANCE = 0.10
"""Claimed and measured times further apart than this (relative) are reported."""


def reuse_blocker(result: Any) -> str | None:
    """Why a stored EvalResult must not be returned for an identical source (None: reuse it)."""
    timing = getattr(result, "timing", None)
    if timing is not None and getattr(timing, "throttled", None):
        reasons = ", ".join(getattr(timing, "throttle_reasons", []) or []) or "throttled"
        return f"the stored timing saw a throttled GPU ({reasons})"
    return None


def _is_time(metric: str) -> bool:
    m = metric.lower()
    return m.endswith("_ms") or m in ("ms", "time", "median", "time_ms", "median_ms", "runtime_ms")


def _num(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().removesuffix("ms").strip())
        except ValueError:
            return None
    return None


def evidence_mismatches(evidence: list[Any], *, after_ms: float | None, before_ms: float | None,
                        candidate_id: str) -> list[str]:
    """Warnings for time-like evidence (`*_ms`, 'median', 'time') whose before/after disagree with the
    measured times (the committed candidate's, and the previous commit's)."""
    out = []
    for e in evidence:
        if not _is_time(e.metric):
            continue
        for side, claimed, measured, whose in (("after", e.after, after_ms, f"candidate {candidate_id}"),
                                               ("before", e.before, before_ms, "the previous commit")):
            value = _num(claimed)
            if value is None or not measured:
                continue
            if abs(value - measured) > EVIDENCE_REL_TOLERANCE * measured:
                out.append(f"decision.evidence {e.metric} {side}={claimed} does not match the {measured:.4g} ms "
                           f"measured for {whose} (more than {100 * EVIDENCE_REL_TOLERANCE:.0f}% apart); the commit "
                           "records the measured time")
    return out
