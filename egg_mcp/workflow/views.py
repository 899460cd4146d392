"""Read-side tools and reports: get_context, task_status, list_tasks, get_candidate, export_kernel,
stored profile/tiling reports, and the verified-correct candidate those tools start from."""

from __future__ import annotations

from typing import Any

from egg_mcp.analysis.analysis_types import ReferenceAnalysis
from egg_mcp.analysis.roofline import summary_now
from egg_mcp.cluster.build import describe as describe_lanes
from egg_mcp.stages import STAGE_GOALS, tools_allowed
from egg_mcp.workflow import limits, memcheck_gate
from egg_mcp.workflow.core import ServiceCore, WorkflowError, _check, _compile_ms, _eager_ms, _safe, _summary
from egg_mcp.workflow.export import ExportError, write_export
from egg_mcp.workflow.models import CandidateDetail, ExportResult, HandoffContext, TaskList, TaskStatus, TaskSummary
from egg_mcp.workspace.damage import ArtifactError


class Views(ServiceCore):
    # -- context, status, listing, export --------------------------------------------------------
    def context(self, task_id: str) -> HandoffContext:
        row = self._task_row(task_id)
        opts = self._options(row)
        analysis = self._analysis(row)
        floor = self.task_floor(row)
        base = self._baselines(row)
        commits = self._commits(task_id)
        last = commits[-1] if commits else None
        source = self._source(self._candidate_row(task_id, last.candidate_id)) if last else None
        stage = self._stage(row)
        return HandoffContext(
            task_id=task_id, problem=row.name, stage=stage.value, stage_goal=STAGE_GOALS[stage],
            dtype=opts.dtype, tolerance=opts.tolerance, gpu=opts.gpu_name,
            analysis_summary=summary_now(ReferenceAnalysis.model_validate(analysis), floor) if analysis else None,
            floor_ms=floor.floor_ms if floor else None,
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
            candidates_in_stage=[_summary(c, self._ran_on(c)) for c in self.repo.candidates_in_stage(task_id,
                                                                                                     stage.value)],
            running_jobs=self.repo.running_count(task_id), reports=reports,
            baselines_ran_on=base.placement.label() if base is not None and base.placement else None,
            cluster=describe_lanes(self.evaluator),
        )

    def _ran_on(self, cand) -> str | None:
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
                               result=self._result(cand), memcheck=memcheck_gate.stored(self, task_id, candidate_id))

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
