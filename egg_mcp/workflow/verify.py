"""verify: the candidate contract check, single-flight evaluation (one future per identical verify in
this server, the running candidate row across servers), the verify cache and its reply."""

from __future__ import annotations

import asyncio
import json
import sqlite3

from egg_mcp.analysis.environment_probes import CHECK as PROBE_CHECK
from egg_mcp.analysis.environment_probes import describe as describe_probes
from egg_mcp.analysis.environment_probes import scan as scan_probes
from egg_mcp.contract import ErrorReport, EvalResult, IntegrityFinding, ProgressFn
from egg_mcp.problems.loader import ProblemError, check_candidate_contract
from egg_mcp.stages import Stage
from egg_mcp.workflow import limits
from egg_mcp.workflow.checks import reuse_blocker
from egg_mcp.workflow.core import (
    ServiceCore,
    WorkflowError,
    _check,
    _compile_ms,
    _eager_ms,
    _owner_alive,
    _ratio,
    quick_key,
)
from egg_mcp.workflow.models import VerifyResult
from egg_mcp.workspace.faults import StorageFault, plain_cause, storage_cause
from egg_mcp.workspace.repo import CandidateRow, TaskRow

CANCELLED = "the verify was cancelled (the client went away or the server is stopping); verify the source again"



class Verification(ServiceCore):
    # -- verify ---------------------------------------------------------------------------------
    async def verify(self, task_id: str, source: str, note: str | None = None,
                     progress: ProgressFn | None = None,
                     size_overrides: dict[str, int | list[int]] | None = None) -> VerifyResult:
        """Identical concurrent verifies share one evaluation: in this server through a future keyed by
        (task, source hash, sizes); across servers the running candidate row is the lock (polled until done).
        A quick check (size_overrides) is cached apart from the full-size result and never stands for it."""
        _check(limits.check_text, "note", note, limits.MAX_NOTE)
        _check(limits.check_text, "source", source, self.config.max_source_bytes)
        row = self._task_row(task_id)
        stage = self._require("verify", row)
        self.require_sandbox("run candidates (verify)")
        sizes = self.check_sizes(row, size_overrides)
        try:
            check = check_candidate_contract(source, self.config.max_source_bytes)
        except ProblemError as exc:
            raise WorkflowError(str(exc)) from None
        source_sha = self.ws.put_text(source)
        key = (task_id, source_sha, json.dumps(sizes, sort_keys=True))
        shared = self._inflight.get(key)
        if shared is not None:
            cand_id = await asyncio.shield(shared)
            return self._verify_result(self._task_row(task_id), self._candidate_row(task_id, cand_id), cached=True)
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            cand_id, cached = await self._verify_once(row, stage, source, source_sha, check, note, progress, sizes)
            future.set_result(cand_id)
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else WorkflowError("the verify was cancelled"))
            future.exception()  # retrieved: sharers see it through shield; nobody else must warn
            raise
        finally:
            self._inflight.pop(key, None)
        return self._verify_result(self._task_row(task_id), self._candidate_row(task_id, cand_id), cached=cached)

    def _same_sizes(self, row: TaskRow, sizes: dict[str, int | list[int]] | None):
        """Predicate for the verify cache: a row evaluated at these sizes (full size when sizes is None)."""
        def same(cand: CandidateRow) -> bool:
            if cand.status == "done":  # a timing taken while the GPU throttled is measured again
                result = self._result(cand)
                return self._quick_sizes_of(row, result) == sizes and reuse_blocker(result) is None
            return cand.quick_sizes == quick_key(sizes)
        return same

    async def _verify_once(self, row: TaskRow, stage: Stage, source: str, source_sha: str, check, note: str | None,
                           progress: ProgressFn | None, sizes: dict[str, int | list[int]] | None) -> tuple[str, bool]:
        while True:
            try:
                claim = self.repo.claim_candidate(row.id, stage.value, source_sha, note, _owner_alive,
                                                  same=self._same_sizes(row, sizes), quick_sizes=quick_key(sizes))
            except (OSError, sqlite3.Error) as exc:
                raise StorageFault(storage_cause(exc, self.ws.root)) from exc
            if claim.kind == "done":
                return claim.candidate.id, True
            if claim.kind == "new":
                break
            await asyncio.sleep(0.5)  # another server is evaluating this exact source: wait for its row
            cause = self._stopped_cause(claim.candidate.id)
            if cause is not None:  # it stopped on a fault: the same fault would stop this call too
                raise WorkflowError(f"the evaluation of this same source by another call stopped: {cause}")
        cand_id = claim.candidate.id
        try:
            if not check.ok:
                result = EvalResult(
                    verdict="compile_error",
                    summary=f"the source does not parse ({check.syntax_error} at line {check.syntax_error_line}); "
                            "fix the syntax and verify again",
                    error=ErrorReport(kind="SyntaxError", message=check.syntax_error or "",
                                      candidate_line=check.syntax_error_line),
                )
            else:
                base = await self._ensure_baselines(row, progress)
                opts = self._options(row)
                if sizes is not None:
                    opts = opts.model_copy(update={"size_overrides": sizes})
                # the task's floor holds at the task's sizes: a quick check at other sizes is held to none
                floor = self.task_floor(row) if sizes is None else None
                eval_opts = self._eval_options(opts, base, roofline_floor_ms=floor.floor_ms if floor else None,
                                               roofline_floor_path=floor.compute_type if floor else None,
                                               roofline_floor_basis=floor.basis() if floor else None,
                                               timing=self.timing_available(),
                                               isolated_timing=self.config.isolated_timing)
                result = await self.evaluator.evaluate(self._reference(row), source, eval_opts, progress)
            probes = scan_probes(source)
            if probes:  # the server's static check: shown with the result; commit_stage refuses it unless forced
                result.integrity.append(IntegrityFinding(check=PROBE_CHECK, severity="review",
                                                         detail=describe_probes(probes)[:1000]))
            # A quick check's time is at other sizes: kept in its result, never in the row guards compare.
            time_ms = result.timing.median_ms if result.timing and result.verdict == "correct" and sizes is None \
                else None
            # A harness fault (our side or the environment, not the candidate) is stored but never served from the
            # cache.
            self.repo.finish_candidate(cand_id, result.verdict, time_ms, self.ws.put_text(result.model_dump_json()),
                                       status="harness_fault" if result.fault == "harness" else "done")
        except BaseException as exc:
            # Whatever stopped it (a full disk while storing the result included), the row never stays `running`:
            # it is interrupted with the cause, which waiters on this source read instead of waiting forever.
            cause = plain_cause(exc, self.ws.root) if isinstance(exc, Exception) else CANCELLED
            self.repo.interrupt_candidate(cand_id, cause)
            if isinstance(exc, Exception) and storage_cause(exc, self.ws.root) is not None:
                raise StorageFault(cause) from exc
            raise
        return cand_id, False

    def _stopped_cause(self, cand_id: str) -> str | None:
        """Why the running row this call waits on stopped, if it stopped on a fault (not a cancellation:
        then this call claims the source and evaluates it itself)."""
        try:
            cand = self.repo.candidate_by_id(cand_id)
        except (OSError, sqlite3.Error):
            cand = None
        if cand is not None and cand.status == "interrupted":
            cause = cand.cause
        elif cand is None or cand.status in ("running", "queued"):
            cause = self.ws.faults.get(cand_id)  # the database could not record it (disk full)
        else:
            return None
        return None if cause in (None, CANCELLED) else cause

    def _verify_result(self, row: TaskRow, cand: CandidateRow, *, cached: bool) -> VerifyResult:
        result = self._result(cand)
        if result is None:
            why = f": {cand.cause}" if cand.cause else ""
            raise WorkflowError(f"candidate {cand.id} has no result ({cand.status}{why}); verify the source again")
        base = self._baselines(row)
        time_ms = cand.time_ms
        last = self._last_commit(row.id)
        stage = self._stage(row)
        best = self.repo.best_time_in_stage(row.id, cand.stage)
        failed = result.verdict != "correct"
        quick = self._quick_sizes_of(row, result)
        if failed:
            nxt = (f"the candidate is {result.verdict}: read the summary and the mismatch/error report, fix it and "
                   "verify again (the debug_brief has the checklist)")
        elif quick is not None:
            nxt = (f"correct at the quick-check sizes {quick}; verify it without size_overrides (the task's sizes) "
                   "before commit_stage")
        elif time_ms is None:
            nxt = "correct (no timing without a GPU); " + self.next_step(row)
        else:
            nxt = self.next_step(row)
        return VerifyResult(
            task_id=row.id, candidate_id=cand.id, stage=cand.stage, cached=cached,
            verdict=result.verdict, summary=result.summary, time_ms=time_ms,
            speedup_vs_eager=_ratio(_eager_ms(base), time_ms),
            speedup_vs_compile=_ratio(_compile_ms(base), time_ms),
            speedup_vs_committed=_ratio(last.time_ms if last else None, time_ms),
            best_in_stage=time_ms is not None and best is not None and time_ms <= best,
            result=result, debug_brief=self._brief(row, stage, "debug") if failed else None, next_step=nxt,
            size_overrides=quick, sandbox=self.sandbox_line(result.sandbox),
        )
