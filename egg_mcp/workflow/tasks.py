"""start_task and generate_seeds: creating a task (reference, options, analysis) and the seed brief."""

from __future__ import annotations

import json
from typing import Any, Literal

from egg_mcp.contract import ProgressFn, TolerancePolicy, default_tolerance
from egg_mcp.problems.loader import ProblemError, resolve_reference
from egg_mcp.stages import NEXT_STEP, Stage
from egg_mcp.workflow import limits
from egg_mcp.workflow.core import ServiceCore, WorkflowError, _check
from egg_mcp.workflow.models import SeedsResult, StartTaskResult, TaskOptions


class TaskLifecycle(ServiceCore):
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
        size_overrides: dict[str, int | list[int]] | None = None,
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
        analysis, analysis_error = await self._analyze(ref.source, dtype, tol)
        if analysis_error:
            notes.append(f"reference analysis failed: {analysis_error}")
        if not timing and not overrides:
            overrides = await self._derived_quick_sizes(ref, dtype, tol, notes)
        opts = TaskOptions(k_seeds=k_seeds, dtype=dtype, tolerance=tol, size_overrides=overrides,
                           correctness_trials=correctness_trials,
                           gpu_name=self.gpu.name if timing and self.gpu else None)
        if size_overrides:
            _check(limits.check_size_memory, (analysis or {}).get("min_bytes"), dict(ref.size_constants),
                   overrides, self.config.max_eval_bytes)
            if analysis is not None:  # floors and briefs at the sizes every verify times (the H200 guidance run:
                # a batch-32 timing against a batch-128 floor read as "below the floor")
                sized, sized_error = await self._analyze(ref.source, dtype, tol, overrides)
                if sized is not None:
                    analysis = sized
                    notes.append("the reference analysis (FLOPs, bytes, roofline floor) is at the size_overrides, "
                                 "the sizes every verify times")
                else:
                    analysis = {**analysis, "floor": None, "floors_ms": {},
                                "floor_unavailable": f"no analysis at the size_overrides ({sized_error})"}
                    notes.append(f"the reference analysis at the size_overrides failed ({sized_error}): the one at "
                                 "the default sizes is kept without its floor (it would not hold at the timed sizes)")
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

    async def _derived_quick_sizes(self, ref, dtype: str, tol: TolerancePolicy,
                                   notes: list[str]) -> dict[str, int | list[int]]:
        """No GPU and no QUICK_SIZES: small sizes derived from the reference's constants (problems.loader), kept
        only when the reference runs at them (its analysis there succeeds); the note says which were used."""
        from egg_mcp.problems.loader import derive_quick_sizes

        derived = derive_quick_sizes(ref.size_constants)
        if derived:
            sized, error = await self._analyze(ref.source, dtype, tol, derived)
            if sized is not None:
                notes.append(f"no GPU and no QUICK_SIZES in the problem: candidates are checked in the Triton "
                             f"interpreter at sizes derived from the reference's constants {derived} (related "
                             "constants shrunk by one power of two, multiples kept); pass size_overrides to choose "
                             "others; timings need a GPU")
                return derived
            notes.append(f"no GPU: the sizes derived for a quick check {derived} do not run in the reference "
                         f"({error}); candidates are checked at the problem's full sizes, which can be slow: pass "
                         "size_overrides")
            return {}
        notes.append("no GPU: candidates are checked in the Triton interpreter at the problem's full sizes, which "
                     "can be slow; pass size_overrides for a quick check")
        return {}

    async def _analyze(self, source: str, dtype: str, tolerance: TolerancePolicy,
                       size_overrides: dict[str, int | list[int]] | None = None) -> tuple[dict[str, Any] | None,
                                                                                          str | None]:
        """Reference analysis in a worker (the reference is user code), at the problem's real sizes or at
        `size_overrides` (checked against the real-size analysis first: start_task)."""
        from egg_mcp.analysis.reference import AnalysisError, analyze_reference

        try:
            analysis = await analyze_reference(self.analysis_evaluator, source, dtype=dtype,
                                               gpu=self._gpu_for_roofline(), tolerance=tolerance,
                                               size_overrides=size_overrides,
                                               timeout_s=self.config.analysis_timeout_s)
        except AnalysisError as exc:
            return None, str(exc)
        return analysis.model_dump(mode="json"), None

    # -- generate_seeds -------------------------------------------------------------------------
    async def generate_seeds(self, task_id: str, progress: ProgressFn | None = None) -> SeedsResult:
        from egg_mcp.analysis.analysis_types import ReferenceAnalysis
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
