"""propose_tiling: enumerate a candidate's tile configurations, prune and rank them analytically,
then measure just enough of them on the GPU to be sure of the recommendation."""

from __future__ import annotations

import inspect
import math
import time
from collections import Counter
from typing import Any

from egg_mcp.contract import EvalOptions
from egg_mcp.hardware import GpuSpec, gpu_status, spec_for
from egg_mcp.tiling.dims import check_kind, normalize_dims
from egg_mcp.tiling.kernel_calls import kernel_calls, spearman
from egg_mcp.tiling.model import estimate_all, grid_notes, infer_kind
from egg_mcp.tiling.plan import config_key
from egg_mcp.tiling.rewrite import apply_config
from egg_mcp.tiling.space import DEFAULT_MAX_CONFIGS, current_config, enumerate_configs, extract_space
from egg_mcp.tiling.tiling_types import (
    ConfigEstimate,
    KernelSummary,
    MeasuredConfig,
    PrunedGroup,
    RankedConfig,
    TilingConfig,
    TilingProposal,
)

STAND_IN_GPU = "H200"
MEASURE_TARGET = "egg_mcp.tiling.measure:measure_configs"
PROBE_TARGET = "egg_mcp.tiling.launches:probe_launches"


async def probe_launches(evaluator: Any, *, reference_source: str, candidate_source: str,
                         options: EvalOptions) -> tuple[list[dict] | None, str | None]:
    """Each launch of the candidate (kernel, grid, int args, tensor shapes, constexprs, num_warps / num_stages),
    from one forward on the meta device in a worker (`launches.py`; no GPU needed). (records, None) or
    (None, why not)."""
    payload = {"reference_source": reference_source, "candidate_source": candidate_source, "dtype": options.dtype,
               "size_overrides": dict(options.size_overrides)}
    try:
        outcome = await evaluator.run_job(PROBE_TARGET, payload, timeout_s=120.0, uses_gpu=False)
    except Exception as exc:  # noqa: BLE001 - the ranking still works on the task's dims
        return None, f"launch probe failed ({type(exc).__name__}: {exc})"
    if not outcome.ok or not outcome.result:
        return None, f"launch probe failed ({outcome.error.message if outcome.error else 'no result'})"
    records = outcome.result.get("launches") or []
    if outcome.result.get("error") and not records:
        return None, f"launch probe failed on the meta device ({outcome.result['error']})"
    return records, None
TABLE_ROWS = 24  # unmeasured rows shown after the measured ones
RANKED_SENT = 4096  # ranked configs handed to the worker (it walks only near the top)
JOB_STARTUP_S = 30.0  # worker start + torch import: the job's fallback budget when it has no usable deadline
RETURN_MARGIN_S = 3.0  # the job stops measuring this long before the caller's budget ends (its result returns)
BASELINE_NOISE = 0.02
"""A config must beat the current one by more than this share (or 3 standard errors of the two medians, if more)
to be recommended: anything closer is noise, and the current config stays."""


async def _report(progress, done: float, total: float | None, message: str) -> None:
    if progress is None:
        return
    outcome = progress(done, total, message)
    if inspect.isawaitable(outcome):
        await outcome


def _pruned_groups(estimates: list[ConfigEstimate]) -> list[PrunedGroup]:
    counts: Counter[str] = Counter()
    example: dict[str, str] = {}
    for est in estimates:
        if est.feasible:
            continue
        for rule, reason in zip(est.rules, est.reasons):
            counts[rule] += 1
            example.setdefault(rule, reason)
    return [PrunedGroup(rule=rule, count=n, example=example[rule]) for rule, n in counts.most_common()]


def _row(rank: int, est: ConfigEstimate | None, config: dict[str, int],
         measured: MeasuredConfig | None) -> RankedConfig:
    row = RankedConfig(rank=rank, config=TilingConfig(values=config),
                       predicted_ms=est.predicted_ms if est else None)
    if est is not None:
        row.smem_bytes, row.regs_per_thread, row.waves, row.notes = (
            est.smem_bytes, est.regs_per_thread, round(est.waves, 3), list(est.notes))
    if measured is not None:
        row.measured_ms, row.correct, row.error = measured.median_ms, measured.correct, measured.error
        spills = [k.spills for k in measured.kernels if k.spills]
        if spills:
            row.notes.append(f"compiler: {max(spills)} bytes spilled")
    return row


