"""commit_stage: the stage-bound idempotent commit and the regression guard (the EGG discipline)."""

from __future__ import annotations

import json
import math
from typing import Callable

from egg_mcp.analysis.environment_probes import CHECK as PROBE_CHECK
from egg_mcp.analysis.environment_probes import describe as describe_probes
from egg_mcp.analysis.environment_probes import scan as scan_probes
from egg_mcp.contract import TimingStats, median_standard_error
from egg_mcp.stages import NEXT_STEP, Stage, next_stage
from egg_mcp.workflow import limits, memcheck_gate
from egg_mcp.workflow.checks import evidence_mismatches
from egg_mcp.workflow.core import ServiceCore, WorkflowError, _check
from egg_mcp.workflow.models import CommitResult, HandoffContext, StageDecision
from egg_mcp.workspace.repo import CandidateRow, CommitConflict, CommitRow, TaskRow

MIN_NOISE = 0.02
"""Smallest relative difference the regression guard treats as real (2%: above the ~0.3% CV of
a 100 us kernel and the ~1.5% of a graph-replayed 5 us kernel measured on the H200)."""
MAX_NOISE = 0.05
"""Widest band. Repeated medians agree far closer than one reading's spread: A/A pairs on the H200 within 0.4 %
(1.88 us to 1.09 ms, benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/README.md), honest candidates
within 0.5 % across runs (benchmarks/results/h200_2026-12-02/README.md). The old band, twice the two readings'
CVs, reached 10.3 % and let a 10 % regression pass; past 5 % `compare` (interleaved A/B) settles it."""


def noise_band(a: TimingStats | None, b: TimingStats | None) -> float:
    """The relative difference of two medians the guard treats as noise: twice the combined standard error of the
    two medians (1.2533 cv / sqrt(n) each; the reading's cv where n is unknown), within [MIN_NOISE, MAX_NOISE]."""
    def se(t: TimingStats | None) -> float:
        if t is None or not t.cv:
            return 0.0
        return median_standard_error(t.cv, t.n_runs) if t.n_runs > 1 else t.cv
    return min(MAX_NOISE, max(MIN_NOISE, 2 * math.hypot(se(a), se(b))))

SETTLE = " (when the readings are this noisy, compare A/B settles it; force with its result as the reason)"


