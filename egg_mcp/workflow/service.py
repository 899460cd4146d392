"""The workflow service: every tool's logic as a plain async method, testable without MCP.

The MCP layer (server.py) only translates arguments and errors. This module owns the rules of EGG:
stage order, the regression guard on commit, selective handoff, idempotent verification.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from typing import Any, Literal

from egg_mcp.cluster.build import describe as describe_lanes
from egg_mcp.config import ServerConfig, derived_run_timeout
from egg_mcp.evaluation.api import (
    BaselineResult,
    ErrorReport,
    EvalOptions,
    EvalResult,
    Evaluator,
    ProgressFn,
    TolerancePolicy,
    default_tolerance,
)
from egg_mcp.hardware import GpuSpec, spec_for
from egg_mcp.problems.loader import ProblemError, check_candidate_contract, resolve_reference
from egg_mcp.workflow.checks import evidence_mismatches, reuse_blocker
from egg_mcp.workflow.models import (
    CandidateDetail,
    CandidateSummary,
    CommitResult,
    CommittedStage,
    ExportResult,
    HandoffContext,
    SeedsResult,
    StageDecision,
    StartTaskResult,
    TaskList,
    TaskOptions,
    TaskStatus,
    TaskSummary,
    VerifyResult,
)
from egg_mcp.workflow.stages import (
    NEXT_STEP,
    STAGE_GOALS,
    Stage,
    allowed,
    next_stage,
    refusal,
    tools_allowed,
)
from egg_mcp.workflow import limits
from egg_mcp.workflow.export import ExportError, write_export
from egg_mcp.workspace.repo import QUICK_PREFIX, CandidateRow, CommitConflict, CommitRow, Repository, TaskRow
from egg_mcp.workspace.store import ArtifactError, Workspace, _pid_alive

log = logging.getLogger(__name__)

MIN_NOISE = 0.02
"""Smallest relative difference the regression guard treats as real (2%: above the ~0.3% CV of
a 100 us kernel and the ~1.5% of a graph-replayed 5 us kernel measured on the H200)."""


class WorkflowError(Exception):
    """A failure the client can fix; the message says how (becomes an MCP tool error)."""


class EggService:
    def __init__(self, config: ServerConfig, workspace: Workspace, evaluator: Evaluator, gpu: GpuSpec | None,
                 analysis_evaluator: Evaluator | None = None):
        self.config = config
        self.ws = workspace
        self.repo = Repository(workspace)
        self.evaluator = evaluator
        self.analysis_evaluator = analysis_evaluator or evaluator
        """Runs start_task's reference analysis: a separate engine so it never queues behind verifies."""
        self.gpu = gpu
        self._baseline_locks: dict[str, asyncio.Lock] = {}
        self._inflight: dict[tuple[str, str], asyncio.Future] = {}
        """Single flight: identical (task, source hash) verifies in this server share one evaluation."""
        interrupted = workspace.mark_interrupted()
        if interrupted:
            log.warning("%d job(s) were running when the previous server stopped: marked interrupted", interrupted)

    # -- helpers --------------------------------------------------------------------------------
    def _task_row(self, task_id: str) -> TaskRow:
        _check(limits.check_id, "task_id", task_id)
        row = self.repo.task(task_id)
        if row is None:
            known = self.repo.recent_task_ids(5)
            hint = f" Recent tasks here: {', '.join(known)}." if known else " This workspace has no tasks yet."
            raise WorkflowError(
                f"unknown task id {task_id!r} in workspace {self.ws.root}.{hint} "
                "Call list_tasks, or start_task to create one."
            )
        return row

    def _stage(self, row: TaskRow) -> Stage:
        return Stage(row.stage)

    def _require(self, tool: str, row: TaskRow) -> Stage:
        stage = self._stage(row)
        if not allowed(tool, stage):
            raise WorkflowError(refusal(tool, stage))
        return stage

    def _options(self, row: TaskRow) -> TaskOptions:
        return TaskOptions.model_validate_json(row.options_json)

    def _eval_options(self, opts: TaskOptions, base: BaselineResult | None = None, **extra: Any) -> EvalOptions:
        return EvalOptions(
            dtype=opts.dtype,
            tolerance=opts.tolerance,
            correctness_trials=opts.correctness_trials,
            size_overrides=opts.size_overrides,
            device="interpreter" if self.config.force_interpreter else "auto",
            compile_timeout_s=self.config.compile_timeout_s,
            run_timeout_s=derived_run_timeout(_eager_ms(base), self.config.run_timeout_floor_s,
                                              self.config.run_timeout_s),
            **extra,
        )

    def _text(self, sha: str, what: str) -> str:
        try:
            return self.ws.get_text(sha, what)
        except ArtifactError as exc:
            raise WorkflowError(str(exc)) from None

    def _reference(self, row: TaskRow) -> str:
        return self._text(row.reference_sha, f"reference source of task {row.id}")

    def _analysis(self, row: TaskRow) -> dict[str, Any] | None:
        return json.loads(row.analysis_json) if row.analysis_json else None

    def _baselines(self, row: TaskRow) -> BaselineResult | None:
        return BaselineResult.model_validate_json(row.baselines_json) if row.baselines_json else None

    def _candidate_row(self, task_id: str, candidate_id: str) -> CandidateRow:
        _check(limits.check_id, "candidate_id", candidate_id)
        cand = self.repo.candidate(task_id, candidate_id)
        if cand is None:
            recent = self.repo.recent_candidate_ids(task_id, 5)
            raise WorkflowError(
                f"unknown candidate {candidate_id!r} for task {task_id}."
                + (f" Recent candidates: {', '.join(recent)}." if recent else " Submit one with verify first.")
            )
        return cand

    def _source(self, cand: CandidateRow) -> str:
        return self._text(cand.source_sha, f"source of candidate {cand.id}")

    def _result(self, cand: CandidateRow) -> EvalResult | None:
        if not cand.result_sha:
            return None
        return EvalResult.model_validate_json(self._text(cand.result_sha, f"verification result of candidate {cand.id}"))

    def _floor_ms(self, analysis: dict[str, Any] | None) -> float | None:
        floor = (analysis or {}).get("floor") or {}
        return floor.get("floor_ms")

    def _committed(self, r: CommitRow, base: BaselineResult | None) -> CommittedStage:
        return CommittedStage(
            stage=r.stage, candidate_id=r.candidate_id, time_ms=r.time_ms,
            speedup_vs_eager=_ratio(_eager_ms(base), r.time_ms),
            speedup_vs_compile=_ratio(_compile_ms(base), r.time_ms),
            decision=StageDecision.model_validate_json(r.decision_json),
            forced=bool(r.forced), force_reason=r.force_reason, guard=r.guard or "",
        )

    def _commits(self, task_id: str) -> list[CommittedStage]:
        base = self._baselines(self._task_row(task_id))
        return [self._committed(r, base) for r in self.repo.commits(task_id)]

    def timing_available(self) -> bool:
        return self.evaluator.has_gpu() and not self.config.force_interpreter

    # -- start_task -----------------------------------------------------------------------------
    async def start_task(
        self,
        reference: str,
        *,
        name: str | None = None,
        k_seeds: int = 3,
        dtype: Literal["float32", "float16", "bfloat16"] = "float32",
        tolerance_preset: str = "kernelbench-v0.1",
        atol: float | None = None,
        rtol: float | None = None,
        size_overrides: dict[str, int] | None = None,
        correctness_trials: int = 5,
    ) -> StartTaskResult:
        _check(limits.check_text, "name", name, limits.MAX_NAME)
        _check(limits.check_text, "reference", reference, self.config.max_source_bytes)
        _check(limits.check_tolerance, "atol", atol)
        _check(limits.check_tolerance, "rtol", rtol)
        _check(limits.check_size_values, dict(size_overrides or {}))
        try:
            ref = resolve_reference(reference, self.config)
            tol = default_tolerance(dtype, tolerance_preset)
        except (ProblemError, ValueError) as exc:
            raise WorkflowError(str(exc)) from None
        if atol is not None or rtol is not None:
            tol = TolerancePolicy(name="custom", atol=atol if atol is not None else tol.atol,
                                  rtol=rtol if rtol is not None else tol.rtol)
        notes: list[str] = []
        timing = self.timing_available()
        if size_overrides:
            unknown = sorted(set(size_overrides) - set(ref.size_constants))
            if unknown:
                raise WorkflowError(
                    f"size_overrides names {unknown} that are not module-level int constants of the reference "
                    f"(it has: {sorted(ref.size_constants) or 'none'})")
            overrides = dict(size_overrides)
        elif not timing and ref.quick_sizes:
            overrides = dict(ref.quick_sizes)
            notes.append(f"no GPU: candidates are checked in the Triton interpreter at reduced sizes {overrides}; "
                         "timings need a GPU")
        else:
            overrides = {}
            if not timing:
                notes.append("no GPU: candidates are checked in the Triton interpreter at the problem's full sizes, "
                             "which can be slow; pass size_overrides for a quick check")
        opts = TaskOptions(k_seeds=k_seeds, dtype=dtype, tolerance=tol, size_overrides=overrides,
                           correctness_trials=correctness_trials, gpu_name=self.gpu.name if timing and self.gpu else None)
        analysis, analysis_error = await self._analyze(ref.source, dtype, tol)
        if analysis_error:
            notes.append(f"reference analysis failed: {analysis_error}")
        if size_overrides:
            _check(limits.check_size_memory, (analysis or {}).get("min_bytes"), dict(ref.size_constants),
                   overrides, self.config.max_eval_bytes)
        sha = self.ws.put_text(ref.source)
        row = self.repo.insert_task(
            name=name or ref.name, stage=Stage.SEEDS.value, reference_sha=sha, origin=ref.origin,
            options_json=opts.model_dump_json(), analysis_json=json.dumps(analysis) if analysis else None,
            analysis_error=analysis_error)
        return StartTaskResult(
            task_id=row.id, problem=row.name, origin=ref.origin, stage=Stage.SEEDS.value, options=opts,
            analysis=analysis, timing_available=timing, notes=notes,
            brief=self._brief(row, Stage.SEEDS, "code"), next_step=NEXT_STEP[Stage.SEEDS],
        )

    async def _analyze(self, source: str, dtype: str, tolerance: TolerancePolicy
                       ) -> tuple[dict[str, Any] | None, str | None]:
        """Reference analysis in a worker (the reference is user code), at the problem's real sizes."""
        from egg_mcp.analysis.reference import AnalysisError, analyze_reference

        try:
            analysis = await analyze_reference(self.analysis_evaluator, source, dtype=dtype,
                                               gpu=self._gpu_for_roofline(), tolerance=tolerance,
                                               timeout_s=self.config.analysis_timeout_s)
        except AnalysisError as exc:
            return None, str(exc)
        return analysis.model_dump(mode="json"), None

    def _gpu_for_roofline(self) -> GpuSpec | None:
        return self.gpu or spec_for(None)

    # -- generate_seeds -------------------------------------------------------------------------
    async def generate_seeds(self, task_id: str, progress: ProgressFn | None = None) -> SeedsResult:
        from egg_mcp.analysis.models import ReferenceAnalysis
        from egg_mcp.expertise.seeds import build_seed_brief

        row = self._task_row(task_id)
        stage = self._require("generate_seeds", row)
        opts = self._options(row)
        baselines = await self._ensure_baselines(row, progress)
        analysis = self._analysis(row)
        if analysis is None:
            raise WorkflowError(
                f"task {task_id} has no reference analysis ({row.analysis_error}); fix the reference and "
                "start a new task")
        brief = build_seed_brief(
            ReferenceAnalysis.model_validate(analysis), k=opts.k_seeds, tolerance=opts.tolerance,
            dtype=opts.dtype, gpu=self._gpu_for_roofline(), baselines=baselines,
        )
        return SeedsResult(
            task_id=task_id, stage=stage.value, k=opts.k_seeds, brief=brief.brief_markdown,
            seed_plan=brief.model_dump(mode="json", exclude={"brief_markdown"}), baselines=baselines,
            next_step=f"write {opts.k_seeds} structurally different ModelNew seeds and submit each with verify; "
                      "then commit_stage with the fastest correct one",
        )

    async def _ensure_baselines(self, row: TaskRow, progress: ProgressFn | None = None) -> BaselineResult | None:
        """Eager and torch.compile times of the reference: measured once per task, then stored.

        Single flight per task: 50 verify calls arriving together on a new task must wait for one
        baseline job, not queue 50 of them on the GPU ahead of their own evaluations."""
        existing = self._baselines(row)
        if existing is not None:
            return existing
        if not self.timing_available():
            return BaselineResult(unavailable_reason="no GPU: baselines need CUDA (the interpreter has no timing)")
        async with self._baseline_locks.setdefault(row.id, asyncio.Lock()):
            row = self._task_row(row.id)
            existing = self._baselines(row)
            if existing is not None:
                return existing
            opts = self._options(row)
            result = await self.evaluator.baselines(self._reference(row), self._eval_options(opts), progress)
            self.repo.set_baselines(row.id, result.model_dump_json())
            return result

    # -- verify ---------------------------------------------------------------------------------
    async def verify(self, task_id: str, source: str, note: str | None = None,
                     progress: ProgressFn | None = None, size_overrides: dict[str, int] | None = None) -> VerifyResult:
        """Identical concurrent verifies share one evaluation: in this server through a future keyed by
        (task, source hash, sizes); across servers the running candidate row is the lock (polled until done).
        A quick check (size_overrides) is cached apart from the full-size result and never stands for it."""
        _check(limits.check_text, "note", note, limits.MAX_NOTE)
        _check(limits.check_text, "source", source, self.config.max_source_bytes)
        row = self._task_row(task_id)
        stage = self._require("verify", row)
        sizes = self.check_sizes(row, size_overrides)
        try:
            check = check_candidate_contract(source, self.config.max_source_bytes)
        except ProblemError as exc:
            raise WorkflowError(str(exc)) from None
        source_sha = self.ws.put_text(source)
        if sizes is not None:
            note = f"{_quick_prefix(sizes)}{note or ''}"
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

    def _same_sizes(self, row: TaskRow, sizes: dict[str, int] | None):
        """Predicate for the verify cache: a row evaluated at these sizes (full size when sizes is None)."""
        def same(cand: CandidateRow) -> bool:
            if cand.status == "done":  # a timing taken while the GPU throttled is measured again
                result = self._result(cand)
                return self._quick_sizes_of(row, result) == sizes and reuse_blocker(result) is None
            quick = (cand.note or "").startswith(QUICK_PREFIX)
            return (cand.note or "").startswith(_quick_prefix(sizes)) if sizes is not None else not quick
        return same

    async def _verify_once(self, row: TaskRow, stage: Stage, source: str, source_sha: str, check, note: str | None,
                           progress: ProgressFn | None, sizes: dict[str, int] | None) -> tuple[str, bool]:
        while True:
            claim = self.repo.claim_candidate(row.id, stage.value, source_sha, note, _owner_alive,
                                              same=self._same_sizes(row, sizes))
            if claim.kind == "done":
                return claim.candidate.id, True
            if claim.kind == "new":
                break
            await asyncio.sleep(0.5)  # another server is evaluating this exact source: wait for its row
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
                eval_opts = self._eval_options(opts, base, roofline_floor_ms=self._floor_ms(self._analysis(row)),
                                               timing=self.timing_available(),
                                               isolated_timing=self.config.isolated_timing)
                result = await self.evaluator.evaluate(self._reference(row), source, eval_opts, progress)
        except BaseException:
            self.repo.interrupt_candidate(cand_id)
            raise
        # A quick check's time is at other sizes: kept in its result, never in the row guards compare.
        time_ms = result.timing.median_ms if result.timing and result.verdict == "correct" and sizes is None else None
        # A harness fault (our side or the environment, not the candidate) is stored but never served from the cache.
        self.repo.finish_candidate(cand_id, result.verdict, time_ms, self.ws.put_text(result.model_dump_json()),
                                   status="harness_fault" if result.fault == "harness" else "done")
        return cand_id, False

    def _verify_result(self, row: TaskRow, cand: CandidateRow, *, cached: bool) -> VerifyResult:
        result = self._result(cand)
        if result is None:
            raise WorkflowError(f"candidate {cand.id} has no result ({cand.status}); verify the source again")
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
            size_overrides=quick,
        )

    # -- quick checks at other sizes (verify / profile_ncu size_overrides) ------------------------
    def check_sizes(self, row, size_overrides: dict[str, int] | None) -> dict[str, int] | None:
        """None when the task's own sizes apply; else the validated overrides (merged over the task's)."""
        from egg_mcp.problems.loader import module_int_constants

        if not size_overrides:
            return None
        known = module_int_constants(self._reference(row))
        unknown = sorted(set(size_overrides) - set(known))
        if unknown:
            raise WorkflowError(f"size_overrides names {unknown} that are not module-level int constants of the "
                                f"reference; it has {sorted(known) or 'none'} (e.g. {{'{next(iter(known), 'N')}': 8}})")
        bad = sorted(k for k, v in size_overrides.items() if not isinstance(v, int) or v < 1)
        if bad:
            raise WorkflowError(f"size_overrides {bad} must be positive integers")
        sizes = {**self._options(row).size_overrides, **size_overrides}
        return None if sizes == self._options(row).size_overrides else sizes

    def _quick_sizes_of(self, row, result: EvalResult | None) -> dict[str, int] | None:
        """The sizes a stored result was evaluated at, or None when they are the task's own."""
        task_sizes = dict(self._options(row).size_overrides)
        sizes = dict(result.options.size_overrides) if result is not None and result.options is not None else task_sizes
        return None if sizes == task_sizes else sizes

    def next_step(self, row) -> str:
        """NEXT_STEP of the stage, told apart in SEEDS by how many correct seeds exist already."""
        stage = self._stage(row)
        if stage is not Stage.SEEDS:
            return NEXT_STEP[stage]
        k = self._options(row).k_seeds
        n = self.repo.count_correct(row.id, stage.value)
        if n == 0:
            return NEXT_STEP[stage]
        if n < k:
            return (f"{n} of {k} seeds verified correct: write and verify the other {k - n} structurally different "
                    "seed(s), then commit_stage with the fastest correct one")
        return f"{n} correct seeds (k={k}): commit_stage with the fastest correct one"

    def _last_commit(self, task_id: str) -> CommittedStage | None:
        commits = self._commits(task_id)
        return commits[-1] if commits else None

    # -- commit_stage ---------------------------------------------------------------------------
    async def commit_stage(self, task_id: str, candidate_id: str, decision: StageDecision,
                           force: bool = False, force_reason: str | None = None,
                           stage: str | None = None) -> CommitResult:
        """Commit `stage` (default: the stage the candidate was verified in) and advance the task.

        A commit names the stage it finalises, so a repeated call cannot skip stages: the repeat of
        a stored commit (same stage, same candidate) returns the stored outcome; a commit for a stage
        the task is not in is refused. Racing commits are serialised by the repository's
        BEGIN IMMEDIATE transaction and the loser is told who won."""
        _check(limits.check_text, "force_reason", force_reason, limits.MAX_FORCE_REASON)
        _check_decision(decision)
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
            raise WorkflowError("force=true needs a force_reason: say why the guard should be overridden (it is recorded)")
        last = self._last_commit(task_id)
        warnings: list[str] = evidence_mismatches(decision.evidence, after_ms=cand.time_ms,
                                                  before_ms=last.time_ms if last else None, candidate_id=candidate_id)
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
                warnings.append(f"only {n_correct} correct seed(s) of the {k} asked for were verified; EGG's seed stage "
                                "explores k structurally different algorithms before choosing")
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
                f"(another or an earlier commit_stage call); the task is now in stage {row.stage}. Nothing was changed. "
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
        cv = self._cv(cand)
        if stage is Stage.SEEDS:
            best = self.repo.fastest_correct(row.id, stage.value)
            if best is not None and best.id != cand.id:
                noise = max(MIN_NOISE, 2 * (cv + self._cv(best)))
                if t > best.time_ms * (1 + noise):
                    return (f"REFUSED: seed {best.id} is faster ({best.time_ms:.4g} ms vs {t:.4g} ms, beyond "
                            f"the {noise:.1%} noise band); the best seed by measurement goes on.")
            return f"passed: fastest correct seed ({t:.4g} ms)"
        last = self._last_commit(row.id)
        if last is None or last.time_ms is None:
            return "skipped: the previous stage has no timing"
        prev = self._candidate_row(row.id, last.candidate_id)
        noise = max(MIN_NOISE, 2 * (cv + self._cv(prev)))
        if t > last.time_ms * (1 + noise):
            return (f"REFUSED: {t:.4g} ms is slower than the committed {last.stage} kernel ({last.time_ms:.4g} ms) "
                    f"beyond the {noise:.1%} noise band; a later stage must not regress an earlier one.")
        return f"passed: {t:.4g} ms vs committed {last.time_ms:.4g} ms (noise band {noise:.1%})"

    def _cv(self, cand: CandidateRow) -> float:
        result = self._result(cand)
        return (result.timing.cv or 0.0) if result and result.timing else 0.0

    # -- context, status, listing, export --------------------------------------------------------
    def context(self, task_id: str) -> HandoffContext:
        row = self._task_row(task_id)
        opts = self._options(row)
        analysis = self._analysis(row)
        base = self._baselines(row)
        commits = self._commits(task_id)
        last = commits[-1] if commits else None
        source = self._source(self._candidate_row(task_id, last.candidate_id)) if last else None
        stage = self._stage(row)
        return HandoffContext(
            task_id=task_id, problem=row.name, stage=stage.value, stage_goal=STAGE_GOALS[stage],
            dtype=opts.dtype, tolerance=opts.tolerance, gpu=opts.gpu_name,
            analysis_summary=(analysis or {}).get("summary"), floor_ms=self._floor_ms(analysis),
            eager_ms=_eager_ms(base),
            compile_ms=_compile_ms(base),
            committed_candidate_id=last.candidate_id if last else None,
            committed_time_ms=last.time_ms if last else None, committed_source=source, decisions=commits,
        )

    def status(self, task_id: str) -> TaskStatus:
        row = self._task_row(task_id)
        stage = self._stage(row)
        base = self._baselines(row)
        reports = [dict(id=r.id, candidate_id=r.candidate_id, kind=r.kind, stage=r.stage, created_at=r.created_at)
                   for r in self.repo.reports(task_id)]
        return TaskStatus(
            task_id=task_id, problem=row.name, origin=row.origin, stage=stage.value, next_step=self.next_step(row),
            allowed_tools=tools_allowed(stage), options=self._options(row),
            eager_ms=_eager_ms(base),
            compile_ms=_compile_ms(base),
            history=self._commits(task_id),
            candidates_in_stage=[_summary(c, self._ran_on(c)) for c in self.repo.candidates_in_stage(task_id, stage.value)],
            running_jobs=self.repo.running_count(task_id), reports=reports,
            baselines_ran_on=base.placement.label() if base is not None and base.placement else None,
            cluster=describe_lanes(self.evaluator),
        )

    def _ran_on(self, cand: CandidateRow) -> str | None:
        """Where a finished candidate's verify ran (its stored result's placement; None from a bare engine)."""
        if cand.status != "done" or not cand.result_sha:
            return None
        try:
            result = self._result(cand)
        except WorkflowError:
            return None
        return result.placement.label() if result is not None and result.placement else None

    def list_tasks(self) -> TaskList:
        return TaskList(workspace=str(self.ws.root), tasks=[
            TaskSummary(task_id=t.id, problem=t.name, stage=t.stage, created_at=t.created_at, best_time_ms=best)
            for t, best in self.repo.list_tasks()])

    def candidate(self, task_id: str, candidate_id: str) -> CandidateDetail:
        self._task_row(task_id)
        cand = self._candidate_row(task_id, candidate_id)
        return CandidateDetail(task_id=task_id, candidate=_summary(cand), source=self._source(cand),
                               result=self._result(cand))

    def export_kernel(self, task_id: str, path: str | None = None) -> ExportResult:
        _check(limits.check_text, "path", path, limits.MAX_PATH)
        row = self._task_row(task_id)
        last = self._last_commit(task_id)
        if last is None:
            raise WorkflowError(f"task {task_id} has no committed kernel yet; commit_stage a verified candidate first")
        source = self._source(self._candidate_row(task_id, last.candidate_id))
        header = (f"# egg-mcp export: task {task_id} ({row.name}), candidate {last.candidate_id}, "
                  f"committed in stage {last.stage}\n")
        text = header + source
        default_name = f"{task_id}_{_safe(row.name)}.py"
        try:
            target = write_export(self.ws.root, self.config.allowed_roots, path, default_name, text)
        except ExportError as exc:
            raise WorkflowError(str(exc)) from None
        return ExportResult(task_id=task_id, candidate_id=last.candidate_id, stage=last.stage, path=str(target),
                            source=text)

    # -- reports (profile / tiling) ---------------------------------------------------------------
    def save_report(self, task_id: str, candidate_id: str | None, kind: str, report: dict[str, Any]) -> str:
        row = self._task_row(task_id)
        return self.repo.insert_report(task_id=task_id, candidate_id=candidate_id, kind=kind, stage=row.stage,
                                       report_sha=self.ws.put_json(report))

    def report(self, task_id: str, report_id: str) -> dict[str, Any]:
        _check(limits.check_id, "report_id", report_id)
        rep = self.repo.report(task_id, report_id)
        if rep is None:
            raise WorkflowError(f"unknown report {report_id!r} for task {task_id}; task_status lists its reports")
        try:
            return self.ws.get_json(rep.report_sha, f"{rep.kind} report {report_id}")
        except ArtifactError as exc:
            raise WorkflowError(str(exc)) from None

    def correct_candidate(self, tool: str, task_id: str, candidate_id: str):
        """(task row, stage, candidate row, source) for tools that work on a verified-correct candidate."""
        row = self._task_row(task_id)
        stage = self._require(tool, row)
        cand = self._candidate_row(task_id, candidate_id)
        if cand.verdict != "correct":
            raise WorkflowError(f"candidate {candidate_id} is {cand.verdict or cand.status}: {tool} needs a "
                                "verified-correct candidate (verify it first and fix any failure)")
        return row, stage, cand, self._source(cand)

    # -- briefs -----------------------------------------------------------------------------------
    def _brief(self, row: TaskRow, stage: Stage, role: Literal["code", "profile", "debug"]) -> str:
        from egg_mcp.expertise.briefs import render_brief

        if stage is Stage.DONE:
            return ""
        return render_brief(stage, role, self.brief_facts(row))

    def brief_facts(self, row: TaskRow):
        from egg_mcp.analysis.models import ReferenceAnalysis
        from egg_mcp.expertise.briefs import BriefFacts

        opts = self._options(row)
        analysis = self._analysis(row)
        base = self._baselines(row)
        commits = self._commits(row.id)
        facts = dict(
            task_id=row.id, problem_name=row.name, dtype=opts.dtype, tolerance=opts.tolerance,
            eager_ms=_eager_ms(base),
            compile_ms=_compile_ms(base),
            best_ms=min((c.time_ms for c in commits if c.time_ms is not None), default=None),
            committed_decisions=[f"{c.stage}: {c.decision.summary}" for c in commits], stage=Stage(row.stage),
            commits=len(commits),
            has_gpu=self.timing_available(), k=opts.k_seeds,
        )
        if analysis:
            return BriefFacts.from_analysis(ReferenceAnalysis.model_validate(analysis), **facts)
        return BriefFacts(**facts)

    def brief_for(self, stage: Stage, role: Literal["code", "profile", "debug"], task_id: str | None) -> str:
        from egg_mcp.expertise.briefs import BriefFacts, render_brief

        if task_id:
            return render_brief(stage, role, self.brief_facts(self._task_row(task_id)))
        return render_brief(stage, role, BriefFacts(stage=stage, has_gpu=self.timing_available()))