async def propose_tiling(
    evaluator: Any,
    *,
    reference_source: str,
    candidate_source: str,
    options: EvalOptions,
    gpu: GpuSpec | None,
    dims: dict[str, int],
    kind: str | None = None,
    max_trials: int = 8,
    time_budget_s: float = 120.0,
    measure: bool = True,
    progress=None,
    max_configs: int = DEFAULT_MAX_CONFIGS,
    launches: list[dict] | None = None,
) -> TilingProposal:
    """Hardware-aware search of the candidate's tile configurations.

    `dims`: problem dimensions (GEMM: M, N, K; softmax / norm / reduction: n_rows, n_cols with
    n_cols reduced; elementwise: n or n_rows, n_cols) for the sizes being tuned — those of
    `options.size_overrides` when given. `kind` picks the cost model (inferred from the kernels'
    tl.* calls when None). `launches` (from `probe_launches`) gives each kernel launch its own dims; without
    it the task's dims are used. With `measure` and a GPU, up to `max_trials` configs are compiled,
    checked on one input and timed in one GPU job; otherwise the ranking is analytic only.
    """
    started = time.perf_counter()
    if max_trials < 0:
        raise ValueError("max_trials must be >= 0")
    kind, canonical, space, call_notes = _tunable_space(candidate_source, kind, dims, launches)
    gpu, stand_in = _target_gpu(gpu)
    configs, total, truncated = enumerate_configs(space, max_configs=max_configs)
    estimates = estimate_all(configs, space, gpu=gpu, dims=canonical, kind=kind, dtype=options.dtype)
    feasible = [e for e in estimates if e.feasible]
    warnings = (list(space.warnings) + call_notes + grid_notes(space, gpu, options.dtype)
                + ([stand_in] if stand_in else []))
    if truncated:
        warnings.append(f"space of {total} configs sampled down to {len(configs)} (seeded, uniform)")
    proposal = TilingProposal(
        kind=kind, dims=canonical, gpu=gpu.name, dtype=options.dtype, parameters=space.params, space_size=total,
        enumerated=len(configs), truncated=truncated, feasible_count=len(feasible),
        pruned_count=len(estimates) - len(feasible), pruned=_pruned_groups(estimates), warnings=warnings,
        kernels=[KernelSummary(kernel=c.kernel, kind=c.kind, dims=c.dims, dims_from=c.dims_from, precision=c.precision,
                               parameters={k: v for k, v in c.params.items() if (p := space.param(v)) is not None
                                           and p.applicable and len(p.choices) > 1})
                 for c in space.calls],
    )
    by_key = {config_key(e.config.values): e for e in estimates}

    measured: list[MeasuredConfig] = []
    baseline = current_config(space)  # the config the source has now: measured first, the one to beat
    baseline = baseline if all(p.name in baseline for p in _tunable(space)) else None
    if not feasible:
        proposal.note = "every config was pruned; see `pruned` for the reasons"
    elif not measure or max_trials == 0:
        proposal.note = "unmeasured: measurement not requested (analytic ranking only)"
    elif not evaluator.has_gpu():
        proposal.note = "unmeasured: no GPU (analytic ranking only)"
    else:
        measured = await _measure(evaluator, proposal, feasible, space, reference_source, candidate_source,
                                  options, max_trials, time_budget_s - (time.perf_counter() - started), progress,
                                  baseline)

    ordered = _rank_table(proposal, measured, feasible, by_key)
    correct = [m for m in ordered if m.correct and m.median_ms is not None]
    _rank_correlation(proposal, correct, by_key)
    base = next((m for m in measured if config_key(m.config.values) == config_key(baseline)), None) \
        if baseline else None
    _recommend(proposal, evaluator, measure, measured, correct, base, feasible)
    if proposal.recommended is not None:
        proposal.recommended_source = apply_config(candidate_source, proposal.recommended.values)
    proposal.wall_s = time.perf_counter() - started
    return proposal


def _tunable(space) -> list:
    return [p for p in space.params if p.applicable and len(p.choices) > 1]


def _tunable_space(candidate_source: str, kind: str | None, dims: dict[str, int], launches: list[dict] | None):
    """The candidate's tile space for `kind` (inferred from its tl.* calls when None) at the canonical
    dims, each kernel launch with its own dims; (kind, dims, space, notes). Raises when nothing is tunable."""
    first_look = extract_space(candidate_source)
    kind = check_kind(kind) if kind is not None else infer_kind(first_look)
    canonical = normalize_dims(kind, dict(dims))
    space = extract_space(candidate_source, kind=kind, dims=canonical)
    calls, call_notes = kernel_calls(space, kind, canonical, launches)
    space.calls = calls
    if not _tunable(space):
        raise ValueError(
            "no tunable parameters found in the candidate: pass the block sizes at the launch as int literals or "
            "module constants (kernel[grid](..., BM=128, BLOCK_N=BLOCK_N, num_warps=4)) or declare "
            "TUNING_SPACE = {'BLOCK_M': [64, 128], ...}; sizes computed at the launch (e.g. "
            "triton.next_power_of_2(n)) are derived, not tunable"
        )
    return kind, canonical, space, call_notes