class Commits(ServiceCore):
    """Needs `context` (views.py) for its reply: use it through `EggService`."""

    context: Callable[[str], HandoffContext]

    # -- commit_stage ---------------------------------------------------------------------------
    async def commit_stage(self, task_id: str, candidate_id: str, decision: StageDecision,
                           force: bool = False, force_reason: str | None = None,
                           stage: str | None = None, skip_memcheck: str | None = None) -> CommitResult:
        """Commit `stage` (default: the stage the candidate was verified in) and advance the task.

        A commit names the stage it finalises, so a repeated call cannot skip stages: the repeat of
        a stored commit (same stage, same candidate) returns the stored outcome; a commit for a stage
        the task is not in is refused. Racing commits are serialised by the repository's
        BEGIN IMMEDIATE transaction and the loser is told who won."""
        _check_arguments(decision, force_reason, skip_memcheck)
        row = self._task_row(task_id)
        cand = self._candidate_row(task_id, candidate_id)
        try:
            target = Stage(stage) if stage is not None else Stage(cand.stage)
        except ValueError:
            raise WorkflowError(f"stage {stage!r} is not a stage; one of: "
                                f"{', '.join(s.value for s in Stage if s is not Stage.DONE)}") from None
        existing = self.repo.commit_for(task_id, target.value)
        if existing is not None:
            return self._repeat_or_refuse(row, existing, candidate_id, decision)
        current = self._require("commit_stage", row)
        if target is not current:
            how = (f"candidate {candidate_id} was verified in stage {cand.stage}; " if stage is None else "")
            raise WorkflowError(
                f"commit_stage for stage {target.value} refused: task {task_id} is in stage {current.value}. {how}"
                f"To commit it as the {current.value} decision, pass stage='{current.value}' (e.g. to keep the "
                "committed kernel unchanged); otherwise verify a candidate in this stage and commit that.")
        if cand.verdict != "correct":
            raise WorkflowError(
                f"candidate {candidate_id} is {cand.verdict or cand.status}, not correct: only a verified-correct "
                "candidate can be committed. Fix it (verify again) or commit another candidate.")
        quick = self._quick_sizes_of(row, self._result(cand))
        if quick is not None:
            raise WorkflowError(f"candidate {candidate_id} was only checked at the quick-check sizes {quick}; verify "
                                "the same source without size_overrides, then commit that candidate")
        if force and not (force_reason and force_reason.strip()):
            raise WorkflowError("force=true needs a force_reason: say why the guard should be overridden (it is "
                                "recorded)")
        last = self._last_commit(task_id)
        warnings: list[str] = evidence_mismatches(decision.evidence, after_ms=cand.time_ms,
                                                  before_ms=last.time_ms if last else None, candidate_id=candidate_id)
        probes = scan_probes(self._source(cand))
        if probes:
            if not force:
                raise WorkflowError(f"commit refused ({PROBE_CHECK}): candidate {candidate_id}: "
                                    f"{describe_probes(probes)}. "
                                    "Remove those reads and verify the source again, or pass force=true with a "
                                    "force_reason (recorded with the commit).")
            warnings.append(f"{PROBE_CHECK} overridden by force: {describe_probes(probes, limit=4)}")
        guard = self._regression_guard(row, current, cand)
        if guard.startswith("REFUSED"):
            if not force:
                raise WorkflowError(guard.removeprefix("REFUSED: ")
                                    + " Commit a faster candidate, or pass force=true with a force_reason.")
            warnings.append(f"guard overridden by force: {guard.removeprefix('REFUSED: ')}")
            guard = "overridden: " + guard.removeprefix("REFUSED: ")
        if current is Stage.SEEDS:
            n_correct = self.repo.count_correct(task_id, current.value)
            k = self._options(row).k_seeds
            if n_correct < k:
                warnings.append(f"only {n_correct} correct seed(s) of the {k} asked for were verified; EGG's seed "
                                "stage "
                                "explores k structurally different algorithms before choosing")
        memcheck = await memcheck_gate.check_before_commit(self, row, cand, skip_memcheck)  # last: it is slow
        if memcheck.status in memcheck_gate.REFUSING:
            raise WorkflowError(memcheck_gate.refusal(memcheck, candidate_id))
        new = next_stage(current)
        try:
            self.repo.commit(task_id=task_id, stage=current.value, new_stage=new.value, candidate_id=candidate_id,
                             time_ms=cand.time_ms, decision_json=decision.model_dump_json(), forced=force,
                             force_reason=force_reason, guard=guard, warnings_json=json.dumps(warnings))
        except CommitConflict as conflict:
            if conflict.existing is not None:
                return self._repeat_or_refuse(self._task_row(task_id), conflict.existing, candidate_id, decision)
            raise WorkflowError(
                f"another commit_stage call moved task {task_id} to stage {conflict.stage_now} first; this commit "
                f"for {current.value} was not recorded. Call task_status and continue from there.") from None
        return self._commit_result(self._task_row(task_id), current, warnings, repeated=False)

    def _repeat_or_refuse(self, row: TaskRow, existing: CommitRow, candidate_id: str,
                          decision: StageDecision) -> CommitResult:
        if existing.candidate_id != candidate_id:
            raise WorkflowError(
                f"stage {existing.stage} of task {row.id} is already committed with candidate {existing.candidate_id} "
                f"(another or an earlier commit_stage call); the task is now in stage {row.stage}. Nothing was "
                "changed. "
                "Call task_status and continue from the current stage.")
        warnings = json.loads(existing.warnings_json or "[]")
        if existing.decision_json != decision.model_dump_json():
            warnings.append("this repeat's decision differs from the stored one; the stored decision is kept")
        return self._commit_result(row, Stage(existing.stage), warnings, repeated=True)

    def _commit_result(self, row: TaskRow, committed_stage: Stage, warnings: list[str], *,
                       repeated: bool) -> CommitResult:
        new = next_stage(committed_stage)
        committed = next(c for c in self._commits(row.id) if c.stage == committed_stage.value)
        return CommitResult(
            memcheck=memcheck_gate.stored(self, row.id, committed.candidate_id),
            task_id=row.id, committed=committed, new_stage=new.value, warnings=warnings, repeated=repeated,
            brief="" if self._stage(row) is Stage.DONE else self._brief(row, self._stage(row), "code"),
            context=self.context(row.id), next_step=NEXT_STEP[self._stage(row)],
        )

    def _regression_guard(self, row: TaskRow, stage: Stage, cand: CandidateRow) -> str:
        """After the seed stage a commit may not be slower than the last committed kernel beyond
        noise; in the seed stage it must be the fastest correct seed (the best seed goes on)."""
        t = cand.time_ms
        if t is None:
            return "skipped: no timing (CPU interpreter); correctness only"
        timing = self._timing(cand)
        if stage is Stage.SEEDS:
            best = self.repo.fastest_correct(row.id, stage.value)
            if best is not None and best.id != cand.id and best.time_ms is not None:  # (selected with a time)
                noise = noise_band(timing, self._timing(best))
                if t > best.time_ms * (1 + noise):
                    return (f"REFUSED: seed {best.id} is faster ({best.time_ms:.4g} ms vs {t:.4g} ms, beyond "
                            f"the {noise:.1%} noise band); the best seed by measurement goes on{SETTLE}.")
            return f"passed: fastest correct seed ({t:.4g} ms)"
        last = self._last_commit(row.id)
        if last is None or last.time_ms is None:
            return "skipped: the previous stage has no timing"
        prev = self._candidate_row(row.id, last.candidate_id)
        noise = noise_band(timing, self._timing(prev))
        if t > last.time_ms * (1 + noise):
            return (f"REFUSED: {t:.4g} ms is slower than the committed {last.stage} kernel ({last.time_ms:.4g} ms) "
                    f"beyond the {noise:.1%} noise band; a later stage must not regress an earlier one{SETTLE}.")
        return f"passed: {t:.4g} ms vs committed {last.time_ms:.4g} ms (noise band {noise:.1%})"

    def _timing(self, cand: CandidateRow) -> TimingStats | None:
        result = self._result(cand)
        return result.timing if result else None