def _check(fn, *args) -> None:
    """Run a limits check; its InputError becomes the WorkflowError the client sees."""
    try:
        fn(*args)
    except limits.InputError as exc:
        raise WorkflowError(str(exc)) from None


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


def _owner_alive(owner: str | None) -> bool:
    """Is the server process that owns a running candidate row alive (same host only)?"""
    host, _, pid = (owner or ":").rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and (int(pid) == os.getpid() or _pid_alive(int(pid)))


def _quick_prefix(sizes: dict[str, int]) -> str:
    return f"{QUICK_PREFIX}{json.dumps(sizes, sort_keys=True)}] "


def _eager_ms(base: BaselineResult | None) -> float | None:
    return base.eager.median_ms if base and base.eager else None


def _compile_ms(base: BaselineResult | None) -> float | None:
    return base.compiled.median_ms if base and base.compiled else None


def _ratio(base_ms: float | None, t_ms: float | None) -> float | None:
    if base_ms is None or t_ms is None or t_ms <= 0:
        return None
    return round(base_ms / t_ms, 4)


def _summary(c: CandidateRow, ran_on: str | None = None) -> CandidateSummary:
    return CandidateSummary(candidate_id=c.id, stage=c.stage, verdict=c.verdict, status=c.status,
                            time_ms=c.time_ms, note=c.note, ran_on=ran_on)


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)[:60] or "kernel"



