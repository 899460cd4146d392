"""Memcheck before commit (issue 12): on a GPU with compute-sanitizer, a candidate gets one forward under
`compute-sanitizer --tool memcheck` before it can be committed; a `memory_error` refuses the commit, and so
does `over_bound` (its runner, bounded as verify's, went over a resource bound under the tool; run again at
the next commit, as a client may skip it with a reason).

Once per candidate: the result is stored in the workspace as a report of kind "memcheck" linked to the
candidate, so a repeated or retried commit (and `candidate`) reads it back instead of paying again. On
the CPU interpreter there is nothing to run: every verify's guarded allocations already catch writes
past a tensor. Where the sanitizer is missing or writes no report, the commit goes on and says so
("memcheck unavailable: <why>, guarded allocations only"). The client may opt out with a reason
(`skip_memcheck`), which is stored; a memory_error already found still refuses.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, Field

KIND = "memcheck"


class MemcheckGate(BaseModel):
    """What the memory check before commit found for one candidate."""

    status: Literal["clean", "memory_error", "over_bound", "unavailable", "skipped", "not_needed"]
    summary: str
    cached: bool = Field(default=False, description="read back from the workspace (run once per candidate)")
    cost_s: float | None = Field(default=None,
                                 description="wall seconds of the memcheck job, measured here when it ran")
    measured_at: float | None = Field(default=None, description="unix time the memcheck ran (or was skipped)")
    skip_reason: str | None = None
    errors: list[dict[str, Any]] = Field(default_factory=list, description="kernel, access, address, detail")
    report_id: str | None = None

    def line(self) -> str:
        """One line for the commit reply."""
        cost = f", {self.cost_s:.1f} s" if self.cost_s is not None else ""
        again = " (cached)" if self.cached else ""
        return f"memcheck {self.status}{again}{cost}: {self.summary}"


def stored(service, task_id: str, candidate_id: str) -> MemcheckGate | None:
    """The stored memcheck of this candidate (the latest), or None."""
    rows = [r for r in service.repo.reports(task_id) if r.kind == KIND and r.candidate_id == candidate_id]
    if not rows:
        return None
    row = max(rows, key=lambda r: r.created_at)
    try:
        gate = MemcheckGate.model_validate(service.ws.get_json(row.report_sha, f"memcheck report {row.id}"))
    except Exception:  # noqa: BLE001 - a damaged artifact: run it again
        return None
    return gate.model_copy(update={"cached": True, "report_id": row.id})


def _save(service, task_id: str, candidate_id: str, gate: MemcheckGate) -> MemcheckGate:
    report_id = service.save_report(task_id, candidate_id, KIND, gate.model_dump(mode="json"))
    return gate.model_copy(update={"report_id": report_id})


REFUSING = ("memory_error", "over_bound")
"""Statuses that refuse the commit."""


def refusal(gate: MemcheckGate, candidate_id: str) -> str:
    """The commit refusal for a memory_error (which kernel, which addresses, what to fix) or an over_bound."""
    if gate.status == "over_bound":
        return (f"commit refused: the memcheck forward of candidate {candidate_id} went over a resource bound: "
                f"{gate.summary.removeprefix('over_bound: ')} A commit runs the memcheck again; skip_memcheck with a "
                "reason opts out (stored with the candidate).")
    where = "; ".join(f"{e.get('access')} in kernel {e.get('kernel')} at {e.get('address')} ({e.get('detail')})"
                      for e in gate.errors[:3]) or gate.summary
    return (f"commit refused: compute-sanitizer memcheck found out-of-bounds accesses in candidate {candidate_id}: "
            f"{where}. Its outputs may compare equal, but the kernel reads or writes memory it does not own. Fix the "
            "masks/offsets of that access (e.g. `<` vs `<=`, the last partial tile), verify the fixed source and "
            "commit that candidate.")


async def check_before_commit(service, row, cand, skip_reason: str | None) -> MemcheckGate:
    """Run (or read back) the memory check of `cand`; the caller refuses the commit on `memory_error`."""
    if not service.timing_available():
        return MemcheckGate(status="not_needed", summary="CPU interpreter: verify's guarded allocations cover "
                            "out-of-bounds writes; compute-sanitizer needs a GPU")
    known = stored(service, row.id, cand.id)
    if known is not None and (known.status in ("clean", "memory_error") or (known.status == "skipped" and skip_reason)):
        return known  # a found error refuses whatever the opt-out; "unavailable" is tried again
    if skip_reason:
        return _save(service, row.id, cand.id, MemcheckGate(
            status="skipped", skip_reason=skip_reason, measured_at=time.time(),
            summary=f"skipped by the client ({skip_reason}); guarded allocations of verify only"))
    memcheck = getattr(service.evaluator, "memcheck", None)
    from egg_mcp.evaluation.memcheck import find_compute_sanitizer

    if memcheck is None or find_compute_sanitizer() is None:
        why = ("this evaluator has no memcheck" if memcheck is None else "compute-sanitizer not found (install the "
               "CUDA toolkit or set EGG_MCP_COMPUTE_SANITIZER)")
        return _save(service, row.id, cand.id, MemcheckGate(
            status="unavailable", measured_at=time.time(), summary=f"memcheck unavailable: {why}, guarded allocations "
            "only"))
    service.require_sandbox("run candidates (commit_stage's memory check)")
    opts = service._eval_options(service._options(row), service._baselines(row))
    started = time.monotonic()
    result = await memcheck(service._reference(row), service._source(cand), opts)
    cost = round(time.monotonic() - started, 2)
    if result.verdict == "memory_error":
        gate = MemcheckGate(status="memory_error", summary=result.summary, cost_s=cost, measured_at=time.time(),
                            errors=[e.model_dump() for e in result.errors[:5]])
    elif result.verdict == "over_bound":
        gate = MemcheckGate(status="over_bound", summary=result.summary, cost_s=cost, measured_at=time.time())
    elif result.verdict == "clean":
        gate = MemcheckGate(status="clean", summary=result.summary, cost_s=cost, measured_at=time.time())
    else:
        why = result.summary[:400].removeprefix("memcheck unavailable: ")
        gate = MemcheckGate(status="unavailable", cost_s=cost, measured_at=time.time(),
                            summary=f"memcheck unavailable: {why}; guarded allocations only")
    return _save(service, row.id, cand.id, gate)
