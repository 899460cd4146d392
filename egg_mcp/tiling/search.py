"""propose_tiling: enumerate a candidate's tile configurations, prune and rank them analytically,
then measure just enough of them on the GPU to be sure of the recommendation."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from egg_mcp.contract import EvalOptions
from egg_mcp.hardware import GpuSpec, gpu_status, spec_for
from egg_mcp.tiling.costs import time_scale_note
from egg_mcp.tiling.dims import check_kind, normalize_dims
from egg_mcp.tiling.kernel_calls import kernel_calls, spearman
from egg_mcp.tiling.measure_call import measure as measure_job
from egg_mcp.tiling.measure_call import report
from egg_mcp.tiling.model import estimate_all, grid_notes, infer_kind
from egg_mcp.tiling.plan import config_key
from egg_mcp.tiling.recommend import choose, reverify
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
    spent_s: float = 0.0,
) -> TilingProposal:
    """Hardware-aware search of the candidate's tile configurations.

    `dims`: problem dimensions (GEMM: M, N, K; softmax / norm / reduction: n_rows, n_cols with
    n_cols reduced; elementwise: n or n_rows, n_cols) for the sizes being tuned — those of
    `options.size_overrides` when given. `kind` picks the cost model (inferred from the kernels'
    tl.* calls when None). `launches` (from `probe_launches`) gives each kernel launch its own dims; without
    it the task's dims are used. With `measure` and a GPU, up to `max_trials` configs are compiled,
    checked on one input and timed in one GPU job, the current config first; a config that beats it beyond the
    noise band is re-verified through verify (`recommend.py`) before it is recommended; otherwise the ranking is
    analytic only. `time_budget_s` is the whole call's, of which `spent_s` went before (the launch probe):
    `time_s` says where it all went.
    """
    started = time.perf_counter() - spent_s
    if max_trials < 0:
        raise ValueError("max_trials must be >= 0")
    kind, canonical, space, call_notes = _tunable_space(candidate_source, kind, dims, launches)
    gpu, stand_in = _target_gpu(gpu)
    configs, total, truncated = enumerate_configs(space, max_configs=max_configs)
    estimates = estimate_all(configs, space, gpu=gpu, dims=canonical, kind=kind, dtype=options.dtype)
    feasible = [e for e in estimates if e.feasible]
    proposal = _proposal(space, kind, canonical, gpu, options.dtype, estimates, feasible, total, truncated,
                         call_notes + ([stand_in] if stand_in else []))
    proposal.time_s = {"budget": round(time_budget_s, 3), "probe": round(spent_s, 3),
                       "model": round(time.perf_counter() - started - spent_s, 3)}
    by_key = {config_key(e.config.values): e for e in estimates}

    measured: list[MeasuredConfig] = []
    baseline = current_config(space)  # the config the source has now: measured first, the one to beat
    gpu_measures = measure and max_trials > 0 and bool(feasible) and evaluator.has_gpu()
    if not feasible:
        proposal.note = "every config was pruned; see `pruned` for the reasons"
    elif not measure or max_trials == 0:
        proposal.note = "unmeasured: measurement not requested (analytic ranking only)"
    elif not gpu_measures:
        proposal.note = "unmeasured: no GPU (analytic ranking only)"
    else:
        measured = await measure_job(evaluator, proposal, feasible, space, reference_source, candidate_source,
                                     options, max_trials, time_budget_s - (time.perf_counter() - started), progress,
                                     baseline)

    ordered = _rank_table(proposal, measured, feasible, by_key, baseline)
    correct = [m for m in ordered if m.correct and m.median_ms is not None]
    _rank_correlation(proposal, correct, by_key)
    if gpu_measures:  # a measured config, beyond noise over the measured current one, re-verified; or none
        base = next((m for m in measured if config_key(m.config.values) == config_key(baseline)), None)
        winner = choose(proposal, measured, correct, base, feasible)
        if winner is not None:
            await report(progress, len(measured), None,
                         f"re-verifying the winner {winner.config.values} and the current source through verify")
            proposal.time_s["verify"] = round(await reverify(
                proposal, evaluator, winner, reference_source=reference_source, candidate_source=candidate_source,
                options=options), 3)
    elif feasible:
        proposal.recommended = feasible[0].config
        proposal.recommended_source = apply_config(candidate_source, proposal.recommended.values)
        proposal.recommended_reason = ("best predicted by the analytic model (not measured): verify it against the "
                                       "current config")
    proposal.wall_s = time.perf_counter() - started
    proposal.time_s.update(total=round(proposal.wall_s, 3), left=round(time_budget_s - proposal.wall_s, 3))
    return proposal


def _proposal(space, kind: str, canonical: dict[str, int], gpu: GpuSpec, dtype: str,
              estimates: list[ConfigEstimate], feasible: list[ConfigEstimate], total: int, truncated: bool,
              notes: list[str]) -> TilingProposal:
    """The proposal before anything is measured: the space, what was pruned, each launch's kernel, the warnings."""
    warnings = list(space.warnings) + notes + grid_notes(space, gpu, dtype)
    if truncated:
        warnings.append(f"space of {total} configs sampled down to {len(estimates)} (seeded, uniform)")
    return TilingProposal(
        kind=kind, dims=canonical, gpu=gpu.name, dtype=dtype, parameters=space.params, space_size=total,
        enumerated=len(estimates), truncated=truncated, feasible_count=len(feasible),
        pruned_count=len(estimates) - len(feasible), pruned=_pruned_groups(estimates), warnings=warnings,
        excluded=dict(space.excluded), model_constants=time_scale_note(gpu),
        kernels=[KernelSummary(kernel=c.kernel, kind=c.kind, dims=c.dims, dims_from=c.dims_from, precision=c.precision,
                               parameters={k: v for k, v in c.params.items() if (p := space.param(v)) is not None
                                           and p.applicable and len(p.choices) > 1})
                 for c in space.calls],
    )


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
                by_key: dict[tuple, ConfigEstimate], current: dict[str, int]) -> list[MeasuredConfig]:
    """The ranked table: measured configs first (correct by time, then the failures; the current one says so),
    then the best predicted ones not measured; returns the measured configs in that order."""
    ranked: list[RankedConfig] = []
    seen: set[tuple] = set()
    ordered = sorted(measured, key=lambda m: (not m.correct, m.median_ms if m.median_ms is not None else float("inf")))
    for m in ordered:
        seen.add(config_key(m.config.values))
        ranked.append(_row(len(ranked) + 1, by_key.get(config_key(m.config.values)), m.config.values, m))
        if config_key(m.config.values) == config_key(current):
            ranked[-1].notes.insert(0, "the current config (the unchanged source)")
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