# -- profile_ncu and propose_tiling: they measure through the same evaluator as verify ------------

async def profile(service: EggService, task_id: str, candidate_id: str, progress: ProgressFn | None = None,
                  size_overrides: dict[str, int] | None = None):
    from egg_mcp.profiling.runner import ProfileError, profile_candidate

    row, stage, _cand, source = service.correct_candidate("profile_ncu", task_id, candidate_id)
    analysis = service._analysis(row) or {}
    opts = service._options(row)
    sizes = service.check_sizes(row, size_overrides)
    notes: list[str] = []
    if sizes is not None:
        opts = opts.model_copy(update={"size_overrides": sizes})
        notes.append(f"profiled at the size_overrides {sizes}, not the task's sizes")
    try:
        report = await profile_candidate(
            service.evaluator, reference_source=service._reference(row), candidate_source=source,
            options=service._eval_options(opts, service._baselines(row)), stage=stage,
            gpu=service.gpu if service.timing_available() else None,
            flops=analysis.get("flops"), min_bytes=analysis.get("min_bytes"), progress=progress,
            floor=analysis.get("floor"), tensor_core_flops=analysis.get("tensor_core_flops"),
        )
    except (ProfileError, ValueError) as exc:
        raise WorkflowError(f"profiling failed: {exc}") from None
    report.warnings = notes + report.warnings
    report_id = service.save_report(task_id, candidate_id, "profile", report.model_dump(mode="json"))
    return report_id, report, service._brief(row, stage, "profile")


