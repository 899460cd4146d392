"""The workflow service's shared core: task/candidate row access, evaluation options, baselines,
quick-check sizes, next steps and briefs -- what every tool of `EggService` reads through.

The tools themselves live beside it (tasks.py, verify.py, commit.py, views.py) as mixins over
`ServiceCore`; service.py composes them into `EggService`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from typing import TYPE_CHECKING, Any, Literal

from egg_mcp.config import ServerConfig, derived_run_timeout
from egg_mcp.contract import BaselineResult, EvalOptions, EvalResult, Evaluator, ProgressFn
from egg_mcp.hardware import GpuSpec, ceiling, spec_for
from egg_mcp.stages import NEXT_STEP, Stage, allowed, refusal
from egg_mcp.workflow import limits
from egg_mcp.workflow.models import CandidateSummary, CommittedStage, StageDecision, TaskOptions
from egg_mcp.workspace.damage import ArtifactError
from egg_mcp.workspace.repo import CandidateRow, CommitRow, Repository, TaskRow
from egg_mcp.workspace.scratch import pid_alive
from egg_mcp.workspace.store import Workspace

if TYPE_CHECKING:
    from egg_mcp.analysis.analysis_types import RooflineFloor

log = logging.getLogger("egg_mcp.workflow.service")  # the name operators' log filters know


class WorkflowError(Exception):
    """A failure the client can fix; the message says how (becomes an MCP tool error)."""


class ServiceCore:
    """State and the row/option helpers every tool mixin uses (no tool of its own)."""

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
        self._inflight: dict[tuple[str, str, str], asyncio.Future] = {}
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
        """The stored baselines; a "no GPU" record (kept so the workflow knows generate_seeds ran) is not one once a
        GPU is here."""
        base = BaselineResult.model_validate_json(row.baselines_json) if row.baselines_json else None
        if base is not None and (base.unavailable_reason or "").startswith("no GPU") and self.timing_available():
            return None
        return base

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
        return EvalResult.model_validate_json(self._text(cand.result_sha,
                                                         f"verification result of candidate {cand.id}"))

    def floor_for(self, row: TaskRow):
        """`task_floor` on a given GPU spec (profile_ncu places a report on the GPU its worker ran on): a
        function of the spec, None when the task has no analysis or its floor does not hold at its sizes."""
        from egg_mcp.analysis.analysis_types import ReferenceAnalysis
        from egg_mcp.analysis.roofline import current_floor, floor_holds

        analysis = self._analysis(row)
        stored = ReferenceAnalysis.model_validate(analysis) if analysis else None
        if stored is None or not floor_holds(stored):
            return None
        tolerance = self._options(row).tolerance
        return lambda gpu: current_floor(stored, gpu, tolerance)

    def task_floor(self, row: TaskRow) -> RooflineFloor | None:
        """The task's roofline floor now (`analysis.roofline.current_floor`): the stored work priced with this
        server's current GPU spec, calibrated once the calibration has finished. Every tool reads it here."""
        from egg_mcp.analysis.analysis_types import ReferenceAnalysis
        from egg_mcp.analysis.roofline import current_floor

        analysis = self._analysis(row)
        if not analysis:
            return None
        return current_floor(ReferenceAnalysis.model_validate(analysis), self._gpu_for_roofline(),
                             self._options(row).tolerance)

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

    @property
    def sandbox_floor(self):
        """The sandbox floor in force (egg_mcp.sandbox.floor): this host's probe against the operator's choice;
        probed once per server."""
        floor = getattr(self, "_sandbox_floor", None)
        if floor is None:
            from egg_mcp.sandbox import probe
            from egg_mcp.sandbox.floor import floor_for

            floor = self._sandbox_floor = floor_for(probe(), self.config.unsafe_sandbox_floor)
        return floor

    def require_sandbox(self, what: str = "run candidates") -> None:
        """Refuse, before anything runs, a call that would run candidate code below the sandbox floor."""
        floor = self.sandbox_floor
        if not floor.runs_candidates:
            raise WorkflowError(floor.refusal(what))

    def sandbox_line(self, runner: dict | None = None) -> str:
        """The sandbox a result's text states: the runner's own level when it reported one (and what it lacked
        of the floor), with the operator's opt-in when the floor was lowered below what the kernel should give."""
        from egg_mcp.sandbox.floor import UNSAFE_FLAG, describe, missing_layers

        floor = self.sandbox_floor
        if not runner:
            return floor.line()
        level = str(runner.get("level", "unknown"))
        lacks = missing_layers(runner, floor.required)
        line = f"sandbox: {level}" + (f" (this runner lacked {describe(lacks)})" if lacks else "")
        if floor.weak:
            line += f"; below the default floor, allowed by {UNSAFE_FLAG} {floor.unsafe_level}"
        return line

    def timing_available(self) -> bool:
        return self.evaluator.has_gpu() and not self.config.force_interpreter

    def _gpu_for_roofline(self) -> GpuSpec | None:
        return self.gpu or spec_for(None)

    async def _ensure_baselines(self, row: TaskRow, progress: ProgressFn | None = None) -> BaselineResult | None:
        """Eager and torch.compile times of the reference: measured once per task, then stored.

        Single flight per task: 50 verify calls arriving together on a new task must wait for one
        baseline job, not queue 50 of them on the GPU ahead of their own evaluations."""
        existing = self._baselines(row)
        if existing is not None:
            return existing
        if not self.timing_available():
            result = BaselineResult(unavailable_reason="no GPU: baselines need CUDA (the interpreter has no timing)")
            self.repo.set_baselines(row.id, result.model_dump_json())  # marks generate_seeds as run (next_step)
            return result
        async with self._baseline_locks.setdefault(row.id, asyncio.Lock()):
            row = self._task_row(row.id)
            existing = self._baselines(row)
            if existing is not None:
                return existing
            opts = self._options(row)
            result = await self.evaluator.baselines(self._reference(row), self._eval_options(opts), progress)
            self.repo.set_baselines(row.id, result.model_dump_json())
            return result

    # -- quick checks at other sizes (verify / profile_ncu size_overrides) ------------------------
    def check_sizes(self, row, size_overrides: dict[str, int | list[int]] | None) -> dict[str, int | list[int]] | None:
        """None when the task's own sizes apply; else the validated overrides (merged over the task's)."""
        from egg_mcp.problems.loader import module_int_constants

        if not size_overrides:
            return None
        known = module_int_constants(self._reference(row))
        unknown = sorted(set(size_overrides) - set(known))
        if unknown:
            raise WorkflowError(f"size_overrides names {unknown} that are not module-level int constants of the "
                                f"reference; it has {sorted(known) or 'none'} (e.g. {{'{next(iter(known), 'N')}': 8}})")
        _check(limits.check_size_values, size_overrides)
        sizes = {**self._options(row).size_overrides, **size_overrides}
        # start_task's footprint check, before any job: scaled from the stored analysis at the sizes it was taken at
        analysis = self._analysis(row) or {}
        analysed_at = {**known, **(analysis.get("size_overrides") or {})}
        _check(limits.check_size_memory, analysis.get("min_bytes"), analysed_at, sizes, self.config.max_eval_bytes)
        return None if sizes == self._options(row).size_overrides else sizes

    def _quick_sizes_of(self, row, result: EvalResult | None) -> dict[str, int | list[int]] | None:
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
        if n == 0 and row.baselines_json:  # generate_seeds has run (it measures the baselines first)
            return (f"write {k} structurally different ModelNew seeds from generate_seeds' paradigms, verify each, "
                    "then commit_stage with the fastest correct candidate")
        if n == 0:
            return NEXT_STEP[stage]
        if n < k:
            return (f"{n} of {k} seeds verified correct: write and verify the other {k - n} structurally different "
                    "seed(s), then commit_stage with the fastest correct one")
        return f"{n} correct seeds (k={k}): commit_stage with the fastest correct one"

    def _last_commit(self, task_id: str) -> CommittedStage | None:
        commits = self._commits(task_id)
        return commits[-1] if commits else None

    # -- briefs -----------------------------------------------------------------------------------
    def _brief(self, row: TaskRow, stage: Stage, role: Literal["code", "profile", "debug"]) -> str:
        from egg_mcp.expertise.briefs import render_brief

        if stage is Stage.DONE:
            return ""
        return render_brief(stage, role, self.brief_facts(row))

    def brief_facts(self, row: TaskRow):
        from egg_mcp.analysis.analysis_types import ReferenceAnalysis
        from egg_mcp.expertise.briefs import BriefFacts

        opts = self._options(row)
        analysis = self._analysis(row)
        base = self._baselines(row)
        commits = self._commits(row.id)
        facts: dict[str, Any] = dict(
            task_id=row.id, problem_name=row.name, dtype=opts.dtype, tolerance=opts.tolerance,
            eager_ms=_eager_ms(base),
            compile_ms=_compile_ms(base),
            best_ms=min((c.time_ms for c in commits if c.time_ms is not None), default=None),
            committed_decisions=[f"{c.stage}: {c.decision.summary}" for c in commits], stage=Stage(row.stage),
            commits=len(commits),
            has_gpu=self.timing_available(), k=opts.k_seeds,
            bandwidth=ceiling(gpu, "dram").label() if (gpu := self._gpu_for_roofline()) else None,
            dram_bytes_per_s=gpu.dram_bytes_per_s if gpu else None,
        )
        if analysis:
            return BriefFacts.from_analysis(ReferenceAnalysis.model_validate(analysis), self.task_floor(row), **facts)
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


def _owner_alive(owner: str | None) -> bool:
    """Is the server process that owns a running candidate row alive (same host only)?"""
    host, _, pid = (owner or ":").rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and (int(pid) == os.getpid() or pid_alive(int(pid)))


def quick_key(sizes: dict[str, int | list[int]] | None) -> str | None:
    """What `candidates.quick_sizes` holds for a verify at these size_overrides (None: the task's sizes)."""
    return None if sizes is None else json.dumps(sizes, sort_keys=True)


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
                            time_ms=c.time_ms, note=c.note, ran_on=ran_on,
                            quick_sizes=json.loads(c.quick_sizes) if c.quick_sizes else None)


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)[:60] or "kernel"
