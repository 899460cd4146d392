"""The server's side of propose_tiling's measuring job (`measure.py` is the worker's): the payload, the deadline
it measures to, which of its results were measured, and where its time went.

The budget is the caller's, whole: the job measures until a deadline on the caller's clock (whatever its start-up
took), less a return margin and the share kept for re-verifying a winner through verify (`recommend.reverify`).
Only where the job's clock does not agree with this one does it fall back to its own clock, less an assumed
start-up, and the reply says so.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

from egg_mcp.contract import EvalOptions
from egg_mcp.tiling.tiling_types import ConfigEstimate, MeasuredConfig, TilingConfig, TilingProposal

MEASURE_TARGET = "egg_mcp.tiling.measure:measure_configs"
RANKED_SENT = 4096  # ranked configs handed to the worker (it walks only near the top)
JOB_STARTUP_S = 30.0  # worker start + torch import: the job's fallback budget when it has no usable deadline
RETURN_MARGIN_S = 3.0  # the job stops measuring this long before its deadline (its result returns)
REVERIFY_SHARE, REVERIFY_MIN_S, REVERIFY_MAX_S = 0.2, 5.0, 30.0
"""The budget kept for re-verifying a winner (two verify calls): this share of it, within these bounds."""


def reverify_reserve(budget_s: float) -> float:
    return min(REVERIFY_MAX_S, max(REVERIFY_MIN_S, REVERIFY_SHARE * budget_s))


async def report(progress, done: float, total: float | None, message: str) -> None:
    if progress is None:
        return
    outcome = progress(done, total, message)
    if inspect.isawaitable(outcome):
        await outcome


def payload_for(feasible: list[ConfigEstimate], space, reference_source: str, candidate_source: str,
                options: EvalOptions, max_trials: int, measure_s: float, baseline: dict[str, int]) -> dict[str, Any]:
    """The job: the current config first, from the unchanged source (what a winner has to beat), then the
    worker's adaptive rounds over the model's ranking; measuring until `measure_s` from now."""
    choices = {p.name: list(p.choices) for p in space.params if p.applicable}
    return {
        "reference_source": reference_source,
        "candidates": [{"config": baseline, "source": candidate_source}],
        "adaptive": {
            "candidate_source": candidate_source,
            "ranked": [[e.config.values, e.predicted_ms] for e in feasible[:RANKED_SENT]],
            "choices": choices,
            "max_trials": max(1, min(max_trials - (1 if max_trials > 1 else 0), len(feasible))),  # baseline counts
        },
        "dtype": options.dtype,
        "size_overrides": dict(options.size_overrides),
        "atol": options.tolerance.atol,
        "rtol": options.tolerance.rtol,
        "device": "cuda",
        "time_budget_s": max(5.0, measure_s - JOB_STARTUP_S),  # the job's own clock, only if its deadline is unusable
        "deadline_unix": time.time() + max(5.0, measure_s - RETURN_MARGIN_S),  # the budget, whatever start-up took
    }


async def measure(evaluator: Any, proposal: TilingProposal, feasible: list[ConfigEstimate], space,
                  reference_source: str, candidate_source: str, options: EvalOptions, max_trials: int,
                  budget_s: float, progress, baseline: dict[str, int]) -> list[MeasuredConfig]:
    """Run the measuring job within `budget_s` (what is left of the caller's budget), less the re-verify reserve;
    returns the configs it measured (none it only picked), and fills the proposal's note, not_measured,
    stopped_by and time_s."""
    measure_s = max(5.0, budget_s - reverify_reserve(budget_s))
    payload = payload_for(feasible, space, reference_source, candidate_source, options, max_trials, measure_s,
                          baseline)
    total = min(max_trials, len(feasible) + 1)
    await report(progress, 0, total, f"compiling and timing up to {total} configs (the current one first) of "
                                     f"{len(feasible)} feasible on the GPU, for {measure_s:.0f} s")
    asked = time.time()
    outcome = await evaluator.run_job(MEASURE_TARGET, payload, timeout_s=max(10.0, budget_s), uses_gpu=True)
    waited = time.time() - asked
    if not outcome.ok or not outcome.result:
        reason = outcome.error.message if outcome.error else ("timed out" if outcome.timed_out else "no result")
        proposal.note = f"unmeasured: the measuring job failed ({reason}); analytic ranking only"
        proposal.warnings.append(f"measure job: {reason}")
        proposal.stopped_by = "failed"
        proposal.time_s["job"] = round(waited, 3)
        await report(progress, total, total, "measurement failed; analytic ranking only")
        return []
    result = outcome.result
    tried = [MeasuredConfig.model_validate(r) for r in result.get("results", [])]
    measured = [m for m in tried if m.error_kind != "not_measured"]
    proposal.not_measured = [TilingConfig(values=m.config.values) for m in tried if m.error_kind == "not_measured"]
    proposal.warnings += list(result.get("notes", []))
    proposal.stopped_by = str(result.get("stopped_by") or ("budget" if proposal.not_measured else "max_trials"))
    _account(proposal, result, asked, waited, measure_s)
    ok = sum(1 for m in measured if m.correct)
    timed = sum(1 for m in measured if m.median_ms is not None)
    t = proposal.time_s
    proposal.note = (f"measured {timed} configs ({ok} correct, {len(measured) - timed} failed before a time) on "
                     f"{result.get('device', 'the GPU')}, the current config first"
                     + (f"; {len(proposal.not_measured)} more picked but not measured (the budget ran out)"
                        if proposal.not_measured else "")
                     + f"; stopped by {_STOPS.get(proposal.stopped_by, proposal.stopped_by)}; "
                     f"{measure_s:.0f} s of the budget for measuring: worker start {t['start']:.1f} s, compile "
                     f"{t['compile']:.1f} s ({result.get('compile_mode')}), check and time {t['measure']:.1f} s, "
                     f"rest of the job {t['job_other']:.1f} s, return {t['return']:.1f} s")
    await report(progress, len(measured), total, f"measured {timed} configs, {ok} correct")
    return measured


_STOPS = {"max_trials": "max_trials (all the configs asked for were measured)",
          "budget": "the time budget", "space": "the space (every config worth trying was measured)"}


def _account(proposal: TilingProposal, result: dict, asked: float, waited: float, measure_s: float) -> None:
    """The job's share of `time_s`: start-up, compile, check and time, the rest of the job, the return."""
    wall = float(result.get("wall_s") or 0.0)
    compile_s = float(result.get("compile_wall_s") or 0.0)
    measure_wall = float(result.get("measure_wall_s") or 0.0)
    start = max(0.0, float(result.get("started_unix", asked)) - asked)
    if result.get("deadline_used") is False:  # the job's clock disagrees with ours: its start is not readable
        start = max(0.0, waited - wall)
        proposal.warnings.append(
            f"the measuring job's clock does not agree with this server's, so it could not measure to the budget's "
            f"deadline: it measured on its own clock for {float(result.get('time_budget_s') or 0):.0f} s, the "
            f"{measure_s:.0f} s for measuring less an assumed {JOB_STARTUP_S:.0f} s worker start-up")
    start = min(start, max(0.0, waited - wall))
    proposal.time_s.update({
        "start": round(start, 3), "compile": round(compile_s, 3), "measure": round(measure_wall, 3),
        "job_other": round(max(0.0, wall - compile_s - measure_wall), 3),
        "return": round(max(0.0, waited - wall - start), 3)})