def _target_gpu(gpu: GpuSpec | None) -> tuple[GpuSpec, str | None]:
    """The GPU the ranking targets; without one, a named stand-in and the warning that says so."""
    if gpu is not None:
        return gpu, None
    status = gpu_status()
    gpu = spec_for(STAND_IN_GPU)
    assert gpu is not None  # the stand-in is in the table
    return gpu, (f"{status or 'no GPU ceilings'}: the analytic ranking targets the {gpu.name} datasheet leads as a "
                 "stand-in; on your GPU, run egg-mcp calibrate and measure the top configs")


def _rank_table(proposal: TilingProposal, measured: list[MeasuredConfig], feasible: list[ConfigEstimate],
                by_key: dict[tuple, ConfigEstimate]) -> list[MeasuredConfig]:
    """The ranked table: measured configs first (correct by time, then the failures), then the best
    predicted ones not measured; returns the measured configs in that order."""
    ranked: list[RankedConfig] = []
    seen: set[tuple] = set()
    ordered = sorted(measured, key=lambda m: (not m.correct, m.median_ms if m.median_ms is not None else float("inf")))
    for m in ordered:
        seen.add(config_key(m.config.values))
        ranked.append(_row(len(ranked) + 1, by_key.get(config_key(m.config.values)), m.config.values, m))
    for est in feasible:
        if len(ranked) >= len(measured) + TABLE_ROWS:
            break
        if config_key(est.config.values) not in seen:
            ranked.append(_row(len(ranked) + 1, est, est.config.values, None))
    proposal.ranked = ranked
    proposal.trials_used = len(measured)
    proposal.measured = bool(measured)
    return ordered


def _rank_correlation(proposal: TilingProposal, correct: list[MeasuredConfig], by_key: dict[tuple,
                                                                                            ConfigEstimate]) -> None:
    """Spearman correlation of predicted vs measured time over the correct measured configs."""
    pairs: list[tuple[float, float]] = []
    for m in correct:
        e = by_key.get(config_key(m.config.values))
        if e is not None and e.predicted_ms and m.median_ms is not None:
            pairs.append((e.predicted_ms, m.median_ms))
    proposal.rank_correlation = spearman([p for p, _ in pairs], [t for _, t in pairs])
    proposal.rank_correlation_n = len(pairs)
    if proposal.rank_correlation is not None:
        proposal.note += (f"; model vs measured rank correlation (Spearman) {proposal.rank_correlation:.2f} over "
                          f"{len(pairs)} configs")


def _recommend(proposal: TilingProposal, evaluator: Any, measure: bool, measured: list[MeasuredConfig],
               correct: list[MeasuredConfig], base: MeasuredConfig | None, feasible: list[ConfigEstimate]) -> None:
    """The recommendation and its reason: from the measured configs when any is correct; none when
    all failed or nothing was measured on a GPU; else the analytic model's best."""
    if correct:
        _recommend_measured(proposal, correct, base, feasible)
    elif measured:
        proposal.recommended_reason = ("no measured config was correct: fix the candidate first (see the errors in "
                                       "`ranked`) before tuning it")
    elif measure and evaluator.has_gpu() and feasible:
        proposal.recommended_reason = "nothing was measured (see note): no config is recommended over the current one"
    elif feasible:
        proposal.recommended = feasible[0].config
        proposal.recommended_reason = ("best predicted by the analytic model (not measured): verify it against the "
                                       "current config")


