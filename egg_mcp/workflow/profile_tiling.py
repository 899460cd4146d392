"""profile_ncu and propose_tiling: advisory tools that measure through the same evaluator as verify."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from egg_mcp.contract import ProgressFn
from egg_mcp.workflow.core import WorkflowError

if TYPE_CHECKING:
    from egg_mcp.analysis.analysis_types import RooflineFloor
    from egg_mcp.workflow.service import EggService


async def profile(service: EggService, task_id: str, candidate_id: str, progress: ProgressFn | None = None,
                  size_overrides: dict[str, int | list[int]] | None = None):
    from egg_mcp.profiling.profile_job import ProfileError, profile_candidate

    row, stage, _cand, source = service.correct_candidate("profile_ncu", task_id, candidate_id)
    analysis = service._analysis(row) or {}
    opts = service._options(row)
    sizes = service.check_sizes(row, size_overrides)
    notes: list[str] = []
    floor_for = service.floor_for(row)  # the floor verify and the briefs state, on the GPU the report is placed on
    if sizes is not None:
        opts = opts.model_copy(update={"size_overrides": sizes})
        notes.append(f"profiled at the size_overrides {sizes}, not the task's sizes: no floor or roofline (the "
                     "task's FLOPs, bytes and floor are for its own sizes)")
        analysis, floor_for = {}, None
    elif analysis and floor_for is None:
        notes.append(f"no floor or roofline: {analysis.get('floor_unavailable') or 'the analysis holds no floor'}")
        analysis = {}
    service.require_sandbox("run candidates (profile_ncu)")
    try:
        report = await profile_candidate(
            service.evaluator, reference_source=service._reference(row), candidate_source=source,
            options=service._eval_options(opts, service._baselines(row)), stage=stage,
            gpu=service.gpu if service.timing_available() else None,
            flops=analysis.get("flops"), min_bytes=analysis.get("min_bytes"), progress=progress,
            tensor_core_flops=analysis.get("tensor_core_flops"), floor_for=floor_for,
        )
    except (ProfileError, ValueError) as exc:
        raise WorkflowError(f"profiling failed: {exc}") from None
    report.warnings = notes + report.warnings
    report_id = service.save_report(task_id, candidate_id, "profile", report.model_dump(mode="json"))
    return report_id, report, service._brief(row, stage, "profile")


async def tiling(service: EggService, task_id: str, candidate_id: str, *, max_trials: int, time_budget_s: float,
                 dims: dict[str, int] | None, kind: str | None, measure: bool, progress: ProgressFn | None = None):
    from egg_mcp.tiling.search import probe_launches, propose_tiling

    row, stage, _cand, source = service.correct_candidate("propose_tiling", task_id, candidate_id)
    service.require_sandbox("run candidates (propose_tiling)")
    analysis = service._analysis(row) or {}
    derived_dims, derived_kind = problem_dims(analysis)
    eval_options = service._eval_options(service._options(row), service._baselines(row))
    # each kernel launch's own dims (meta-device forward in a worker): a K=768 projection is not the task's K
    probe_started = time.perf_counter()
    launches, probe_note = await probe_launches(service.evaluator, reference_source=service._reference(row),
                                                candidate_source=source, options=eval_options)
    probe_s = time.perf_counter() - probe_started  # spent from the caller's budget, and said in time_s
    try:
        proposal = await propose_tiling(
            service.evaluator, reference_source=service._reference(row), candidate_source=source,
            options=eval_options, launches=launches,
            gpu=service._gpu_for_roofline(),
            dims=dims or derived_dims, kind=kind or derived_kind, max_trials=max_trials, time_budget_s=time_budget_s,
            measure=measure and service.timing_available(), progress=progress, spent_s=probe_s,
        )
    except ValueError as exc:  # no tunables, unknown dims: the client can fix the candidate or pass dims
        raise WorkflowError(str(exc)) from None
    from egg_mcp.tiling.plan import tie_note

    if measure and not service.timing_available() and not proposal.measured:
        target = service._gpu_for_roofline()
        proposal.note = ("unmeasured: measure=true, but there is no GPU here (the CPU interpreter cannot time "
                         "kernels); the ranking is the cost model's prediction only, for "
                         f"{target.name if target else 'a stand-in GPU (see warnings)'}")
    if probe_note:
        proposal.warnings.append(f"{probe_note}: every kernel priced at the task's dims")
    below = below_floor_warning(proposal, service.task_floor(row))
    if below:
        proposal.warnings.append(below)
    tie = tie_note([r.predicted_ms for r in proposal.ranked if r.measured_ms is None])
    if tie and not proposal.measured:
        proposal.warnings.append(tie)
    report_id = service.save_report(task_id, candidate_id, "tiling", proposal.model_dump(mode="json"))
    return report_id, proposal


def below_floor_warning(proposal, floor: RooflineFloor | None) -> str | None:
    """A prediction below the task's roofline floor (`ServiceCore.task_floor`: the one verify and the briefs
    state) cannot be right: the model's dims or traffic do not describe this kernel (e.g. a grid read wrong), so
    its ranking is not to be trusted; measured times are."""
    if floor is None or not floor.floor_ms:
        return None
    low = [r for r in proposal.ranked if r.predicted_ms is not None and r.predicted_ms < floor.floor_ms]
    if not low:
        return None
    worst = min(low, key=lambda r: r.predicted_ms)
    return (f"the model predicts {len(low)} config(s) below the task's floor {floor.floor_ms:.4g} ms "
            f"({floor.compute_type}; {floor.ceilings or floor.spec_source}; lowest {worst.predicted_ms:.4g} ms for "
            f"{worst.config.values}): its dims {proposal.dims} or traffic do not describe this kernel; rank by "
            "measured times, or pass dims")


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