async def tiling(service: EggService, task_id: str, candidate_id: str, *, max_trials: int, time_budget_s: float,
                 dims: dict[str, int] | None, kind: str | None, measure: bool, progress: ProgressFn | None = None):
    from egg_mcp.tiling.search import propose_tiling

    row, stage, _cand, source = service.correct_candidate("propose_tiling", task_id, candidate_id)
    analysis = service._analysis(row) or {}
    derived_dims, derived_kind = problem_dims(analysis)
    try:
        proposal = await propose_tiling(
            service.evaluator, reference_source=service._reference(row), candidate_source=source,
            options=service._eval_options(service._options(row), service._baselines(row)),
            gpu=service._gpu_for_roofline(),
            dims=dims or derived_dims, kind=kind or derived_kind, max_trials=max_trials, time_budget_s=time_budget_s,
            measure=measure and service.timing_available(), progress=progress,
        )
    except ValueError as exc:  # no tunables, unknown dims: the client can fix the candidate or pass dims
        raise WorkflowError(str(exc)) from None
    from egg_mcp.tiling.plan import tie_note

    if measure and not service.timing_available() and not proposal.measured:
        target = service._gpu_for_roofline()
        proposal.note = ("unmeasured: measure=true, but there is no GPU here (the CPU interpreter cannot time "
                         "kernels); the ranking is the cost model's prediction only, for "
                         f"{target.name if target else 'a stand-in GPU (see warnings)'}")
    tie = tie_note([r.predicted_ms for r in proposal.ranked if r.measured_ms is None])
    if tie and not proposal.measured:
        proposal.warnings.append(tie)
    report_id = service.save_report(task_id, candidate_id, "tiling", proposal.model_dump(mode="json"))
    return report_id, proposal


def problem_dims(analysis: dict[str, Any]) -> tuple[dict[str, int], str | None]:
    """Problem dimensions for the tiling model, from the dominant operator of the reference analysis:
    GEMM-like ops give M, N, K; everything else n_rows (all but the last dim) and n_cols (the last)."""
    ops = analysis.get("ops") or []
    if not ops:
        return {}, None
    main = max(ops, key=lambda op: (op.get("flops") or 0, op.get("bytes") or 0))
    op_class = main.get("op_class")
    shapes = [s for s in (main.get("input_shapes") or []) if s]
    out = main.get("output_shape") or []
    if op_class in ("gemm", "batched_gemm") and len(shapes) >= 2 and out:
        a = shapes[0]
        k = a[-1]
        m = 1
        for d in out[:-1]:
            m *= d
        return {"M": m, "N": out[-1], "K": k}, "gemm"
    shape = out or (shapes[0] if shapes else [])
    if not shape:
        return {}, op_class
    rows = 1
    for d in shape[:-1]:
        rows *= d
    kind = {"softmax": "softmax", "normalization": "norm", "reduction": "reduction"}.get(op_class or "", "elementwise")
    return {"n_rows": rows, "n_cols": shape[-1]}, kind