def _recommend_measured(proposal: TilingProposal, correct: list[MeasuredConfig], base: MeasuredConfig | None,
                        feasible: list[ConfigEstimate]) -> None:
    """With correct measured configs: fix a current config that failed; else the fastest, but over a
    measured current config only beyond the noise band."""
    if base is not None and not (base.correct and base.median_ms is not None):
        proposal.recommended_reason = (f"the current config did not measure ({base.error_kind or 'no time'}: "
                                       f"{(base.error or '')[:160]}): fix the candidate before tuning it")
        return
    best = correct[0]
    predicted_rank = next((i + 1 for i, e in enumerate(feasible)
                           if config_key(e.config.values) == config_key(best.config.values)), None)
    if base is None:
        proposal.recommended = best.config
        proposal.recommended_reason = (f"fastest of {len(correct)} correct configs measured ({best.median_ms:.4f} "
                                       f"ms, predicted rank {predicted_rank}); the current config was not measured")
        return
    band = _noise_band(best, base)
    assert best.median_ms is not None and base.median_ms is not None  # both measured correct
    if best is not base and best.median_ms < base.median_ms * (1 - band):
        proposal.recommended = best.config
        proposal.recommended_reason = (
            f"{base.median_ms / best.median_ms:.2f}x faster than the current config ({best.median_ms:.4f} vs "
            f"{base.median_ms:.4f} ms, beyond the {band:.1%} noise band; fastest of {len(correct)} correct "
            f"configs measured, predicted rank {predicted_rank})")
    else:
        others = [m.median_ms for m in correct if m is not base and m.median_ms is not None]
        proposal.recommended_reason = (
            f"keep the current config: no measured config beat it beyond the {band:.1%} noise band (current "
            f"{base.median_ms:.4f} ms, best other {min(others, default=float('nan')):.4f} ms over "
            f"{len(correct)} correct configs)")


def _noise_band(a: MeasuredConfig, b: MeasuredConfig) -> float:
    """BASELINE_NOISE, or 3 standard errors of the two medians (1.2533 cv / sqrt(runs) each) if that is more."""
    se2 = sum((1.2533 * (m.timing_cv or 0.0)) ** 2 / max(1, m.timing_runs or 1) for m in (a, b))
    return max(BASELINE_NOISE, 3 * math.sqrt(se2))


async def _measure(evaluator, proposal: TilingProposal, feasible: list[ConfigEstimate], space, reference_source: str,
                   candidate_source: str, options: EvalOptions, max_trials: int, budget_s: float,
                   progress, baseline: dict[str, int] | None = None) -> list[MeasuredConfig]:
    choices = {p.name: list(p.choices) for p in space.params if p.applicable}
    payload = {
        "reference_source": reference_source,
        "adaptive": {
            "candidate_source": candidate_source,
            "ranked": [[e.config.values, e.predicted_ms] for e in feasible[:RANKED_SENT]],
            "choices": choices,
            "max_trials": min(max_trials - (1 if baseline and max_trials > 1 else 0), len(feasible)),  # baseline counts
        },
        "dtype": options.dtype,
        "size_overrides": dict(options.size_overrides),
        "atol": options.tolerance.atol,
        "rtol": options.tolerance.rtol,
        "device": "cuda",
        "time_budget_s": max(5.0, budget_s - JOB_STARTUP_S),  # the job's own clock, if its deadline is unusable
        "deadline_unix": time.time() + max(5.0, budget_s - RETURN_MARGIN_S),  # the budget, whatever start-up took
    }
    if baseline:  # the current config first, from the unchanged source: what a winner has to beat
        payload["candidates"] = [{"config": baseline, "source": candidate_source}]
    total = min(max_trials, len(feasible))
    await _report(progress, 0, total, f"compiling and timing up to {total} of {len(feasible)} feasible configs on the "
                                      "GPU")
    asked = time.time()
    outcome = await evaluator.run_job(MEASURE_TARGET, payload, timeout_s=max(10.0, budget_s), uses_gpu=True)
    if not outcome.ok or not outcome.result:
        reason = outcome.error.message if outcome.error else ("timed out" if outcome.timed_out else "no result")
        proposal.note = f"unmeasured: the measuring job failed ({reason}); analytic ranking only"
        proposal.warnings.append(f"measure job: {reason}")
        await _report(progress, total, total, "measurement failed; analytic ranking only")
        return []
    result = outcome.result
    measured = [MeasuredConfig.model_validate(r) for r in result.get("results", [])]
    proposal.warnings += list(result.get("notes", []))
    ok = sum(1 for m in measured if m.correct)
    timed = [m for m in measured if m.median_ms is not None]
    start_s = max(0.0, float(result.get("started_unix", asked)) - asked)
    proposal.note = (f"measured {len(timed)} of {len(measured)} configs tried on {result.get('device', 'the GPU')} "
                     f"({ok} correct); budget {budget_s:.0f} s: worker start {start_s:.1f} s, compile "
                     f"{result.get('compile_wall_s', 0):.1f} s ({result.get('compile_mode')}), in the job "
                     f"{result.get('wall_s', 0):.1f} s")
    await _report(progress, len(measured), total, f"measured {len(measured)} configs, {ok} correct")
    return measured