def _check_arguments(decision: StageDecision, force_reason: str | None, skip_memcheck: str | None) -> None:
    """commit_stage's arguments on their own, before any lookup: bounded texts and a well-formed decision."""
    _check(limits.check_text, "force_reason", force_reason, limits.MAX_FORCE_REASON)
    _check(limits.check_text, "skip_memcheck", skip_memcheck, limits.MAX_FORCE_REASON)
    if skip_memcheck is not None and not skip_memcheck.strip():
        raise WorkflowError("skip_memcheck needs a reason (it is stored with the candidate); omit it to run "
                            "memcheck")
    _check_decision(decision)


def _check_decision(decision: StageDecision) -> None:
    _check(limits.check_text, "decision.summary", decision.summary, limits.MAX_LINE)
    _check(limits.check_text, "decision.rationale", decision.rationale, limits.MAX_RATIONALE)
    for field, items in (("decision.changes", decision.changes), ("decision.evidence", decision.evidence)):
        if len(items) > limits.MAX_ITEMS:
            raise WorkflowError(f"{field} has {len(items)} items; the limit is {limits.MAX_ITEMS}")
    for i, change in enumerate(decision.changes):
        _check(limits.check_text, f"decision.changes[{i}]", change, limits.MAX_LINE)
    for i, ev in enumerate(decision.evidence):
        _check(limits.check_text, f"decision.evidence[{i}].metric", ev.metric, limits.MAX_LINE)
        for part in (ev.before, ev.after):
            if isinstance(part, str):
                _check(limits.check_text, f"decision.evidence[{i}]", part, limits.MAX_LINE)
